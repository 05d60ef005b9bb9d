// JSON in and out of Values: nlohmann::json -> Value for the render context, and Python's
// json.dumps for the tojson filter (HF transformers' tojson: ensure_ascii=False, ", " / ": "
// separators unless indented).
#include <algorithm>
#include <cmath>

#include "template/template_error.h"
#include "template/value.h"

namespace minfer::tmpl {

namespace {

void append_u16(std::string& out, unsigned cp) {
  out += fmt::format("\\u{:04x}", cp);
}

// Decodes one UTF-8 sequence at s[i]; returns the code point and advances i. Invalid bytes
// come back as themselves (U+0080..U+00FF) so escaping never loops.
unsigned next_code_point(std::string_view s, size_t& i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
  if (n < 0 || i + static_cast<size_t>(n) >= s.size() + (n == 0 ? 1 : 0)) {
    ++i;
    return c;
  }
  unsigned cp = n == 0 ? c : (c & (0x3f >> n));
  for (int k = 1; k <= n; ++k) {
    const unsigned char d = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if ((d & 0xc0) != 0x80) {
      ++i;
      return c;
    }
    cp = (cp << 6) | (d & 0x3f);
  }
  i += static_cast<size_t>(n) + 1;
  return cp;
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      if (!ensure_ascii) {
        out += static_cast<char>(c);
        ++i;
        continue;
      }
      const unsigned cp = next_code_point(s, i);
      if (cp >= 0x10000) {
        append_u16(out, 0xd800 + ((cp - 0x10000) >> 10));
        append_u16(out, 0xdc00 + ((cp - 0x10000) & 0x3ff));
      } else {
        append_u16(out, cp);
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
          append_u16(out, c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

struct JsonWriter {
  const JsonStyle& style;
  std::string& out;
  int depth = 0;

  void newline() {
    if (style.indent < 0) return;
    out += '\n';
    for (int d = 0; d < depth; ++d) {
      if (!style.indent_text.empty()) {
        out += style.indent_text;
      } else {
        out.append(static_cast<size_t>(style.indent), ' ');
      }
    }
  }

  void key(const Value& k) {
    switch (k.kind()) {
      case Kind::String:
        append_json_string(out, k.str(), style.ensure_ascii);
        return;
      case Kind::Bool:
        out += k.as_bool() ? "\"true\"" : "\"false\"";
        return;
      case Kind::None:
        out += "\"null\"";
        return;
      case Kind::Int:
      case Kind::Float:
        out += '"' + to_str(k) + '"';
        return;
      default:
        throw_error(TemplateErrorKind::Type, "keys must be str, int, float, bool or None, not {}",
                    type_name(k));
    }
  }

  void write(const Value& v) {
    if (depth > 512) throw_error(TemplateErrorKind::Limit, "tojson: nesting deeper than 512");
    if (out.size() > style.limit) {
      throw_error(TemplateErrorKind::Limit, "tojson: output larger than {} bytes", style.limit);
    }
    switch (v.kind()) {
      case Kind::None:
        out += "null";
        return;
      case Kind::Bool:
        out += v.as_bool() ? "true" : "false";
        return;
      case Kind::Int:
        out += to_str(v);
        return;
      case Kind::Float: {
        const double f = v.as_float();
        out += std::isnan(f)   ? "NaN"
               : std::isinf(f) ? (f < 0 ? "-Infinity" : "Infinity")
                               : format_float(f);
        return;
      }
      case Kind::String:
        append_json_string(out, v.str(), style.ensure_ascii);
        return;
      case Kind::List:
        if (v.list_obj().seq != SeqKind::Generator) return write_list(v.list_obj());
        break;
      case Kind::Dict:
        if (!v.dict_obj().is_namespace) return write_dict(v.dict_obj());
        break;
      default:
        break;
    }
    throw_error(TemplateErrorKind::Type, "Object of type {} is not JSON serializable",
                type_name(v));
  }

  void write_list(const ListObj& l) {
    if (l.items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    ++depth;
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (i) out += style.item_sep;
      newline();
      write(l.items[i]);
    }
    --depth;
    newline();
    out += ']';
  }

  void write_dict(const DictObj& d) {
    if (d.items.empty()) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> items;
    for (const auto& kv : d.items) items.push_back(&kv);
    if (style.sort_keys) {
      std::stable_sort(items.begin(), items.end(),
                       [](auto* a, auto* b) { return compare(a->first, b->first) < 0; });
    }
    out += '{';
    ++depth;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += style.item_sep;
      newline();
      key(items[i]->first);
      out += style.key_sep;
      write(items[i]->second);
    }
    --depth;
    newline();
    out += '}';
  }
};

template <typename Json>
Value convert(const Json& j, int depth) {
  if (depth > 512) throw_error(TemplateErrorKind::Limit, "context JSON nested deeper than 512");
  switch (j.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(convert(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      DictObj d;
      d.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        d.items.emplace_back(Value(it.key()), convert(it.value(), depth + 1));
      }
      return Value::dict(std::move(d));
    }
    case nlohmann::json::value_t::binary:
      break;
  }
  throw_error(TemplateErrorKind::Type, "binary JSON values are not supported in a context");
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  JsonWriter w{style, out};
  w.write(v);
  return out;
}

Value from_json(const nlohmann::ordered_json& j) {
  return convert(j, 0);
}
Value from_json(const nlohmann::json& j) {
  return convert(j, 0);
}

}  // namespace minfer::tmpl
