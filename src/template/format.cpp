// Python's string formatting as templates use it: `"%s: %d" % (a, b)` and the format filter
// (printf-style), str.format ("{}", "{0}", "{name}", with a [[fill]align][sign][0][width]
// [.precision][type] spec), and strftime_now's fixed clock.
#include <cmath>
#include <ctime>

#include "template/interp.h"

namespace minfer::tmpl {

namespace {

struct Spec {
  char fill = ' ';
  char align = 0;  // '<', '>', '^', or 0 (type default)
  char sign = '-';
  bool zero = false;
  bool alt = false;
  int width = -1;
  int precision = -1;
  char type = 0;
};

std::string apply_width(std::string s, const Spec& sp, bool numeric) {
  const int64_t n = utf8_length(s);
  if (sp.width < 0 || n >= sp.width) return s;
  const size_t pad = static_cast<size_t>(sp.width - n);
  char align = sp.align ? sp.align : (numeric ? '>' : '<');
  if (sp.zero && !sp.align && numeric) {
    const size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+' || s[0] == ' ') ? 1 : 0;
    return s.substr(0, sign) + std::string(pad, '0') + s.substr(sign);
  }
  if (align == '<') return s + std::string(pad, sp.fill);
  if (align == '^') return std::string(pad / 2, sp.fill) + s + std::string(pad - pad / 2, sp.fill);
  return std::string(pad, sp.fill) + s;
}

// Formats one value under a spec; `conv` is the printf / format type character.
std::string format_one(const Value& v, const Spec& sp) {
  const char t = sp.type;
  if (t == 0 || t == 's') {
    if (t == 's' || !(v.is_number() || v.is_bool())) {
      std::string s = to_str(v);
      if (sp.precision >= 0) {
        const std::vector<size_t> offs = utf8_offsets(s);
        if (static_cast<size_t>(sp.precision) + 1 < offs.size())
          s.resize(offs[static_cast<size_t>(sp.precision)]);
      }
      return apply_width(s, sp, false);
    }
  }
  if (t == 'r') return apply_width(repr(v), sp, false);
  if (t == 'c') {
    if (v.is_string()) return apply_width(v.str(), sp, false);
  }
  if (!(v.is_number() || v.is_bool())) {
    throw_error(TemplateErrorKind::Type, "format: a number is required, not {}", type_name(v));
  }
  std::string s;
  const std::string sign = sp.sign == '+' ? "+" : sp.sign == ' ' ? " " : "";
  if (t == 'd' || t == 'i' || t == 'u' || ((t == 0) && !v.is_float())) {
    const int64_t i = v.is_float() ? static_cast<int64_t>(v.as_float())
                                   : (v.is_bool() ? v.as_bool() : v.as_int());
    s = (i >= 0 ? sign : "") + std::to_string(i);
  } else if (t == 'x' || t == 'X' || t == 'o' || t == 'b') {
    const int64_t i = v.is_bool()  ? v.as_bool()
                      : v.is_int() ? v.as_int()
                                   : static_cast<int64_t>(v.as_float());
    const uint64_t u = static_cast<uint64_t>(i < 0 ? -i : i);
    s = t == 'x'   ? fmt::format("{:x}", u)
        : t == 'X' ? fmt::format("{:X}", u)
        : t == 'o' ? fmt::format("{:o}", u)
                   : fmt::format("{:b}", u);
    s = (i < 0 ? "-" : sign) + s;
  } else if (t == 0 && v.is_float() && sp.precision < 0) {
    const double f = v.as_float();
    s = (f >= 0 ? sign : "") + format_float(f);
  } else {
    const double f = v.to_double();
    const int prec = sp.precision < 0 ? 6 : std::min(sp.precision, 100);
    const char ft = t == 0 ? 'g' : t;
    char fmtbuf[16];
    std::snprintf(fmtbuf, sizeof fmtbuf, "%%%s.%d%c", sign.c_str(), prec, ft == '%' ? 'f' : ft);
    char buf[512];
    std::snprintf(buf, sizeof buf, fmtbuf, ft == '%' ? f * 100 : f);
    s = buf;
    if (ft == '%') s += '%';
  }
  return apply_width(s, sp, true);
}

}  // namespace

std::string percent_format(const std::string& f, const Value& args) {
  std::vector<Value> items;
  const bool mapping = args.is_dict();
  if (args.is_list() && args.list_obj().seq == SeqKind::Tuple) {
    items = args.list_obj().items;
  } else if (!mapping) {
    items.push_back(args);
  }
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    if (++i >= f.size()) throw_error(TemplateErrorKind::Type, "incomplete format");
    Value v;
    bool have = false;
    if (f[i] == '(') {
      const size_t e = f.find(')', i);
      if (e == std::string::npos || !mapping)
        throw_error(TemplateErrorKind::Type, "format requires a mapping");
      const Value* found = args.dict_obj().find(std::string_view(f).substr(i + 1, e - i - 1));
      if (!found)
        throw_error(TemplateErrorKind::Type, "KeyError: '{}'", f.substr(i + 1, e - i - 1));
      v = *found;
      have = true;
      i = e + 1;
    }
    Spec sp;
    for (; i < f.size() && std::strchr("-+ #0", f[i]); ++i) {
      if (f[i] == '-') sp.align = '<';
      if (f[i] == '+' || f[i] == ' ') sp.sign = f[i];
      if (f[i] == '0') sp.zero = true;
    }
    for (; i < f.size() && std::isdigit(static_cast<unsigned char>(f[i])); ++i)
      sp.width = std::max(sp.width, 0) * 10 + (f[i] - '0');
    if (i < f.size() && f[i] == '.') {
      sp.precision = 0;
      for (++i; i < f.size() && std::isdigit(static_cast<unsigned char>(f[i])); ++i)
        sp.precision = sp.precision * 10 + (f[i] - '0');
    }
    if (i >= f.size()) throw_error(TemplateErrorKind::Type, "incomplete format");
    if (f[i] == '%') {
      out += '%';
      continue;
    }
    sp.type = f[i];
    if (!std::strchr("sridufFeEgGxXoc", sp.type))
      throw_error(TemplateErrorKind::Type, "unsupported format character '{}'", sp.type);
    if (sp.width > (1 << 20) || sp.precision > (1 << 20))
      throw_error(TemplateErrorKind::Limit, "format width too large");
    if (!have) {
      if (next >= items.size())
        throw_error(TemplateErrorKind::Type, "not enough arguments for format string");
      v = items[next++];
    }
    out += format_one(v, sp);
  }
  if (!mapping && next < items.size())
    throw_error(TemplateErrorKind::Type, "not all arguments converted during string formatting");
  return out;
}

namespace {

Spec parse_spec(const std::string& s) {
  Spec sp;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (s.size() >= 2 && is_align(s[1])) {
    sp.fill = s[0];
    sp.align = s[1];
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    sp.align = s[0];
    i = 1;
  }
  if (sp.align == '=') sp.align = '>';
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) sp.sign = s[i++];
  if (i < s.size() && s[i] == '#') {
    sp.alt = true;
    ++i;
  }
  if (i < s.size() && s[i] == '0') {
    sp.zero = true;
    ++i;
  }
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i)
    sp.width = std::max(sp.width, 0) * 10 + (s[i] - '0');
  if (i < s.size() && s[i] == '.') {
    sp.precision = 0;
    for (++i; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i)
      sp.precision = sp.precision * 10 + (s[i] - '0');
  }
  if (i < s.size()) sp.type = s[i++];
  if (i != s.size()) throw_error(TemplateErrorKind::Type, "invalid format specifier '{}'", s);
  if (sp.width > (1 << 20) || sp.precision > (1 << 20))
    throw_error(TemplateErrorKind::Limit, "format width too large");
  return sp;
}

}  // namespace

std::string str_format(Interp& in, const std::string& f, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') ++i;
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t e = f.find('}', i);
    if (e == std::string::npos)
      throw_error(TemplateErrorKind::Type, "Single '{{' encountered in format string");
    std::string field = f.substr(i + 1, e - i - 1);
    i = e;
    std::string spec;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    char conv = 0;
    if (const size_t bang = field.find('!'); bang != std::string::npos && bang + 1 < field.size()) {
      conv = field[bang + 1];
      field.resize(bang);
    }
    // Field name: index or keyword, then .attr / [key] parts.
    size_t end = field.find_first_of(".[");
    const std::string head = field.substr(0, end);
    Value v;
    if (head.empty() || std::isdigit(static_cast<unsigned char>(head[0]))) {
      const size_t idx = head.empty() ? auto_index++ : static_cast<size_t>(std::stoul(head));
      if (idx >= args.pos.size())
        throw_error(TemplateErrorKind::Type, "Replacement index {} out of range", idx);
      v = args.pos[idx];
    } else {
      auto it = std::find_if(args.kw.begin(), args.kw.end(),
                             [&](const auto& kv) { return kv.first == head; });
      if (it == args.kw.end()) throw_error(TemplateErrorKind::Type, "KeyError: '{}'", head);
      v = it->second;
    }
    while (end != std::string::npos && end < field.size()) {
      if (field[end] == '.') {
        const size_t nx = field.find_first_of(".[", end + 1);
        v = in.get_attr(
            v, field.substr(end + 1, nx == std::string::npos ? std::string::npos : nx - end - 1));
        end = nx;
      } else {
        const size_t close = field.find(']', end);
        if (close == std::string::npos)
          throw_error(TemplateErrorKind::Type, "Missing ']' in format string");
        const std::string key = field.substr(end + 1, close - end - 1);
        const bool digits = !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit);
        v = in.get_item(v, digits ? Value(static_cast<int64_t>(std::stoll(key))) : Value(key));
        end = close + 1;
      }
    }
    if (conv == 'r') v = Value(repr(v));
    if (conv == 's') v = Value(to_str(v));
    out += format_one(v, parse_spec(spec));
    in.check_size(out.size());
  }
  return out;
}

std::string strftime_fixed(const std::string& fmt) {
  // HF's reference renderings use a fixed clock: 2026-11-29 12:00:00 (a Sunday).
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 29;
  tm.tm_hour = 12;
  tm.tm_wday = 0;
  tm.tm_yday = 332;
  tm.tm_isdst = 0;
  if (fmt.size() > 4096) throw_error(TemplateErrorKind::Limit, "strftime format too long");
  std::string out(fmt.size() * 8 + 64, '\0');
  const size_t n = std::strftime(out.data(), out.size(), fmt.c_str(), &tm);
  out.resize(n);
  return out;
}

}  // namespace minfer::tmpl
