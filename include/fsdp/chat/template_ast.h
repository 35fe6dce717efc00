// The parsed template: statements and expressions as Jinja's parser builds them, each with
// the line and column it starts at (for error messages). One node type per kind, fields by
// kind, children owned by the node.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fsdp/chat/template_error.h"
#include "fsdp/chat/template_value.h"

namespace fsdp::chat {

// How deep blocks ({% if %} in {% for %} ...) and expressions may nest: published templates
// stay under 10; a deeper one (fuzz_chat_template: 2000 unary '+' in a row) overflowed the
// parser's and the renderer's stacks.
inline constexpr int kMaxTemplateNesting = 200;
// "<what> deeper than <levels> levels", appended piece by piece (GCC 12's -Wrestrict misreads
// `"..." + std::to_string(...)` in these files).
inline std::string nesting_message(const char* what, int levels) {
  std::string m = what;
  m += " deeper than ";
  m += std::to_string(levels);
  m += " levels";
  return m;
}

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  Const,      // value
  Name,       // name
  List,       // args
  Tuple,      // args
  Dict,       // args: key, value, key, value, ...
  GetAttr,    // args[0] . name   (`x.y`; `x.0` is GetItem)
  GetItem,    // args[0] [ args[1] ]
  Slice,      // args[0] [ args[1] : args[2] : args[3] ], absent parts null
  Call,       // args[0] ( args[1..] , kwargs )
  Filter,     // args[0] | name ( args[1..] , kwargs ); args[0] null in a {% filter %} block
  Test,       // args[0] is [not] name ( args[1..] , kwargs ); negated
  Unary,      // op ("-", "+", "not") args[0]
  Binary,     // args[0] op args[1]: + - * / // % ** ~ and or
  Compare,    // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in notin
  CondExpr,   // args[1] if args[0] else args[2] (args[2] null without else)
};

struct Expr {
  ExprKind kind;
  SourcePos pos;
  Value value;                                        // Const
  std::string name;                                   // Name, GetAttr, Filter, Test
  std::string op;                                     // Unary, Binary
  std::vector<std::string> ops;                       // Compare
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // Call, Filter, Test
  bool negated = false;                               // Test
};

enum class StmtKind {
  Data,        // text
  Output,      // {{ expr }}
  If,          // branches (cond, body) ...; else_body
  For,         // targets in expr [if cond]: body [else: else_body]
  Set,         // targets = expr  | target.attr = expr (attr non-empty)
  SetBlock,    // {% set target %}body{% endset %}
  Macro,       // name(params with defaults): body
  FilterBlock, // {% filter name(args) %}body{% endfilter %}: expr is the Filter node
  Generation,  // {% generation %}body{% endgeneration %} (transformers' assistant-mask tag)
  Break,
  Continue,
};

struct Stmt {
  StmtKind kind;
  SourcePos pos;
  std::string text;                                     // Data
  ExprPtr expr;                                         // Output, For iterable, Set value, FilterBlock
  ExprPtr cond;                                         // For filter condition
  std::vector<std::string> targets;                     // For, Set, SetBlock
  std::string attr;                                     // Set: ns.attr
  std::vector<std::pair<ExprPtr, Body>> branches;       // If
  Body body, else_body;
  std::string name;                                     // Macro
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro: name, default (may be null)
};

}  // namespace fsdp::chat
