#include "template/template.h"

#include "template/interp.h"
#include "template/lexer.h"
#include "template/parser.h"

namespace minfer::tmpl {

struct Program {
  Body body;
  TemplateOptions options;
};

// ---- globals: range, dict, namespace, raise_exception, strftime_now ------------------------

namespace {

Value g_range(Interp& in, CallArgs& a) {
  if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3) {
    throw_error(TemplateErrorKind::Type, "range expected 1 to 3 integer arguments");
  }
  for (const Value& v : a.pos) {
    if (!v.is_int() && !v.is_bool()) {
      throw_error(TemplateErrorKind::Type, "'{}' object cannot be interpreted as an integer",
                  type_name(v));
    }
  }
  auto iv = [&](size_t i) {
    return a.pos[i].is_bool() ? int64_t{a.pos[i].as_bool()} : a.pos[i].as_int();
  };
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = iv(0);
  } else {
    start = iv(0);
    stop = iv(1);
    if (a.pos.size() == 3) step = iv(2);
  }
  if (step == 0) throw_error(TemplateErrorKind::Type, "range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    in.count_iterations(1);
    out.emplace_back(i);
    if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
  }
  return Value::list(std::move(out));
}

Value g_dict(Interp&, CallArgs& a) {
  DictObj d;
  if (a.pos.size() > 1) throw_error(TemplateErrorKind::Type, "dict expected at most 1 argument");
  if (!a.pos.empty()) {
    if (a.pos[0].is_dict()) {
      d.items = a.pos[0].dict_obj().items;
    } else {
      for (const Value& kv : iterate(a.pos[0])) {
        const std::vector<Value> pair = iterate(kv);
        if (pair.size() != 2)
          throw_error(TemplateErrorKind::Type, "dict update sequence element has wrong length");
        d.set(pair[0], pair[1]);
      }
    }
  }
  for (auto& [k, v] : a.kw) d.set(Value(k), v);
  return Value::dict(std::move(d));
}

Value g_namespace(Interp& in, CallArgs& a) {
  Value d = g_dict(in, a);
  d.dict_obj().is_namespace = true;
  return d;
}

Value g_raise_exception(Interp&, CallArgs& a) {
  const std::string msg = a.pos.empty() ? "raise_exception() called" : to_str(a.pos[0]);
  throw TemplateError(TemplateErrorKind::Raised, msg);
}

Value g_strftime_now(Interp&, CallArgs& a) {
  if (a.pos.empty() || !a.pos[0].is_string()) {
    throw_error(TemplateErrorKind::Type, "strftime_now expects a format string");
  }
  return Value(strftime_fixed(a.pos[0].str()));
}

}  // namespace

void add_globals(Interp&, std::vector<std::pair<std::string, Value>>& vars) {
  // Built once per process: the functions are stateless, so renders can share them.
  static const std::vector<std::pair<std::string, Value>> globals = {
      {"range", Value::function("range", g_range)},
      {"dict", Value::function("dict", g_dict)},
      {"namespace", Value::function("namespace", g_namespace)},
      {"raise_exception", Value::function("raise_exception", g_raise_exception)},
      {"strftime_now", Value::function("strftime_now", g_strftime_now)},
  };
  vars.insert(vars.end(), globals.begin(), globals.end());
}

// ---- Template ------------------------------------------------------------------------------

Template Template::parse(std::string_view source, const TemplateOptions& options) {
  auto program = std::make_shared<Program>();
  program->options = options;
  program->body =
      tmpl::parse(lex(source, {options.trim_blocks, options.lstrip_blocks}), options.max_nesting);
  Template t;
  t.program_ = std::move(program);
  return t;
}

const TemplateOptions& Template::options() const {
  return program_->options;
}

std::string Template::render_value(const Value& context) const {
  MINFER_ASSERT(program_, "render on a default-constructed Template");
  if (!context.is_dict()) {
    throw_error(TemplateErrorKind::Type, "the render context must be a JSON object, not {}",
                type_name(context));
  }
  std::string out;
  Interp in(program_->options, out);
  in.run(program_->body, context);
  return out;
}

std::string Template::render(const nlohmann::ordered_json& context) const {
  return render_value(from_json(context));
}

std::string Template::render(const nlohmann::json& context) const {
  return render_value(from_json(context));
}

std::string render_chat_template(std::string_view template_src,
                                 const nlohmann::ordered_json& context,
                                 const TemplateOptions& options) {
  return Template::parse(template_src, options).render(context);
}

std::string render_chat_template(std::string_view template_src, const nlohmann::json& context,
                                 const TemplateOptions& options) {
  return Template::parse(template_src, options).render(context);
}

}  // namespace minfer::tmpl
