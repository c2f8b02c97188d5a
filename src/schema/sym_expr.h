// Parser for the sympy srepr strings torch.export writes for symbolic sizes,
// e.g. "Add(Integer(1), Symbol('s0', integer=True, positive=True))".
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pt2onnx::schema {

struct SymExpr {
  std::string head;   // "Symbol", "Integer", "Add", "Mul", "Pow", "FloorDiv", ...
  std::string text;   // Symbol name / Integer digits / Float text
  int64_t value = 0;  // Integer: the digits' value (checked when parsed)
  std::vector<std::shared_ptr<const SymExpr>> args;

  bool is_symbol() const { return head == "Symbol"; }
  bool is_integer() const { return head == "Integer"; }
  // Readable infix form, symbols renamed through `names` when present.
  std::string render(const std::map<std::string, std::string>& names = {}) const;
  // Value under an assignment of symbols; nullopt if a symbol is unassigned,
  // the expression uses something we do not evaluate, or int64 overflows.
  std::optional<int64_t> eval(const std::map<std::string, int64_t>& env) const;
};

using SymExprPtr = std::shared_ptr<const SymExpr>;

// Throws pt2onnx::Error naming the position on malformed input, Integer(...)
// that is not an int64 and Float(...) that is not a finite-or-special double.
SymExprPtr parse_sym_expr(std::string_view s);

}  // namespace pt2onnx::schema
