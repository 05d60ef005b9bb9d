// The syntax tree of a parsed template: expressions and statements as plain tagged structs.
// Internal to src/template. Ownership: a node owns its children (unique_ptr); the tree is built
// once by the parser and only read afterwards, so one tree serves concurrent renders.
// Cost: one allocation per node.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace minfer::tmpl {

enum class ExprKind : uint8_t {
  Const,    // value
  Name,     // name
  List,     // kids
  Tuple,    // kids
  Dict,     // kids: key, value, key, value, ...
  GetAttr,  // kids[0].name
  GetItem,  // kids[0][kids[1]]
  Slice,    // kids[0][kids[1]:kids[2]:kids[3]] (null kids are omitted bounds)
  Call,     // kids[0](args)
  Filter,   // kids[0] | name(args); kids[0] null inside {% filter %}
  Test,     // kids[0] is [not] name(args)
  Unary,    // op kids[0]
  Binary,   // kids[0] op kids[1] (and/or short-circuit); Concat (~) takes any number of kids
  Compare,  // kids[0] ops[0] kids[1] ops[1] kids[2] ... (chained, as Python)
  Cond,     // kids[0] if kids[1] else kids[2] (kids[2] null: Undefined)
};

enum class Op : uint8_t {
  Add,
  Sub,
  Mul,
  Div,
  FloorDiv,
  Mod,
  Pow,
  Concat,
  And,
  Or,  // binary
  Not,
  Neg,
  Pos,  // unary
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  In,
  NotIn,  // comparison
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Args {
  std::vector<ExprPtr> pos;
  std::vector<std::pair<std::string, ExprPtr>> kw;
};

struct Expr {
  ExprKind kind = ExprKind::Const;
  int line = 0;
  int col = 0;
  int depth = 1;  // height of this subtree; bounded by the parser (evaluation recursion)
  Op op = Op::Add;
  bool negated = false;  // Test: `is not`
  Value value;           // Const
  std::string name;      // Name, GetAttr, Filter, Test
  std::vector<ExprPtr> kids;
  std::vector<Op> ops;  // Compare
  Args args;            // Call, Filter, Test
};

enum class StmtKind : uint8_t {
  Text,         // text
  Print,        // {{ expr }}
  If,           // branches: (cond, body)...; a null cond is the else branch
  For,          // target in expr [if cond] body [else else_body]
  Set,          // {% set target = expr %}
  SetBlock,     // {% set target [| filters] %}body{% endset %}
  Macro,        // {% macro name(params) %}body{% endmacro %}
  CallBlock,    // {% call[(params)] expr %}body{% endcall %}
  FilterBlock,  // {% filter expr %}body{% endfilter %} (expr: Filter chain on a null operand)
  Break,
  Continue,
  Generation,  // {% generation %}body{% endgeneration %}: renders body unchanged
  With,        // {% with a = x %}body{% endwith %}
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Param {
  std::string name;
  ExprPtr default_value;  // null: required (Undefined when omitted)
};

struct Stmt {
  StmtKind kind = StmtKind::Text;
  int line = 0;
  int col = 0;
  std::string text;  // Text; Macro name
  ExprPtr target;    // For, Set, SetBlock (Name, Tuple of Names, or GetAttr for namespaces)
  ExprPtr expr;      // Print, For iterable, Set value, CallBlock call, FilterBlock filters
  ExprPtr cond;      // For filter (`for x in xs if cond`)
  bool recursive = false;
  std::vector<std::pair<ExprPtr, Body>> branches;  // If
  Body body;
  Body else_body;
  std::vector<Param> params;                          // Macro, CallBlock (caller's params)
  std::vector<std::pair<std::string, ExprPtr>> sets;  // With
};

}  // namespace minfer::tmpl
