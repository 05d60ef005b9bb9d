// The evaluator: one Interp per render walks the tree (ast.h) and writes the output.
// Internal to src/template (template.h is the public face).
//
// Scopes follow Jinja2: the root frame holds the context, the globals and top-level `set`s;
// every for-loop iteration, `with` block and macro call gets its own frame, so a `set` inside
// a loop is gone after the iteration (namespace() is how templates carry state out). A macro's
// frame looks up names in itself and then the root frame, a caller's in the call site's frame.
//
// Ownership: borrows the tree and the options for the render's duration; owns every Value it
// makes. Thread safety: one thread per Interp. Failure: TemplateError, located at the
// innermost node that failed. Cost: a tree walk; name lookup is linear in the visible frames.
#pragma once

#include <string>
#include <vector>

#include "template/ast.h"
#include "template/template.h"

namespace minfer::tmpl {

enum class Flow : uint8_t { Normal, Break, Continue };

class Interp {
 public:
  Interp(const TemplateOptions& opts, std::string& out);

  // Root frame: globals, then the context's members (a dict), then runs the body.
  void run(const Body& body, const Value& context);

  Flow exec(const Body& body);
  Value eval(const Expr& e);

  // Calls a callable Value (built-in, bound method, macro); Undefined and others are errors.
  Value call(const Value& fn, CallArgs& args);
  Value apply_filter(const std::string& name, const Value& v, CallArgs& args);
  bool apply_test(const std::string& name, const Value& v, CallArgs& args);

  // Sandbox accounting.
  void count_iterations(int64_t n);
  void check_size(size_t bytes) const;
  const TemplateOptions& options() const { return opts_; }

  // Attribute / item access with Jinja's fallbacks (getattr then getitem, and back).
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);

  // Runs a macro definition with arguments; `caller_frame` is the frame a caller body sees.
  Value call_macro(const Stmt& def, CallArgs& args, size_t defining_frame);

 private:
  struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
    size_t parent = 0;  // where lookup continues (the root frame is its own end)
  };

  Flow exec_stmt(const Stmt& s);
  Flow exec_for(const Stmt& s);
  Flow exec_if(const Stmt& s);
  void exec_set(const Stmt& s);
  void exec_set_block(const Stmt& s);
  void exec_call_block(const Stmt& s);
  void exec_filter_block(const Stmt& s);
  Flow exec_with(const Stmt& s);
  std::string capture(const Body& body);

  Value eval_inner(const Expr& e);
  Value eval_name(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_compare(const Expr& e);
  Value eval_call(const Expr& e);
  Value eval_filter(const Expr& e);
  Value eval_test(const Expr& e);
  Value eval_slice(const Expr& e);
  Value eval_collection(const Expr& e);
  CallArgs eval_args(const Args& a);

  void push_frame(size_t parent);
  void pop_frame();
  const Value* lookup(const std::string& name) const;
  void assign(const Expr& target, const Value& v);
  void define(const std::string& name, Value v);
  void write(const Value& v);

  // Bounds the C++ recursion of one render (nested statements and expressions across macro
  // calls), so a hostile template fails with Limit instead of overflowing the stack.
  struct DepthGuard {
    Interp& in;
    explicit DepthGuard(Interp& interp) : in(interp) {
      if (++in.depth_ > in.opts_.limits.max_depth) {
        --in.depth_;
        throw_error(TemplateErrorKind::Limit, "evaluation nested deeper than {}",
                    in.opts_.limits.max_depth);
      }
    }
    ~DepthGuard() { --in.depth_; }
  };

  const TemplateOptions& opts_;
  std::string* out_;
  int depth_ = 0;
  std::vector<Frame> frames_;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
  Value filter_input_;  // the operand of a {% filter %} / {% set x | f %} chain
};

// Python's arithmetic operators (+ - * / // % **) on two values.
Value binary_op(Interp& in, Op op, const Value& a, const Value& b);

// Items of an iterable as Python's iter() yields them (dict: keys; str: characters).
// Undefined yields nothing; others are TypeError.
std::vector<Value> iterate(const Value& v);

// Builtins (filters.cpp, tests.cpp, methods.cpp, globals.cpp).
using FilterFn = Value (*)(Interp&, const Value&, CallArgs&);
using TestFn = bool (*)(Interp&, const Value&, CallArgs&);
FilterFn find_filter(const std::string& name);
TestFn find_test(const std::string& name);
// A Python method of str / list / dict by name; false when `self` has no such method.
bool has_method(const Value& self, const std::string& name);
Value call_method(Interp& in, const Value& self, const std::string& name, CallArgs& args);
void add_globals(Interp& in, std::vector<std::pair<std::string, Value>>& vars);

// Python-style argument binding for built-ins: positional first, then keywords by name;
// unknown keywords and surplus positionals are TypeErrors naming `fn`. Missing -> Undefined.
std::vector<Value> bind_args(const char* fn, CallArgs& args,
                             std::initializer_list<const char*> names);

// Formatting (format.cpp): Python's `fmt % args`, str.format, and the strftime_now clock.
std::string percent_format(const std::string& fmt, const Value& args);
std::string str_format(Interp& in, const std::string& fmt, CallArgs& args);
std::string strftime_fixed(const std::string& fmt);

}  // namespace minfer::tmpl
