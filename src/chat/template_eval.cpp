#include "fsdp/chat/template_eval.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <optional>
#include <unordered_map>

#include "fsdp/chat/python_string.h"
#include "fsdp/chat/template_builtins.h"

namespace fsdp::chat {

namespace {

// raise_exception(message) unwinds to the call with this, so the error can carry the call's place.
struct RaisedByTemplate {
  std::string message;
};

constexpr int kMaxMacroDepth = 64;
constexpr int64_t kMaxRange = 100000;  // Jinja's sandbox refuses longer ranges the same way

class Renderer {
 public:
  Renderer(const ParsedTemplate& t, const RenderOptions& opts) : t_(t), opts_(opts) {}

  RenderResult run(const std::vector<std::pair<std::string, Value>>& variables) {
    scopes_.emplace_back();
    install_globals(scopes_.back());
    scopes_.emplace_back();
    for (const auto& [k, v] : variables) scopes_.back()[k] = v;
    exec(t_.body);
    return RenderResult{std::move(out_), std::move(spans_)};
  }

 private:
  enum class Flow { Normal, Break, Continue };
  using Scope = std::unordered_map<std::string, Value>;

  [[noreturn]] void fail(SourcePos pos, const std::string& msg) const { throw TemplateError(t_.origin, pos, msg); }
  int eval_depth_ = 0;

  void step(SourcePos pos) {
    if (opts_.max_steps > 0 && ++steps_ > opts_.max_steps)
      fail(pos, "the template ran more than " + std::to_string(opts_.max_steps) + " loop iterations and macro calls");
  }

  void install_globals(Scope& g) {
    g["raise_exception"] = Value::function("raise_exception", [](CallArgs& a) -> Value {
      a.check("raise_exception", 1, {"message"});
      throw RaisedByTemplate{to_str(a.get(0, "message"))};
    });
    g["namespace"] = Value::function("namespace", [](CallArgs& a) {
      std::vector<std::pair<std::string, Value>> attrs;
      if (a.positional.size() > 1) throw TemplateValueError{"namespace() takes at most one positional argument"};
      if (!a.positional.empty()) {
        if (!a.positional[0].is_dict()) throw TemplateValueError{"namespace() takes a mapping"};
        for (const auto& [k, v] : a.positional[0].dict_items()) attrs.emplace_back(to_str(k), v);
      }
      for (const auto& [k, v] : a.keyword) {
        if (!k.empty() && k[0] == '_')
          throw TemplateValueError{"Chat templates cannot store underscore-prefixed attributes on a namespace"};
        attrs.emplace_back(k, v);
      }
      return Value::make_namespace(std::move(attrs));
    });
    g["dict"] = Value::function("dict", [](CallArgs& a) {
      if (!a.positional.empty()) throw TemplateValueError{"dict() with positional arguments is not supported"};
      ValueItems items;
      for (const auto& [k, v] : a.keyword) items.emplace_back(Value(k), v);
      return Value::dict(std::move(items));
    });
    g["range"] = Value::function("range", [](CallArgs& a) {
      a.check("range", 3, {});
      if (a.positional.empty()) throw TemplateValueError{"range expected at least 1 argument, got 0"};
      for (const auto& v : a.positional)
        if (!v.is_int() && !v.is_bool())
          throw TemplateValueError{"'" + v.type_name() + "' object cannot be interpreted as an integer"};
      int64_t start = 0, stop = 0, stride = 1;
      if (a.positional.size() == 1) stop = a.positional[0].as_int();
      else start = a.positional[0].as_int(), stop = a.positional[1].as_int();
      if (a.positional.size() == 3) stride = a.positional[2].as_int();
      if (stride == 0) throw TemplateValueError{"range() arg 3 must not be zero"};
      const long double n = std::max<long double>(0, std::ceil((long double)(stop - start) / stride));
      if (n > kMaxRange)
        throw TemplateValueError{"Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000)."};
      ValueList out;
      for (int64_t i = 0; i < int64_t(n); ++i) out.emplace_back(start + i * stride);
      return Value::list(std::move(out));
    });
    g["strftime_now"] = Value::function("strftime_now", [this](CallArgs& a) {
      a.check("strftime_now", 1, {"format"});
      const auto now = opts_.now ? opts_.now() : std::chrono::system_clock::now();
      const std::time_t tt = std::chrono::system_clock::to_time_t(now);
      std::tm tm{};
      localtime_r(&tt, &tm);
      const std::string fmt = to_str(a.get(0, "format"));
      if (fmt.empty()) return Value(std::string());
      std::string buf(256 + fmt.size() * 8, '\0');
      const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
      buf.resize(n);
      return Value(std::move(buf));
    });
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      const auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  void emit(const std::string& s, SourcePos pos) {
    if (out_.size() + s.size() > opts_.max_output) fail(pos, "the rendered text is larger than " + std::to_string(opts_.max_output) + " bytes");
    out_ += s;
  }

  // ---- statements ----
  Flow exec(const Body& body) {
    for (const auto& s : body) {
      const Flow f = exec(*s);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  void assign(const std::vector<std::string>& targets, const Value& v, SourcePos pos) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = v;
      return;
    }
    ValueList parts;
    try {
      parts = iterate(v);
    } catch (const TemplateValueError& e) {
      fail(pos, "cannot unpack: " + e.message);
    }
    if (parts.size() != targets.size())
      fail(pos, "cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) scopes_.back()[targets[i]] = parts[i];
  }

  std::string render_body(const Body& body) {
    std::string saved = std::move(out_);
    out_.clear();
    scopes_.emplace_back();
    exec(body);
    scopes_.pop_back();
    std::string text = std::move(out_);
    out_ = std::move(saved);
    return text;
  }

  Flow exec(const Stmt& s) {
    switch (s.kind) {
      case StmtKind::Data: emit(s.text, s.pos); return Flow::Normal;
      case StmtKind::Output: emit(to_str(eval(*s.expr)), s.pos); return Flow::Normal;
      case StmtKind::If:
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond))) return exec(body);
        return exec(s.else_body);
      case StmtKind::For: return exec_for(s);
      case StmtKind::Set: {
        const Value v = eval(*s.expr);
        if (s.attr.empty()) {
          assign(s.targets, v, s.pos);
        } else {
          const Value ns = lookup(s.targets[0]);
          if (!ns.is_namespace()) fail(s.pos, "can only assign attributes on namespace objects ('" + s.targets[0] + "' is " + (ns.is_undefined() ? "undefined" : "a " + ns.type_name()) + ")");
          if (s.attr[0] == '_') fail(s.pos, "Chat templates cannot store underscore-prefixed attributes on a namespace");
          ns.set_attribute(s.attr, v);
        }
        return Flow::Normal;
      }
      case StmtKind::SetBlock: scopes_.back()[s.targets[0]] = Value(render_body(s.body)); return Flow::Normal;
      case StmtKind::Macro: define_macro(s); return Flow::Normal;
      case StmtKind::FilterBlock: {
        const std::string text = render_body(s.body);
        const Expr& f = *s.expr;
        CallArgs args = eval_args(f);
        try {
          emit(to_str(apply_filter(f.name, Value(text), args)), s.pos);
        } catch (const TemplateValueError& e) {
          fail(f.pos, e.message);
        }
        return Flow::Normal;
      }
      case StmtKind::Generation: {
        const size_t begin = out_.size();
        const Flow f = exec(s.body);
        spans_.emplace_back(begin, out_.size());
        return f;
      }
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  Flow exec_for(const Stmt& s) {
    const Value seq = eval(*s.expr);
    ValueList items;
    try {
      items = iterate(seq);
    } catch (const TemplateValueError& e) {
      fail(s.expr->pos, e.message);
    }
    if (s.cond) {  // `for x in xs if cond`: the loop sees only the items that pass
      ValueList kept;
      for (const auto& item : items) {
        scopes_.emplace_back();
        assign(s.targets, item, s.pos);
        const bool keep = truthy(eval(*s.cond));
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t n = int64_t(items.size());
    for (int64_t i = 0; i < n; ++i) {
      step(s.pos);
      scopes_.emplace_back();
      assign(s.targets, items[size_t(i)], s.pos);
      scopes_.back()["loop"] = Value::object(
          "LoopContext",
          {{"index", Value(i + 1)},
           {"index0", Value(i)},
           {"revindex", Value(n - i)},
           {"revindex0", Value(n - i - 1)},
           {"first", Value(i == 0)},
           {"last", Value(i == n - 1)},
           {"length", Value(n)},
           {"depth", Value(int64_t(1))},
           {"depth0", Value(int64_t(0))},
           {"previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined("there is no previous item")},
           {"nextitem", i + 1 < n ? items[size_t(i + 1)] : Value::undefined("there is no next item")},
           {"cycle", Value::function("cycle", [i](CallArgs& a) {
              if (a.positional.empty()) throw TemplateValueError{"no items for cycling given"};
              return a.positional[size_t(i) % a.positional.size()];
            })}});
      const Flow f = exec(s.body);
      scopes_.pop_back();
      if (f == Flow::Break) break;
    }
    if (n == 0) return exec(s.else_body);
    return Flow::Normal;
  }

  void define_macro(const Stmt& s) {
    const Stmt* def = &s;
    scopes_.back()[s.name] = Value::function(s.name, [this, def](CallArgs& a) {
      step(def->pos);
      if (++macro_depth_ > kMaxMacroDepth) {
        --macro_depth_;
        throw TemplateValueError{"macro '" + def->name + "' recursed more than " + std::to_string(kMaxMacroDepth) + " deep"};
      }
      if (a.positional.size() > def->params.size())
        throw TemplateValueError{"macro '" + def->name + "' takes " + std::to_string(def->params.size()) + " arguments"};
      Scope frame;
      for (size_t i = 0; i < def->params.size(); ++i) {
        const auto& [pname, dflt] = def->params[i];
        Value v = a.get(i, pname);
        if (v.is_undefined() && dflt) v = eval(*dflt);
        if (v.is_undefined()) v = Value::undefined("parameter '" + pname + "' was not provided");
        frame[pname] = v;
      }
      for (const auto& [k, v] : a.keyword) {
        bool known = false;
        for (const auto& p : def->params) known = known || p.first == k;
        if (!known) throw TemplateValueError{"macro '" + def->name + "' takes no keyword argument '" + k + "'"};
      }
      // The body sees the globals, the template's variables and its parameters, not the caller's locals.
      std::vector<Scope> saved(scopes_.begin() + 2, scopes_.end());
      scopes_.resize(2);
      scopes_.push_back(std::move(frame));
      std::string saved_out = std::move(out_);
      out_.clear();
      try {
        exec(def->body);
      } catch (...) {
        scopes_.resize(2);
        scopes_.insert(scopes_.end(), saved.begin(), saved.end());
        out_ = std::move(saved_out);
        --macro_depth_;
        throw;
      }
      std::string text = std::move(out_);
      out_ = std::move(saved_out);
      scopes_.resize(2);
      scopes_.insert(scopes_.end(), saved.begin(), saved.end());
      --macro_depth_;
      return Value(std::move(text));
    });
  }

  // ---- expressions ----
  CallArgs eval_args(const Expr& e) {
    CallArgs a;
    for (size_t i = 1; i < e.args.size(); ++i) a.positional.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) a.keyword.emplace_back(k, eval(*v));
    return a;
  }

  Value eval(const Expr& e) {
    // A chain the parser builds without recursion (a + b + ... , x|f|g|...) and macros calling
    // macros nest here: bounded like the parser's nesting, with the position.
    if (++eval_depth_ > 4 * kMaxTemplateNesting)
      fail(e.pos, nesting_message("the expression (or macro calls) nest", 4 * kMaxTemplateNesting));
    struct Leave {
      int& n;
      ~Leave() { --n; }
    } leave{eval_depth_};
    try {
      return eval_node(e);
    } catch (const TemplateValueError& err) {
      fail(e.pos, err.message);
    } catch (const RaisedByTemplate& r) {
      throw TemplateError(t_.origin, e.pos, r.message, true);
    }
  }

  Value call(const Value& f, CallArgs& args) {
    if (f.is_undefined()) fail_undefined(f);
    if (!f.is_function()) throw TemplateValueError{"'" + f.type_name() + "' object is not callable"};
    return f.as_function().call(args);
  }

  Value eval_node(const Expr& e) {
    switch (e.kind) {
      case ExprKind::Const: return e.value;
      case ExprKind::Name: return lookup(e.name);
      case ExprKind::List:
      case ExprKind::Tuple: {
        ValueList items;
        for (const auto& a : e.args) items.push_back(eval(*a));
        return e.kind == ExprKind::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
      }
      case ExprKind::Dict: {
        ValueItems items;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i]), v = eval(*e.args[i + 1]);
          bool replaced = false;
          for (auto& [ek, ev] : items)
            if (equals(ek, k)) ev = v, replaced = true;
          if (!replaced) items.emplace_back(std::move(k), std::move(v));
        }
        return Value::dict(std::move(items));
      }
      case ExprKind::GetAttr: return get_attr(eval(*e.args[0]), e.name);
      case ExprKind::GetItem: return get_item(eval(*e.args[0]), eval(*e.args[1]));
      case ExprKind::Slice: return slice(e);
      case ExprKind::Call: {
        const Expr& callee = *e.args[0];
        if (callee.kind == ExprKind::GetAttr) {  // obj.method(...): no bound method object needed
          const Value obj = eval(*callee.args[0]);
          CallArgs args = eval_args(e);
          if (has_method(obj, callee.name)) return call_method(obj, callee.name, args);
          Value f = get_attr(obj, callee.name);
          return call(f, args);
        }
        const Value f = eval(callee);
        CallArgs args = eval_args(e);
        return call(f, args);
      }
      case ExprKind::Filter: {
        const Value operand = eval(*e.args[0]);
        return apply_filter(e.name, operand, eval_args(e));
      }
      case ExprKind::Test: {
        const Value operand = eval(*e.args[0]);
        return Value(apply_test(e.name, operand, eval_args(e)) != e.negated);
      }
      case ExprKind::Unary: {
        const Value v = eval(*e.args[0]);
        if (e.op == "not") return Value(!truthy(v));
        return unary_op(e.op, v);
      }
      case ExprKind::Binary: {
        if (e.op == "and" || e.op == "or") {  // Python's: the deciding operand itself, short-circuit
          Value l = eval(*e.args[0]);
          if (truthy(l) == (e.op == "or")) return l;
          return eval(*e.args[1]);
        }
        const Value l = eval(*e.args[0]);
        const Value r = eval(*e.args[1]);
        if (e.op == "~") {
          std::string s = to_str(l) + to_str(r);
          if (s.size() > opts_.max_output) throw TemplateValueError{"the result of '~' is too large"};
          return Value(std::move(s));
        }
        return binary_op(e.op, l, r, opts_.max_output);
      }
      case ExprKind::Compare: {
        Value left = eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1]);
          const std::string& op = e.ops[i];
          bool ok;
          if (op == "==") ok = equals(left, right);
          else if (op == "!=") ok = !equals(left, right);
          else if (op == "in") ok = contains(right, left);
          else if (op == "notin") ok = !contains(right, left);
          else {
            if (left.is_undefined()) fail_undefined(left);
            if (right.is_undefined()) fail_undefined(right);
            const int c = compare(left, right);
            ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!ok) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case ExprKind::CondExpr:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("the conditional expression had no else");
    }
    return Value();
  }

  Value slice(const Expr& e) {
    const Value obj = eval(*e.args[0]);
    auto bound = [&](size_t i) -> std::optional<int64_t> {
      if (!e.args[i]) return std::nullopt;
      const Value v = eval(*e.args[i]);
      if (v.is_none()) return std::nullopt;
      if (!v.is_int() && !v.is_bool())
        throw TemplateValueError{"slice indices must be integers or None, not " + v.type_name()};
      return v.as_int();
    };
    const auto start = bound(1), stop = bound(2), stride = bound(3);
    if (obj.is_undefined()) fail_undefined(obj);
    if (!obj.is_string() && !obj.is_sequence()) return Value::undefined("'" + obj.type_name() + "' object is not subscriptable");
    const int64_t st = stride.value_or(1);
    if (st == 0) throw TemplateValueError{"slice step cannot be zero"};
    const auto cps = obj.is_string() ? py::decode(obj.as_string()) : std::vector<char32_t>{};
    const int64_t n = obj.is_string() ? int64_t(cps.size()) : int64_t(obj.items().size());
    // Python's slice.indices(n).
    auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
      if (!v) return dflt;
      int64_t x = *v;
      if (x < 0) x += n;
      if (st > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t b = clamp(start, st > 0 ? 0 : n - 1), en = clamp(stop, st > 0 ? n : -1);
    std::vector<int64_t> idx;
    for (int64_t i = b; st > 0 ? i < en : i > en; i += st) idx.push_back(i);
    if (obj.is_string()) {
      std::string out;
      for (int64_t i : idx) py::append_utf8(out, cps[size_t(i)]);
      return Value(std::move(out));
    }
    ValueList out;
    for (int64_t i : idx) out.push_back(obj.items()[size_t(i)]);
    return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }

  const ParsedTemplate& t_;
  const RenderOptions& opts_;
  std::vector<Scope> scopes_;  // [0] globals, [1] the template's variables, then loop and macro scopes
  std::string out_;
  std::vector<std::pair<size_t, size_t>> spans_;
  int64_t steps_ = 0;
  int macro_depth_ = 0;
};

}  // namespace

RenderResult render_template(const ParsedTemplate& t, const std::vector<std::pair<std::string, Value>>& variables,
                             const RenderOptions& options) {
  return Renderer(t, options).run(variables);
}

}  // namespace fsdp::chat
