// Arithmetic, comparison and unary math: add/sub/mul/div/pow/neg, sqrt/rsqrt/
// exp/log/cos/sin/..., eq/ne/lt/le/gt/ge, where, masked_fill, casts.
// PyTorch's type promotion is made explicit: operands are cast to the type
// torch computed in (recorded as the output dtype, or promoted for compares).
#include <cmath>

#include "convert/complex.h"
#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

// Bitwise and / or / xor before opset 18, bit by bit (math.cpp).
std::string bitwise_by_bits(Ctx& c, char op);

namespace {

// Add / Sub / Mul / Div take 8- and 16-bit integers only from opset 14:
// before, they compute in int32 and wrap back (the bits torch's wrapping
// arithmetic gives).
DType arith_type(Ctx& c, DType t) {
  bool narrow = t == DType::Int8 || t == DType::UInt8 || t == DType::Int16 || t == DType::UInt16;
  return narrow && c.opset() < 14 ? DType::Int32 : t;
}

// Type the op computes in: the output dtype for arithmetic.
std::string binary(Ctx& c, const std::string& op, const char* a = "self", const char* b = "other") {
  DType t = c.out_dtype();
  DType ct = op == "Add" || op == "Sub" || op == "Mul" || op == "Div" ? arith_type(c, t) : t;
  std::string x = c.operand(a, ct);
  std::string y = c.operand(b, ct);
  return c.cast(c.b.op(op, {x, y}), t);
}

// add / sub with alpha: self + alpha * other.
void add_sub(Ctx& c, const std::string& op) {
  DType t = c.out_dtype(), ct = arith_type(c, t);
  std::string x = c.operand("self", ct);
  std::string y = c.operand("other", ct);
  double alpha = c.f("alpha", 1.0);
  if (alpha != 1.0) y = c.b.op("Mul", {y, c.b.scalar(ct, alpha)});
  c.set_output(0, c.cast(c.b.op(op, {x, y}), t));
}

void add(Ctx& c) {
  if (is_complex(c.out_dtype())) return complex_arith(c, "Add");
  if (c.out_dtype() == DType::Bool) {  // bool + bool is logical or
    c.set_output(0,
                 c.b.op("Or", {c.operand("self", DType::Bool), c.operand("other", DType::Bool)}));
    return;
  }
  add_sub(c, "Add");
}
void sub(Ctx& c) {
  if (is_complex(c.out_dtype())) return complex_arith(c, "Sub");
  add_sub(c, "Sub");
}
void rsub(Ctx& c) {
  // rsub(self, other, alpha) = other - alpha * self
  DType t = c.out_dtype(), ct = arith_type(c, t);
  std::string x = c.operand("self", ct);
  std::string y = c.operand("other", ct);
  double alpha = c.f("alpha", 1.0);
  if (alpha != 1.0) x = c.b.op("Mul", {x, c.b.scalar(ct, alpha)});
  c.set_output(0, c.cast(c.b.op("Sub", {y, x}), t));
}
void mul(Ctx& c) {
  if (is_complex(c.out_dtype())) return complex_arith(c, "Mul");
  if (c.out_dtype() == DType::Bool) {
    c.set_output(0, binary(c, "And"));
    return;
  }
  c.set_output(0, binary(c, "Mul"));
}

void div(Ctx& c) {
  auto mode = c.str("rounding_mode");
  DType t = c.out_dtype();
  if (is_complex(t)) {
    if (mode) c.fail("div with a rounding mode of complex tensors");
    return complex_arith(c, "Div");
  }
  if (!mode) {
    c.set_output(0, binary(c, "Div"));
    return;
  }
  if (*mode == "trunc" && is_integral(t)) {
    c.set_output(0, binary(c, "Div"));  // integer Div truncates toward zero
    return;
  }
  // Compute in a float type, round, and cast back to the output type.
  DType ft = is_floating(t) ? t : DType::Double;
  std::string q = c.b.op("Div", {c.operand("self", ft), c.operand("other", ft)});
  if (*mode == "floor") {
    q = c.b.op("Floor", {q});
  } else if (*mode == "trunc") {
    // trunc(x) = sign(x) * floor(|x|)
    q = c.b.op("Mul", {c.b.op("Sign", {q}), c.b.op("Floor", {c.b.op("Abs", {q})})});
  } else {
    c.fail("unknown rounding_mode '" + *mode + "'");
  }
  c.set_output(0, c.cast(q, t));
}

void floor_divide(Ctx& c) {
  DType t = c.out_dtype();
  DType ft = is_floating(t) ? t : DType::Double;
  std::string q = c.b.op("Div", {c.operand("self", ft), c.operand("other", ft)});
  c.set_output(0, c.cast(c.b.op("Floor", {q}), t));
}

void pow_(Ctx& c) {
  DType t = c.out_dtype();
  auto e = c.scalar_value("exponent");
  if (e && c.has("self") && c.arg("self")->kind == schema::ArgKind::Tensor) {
    std::string x = c.operand("self", t);
    if (*e == 1.0) return c.set_output(0, x);
    if (*e == 2.0) return c.set_output(0, c.b.op("Mul", {x, x}));
    if (*e == 0.5 && is_floating(t)) return c.set_output(0, c.b.op("Sqrt", {x}));
    if (*e == -1.0 && is_floating(t)) return c.set_output(0, c.b.op("Reciprocal", {x}));
  }
  c.set_output(0, binary(c, "Pow", "self", "exponent"));
}

void unary(Ctx& c, const char* op) {
  DType t = c.out_dtype();
  // bfloat16 (no Sin/Cos/... in ONNX) is computed in float32 as torch does;
  // float64 where onnxruntime has no kernel for it (Erf) too.
  DType ct = t == DType::BFloat16 ? DType::Float : c.kernel_type(op, t);
  c.set_output(0, c.cast(c.b.op(op, {c.operand("self", ct)}), t));
}
void neg(Ctx& c) { unary(c, "Neg"); }
void sqrt_(Ctx& c) { unary(c, "Sqrt"); }
void exp_(Ctx& c) { unary(c, "Exp"); }
void log_(Ctx& c) { unary(c, "Log"); }
void cos_(Ctx& c) { unary(c, "Cos"); }
void sin_(Ctx& c) { unary(c, "Sin"); }
void abs_(Ctx& c) {
  if (is_complex_arg(c, "self")) return c.set_output(0, complex_abs(c, c.tensor("self")));
  unary(c, "Abs");
}
void erf_(Ctx& c) { unary(c, "Erf"); }
void reciprocal(Ctx& c) {
  if (!is_complex_arg(c, "self")) return unary(c, "Reciprocal");
  // 1 / z = conj(z) / |z|^2
  std::string z = c.cast(c.tensor("self"), complex_component(c.out_dtype()));
  std::string re = complex_part(c, z, 0), im = complex_part(c, z, 1);
  std::string den = c.b.op("Add", {c.b.op("Mul", {re, re}), c.b.op("Mul", {im, im})});
  c.set_output(
      0, complex_make(c, c.b.op("Div", {re, den}), c.b.op("Neg", {c.b.op("Div", {im, den})})));
}
// Rounding an integer tensor leaves it as it is.
void rounding(Ctx& c, const char* op) {
  DType t = c.out_dtype();
  if (!is_floating(t)) return c.set_output(0, c.operand("self", t));
  unary(c, op);
}
void floor_(Ctx& c) { rounding(c, "Floor"); }
void ceil_(Ctx& c) { rounding(c, "Ceil"); }
void rsqrt(Ctx& c) {
  DType t = c.out_dtype();
  c.set_output(0, c.b.op("Reciprocal", {c.b.op("Sqrt", {c.operand("self", t)})}));
}
void logical_not(Ctx& c) {
  c.set_output(0, c.cast(c.b.op("Not", {c.operand("self", DType::Bool)}), c.out_dtype()));
}

void logical_binary(Ctx& c, const char* op) {
  std::string x = c.operand("self", DType::Bool);
  std::string y = c.operand("other", DType::Bool);
  c.set_output(0, c.cast(c.b.op(op, {x, y}), c.out_dtype()));
}
void logical_and(Ctx& c) { logical_binary(c, "And"); }
void logical_or(Ctx& c) { logical_binary(c, "Or"); }

void bitwise_and(Ctx& c) {
  if (c.out_dtype() == DType::Bool) return logical_binary(c, "And");
  if (c.opset() < 18) return c.set_output(0, bitwise_by_bits(c, '&'));
  c.set_output(0, binary(c, "BitwiseAnd"));
}
void bitwise_or(Ctx& c) {
  if (c.out_dtype() == DType::Bool) return logical_binary(c, "Or");
  if (c.opset() < 18) return c.set_output(0, bitwise_by_bits(c, '|'));
  c.set_output(0, binary(c, "BitwiseOr"));
}

// Comparisons compute in the promoted type of the operands.
void compare(Ctx& c, const char* op, bool negate = false) {
  auto [ta, ca] = c.operand_class("self");
  auto [tb, cb] = c.operand_class("other");
  DType t = promote_types(ta, ca, tb, cb);
  if (ca == 0 && cb == 0) c.fail("comparison of two scalars");
  // Ordering compares have no bool kernels: compare bools as integers.
  if (t == DType::Bool && std::string(op) != "Equal") t = DType::Int32;
  std::string r = c.b.op(op, {c.operand("self", t), c.operand("other", t)});
  if (negate) r = c.b.op("Not", {r});
  c.set_output(0, r);
}
void eq(Ctx& c) { compare(c, "Equal"); }
void ne(Ctx& c) { compare(c, "Equal", true); }
void lt(Ctx& c) { compare(c, "Less"); }
void le(Ctx& c) { compare(c, "LessOrEqual"); }
void gt(Ctx& c) { compare(c, "Greater"); }
void ge(Ctx& c) { compare(c, "GreaterOrEqual"); }

void maximum(Ctx& c) { c.set_output(0, binary(c, c.out_dtype() == DType::Bool ? "Or" : "Max")); }
void minimum(Ctx& c) { c.set_output(0, binary(c, c.out_dtype() == DType::Bool ? "And" : "Min")); }

// Where has no bool kernel in onnxruntime: bool values select as uint8.
void where(Ctx& c) {
  DType t = c.out_dtype();
  DType wt = t == DType::Bool ? DType::UInt8 : t;
  std::string cond = c.operand("condition", DType::Bool);
  std::string r = c.b.op("Where", {cond, c.operand("self", wt), c.operand("other", wt)});
  c.set_output(0, c.cast(r, t));
}

void masked_fill(Ctx& c) {
  DType t = c.out_dtype();
  DType wt = t == DType::Bool ? DType::UInt8 : t;
  std::string x = c.operand("self", wt);
  std::string mask = c.operand("mask", DType::Bool);
  c.set_output(0, c.cast(c.b.op("Where", {mask, c.operand("value", wt), x}), t));
}

void clamp(Ctx& c) {
  DType t = c.out_dtype();
  std::string x = c.operand("self", t);
  // Max / Min broadcast tensor and scalar bounds alike (Clip takes scalars only).
  auto bound = [&](const char* name, const char* op) {
    if (c.has(name)) x = c.b.op(op, {x, c.operand(name, t)});
  };
  bool b = t == DType::Bool;  // no Max / Min kernels for bool
  bound("min", b ? "Or" : "Max");
  bound("max", b ? "And" : "Min");
  c.set_output(0, x);
}

}  // namespace

void register_elementwise(Registry& r) {
  const std::string p = "torch.ops.aten.";
  for (const char* o : {"add.Tensor", "add.Scalar"}) r.add(p + o, add);
  for (const char* o : {"sub.Tensor", "sub.Scalar", "subtract.Tensor", "subtract.Scalar"})
    r.add(p + o, sub);
  for (const char* o : {"rsub.Tensor", "rsub.Scalar"}) r.add(p + o, rsub);
  for (const char* o : {"mul.Tensor", "mul.Scalar", "multiply.Tensor", "multiply.Scalar"})
    r.add(p + o, mul);
  for (const char* o : {"div.Tensor", "div.Scalar", "div.Tensor_mode", "div.Scalar_mode",
                        "divide.Tensor", "divide.Scalar", "divide.Tensor_mode",
                        "divide.Scalar_mode", "true_divide.Tensor", "true_divide.Scalar"})
    r.add(p + o, div);
  for (const char* o : {"floor_divide.default", "floor_divide.Scalar"}) r.add(p + o, floor_divide);
  for (const char* o : {"pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar"}) r.add(p + o, pow_);
  r.add(p + "neg.default", neg);
  r.add(p + "sqrt.default", sqrt_);
  r.add(p + "rsqrt.default", rsqrt);
  r.add(p + "exp.default", exp_);
  r.add(p + "log.default", log_);
  r.add(p + "cos.default", cos_);
  r.add(p + "sin.default", sin_);
  r.add(p + "abs.default", abs_);
  r.add(p + "erf.default", erf_);
  r.add(p + "reciprocal.default", reciprocal);
  r.add(p + "floor.default", floor_);
  r.add(p + "ceil.default", ceil_);
  r.add(p + "logical_not.default", logical_not);
  r.add(p + "logical_and.default", logical_and);
  r.add(p + "logical_or.default", logical_or);
  for (const char* o :
       {"bitwise_and.Tensor", "bitwise_and.Scalar", "__and__.Tensor", "__and__.Scalar"})
    r.add(p + o, bitwise_and);
  for (const char* o : {"bitwise_or.Tensor", "bitwise_or.Scalar", "__or__.Tensor", "__or__.Scalar"})
    r.add(p + o, bitwise_or);
  for (const char* o : {"eq.Tensor", "eq.Scalar"}) r.add(p + o, eq);
  for (const char* o : {"ne.Tensor", "ne.Scalar"}) r.add(p + o, ne);
  for (const char* o : {"lt.Tensor", "lt.Scalar"}) r.add(p + o, lt);
  for (const char* o : {"le.Tensor", "le.Scalar"}) r.add(p + o, le);
  for (const char* o : {"gt.Tensor", "gt.Scalar"}) r.add(p + o, gt);
  for (const char* o : {"ge.Tensor", "ge.Scalar"}) r.add(p + o, ge);
  r.add(p + "maximum.default", maximum);
  r.add(p + "minimum.default", minimum);
  for (const char* o : {"where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar"})
    r.add(p + o, where);
  for (const char* o : {"masked_fill.Scalar", "masked_fill.Tensor"}) r.add(p + o, masked_fill);
  for (const char* o :
       {"clamp.default", "clamp.Tensor", "clip.default", "clip.Tensor", "clamp_min.default",
        "clamp_min.Tensor", "clamp_max.default", "clamp_max.Tensor"})
    r.add(p + o, clamp);
}

}  // namespace pt2onnx
