// Statements, scopes and the sandbox accounting of the evaluator (interp.h).
#include <algorithm>

#include "template/interp.h"

namespace minfer::tmpl {

namespace {

// Keeps the innermost location: an error thrown without one gets this statement's.
[[noreturn]] void relocate(const TemplateError& e, int line, int col) {
  throw TemplateError(e.template_kind(), e.message(), line, col);
}

}  // namespace

Interp::Interp(const TemplateOptions& opts, std::string& out) : opts_(opts), out_(&out) {}

void Interp::run(const Body& body, const Value& context) {
  frames_.clear();
  frames_.push_back(Frame{});
  add_globals(*this, frames_[0].vars);
  if (context.is_dict()) {
    for (const auto& [k, v] : context.dict_obj().items) {
      if (k.is_string()) define(k.str(), v);
    }
  }
  exec(body);
}

// ---- scopes --------------------------------------------------------------------------------

void Interp::push_frame(size_t parent) {
  frames_.push_back(Frame{});
  frames_.back().parent = parent;
}

void Interp::pop_frame() {
  MINFER_ASSERT(frames_.size() > 1);
  frames_.pop_back();
}

const Value* Interp::lookup(const std::string& name) const {
  size_t f = frames_.size() - 1;
  while (true) {
    for (const auto& [k, v] : frames_[f].vars) {
      if (k == name) return &v;
    }
    if (f == 0) return nullptr;
    f = frames_[f].parent;
  }
}

void Interp::define(const std::string& name, Value v) {
  auto& vars = frames_.back().vars;
  for (auto& [k, old] : vars) {
    if (k == name) {
      old = std::move(v);
      return;
    }
  }
  vars.emplace_back(name, std::move(v));
}

void Interp::assign(const Expr& target, const Value& v) {
  if (target.kind == ExprKind::Name) {
    define(target.name, v);
    return;
  }
  if (target.kind == ExprKind::GetAttr) {
    const Value* ns = lookup(target.kids[0]->name);
    if (!ns || !ns->is_dict() || !ns->dict_obj().is_namespace) {
      throw_error(TemplateErrorKind::Type, "cannot assign attribute on non-namespace object");
    }
    ns->dict_obj().set(Value(target.name), v);
    return;
  }
  MINFER_ASSERT(target.kind == ExprKind::Tuple);
  const std::vector<Value> items = iterate(v);
  if (items.size() != target.kids.size()) {
    throw_error(TemplateErrorKind::Type, "cannot unpack {} values into {} names", items.size(),
                target.kids.size());
  }
  for (size_t i = 0; i < items.size(); ++i) assign(*target.kids[i], items[i]);
}

// ---- sandbox -------------------------------------------------------------------------------

void Interp::count_iterations(int64_t n) {
  iterations_ += n;
  if (iterations_ > opts_.limits.max_loop_iterations) {
    throw_error(TemplateErrorKind::Limit, "more than {} loop iterations",
                opts_.limits.max_loop_iterations);
  }
}

void Interp::check_size(size_t bytes) const {
  if (bytes > opts_.limits.max_output_bytes) {
    throw_error(TemplateErrorKind::Limit, "output or string larger than {} bytes",
                opts_.limits.max_output_bytes);
  }
}

void Interp::write(const Value& v) {
  append_str(*out_, v, opts_.limits.max_output_bytes);
  check_size(out_->size());
}

std::string Interp::capture(const Body& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    exec(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buf;
}

// ---- statements ----------------------------------------------------------------------------

Flow Interp::exec(const Body& body) {
  for (const StmtPtr& s : body) {
    const Flow f = exec_stmt(*s);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Flow Interp::exec_stmt(const Stmt& s) {
  DepthGuard guard(*this);
  try {
    switch (s.kind) {
      case StmtKind::Text:
        out_->append(s.text);
        check_size(out_->size());
        return Flow::Normal;
      case StmtKind::Print:
        write(eval(*s.expr));
        return Flow::Normal;
      case StmtKind::If:
        return exec_if(s);
      case StmtKind::For:
        return exec_for(s);
      case StmtKind::Set:
        exec_set(s);
        return Flow::Normal;
      case StmtKind::SetBlock:
        exec_set_block(s);
        return Flow::Normal;
      case StmtKind::Macro: {
        const Stmt* def = &s;
        const size_t frame = frames_.size() - 1;
        define(s.text, Value::function(s.text, [def, frame](Interp& in, CallArgs& a) {
                 return in.call_macro(*def, a, frame);
               }));
        return Flow::Normal;
      }
      case StmtKind::CallBlock:
        exec_call_block(s);
        return Flow::Normal;
      case StmtKind::FilterBlock:
        exec_filter_block(s);
        return Flow::Normal;
      case StmtKind::Break:
        return Flow::Break;
      case StmtKind::Continue:
        return Flow::Continue;
      case StmtKind::Generation:
        return exec(s.body);
      case StmtKind::With:
        return exec_with(s);
    }
  } catch (const TemplateError& e) {
    if (e.line() == 0) relocate(e, s.line, s.col);
    throw;
  }
  return Flow::Normal;
}

Flow Interp::exec_if(const Stmt& s) {
  for (const auto& [cond, body] : s.branches) {
    if (!cond || truthy(eval(*cond))) return exec(body);
  }
  return Flow::Normal;
}

namespace {

// The `loop` object: a dict whose values are rewritten in place every iteration.
enum LoopKey {
  kIndex,
  kIndex0,
  kRevindex,
  kRevindex0,
  kFirst,
  kLast,
  kLength,
  kPrev,
  kNext,
  kDepth,
  kDepth0,
  kCycle,
  kChanged,
  kLoopKeys
};
constexpr const char* kLoopNames[kLoopKeys] = {"index",  "index0", "revindex", "revindex0", "first",
                                               "last",   "length", "previtem", "nextitem",  "depth",
                                               "depth0", "cycle",  "changed"};

struct LoopState {
  int64_t index0 = 0;
  bool has_last = false;
  std::vector<Value> last_changed;
};

Value make_loop(const std::shared_ptr<LoopState>& st) {
  DictObj d;
  for (const char* n : kLoopNames) d.items.emplace_back(Value(n), Value());
  d.items[kCycle].second = Value::function("cycle", [st](Interp&, CallArgs& a) {
    if (a.pos.empty()) throw_error(TemplateErrorKind::Type, "no items for cycling given");
    return a.pos[static_cast<size_t>(st->index0) % a.pos.size()];
  });
  d.items[kChanged].second = Value::function("changed", [st](Interp&, CallArgs& a) {
    bool same = st->has_last && st->last_changed.size() == a.pos.size();
    for (size_t i = 0; same && i < a.pos.size(); ++i) same = equals(st->last_changed[i], a.pos[i]);
    st->has_last = true;
    st->last_changed = a.pos;
    return Value(!same);
  });
  d.items[kDepth].second = Value(1);
  d.items[kDepth0].second = Value(0);
  return Value::dict(std::move(d));
}

}  // namespace

Flow Interp::exec_for(const Stmt& s) {
  std::vector<Value> items = iterate(eval(*s.expr));
  const size_t outer = frames_.size() - 1;
  if (s.cond) {
    // `for x in xs if cond`: the filter sees the target, and loop.length counts what passes.
    std::vector<Value> kept;
    push_frame(outer);
    for (Value& v : items) {
      count_iterations(1);
      frames_.back().vars.clear();
      assign(*s.target, v);
      if (truthy(eval(*s.cond))) kept.push_back(std::move(v));
    }
    pop_frame();
    items = std::move(kept);
  }
  if (items.empty()) return s.else_body.empty() ? Flow::Normal : exec(s.else_body);
  auto st = std::make_shared<LoopState>();
  const Value loop = make_loop(st);
  auto& lv = loop.dict_obj().items;
  const int64_t n = static_cast<int64_t>(items.size());
  lv[kLength].second = Value(n);
  push_frame(outer);
  for (int64_t i = 0; i < n; ++i) {
    count_iterations(1);
    st->index0 = i;
    lv[kIndex].second = Value(i + 1);
    lv[kIndex0].second = Value(i);
    lv[kRevindex].second = Value(n - i);
    lv[kRevindex0].second = Value(n - i - 1);
    lv[kFirst].second = Value(i == 0);
    lv[kLast].second = Value(i == n - 1);
    lv[kPrev].second =
        i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item");
    lv[kNext].second =
        i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item");
    auto& vars = frames_.back().vars;
    vars.clear();
    vars.emplace_back("loop", loop);
    Flow f;
    try {
      assign(*s.target, items[static_cast<size_t>(i)]);
      f = exec(s.body);
    } catch (...) {
      pop_frame();
      throw;
    }
    if (f == Flow::Break) break;
  }
  pop_frame();
  return Flow::Normal;
}

void Interp::exec_set(const Stmt& s) {
  assign(*s.target, eval(*s.expr));
}

void Interp::exec_set_block(const Stmt& s) {
  Value v(capture(s.body));
  if (s.expr) {
    Value saved = std::move(filter_input_);
    filter_input_ = v;
    v = eval(*s.expr);
    filter_input_ = std::move(saved);
  }
  assign(*s.target, v);
}

void Interp::exec_filter_block(const Stmt& s) {
  Value saved = std::move(filter_input_);
  filter_input_ = Value(capture(s.body));
  Value v = eval(*s.expr);
  filter_input_ = std::move(saved);
  write(v);
}

Flow Interp::exec_with(const Stmt& s) {
  push_frame(frames_.size() - 1);
  Flow f;
  try {
    for (const auto& [name, e] : s.sets) {
      Value v = eval(*e);
      define(name, std::move(v));
    }
    f = exec(s.body);
  } catch (...) {
    pop_frame();
    throw;
  }
  pop_frame();
  return f;
}

void Interp::exec_call_block(const Stmt& s) {
  // `caller()` renders this block's body in a frame that sees the call site's names.
  const Stmt* def = &s;
  const size_t site = frames_.size() - 1;
  Value caller = Value::function(
      "caller", [def, site](Interp& in, CallArgs& a) { return in.call_macro(*def, a, site); });
  const Expr& call = *s.expr;
  Value fn = eval(*call.kids[0]);
  CallArgs args = eval_args(call.args);
  args.kw.emplace_back("caller", std::move(caller));
  write(this->call(fn, args));
}

Value Interp::call_macro(const Stmt& def, CallArgs& args, size_t defining_frame) {
  if (++call_depth_ > opts_.limits.max_call_depth) {
    --call_depth_;
    throw_error(TemplateErrorKind::Limit, "macro calls nested deeper than {}",
                opts_.limits.max_call_depth);
  }
  // A top-level macro sees the root frame; a caller block sees its call site.
  push_frame(def.kind == StmtKind::CallBlock ? defining_frame : 0);
  std::string out;
  try {
    size_t next_pos = 0;
    for (const Param& p : def.params) {
      Value v;
      bool given = false;
      for (auto it = args.kw.begin(); it != args.kw.end(); ++it) {
        if (it->first == p.name) {
          v = std::move(it->second);
          args.kw.erase(it);
          given = true;
          break;
        }
      }
      if (!given && next_pos < args.pos.size()) {
        v = args.pos[next_pos++];
        given = true;
      }
      if (!given) {
        v = p.default_value ? eval(*p.default_value)
                            : Value::undefined(fmt::format("'{}' is undefined", p.name));
      }
      define(p.name, std::move(v));
    }
    std::vector<Value> rest(
        args.pos.begin() + static_cast<std::ptrdiff_t>(std::min(next_pos, args.pos.size())),
        args.pos.end());
    define("varargs", Value::list(std::move(rest)));
    DictObj kwargs;
    for (auto& [k, v] : args.kw) {
      if (k == "caller") {
        define("caller", v);
      } else {
        kwargs.items.emplace_back(Value(k), v);
      }
    }
    define("kwargs", Value::dict(std::move(kwargs)));
    out = capture(def.body);
  } catch (...) {
    pop_frame();
    --call_depth_;
    throw;
  }
  pop_frame();
  --call_depth_;
  return Value(std::move(out));
}

}  // namespace minfer::tmpl
