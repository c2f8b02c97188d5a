// Arithmetic on graph values of one dtype, for lowerings written as formulas
// (activations, losses, backward ops, finite differences, QR, Jacobi, ...).
// Family files derive from it to add their own helpers.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "convert/context.h"

namespace pt2onnx {

// The type torch computes half-precision formulas in (its "opmath" type):
// float32 for float16 / bfloat16, the type itself otherwise.
inline DType opmath(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 ? DType::Float : t;
}

struct Expr {
  Ctx& c;
  DType t;

  std::string k(double v) const { return c.b.scalar(t, v); }
  std::string op(const char* o, std::vector<std::string> in) const {
    return c.b.op(o, std::move(in));
  }
  std::string add(const std::string& a, const std::string& b) const { return op("Add", {a, b}); }
  std::string sub(const std::string& a, const std::string& b) const { return op("Sub", {a, b}); }
  std::string mul(const std::string& a, const std::string& b) const { return op("Mul", {a, b}); }
  std::string div(const std::string& a, const std::string& b) const { return op("Div", {a, b}); }
  std::string neg(const std::string& a) const { return op("Neg", {a}); }
  std::string abs(const std::string& a) const { return op("Abs", {a}); }
  std::string log(const std::string& a) const { return op("Log", {a}); }
  std::string exp(const std::string& a) const { return op("Exp", {a}); }
  std::string eq(const std::string& a, double v) const { return op("Equal", {a, k(v)}); }
  std::string where(const std::string& m, const std::string& a, const std::string& b) const {
    return op("Where", {m, a, b});
  }
};

}  // namespace pt2onnx
