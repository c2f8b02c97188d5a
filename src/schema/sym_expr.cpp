#include "schema/sym_expr.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <system_error>
#include <tuple>

#include "pt2onnx/error.h"

namespace pt2onnx::schema {

namespace {

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  SymExprPtr parse() {
    auto e = expr();
    skip_ws();
    if (pos_ != s_.size()) fail("trailing characters");
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    throw Error("cannot parse symbolic expression '" + std::string(s_) + "' at offset " +
                std::to_string(pos_) + ": " + why);
  }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  std::string ident() {
    skip_ws();
    size_t b = pos_;
    while (pos_ < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
      ++pos_;
    if (b == pos_) fail("expected a name");
    return std::string(s_.substr(b, pos_ - b));
  }
  std::string quoted() {
    skip_ws();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) fail("expected a string");
    char q = s_[pos_++];
    size_t b = pos_;
    while (pos_ < s_.size() && s_[pos_] != q) ++pos_;
    if (pos_ >= s_.size()) fail("unterminated string");
    return std::string(s_.substr(b, pos_++ - b));
  }
  // The whole argument text, checked by the caller: "Integer(1-)" is then
  // reported as the bad number it is.
  std::string number() {
    skip_ws();
    size_t b = pos_;
    while (pos_ < s_.size() && s_[pos_] != ')' && s_[pos_] != ',' && s_[pos_] != '(' &&
           !std::isspace(static_cast<unsigned char>(s_[pos_])))
      ++pos_;
    if (b == pos_) fail("expected a number");
    return std::string(s_.substr(b, pos_ - b));
  }

  SymExprPtr expr() {
    if (++depth_ > 200) fail("expression nested too deeply");
    auto e = std::make_shared<SymExpr>();
    e->head = ident();
    skip_ws();
    if ((e->head == "true" || e->head == "false") && (pos_ >= s_.size() || s_[pos_] != '(')) {
      // sympy's boolean atoms (Piecewise's last condition: `true`)
      e->text = e->head;
      --depth_;
      return e;
    }
    if (!eat('(')) fail("expected '(' after " + e->head);
    if (e->head == "Symbol") {
      e->text = quoted();
      skip_kwargs();
    } else if (e->head == "Integer") {
      e->text = number();
      e->value = integer_value(e->text);
      if (!eat(')')) fail("expected ')'");
    } else if (e->head == "Float") {
      skip_ws();
      e->text = (pos_ < s_.size() && (s_[pos_] == '\'' || s_[pos_] == '"')) ? quoted() : number();
      check_float(e->text);
      skip_kwargs();
    } else {
      skip_ws();
      if (!eat(')')) {
        do {
          skip_ws();
          // keyword argument (evaluate=False, ...) or a nested expression
          size_t save = pos_;
          std::string name = ident();
          skip_ws();
          if (pos_ < s_.size() && s_[pos_] == '=') {
            ++pos_;
            skip_value();
            continue;
          }
          pos_ = save;
          if (std::isdigit(static_cast<unsigned char>(name[0]))) fail("bare number");
          e->args.push_back(expr());
        } while (eat(','));
        if (!eat(')')) fail("expected ')' closing " + e->head);
      }
    }
    --depth_;
    return e;
  }
  // Number text without its one optional sign; and the text from_chars reads
  // (it takes '-' but not '+').
  static std::string_view unsigned_part(std::string_view t) {
    return t.starts_with('+') || t.starts_with('-') ? t.substr(1) : t;
  }
  static std::string_view chars_part(std::string_view t) {
    return t.starts_with('+') ? t.substr(1) : t;
  }
  // The whole text must be one int64: from_chars alone stops at the first
  // other character and would read "1.5e3" as 1.
  int64_t integer_value(const std::string& t) {
    std::string_view digits = unsigned_part(t), num = chars_part(t);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos)
      fail("Integer(" + t + ") is not an integer");
    int64_t v = 0;
    auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
    if (ec != std::errc() || end != num.data() + num.size())
      fail("Integer(" + t + ") does not fit in a 64-bit integer");
    return v;
  }
  // Floats are only rendered, but garbage must not pass for one either.
  void check_float(const std::string& t) {
    std::string_view body = unsigned_part(t), num = chars_part(t);
    double v = 0;
    auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
    if (ec == std::errc::result_out_of_range) fail("Float(" + t + ") is out of the double range");
    if (body.empty() || body[0] == '+' || body[0] == '-' || ec != std::errc() ||
        end != num.data() + num.size())
      fail("Float(" + t + ") is not a number");
  }

  void skip_value() {
    skip_ws();
    if (pos_ < s_.size() && (s_[pos_] == '\'' || s_[pos_] == '"'))
      quoted();
    else
      ident();
  }
  void skip_kwargs() {
    while (eat(',')) {
      ident();
      if (!eat('=')) fail("expected '='");
      skip_value();
    }
    if (!eat(')')) fail("expected ')'");
  }

  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
};

bool is_neg_one(const SymExpr& e) { return e.is_integer() && e.text == "-1"; }

}  // namespace

SymExprPtr parse_sym_expr(std::string_view s) { return Parser(s).parse(); }

std::string SymExpr::render(const std::map<std::string, std::string>& names) const {
  if (head == "Symbol") {
    auto it = names.find(text);
    return it == names.end() ? text : it->second;
  }
  if (head == "Integer" || head == "Float" || head == "true" || head == "false") return text;
  auto sub = [&](size_t i) {
    const SymExpr& a = *args[i];
    std::string r = a.render(names);
    if (a.head == "Add" || (head == "Pow" && a.head == "Mul")) return "(" + r + ")";
    return r;
  };
  if (head == "Add") {
    // Terms in one order whatever order torch printed them in (it sorts by
    // its own symbol names, which the names given here reorder): a sum of the
    // same dims is the same dim_param string, which shape checks compare
    // (a cache's key and value lengths, e.g.). Positive terms first, numbers
    // last in each group: "past + seq", "2*s0 - 1".
    std::vector<std::string> terms;
    for (size_t i = 0; i < args.size(); ++i) terms.push_back(sub(i));
    auto key = [](const std::string& t) {
      const bool neg = !t.empty() && t[0] == '-';
      const char c = t.empty() ? ' ' : t[neg ? 1 : 0];
      return std::make_tuple(neg, c >= '0' && c <= '9', t);
    };
    std::stable_sort(terms.begin(), terms.end(),
                     [&](const std::string& a, const std::string& b) { return key(a) < key(b); });
    std::string r;
    for (size_t i = 0; i < terms.size(); ++i) {
      const std::string& t = terms[i];
      if (i && !t.empty() && t[0] == '-')
        r += " - " + t.substr(1);
      else
        r += (i ? " + " : "") + t;
    }
    return r;
  }
  if (head == "Mul") {
    std::string r;
    size_t start = 0;
    if (!args.empty() && is_neg_one(*args[0])) {
      r = "-";
      start = 1;
    }
    for (size_t i = start; i < args.size(); ++i) r += (i > start ? "*" : "") + sub(i);
    return r;
  }
  if (head == "Pow" && args.size() == 2) return sub(0) + "^" + sub(1);
  if (head == "FloorDiv" && args.size() == 2) return "floor(" + sub(0) + "/" + sub(1) + ")";
  if (head == "Mod" && args.size() == 2) return sub(0) + " mod " + sub(1);
  std::string r = head + "(";
  for (size_t i = 0; i < args.size(); ++i) r += (i ? ", " : "") + args[i]->render(names);
  return r + ")";
}

std::optional<int64_t> SymExpr::eval(const std::map<std::string, int64_t>& env) const {
  if (head == "Symbol") {
    auto it = env.find(text);
    if (it == env.end()) return std::nullopt;
    return it->second;
  }
  if (head == "Integer") return value;
  std::vector<int64_t> v;
  for (auto& a : args) {
    auto x = a->eval(env);
    if (!x) return std::nullopt;
    v.push_back(*x);
  }
  // Hostile expressions must not overflow int64 (undefined behaviour): give up instead.
  auto floordiv = [](int64_t a, int64_t b) -> std::optional<int64_t> {
    if (b == 0 || (a == INT64_MIN && b == -1)) return std::nullopt;
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
  };
  if (head == "Add") {
    int64_t s = 0;
    for (auto x : v)
      if (__builtin_add_overflow(s, x, &s)) return std::nullopt;
    return s;
  }
  if (head == "Mul") {
    int64_t s = 1;
    for (auto x : v)
      if (__builtin_mul_overflow(s, x, &s)) return std::nullopt;
    return s;
  }
  if (head == "FloorDiv" && v.size() == 2) return floordiv(v[0], v[1]);
  if (head == "Mod" && v.size() == 2) {
    auto q = floordiv(v[0], v[1]);
    int64_t qb = 0, r = 0;
    if (!q || __builtin_mul_overflow(*q, v[1], &qb) || __builtin_sub_overflow(v[0], qb, &r))
      return std::nullopt;
    return r;
  }
  if (head == "Pow" && v.size() == 2 && v[1] >= 0) {
    // Square-and-multiply: at most 64 steps, whatever the exponent.
    int64_t r = 1, base = v[0], e = v[1];
    while (e > 0) {
      if ((e & 1) && __builtin_mul_overflow(r, base, &r)) return std::nullopt;
      e >>= 1;
      if (e > 0 && __builtin_mul_overflow(base, base, &base)) return std::nullopt;
    }
    return r;
  }
  if ((head == "Max" || head == "Min") && !v.empty()) {
    int64_t r = v[0];
    for (auto x : v) r = head == "Max" ? std::max(r, x) : std::min(r, x);
    return r;
  }
  return std::nullopt;
}

}  // namespace pt2onnx::schema
