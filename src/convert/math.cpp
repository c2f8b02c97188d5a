// Elementwise math beyond the basic arithmetic of elementwise.cpp: inverse and
// hyperbolic trigonometry, rounding, classification (isnan/isinf/...), float
// remainders, log/exp variants, bit shifts, and special functions (gamma
// family, error-function family, Bessel functions, orthogonal polynomials)
// written as short series / rational approximations in plain ONNX ops.
//
// float16 / bfloat16 tensors are computed in float32 and rounded back once,
// as torch does on CPU (its "opmath" type).
#include <cmath>
#include <functional>
#include <limits>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

using S = std::string;
constexpr double kPi = 3.14159265358979323846;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Type a float result is computed in.
DType compute_type(DType t) {
  return (t == DType::Float16 || t == DType::BFloat16) ? DType::Float : t;
}

// Builds expressions in one element type `t` (values of other types are cast
// explicitly by the caller).
struct M {
  Ctx& c;
  DType t;
  S k(double v) const { return c.b.scalar(t, v); }
  S kt(DType d, double v) const { return c.b.scalar(d, v); }
  // Same-type unary op (also those the shape inference does not know).
  // Where onnxruntime has no kernel for the type (float64 Tan), in the one
  // kernel_type names, cast back.
  S u(const char* op, const S& x, std::vector<Attr> attrs = {}) const {
    ValueType vt = c.type(x);
    DType k = c.kernel_type(op, vt.dtype);
    if (k == vt.dtype) return c.b.op(op, {x}, std::move(attrs), vt);
    DType was = vt.dtype;
    vt.dtype = k;
    return c.cast(c.b.op(op, {c.cast(x, k)}, std::move(attrs), vt), was);
  }
  S bin(const char* op, const S& a, const S& b) const { return c.b.op(op, {a, b}); }
  S add(const S& a, const S& b) const { return bin("Add", a, b); }
  S sub(const S& a, const S& b) const { return bin("Sub", a, b); }
  S mul(const S& a, const S& b) const { return bin("Mul", a, b); }
  S div(const S& a, const S& b) const { return bin("Div", a, b); }
  S add(const S& a, double b) const { return add(a, k(b)); }
  S mul(const S& a, double b) const { return mul(a, k(b)); }
  S neg(const S& a) const { return u("Neg", a); }
  S abs(const S& a) const { return u("Abs", a); }
  S log(const S& a) const { return u("Log", a); }
  S exp(const S& a) const { return u("Exp", a); }
  S sqrt(const S& a) const { return u("Sqrt", a); }
  S floor(const S& a) const { return u("Floor", a); }
  S ceil(const S& a) const { return u("Ceil", a); }
  S recip(const S& a) const { return u("Reciprocal", a); }
  S pow(const S& a, const S& b) const { return bin("Pow", a, b); }
  S where(const S& cond, const S& a, const S& b) const { return c.b.op("Where", {cond, a, b}); }
  S lt(const S& a, const S& b) const { return bin("Less", a, b); }
  S le(const S& a, const S& b) const { return bin("LessOrEqual", a, b); }
  S gt(const S& a, const S& b) const { return bin("Greater", a, b); }
  S ge(const S& a, const S& b) const { return bin("GreaterOrEqual", a, b); }
  S eq(const S& a, const S& b) const { return bin("Equal", a, b); }
  S lt(const S& a, double b) const { return lt(a, k(b)); }
  S le(const S& a, double b) const { return le(a, k(b)); }
  S gt(const S& a, double b) const { return gt(a, k(b)); }
  S ge(const S& a, double b) const { return ge(a, k(b)); }
  S eq(const S& a, double b) const { return eq(a, k(b)); }
  S and_(const S& a, const S& b) const { return bin("And", a, b); }
  S or_(const S& a, const S& b) const { return bin("Or", a, b); }
  S not_(const S& a) const { return u("Not", a); }
  S isnan(const S& a) const { return not_(eq(a, a)); }
  S isinf(const S& a) const { return eq(abs(a), k(kInf)); }
  // Sign bit of a float (true for -0.0 too).
  S signbit(const S& a) const { return or_(lt(a, 0.0), lt(recip(a), 0.0)); }
  S trunc(const S& a) const { return where(lt(a, 0.0), ceil(a), floor(a)); }
  // Horner: coeffs[0] + coeffs[1] x + coeffs[2] x^2 + ...
  S poly(const S& x, const std::vector<double>& coeffs) const {
    S r = k(coeffs.back());
    for (size_t i = coeffs.size() - 1; i-- > 0;) r = add(mul(r, x), k(coeffs[i]));
    return r;
  }
  // log1p without the cancellation of log(1 + x) near 0.
  S log1p(const S& x) const {
    S v = add(x, 1.0);
    S d = sub(v, k(1.0));
    S kahan = div(mul(log(v), x), d);
    return where(eq(d, 0.0), x, where(eq(v, k(kInf)), v, kahan));
  }
  S expm1(const S& x) const {
    S v = exp(x);
    S d = sub(v, k(1.0));
    S kahan = div(mul(d, x), log(v));
    return where(lt(abs(x), 0.5), where(eq(d, 0.0), x, kahan), d);
  }
  S erf(const S& x) const { return u("Erf", x); }
  // exponent e with 2^(e-1) <= |x| < 2^e (as C frexp) for finite nonzero x,
  // as a float of type t.
  S frexp_exponent(const S& ax) const {
    S e = floor(div(log(ax), k(std::log(2.0))));
    S p = pow(k(2.0), e);
    e = where(gt(p, ax), add(e, -1.0), where(le(mul(p, 2.0), ax), add(e, 1.0), e));
    return add(e, 1.0);
  }
};

// ---- generic shapes of converters

// Unary op computing a float result from `self` (ints cast to the result type).
void unary_float(Ctx& c, const std::function<S(M&, const S&)>& f) {
  DType t = c.out_dtype();
  DType ct = compute_type(t);
  M m{c, ct};
  // The special_* ops name their input x.
  c.set_output(0, c.cast(f(m, c.operand(c.arg("self") ? "self" : "x", ct)), t));
}

// Binary op computing in the (promoted) output type.
void binary_float(Ctx& c, const char* a, const char* b,
                  const std::function<S(M&, const S&, const S&)>& f) {
  DType t = c.out_dtype();
  DType ct = compute_type(t);
  M m{c, ct};
  c.set_output(0, c.cast(f(m, c.operand(a, ct), c.operand(b, ct)), t));
}

// Type the inputs of a bool-valued classification are looked at in.
DType input_type(Ctx& c, const char* name) { return c.operand_class(name).first; }

#define UNARY(NAME, BODY)                                \
  void NAME(Ctx& c) {                                    \
    unary_float(c, [](M& m, const S& x) -> S { BODY; }); \
  }
#define BINARY(NAME, A, B, BODY)                                            \
  void NAME(Ctx& c) {                                                       \
    binary_float(c, A, B, [](M& m, const S& x, const S& y) -> S { BODY; }); \
  }

UNARY(acos_, return m.u("Acos", x))
UNARY(asin_, return m.u("Asin", x))
UNARY(atan_, return m.u("Atan", x))
UNARY(acosh_, return m.u("Acosh", x))
UNARY(asinh_, return m.u("Asinh", x))
UNARY(atanh_, return m.u("Atanh", x))
UNARY(cosh_, return m.u("Cosh", x))
UNARY(sinh_, return m.u("Sinh", x))
UNARY(tan_, return m.u("Tan", x))
UNARY(deg2rad, return m.mul(x, kPi / 180.0))
UNARY(rad2deg, return m.mul(x, 180.0 / kPi))
UNARY(erfc_, return m.sub(m.k(1.0), m.erf(x)))
UNARY(exp2_, return m.pow(m.k(2.0), x))
UNARY(expm1_, return m.expm1(x))
UNARY(log1p_, return m.log1p(x))
UNARY(log2_, return m.div(m.log(x), m.k(std::log(2.0))))
UNARY(log10_, return m.div(m.log(x), m.k(std::log(10.0))))
UNARY(sinc, {
  S px = m.mul(x, kPi);
  return m.where(m.eq(x, 0.0), m.k(1.0), m.div(m.u("Sin", px), px));
})
UNARY(spherical_bessel_j0, {
  S r = m.div(m.u("Sin", x), x);
  r = m.where(
      m.lt(m.abs(x), 0.5),
      m.poly(m.mul(x, x), {1.0, -1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880, -1.0 / 39916800}),
      r);
  return m.where(m.isinf(x), m.k(0.0), r);
})
UNARY(special_entr, {
  S r = m.neg(m.mul(x, m.log(x)));
  r = m.where(m.eq(x, 0.0), m.k(0.0), r);
  return m.where(m.lt(x, 0.0), m.k(-kInf), r);
})
UNARY(special_ndtr, return m.mul(m.add(m.erf(m.mul(x, M_SQRT1_2)), 1.0), 0.5))

// Rounding ops keep integer tensors as they are.
void rounding(Ctx& c, const std::function<S(M&, const S&)>& f) {
  DType t = c.out_dtype();
  if (!is_floating(t)) return c.set_output(0, c.operand("self", t));
  unary_float(c, f);
}
void trunc_(Ctx& c) {
  rounding(c, [](M& m, const S& x) { return m.trunc(x); });
}
void frac(Ctx& c) {
  rounding(c, [](M& m, const S& x) { return m.sub(x, m.trunc(x)); });
}
void round_(Ctx& c) {
  int64_t d = c.i("decimals", 0);
  rounding(c, [d](M& m, const S& x) {
    if (d == 0) return m.u("Round", x);
    double p = std::pow(10.0, static_cast<double>(d > 0 ? d : -d));
    if (d > 0) return m.div(m.u("Round", m.mul(x, p)), m.k(p));
    return m.mul(m.u("Round", m.div(x, m.k(p))), p);
  });
}

// sign: (0 < x) - (x < 0); NaN gives 0 as in torch. bool stays as it is.
void sign_(Ctx& c) {
  DType t = c.out_dtype();
  if (t == DType::Bool) return c.set_output(0, c.operand("self", t));
  DType ct = compute_type(t);
  M m{c, ct};
  S x = c.operand("self", ct);
  S r = m.sub(c.cast(m.gt(x, 0.0), ct), c.cast(m.lt(x, 0.0), ct));
  c.set_output(0, c.cast(r, t));
}

void signbit_(Ctx& c) {
  DType it = input_type(c, "self");
  S x = c.tensor("self");
  if (it == DType::Bool) return c.set_output(0, M{c, it}.not_(M{c, it}.eq(x, x)));
  if (!is_floating(it)) return c.set_output(0, M{c, it}.lt(x, 0.0));
  DType ct = compute_type(it);
  M m{c, ct};
  c.set_output(0, m.signbit(c.cast(x, ct)));
}

// ---- classification: bool results
void classify(Ctx& c, bool int_value, const std::function<S(M&, const S&)>& f) {
  DType it = input_type(c, "self");
  S x = c.tensor("self");
  if (!is_floating(it)) {
    M m{c, it};
    S all = m.eq(x, x);  // all true for ints and bools
    return c.set_output(0, int_value ? all : m.not_(all));
  }
  DType ct = compute_type(it);
  M m{c, ct};
  c.set_output(0, f(m, c.cast(x, ct)));
}
void isnan_(Ctx& c) {
  classify(c, false, [](M& m, const S& x) { return m.isnan(x); });
}
void isinf_(Ctx& c) {
  classify(c, false, [](M& m, const S& x) { return m.isinf(x); });
}
void isposinf(Ctx& c) {
  classify(c, false, [](M& m, const S& x) { return m.eq(x, kInf); });
}
void isneginf(Ctx& c) {
  classify(c, false, [](M& m, const S& x) { return m.eq(x, -kInf); });
}
void isfinite_(Ctx& c) {
  classify(c, true, [](M& m, const S& x) { return m.lt(m.abs(x), m.k(kInf)); });
}
void isreal(Ctx& c) {
  classify(c, true, [](M& m, const S& x) { return m.eq(m.add(m.mul(x, 0.0), 1.0), 1.0); });
}

// ---- binary float ops
BINARY(atan2_, "self", "other", {
  // atan2(y, x): atan(y / x) moved by +-pi where x has its sign bit set;
  // y == +-0 keeps its sign through atan so that the quadrant follows it.
  S q = m.where(m.eq(x, 0.0), x, m.div(x, y));
  S a = m.u("Atan", q);
  S shift = m.where(m.signbit(x), m.k(-kPi), m.k(kPi));
  return m.where(m.signbit(y), m.add(a, shift), a);
})
BINARY(copysign_, "self", "other", {
  S a = m.abs(x);
  return m.where(m.signbit(y), m.neg(a), a);
})
BINARY(hypot_, "self", "other", return m.sqrt(m.add(m.mul(x, x), m.mul(y, y))))
BINARY(logaddexp, "self", "other", {
  S mx = m.bin("Max", x, y);
  S r = m.add(mx, m.log1p(m.exp(m.neg(m.abs(m.sub(x, y))))));
  return m.where(m.eq(x, y), m.add(x, std::log(2.0)), r);
})
BINARY(logaddexp2, "self", "other", {
  S mx = m.bin("Max", x, y);
  S d = m.pow(m.k(2.0), m.neg(m.abs(m.sub(x, y))));
  S r = m.add(mx, m.div(m.log1p(d), m.k(std::log(2.0))));
  return m.where(m.eq(x, y), m.add(x, 1.0), r);
})
BINARY(xlogy_, "self", "other", {
  S r = m.where(m.eq(x, 0.0), m.k(0.0), m.mul(x, m.log(y)));
  return m.where(m.isnan(y), m.k(kNaN), r);
})
BINARY(xlog1py, "self", "other", {
  S r = m.where(m.eq(x, 0.0), m.k(0.0), m.mul(x, m.log1p(y)));
  return m.where(m.isnan(y), m.k(kNaN), r);
})
BINARY(ldexp_, "self", "other", return m.mul(x, m.pow(m.k(2.0), y)))

// fmax / fmin: NaN only when both are NaN.
void fminmax(Ctx& c, const char* op) {
  DType t = c.out_dtype();
  if (t == DType::Bool) {
    S r = c.b.op(std::string(op) == "Max" ? "Or" : "And",
                 {c.operand("self", t), c.operand("other", t)});
    return c.set_output(0, r);
  }
  if (!is_floating(t))
    return c.set_output(0, c.b.op(op, {c.operand("self", t), c.operand("other", t)}));
  DType ct = compute_type(t);
  M m{c, ct};
  S x = c.operand("self", ct), y = c.operand("other", ct);
  S r = m.where(m.isnan(x), y, m.where(m.isnan(y), x, m.bin(op, x, y)));
  c.set_output(0, c.cast(r, t));
}
void fmax_(Ctx& c) { fminmax(c, "Max"); }
void fmin_(Ctx& c) { fminmax(c, "Min"); }

// fmod: C's fmod (sign of the dividend); remainder: Python's (sign of the divisor).
void fmod_(Ctx& c) {
  DType t = c.out_dtype();
  DType ct = compute_type(t);
  S r = c.b.op("Mod", {c.operand("self", ct), c.operand("other", ct)}, {Attr::Int("fmod", 1)});
  c.set_output(0, c.cast(r, t));
}
void remainder_(Ctx& c) {
  DType t = c.out_dtype();
  if (!is_floating(t)) {
    S r = c.b.op("Mod", {c.operand("self", t), c.operand("other", t)}, {Attr::Int("fmod", 0)});
    return c.set_output(0, r);
  }
  DType ct = compute_type(t);
  M m{c, ct};
  S y = c.operand("other", ct);
  S r = c.b.op("Mod", {c.operand("self", ct), y}, {Attr::Int("fmod", 1)});
  S fix = m.and_(m.not_(m.eq(r, 0.0)), m.not_(m.eq(m.lt(y, 0.0), m.lt(r, 0.0))));
  c.set_output(0, c.cast(m.where(fix, m.add(r, y), r), t));
}

// gcd / lcm on integers. torch runs Euclid per element on a = |a|, b = |b|:
// while (a != 0) (a, b) = (b % a, a) with C's truncating %, and gcd = b.
// ONNX has no gcd, so a Loop runs that step on the whole tensor until every
// a is 0 (at most ~92 rounds for int64); elements already done keep their
// state. Overflow follows torch's scalar code: |INT_MIN| stays INT_MIN, so
// gcd(INT_MIN, 0) = INT_MIN and gcd(INT_MIN, 6) = -2. int8 / int16 / uint8
// are computed in int32 (C's integer promotion), wrapped back at the end.
DType gcd_compute_type(DType t) {
  return (t == DType::Int8 || t == DType::Int16 || t == DType::UInt8) ? DType::Int32 : t;
}
S euclid_gcd(Ctx& c, DType t, S a, S b) {
  DType ct = gcd_compute_type(t);
  M m{c, ct};
  auto wrapped_abs = [&](const S& v) {
    if (t == DType::UInt8 || t == DType::UInt16 || t == DType::UInt32 || t == DType::UInt64)
      return v;
    S r = m.abs(v);
    return ct == t ? r : c.cast(c.cast(r, t), ct);  // |-128| is -128 in int8
  };
  a = wrapped_abs(a);
  b = wrapped_abs(b);
  // Both take the broadcast shape, which the Loop then carries unchanged.
  a = c.b.op("Expand", {a, c.b.op("Shape", {b})});
  b = c.b.op("Expand", {b, c.b.op("Shape", {a})});
  auto any_nonzero = [&](const S& v) {
    S n = c.cast(m.not_(m.eq(v, 0.0)), DType::Int64);
    S total =
        c.b.op("ReduceSum", {n}, {Attr::Int("keepdims", 0)}, ValueType{DType::Int64, Shape{}});
    return c.b.op("Greater", {total, c.b.scalar_i64(0)});
  };
  S first = any_nonzero(a);
  ValueType state_t = c.type(a);
  c.b.begin_subgraph(c.node.name + "_euclid");
  S iter = c.b.fresh_name("iter");
  c.b.add_input(iter, ValueType{DType::Int64, Shape{}});
  S cond_in = c.b.fresh_name("cond_in");
  c.b.add_input(cond_in, ValueType{DType::Bool, Shape{}});
  S ai = c.b.fresh_name("a"), bi = c.b.fresh_name("b");
  c.b.add_input(ai, state_t);
  c.b.add_input(bi, state_t);
  S done = m.eq(ai, 0.0);
  S d = m.where(done, m.k(1), ai);
  // Python's mod (ONNX Mod, fmod=0, exact on integers) has the divisor's
  // sign; C's % the dividend's: they differ by d when the signs disagree.
  S r = c.b.op("Mod", {bi, d}, {Attr::Int("fmod", 0)});
  S fix = m.and_(m.not_(m.eq(r, 0.0)), m.not_(m.eq(m.lt(bi, 0.0), m.lt(r, 0.0))));
  r = m.where(fix, m.sub(r, d), r);
  S an = m.where(done, ai, r);
  S bn = m.where(done, bi, ai);
  S cond_out = any_nonzero(an);
  c.b.add_output(cond_out, c.b.type(cond_out));
  c.b.add_output(an, state_t);
  c.b.add_output(bn, state_t);
  Graph body = c.b.end_subgraph();
  auto outs = c.b.add_node("Loop", {"", first, a, b}, 2, {Attr::Subgraph("body", std::move(body))},
                           {state_t, state_t});
  return outs[1];
}
void gcd_(Ctx& c) {
  DType t = c.out_dtype();
  if (is_floating(t) || t == DType::Bool) c.fail("gcd is defined for integer tensors only");
  DType ct = gcd_compute_type(t);
  S g = euclid_gcd(c, t, c.operand("self", ct), c.operand("other", ct));
  c.set_output(0, c.cast(g, t));
}
// lcm = |a / g * b| (0 when g is 0), in C's wrapping arithmetic like torch.
// g can be -1 after an overflow (gcd(INT_MIN, INT_MAX)): a / -1 is taken as
// 0 - a, since INT_MIN / -1 traps in C.
void lcm_(Ctx& c) {
  DType t = c.out_dtype();
  if (is_floating(t) || t == DType::Bool) c.fail("lcm is defined for integer tensors only");
  DType ct = gcd_compute_type(t);
  M m{c, ct};
  S a = c.operand("self", ct), b = c.operand("other", ct);
  S g = euclid_gcd(c, t, a, b);
  S zero = m.eq(g, 0.0), minus_one = m.eq(g, -1.0);
  S q = m.div(a, m.where(m.or_(zero, minus_one), m.k(1), g));
  q = m.where(minus_one, m.sub(m.k(0), a), q);
  S l = m.abs(m.mul(q, b));
  c.set_output(0, c.cast(m.where(zero, m.k(0), l), t));
}

void logit_(Ctx& c) {
  DType t = c.out_dtype();
  DType ct = compute_type(t);
  M m{c, ct};
  S x = c.operand("self", ct);
  if (c.has("eps")) {
    double eps = c.f("eps", 0.0);
    x = m.where(m.lt(x, eps), m.k(eps), m.where(m.gt(x, 1.0 - eps), m.k(1.0 - eps), x));
  }
  c.set_output(0, c.cast(m.log(m.div(x, m.sub(m.k(1.0), x))), t));
}

void heaviside_(Ctx& c) {
  DType t = c.out_dtype();
  DType ct = t == DType::Bool ? DType::Int32 : compute_type(t);
  M m{c, ct};
  S x = c.operand("self", ct);
  S r = m.where(m.eq(x, 0.0), c.operand("values", ct), c.cast(m.gt(x, 0.0), ct));
  c.set_output(0, c.cast(r, t));
}

void lerp_(Ctx& c) {
  // torch: w < 0.5 ? a + w (b - a) : b - (b - a)(1 - w)
  DType t = c.out_dtype();
  DType ct = compute_type(t);
  M m{c, ct};
  S a = c.operand("self", ct), b = c.operand("end", ct), w = c.operand("weight", ct);
  S d = m.sub(b, a);
  S lo = m.add(a, m.mul(w, d));
  S hi = m.sub(b, m.mul(d, m.sub(m.k(1.0), w)));
  S r;
  if (auto wv = c.scalar_value("weight"))
    r = std::abs(*wv) < 0.5 ? lo : hi;
  else
    r = m.where(m.lt(m.abs(w), 0.5), lo, hi);
  c.set_output(0, c.cast(r, t));
}

void float_power_(Ctx& c) {
  DType t = c.out_dtype();  // float64 (or complex128)
  c.set_output(0, c.b.op("Pow", {c.operand("self", t), c.operand("exponent", t)}));
}

void frexp_(Ctx& c) {
  DType t = c.out_dtype(0);
  DType ct = compute_type(t);
  M m{c, ct};
  S x = c.operand("self", ct);
  S ax = m.abs(x);
  S e = m.frexp_exponent(ax);
  S special = m.or_(m.eq(x, 0.0), m.not_(m.lt(ax, m.k(kInf))));  // 0, inf, nan
  e = m.where(special, m.k(0.0), e);
  S mant = m.where(special, x, m.div(x, m.pow(m.k(2.0), e)));
  c.set_output(0, c.cast(mant, t));
  c.set_output(1, c.cast(e, c.out_dtype(1)));
}

// nextafter on the float grid of the tensor's type (mantissa bits, smallest
// subnormal), computed in a wider float where the steps are exact.
void nextafter_(Ctx& c) {
  DType t = c.out_dtype();
  int mbits = 23, emin = -149;
  if (t == DType::Double) mbits = 52, emin = -1074;
  if (t == DType::Float16) mbits = 10, emin = -24;
  if (t == DType::BFloat16) mbits = 7, emin = -133;
  DType ct = compute_type(t);
  M m{c, ct};
  S x = c.operand("self", ct), y = c.operand("other", ct);
  S ax = m.abs(x);
  S e = m.add(m.frexp_exponent(ax), -1.0);  // 2^e <= |x| < 2^(e+1)
  S up = m.pow(m.k(2.0), m.bin("Max", m.add(e, -static_cast<double>(mbits)), m.k(emin)));
  S at_pow2 = m.eq(ax, m.pow(m.k(2.0), e));
  S down = m.where(
      at_pow2, m.pow(m.k(2.0), m.bin("Max", m.add(e, -static_cast<double>(mbits) - 1), m.k(emin))),
      up);
  // Away from zero when moving towards y grows |x|.
  S away = m.eq(m.lt(x, y), m.gt(x, 0.0));
  S step = m.where(away, up, down);
  S r = m.where(m.lt(x, y), m.add(x, step), m.sub(x, step));
  S tiny = m.k(std::ldexp(1.0, emin));
  r = m.where(m.eq(x, 0.0), m.where(m.lt(x, y), tiny, m.neg(tiny)), r);
  r = m.where(m.eq(x, y), y, r);
  r = m.where(m.or_(m.isnan(x), m.isnan(y)), m.k(kNaN), r);
  c.set_output(0, c.cast(r, t));
}

void nan_to_num_(Ctx& c) {
  DType t = c.out_dtype();
  if (!is_floating(t)) return c.set_output(0, c.operand("self", t));
  double big = 3.4028234663852886e38;
  if (t == DType::Double) big = std::numeric_limits<double>::max();
  if (t == DType::Float16) big = 65504.0;
  if (t == DType::BFloat16) big = 3.3895313892515355e38;
  double nan = c.f("nan", 0.0), pinf = c.f("posinf", big), ninf = c.f("neginf", -big);
  DType ct = compute_type(t);
  M m{c, ct};
  S x = c.operand("self", ct);
  S r = m.where(m.isnan(x), m.k(nan), x);
  r = m.where(m.eq(x, kInf), m.k(pinf), r);
  r = m.where(m.eq(x, -kInf), m.k(ninf), r);
  c.set_output(0, c.cast(r, t));
}

void identity(Ctx& c) { c.set_output(0, c.operand("self", c.out_dtype())); }

void square_(Ctx& c) {
  DType t = c.out_dtype();
  S x = c.operand("self", t);
  c.set_output(0, c.b.op(t == DType::Bool ? "And" : "Mul", {x, x}));
}

void logical_xor_(Ctx& c) {
  S r = c.b.op("Xor", {c.operand("self", DType::Bool), c.operand("other", DType::Bool)});
  c.set_output(0, c.cast(r, c.out_dtype()));
}

void isclose_(Ctx& c) {
  DType it = input_type(c, "self");
  double rtol = c.f("rtol", 1e-5), atol = c.f("atol", 1e-8);
  bool equal_nan = c.flag("equal_nan", false);
  S a = c.tensor("self"), b = c.tensor("other");
  S close = c.b.op("Equal", {a, b});
  bool fl = is_floating(it);
  if (equal_nan && fl) {
    M m{c, compute_type(it)};
    close = m.or_(close, m.and_(m.isnan(a), m.isnan(b)));
  }
  if (rtol == 0 && atol == 0) return c.set_output(0, close);
  DType ct = fl ? compute_type(it) : DType::Float;
  M m{c, ct};
  S actual;
  if (fl || it == DType::Bool) {
    actual = m.abs(m.sub(c.cast(a, ct), c.cast(b, ct)));
  } else {
    M mi{c, it};
    actual = c.cast(mi.abs(mi.sub(a, b)), ct);
  }
  S allowed = m.add(m.abs(m.mul(c.cast(b, ct), rtol)), atol);
  S ok = m.and_(m.lt(m.abs(actual), m.k(kInf)), m.le(actual, allowed));
  c.set_output(0, m.or_(close, ok));
}

void addcmul_(Ctx& c) {
  DType t = c.out_dtype();
  M m{c, t};
  S p = m.mul(c.operand("tensor1", t), c.operand("tensor2", t));
  double v = c.f("value", 1.0);
  if (v != 1.0) p = m.mul(m.k(v), p);
  c.set_output(0, m.add(c.operand("self", t), p));
}
void addcdiv_(Ctx& c) {
  DType t = c.out_dtype();
  M m{c, t};
  S p = m.div(c.operand("tensor1", t), c.operand("tensor2", t));
  double v = c.f("value", 1.0);
  if (v != 1.0) p = m.mul(m.k(v), p);
  c.set_output(0, m.add(c.operand("self", t), p));
}

// ---- special functions. Bessel functions: the polynomial approximations of
// Abramowitz & Stegun 9.4 and 9.8 (absolute / relative errors below 2e-7).
const std::vector<double> kI0S{1, 3.5156229, 3.0899424, 1.2067492, 0.2659732, 0.0360768, 0.0045813};
const std::vector<double> kI0L{0.39894228,  0.01328592, 0.00225319,  -0.00157565, 0.00916281,
                               -0.02057706, 0.02635537, -0.01647633, 0.00392377};
const std::vector<double> kI1S{0.5,        0.87890594, 0.51498869, 0.15084934,
                               0.02658733, 0.00301532, 0.00032411};
const std::vector<double> kI1L{0.39894228, -0.03988024, -0.00362018, 0.00163801, -0.01031555,
                               0.02282967, -0.02895312, 0.01787654,  -0.00420059};
const std::vector<double> kK0S{-0.57721566, 0.42278420, 0.23069756, 0.03488590,
                               0.00262698,  0.00010750, 0.00000740};
const std::vector<double> kK0L{1.25331414, -0.07832358, 0.02189568, -0.01062446,
                               0.00587872, -0.00251540, 0.00053208};
const std::vector<double> kK1S{1,           0.15443144,  -0.67278579, -0.18156897,
                               -0.01919402, -0.00110404, -0.00004686};
const std::vector<double> kK1L{1.25331414,  0.23498619, -0.03655620, 0.01504268,
                               -0.00780353, 0.00325614, -0.00068245};
const std::vector<double> kJ0S{1,         -2.2499997, 1.2656208, -0.3163866,
                               0.0444479, -0.0039444, 0.0002100};
const std::vector<double> kY0S{0.36746691,  0.60559366, -0.74350384, 0.25300117,
                               -0.04261214, 0.00427916, -0.00024846};
const std::vector<double> kF0{0.79788456, -0.00000077, -0.00552740, -0.00009512,
                              0.00137237, -0.00072805, 0.00014476};
const std::vector<double> kT0{-0.78539816, -0.04166397, -0.00003954, 0.00262573,
                              -0.00054125, -0.00029333, 0.00013558};
const std::vector<double> kJ1S{0.5,        -0.56249985, 0.21093573, -0.03954289,
                               0.00443319, -0.00031761, 0.00001109};
const std::vector<double> kY1S{-0.6366198, 0.2212091,  2.1682709, -1.3164827,
                               0.3123951,  -0.0400976, 0.0027873};
const std::vector<double> kF1{0.79788456,  0.00000156, 0.01659667, 0.00017105,
                              -0.00249511, 0.00113653, -0.00020033};
const std::vector<double> kT1{-2.35619449, 0.12499612, 0.00005650, -0.00637879,
                              0.00074348,  0.00079824, -0.00029166};

// exp(-|x|) I0(x) and exp(-|x|) I1(x).
S i0e(M& m, const S& x) {
  S ax = m.abs(x);
  S t = m.div(ax, m.k(3.75));
  S small = m.mul(m.exp(m.neg(ax)), m.poly(m.mul(t, t), kI0S));
  S large = m.div(m.poly(m.div(m.k(3.75), ax), kI0L), m.sqrt(ax));
  return m.where(m.lt(ax, 3.75), small, large);
}
S i1e(M& m, const S& x) {
  S ax = m.abs(x);
  S t = m.div(ax, m.k(3.75));
  S small = m.mul(m.mul(m.exp(m.neg(ax)), ax), m.poly(m.mul(t, t), kI1S));
  S large = m.div(m.poly(m.div(m.k(3.75), ax), kI1L), m.sqrt(ax));
  S r = m.where(m.lt(ax, 3.75), small, large);
  return m.where(m.lt(x, 0.0), m.neg(r), r);
}
// exp(x) K0(x), exp(x) K1(x) for x > 0; K(0) = inf, K(x < 0) = nan.
S k_scaled(M& m, const S& x, bool one) {
  S h = m.mul(x, 0.5);
  S h2 = m.mul(h, h);
  S small;
  if (!one) {
    small = m.add(m.mul(m.neg(m.log(h)), m.mul(i0e(m, x), m.exp(x))), m.poly(h2, kK0S));
  } else {
    S xi = m.mul(m.mul(x, m.log(h)), m.mul(i1e(m, x), m.exp(x)));
    small = m.div(m.add(xi, m.poly(h2, kK1S)), x);
  }
  small = m.mul(small, m.exp(x));
  S large = m.div(m.poly(m.div(m.k(2.0), x), one ? kK1L : kK0L), m.sqrt(x));
  S r = m.where(m.le(x, 2.0), small, large);
  r = m.where(m.eq(x, 0.0), m.k(kInf), r);
  return m.where(m.lt(x, 0.0), m.k(kNaN), r);
}
// J0 / J1 (order 0 or 1) and, for x > 0, Y0 / Y1.
S bessel_j(M& m, const S& x, bool one) {
  S ax = m.abs(x);
  S t = m.div(ax, m.k(3.0));
  S t2 = m.mul(t, t);
  S small = one ? m.mul(ax, m.poly(t2, kJ1S)) : m.poly(t2, kJ0S);
  S u = m.div(m.k(3.0), ax);
  S phase = m.add(ax, m.poly(u, one ? kT1 : kT0));
  S large = m.div(m.mul(m.poly(u, one ? kF1 : kF0), m.u("Cos", phase)), m.sqrt(ax));
  S r = m.where(m.le(ax, 3.0), small, large);
  r = m.where(m.isinf(x), m.k(0.0), r);
  return one ? m.where(m.lt(x, 0.0), m.neg(r), r) : r;
}
S bessel_y(M& m, const S& x, bool one) {
  S t = m.div(x, m.k(3.0));
  S t2 = m.mul(t, t);
  S lj = m.mul(m.mul(m.k(2.0 / kPi), m.log(m.mul(x, 0.5))), bessel_j(m, x, one));
  S small = one ? m.div(m.add(m.mul(x, lj), m.poly(t2, kY1S)), x) : m.add(lj, m.poly(t2, kY0S));
  S u = m.div(m.k(3.0), x);
  S phase = m.add(x, m.poly(u, one ? kT1 : kT0));
  S large = m.div(m.mul(m.poly(u, one ? kF1 : kF0), m.u("Sin", phase)), m.sqrt(x));
  S r = m.where(m.le(x, 3.0), small, large);
  r = m.where(m.eq(x, kInf), m.k(0.0), r);
  r = m.where(m.eq(x, 0.0), m.k(-kInf), r);
  return m.where(m.lt(x, 0.0), m.k(kNaN), r);
}

UNARY(i0_, return m.mul(i0e(m, x), m.exp(m.abs(x))))
UNARY(i0e_, return i0e(m, x))
UNARY(i1_, return m.mul(i1e(m, x), m.exp(m.abs(x))))
UNARY(i1e_, return i1e(m, x))
UNARY(k0_, return m.mul(k_scaled(m, x, false), m.exp(m.neg(x))))
UNARY(k1_, return m.mul(k_scaled(m, x, true), m.exp(m.neg(x))))
UNARY(k0e_, return k_scaled(m, x, false))
UNARY(k1e_, return k_scaled(m, x, true))
UNARY(j0_, return bessel_j(m, x, false))
UNARY(j1_, return bessel_j(m, x, true))
UNARY(y0_, return bessel_y(m, x, false))
UNARY(y1_, return bessel_y(m, x, true))

// |sin(pi x)| and tan(pi x) with the argument reduced exactly (x - round(x)),
// so that they are exactly 0 at integers.
S sinpi_abs(M& m, const S& x) {
  S r = m.sub(x, m.u("Round", x));
  return m.abs(m.u("Sin", m.mul(r, kPi)));
}

// cot(pi x), reduced to |r| <= 1/2 (r = x - round(x)) and, for |r| > 1/4,
// taken as tan(pi (1/2 - |r|)) so that it is exactly 0 at half-integers.
S cotpi(M& m, const S& x) {
  S r = m.sub(x, m.u("Round", x));
  S ar = m.abs(r);
  S near = m.recip(m.u("Tan", m.mul(r, kPi)));
  S far = m.u("Tan", m.mul(m.sub(m.k(0.5), ar), kPi));
  far = m.where(m.lt(r, 0.0), m.neg(far), far);
  return m.where(m.lt(ar, 0.25), near, far);
}

// lgamma for y >= 0.5: Stirling's series at y (or y + 8, shifted back by the
// recurrence when y < 8).
S lgamma_pos(M& m, const S& y) {
  S small = m.lt(y, 8.0);
  S z = m.where(small, m.add(y, 8.0), y);
  S prod = y;
  for (int i = 1; i < 8; ++i) prod = m.mul(prod, m.add(y, static_cast<double>(i)));
  S zi = m.recip(z);
  S series = m.mul(zi, m.poly(m.mul(zi, zi), {1.0 / 12, -1.0 / 360, 1.0 / 1260, -1.0 / 1680}));
  S st =
      m.add(m.sub(m.mul(m.add(z, -0.5), m.log(z)), z), m.add(series, m.k(0.5 * std::log(2 * kPi))));
  return m.where(small, m.sub(st, m.log(prod)), st);
}
// lgamma everywhere: the reflection formula below 0.5.
S lgamma_(M& m, const S& x) {
  S refl = m.lt(x, 0.5);
  S y = m.where(refl, m.sub(m.k(1.0), x), x);
  S l = lgamma_pos(m, y);
  S r = m.sub(m.sub(m.k(std::log(kPi)), m.log(sinpi_abs(m, x))), l);
  return m.where(m.isinf(x), m.k(kInf), m.where(refl, r, l));
}
S digamma_pos(M& m, const S& y) {
  S small = m.lt(y, 6.0);
  S z = m.where(small, m.add(y, 6.0), y);
  S acc = m.recip(y);
  for (int i = 1; i < 6; ++i) acc = m.add(acc, m.recip(m.add(y, static_cast<double>(i))));
  S zi = m.recip(z);
  S zi2 = m.mul(zi, zi);
  S a = m.sub(m.sub(m.log(z), m.mul(zi, 0.5)),
              m.mul(zi2, m.poly(zi2, {1.0 / 12, -1.0 / 120, 1.0 / 252, -1.0 / 240, 1.0 / 132})));
  return m.where(small, m.sub(a, acc), a);
}
S digamma_(M& m, const S& x) {
  S refl = m.lt(x, 0.5);
  S y = m.where(refl, m.sub(m.k(1.0), x), x);
  S d = digamma_pos(m, y);
  S cot = m.mul(cotpi(m, x), kPi);
  S out = m.where(refl, m.sub(d, cot), d);
  out = m.where(m.and_(m.le(x, 0.0), m.eq(x, m.floor(x))), m.k(kNaN), out);
  // digamma(+-0) = -+inf
  out = m.where(m.eq(x, 0.0), m.where(m.signbit(x), m.k(kInf), m.k(-kInf)), out);
  return m.where(m.eq(x, kInf), x, out);
}
UNARY(lgamma_op, return lgamma_(m, x))
UNARY(digamma_op, return digamma_(m, x))

// Hurwitz zeta(s, y) for an integer s >= 2 and y >= 0.5: ten terms of the
// series, then the Euler-Maclaurin tail at a = y + 10.
S hurwitz_zeta_int(M& m, int64_t s, const S& y) {
  const double sd = static_cast<double>(s);
  S sum = m.pow(y, m.k(-sd));
  for (int i = 1; i < 10; ++i) sum = m.add(sum, m.pow(m.add(y, static_cast<double>(i)), m.k(-sd)));
  S a = m.add(y, 10.0);
  S as = m.pow(a, m.k(-sd));  // a^-s
  S tail = m.add(m.div(m.mul(as, a), m.k(sd - 1)), m.mul(as, 0.5));
  // B_2j / (2j)! * s (s+1) ... (s+2j-2) * a^(-s-2j+1)
  const double bern[] = {1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730};
  S ainv2 = m.recip(m.mul(a, a));
  S apow = m.div(as, a);  // a^(-s-1)
  double rising = sd, fact = 2;
  for (int j = 1; j <= 6; ++j) {
    tail = m.add(tail, m.mul(apow, bern[j - 1] / fact * rising));
    apow = m.mul(apow, ainv2);
    rising *= (sd + 2 * j - 1) * (sd + 2 * j);
    fact *= (2.0 * j + 1) * (2.0 * j + 2);
  }
  return m.add(sum, tail);
}

// Hurwitz zeta(s, q) with tensors s and q, in float64, as torch (Cephes)
// defines it: s == 1 gives inf, s < 1 NaN; q <= 0 an integer gives inf, q < 0
// with a non-integer s NaN. Otherwise 30 terms of the series, then the
// Euler-Maclaurin tail at a = q + 30 (six Bernoulli terms, the rising
// factorial s (s+1) ... (s+2j-2) computed on the tensor s). The tail needs
// a >= 10: q < -20 gives NaN (torch sums more terms there).
S hurwitz_zeta(M& m, const S& s, const S& q) {
  constexpr int kTerms = 30;
  S sum = m.pow(q, m.neg(s));
  for (int i = 1; i < kTerms; ++i)
    sum = m.add(sum, m.pow(m.add(q, static_cast<double>(i)), m.neg(s)));
  S a = m.add(q, static_cast<double>(kTerms));
  S as = m.pow(a, m.neg(s));
  S tail = m.add(m.div(m.mul(as, a), m.add(s, -1.0)), m.mul(as, 0.5));
  const double bern[] = {1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730};
  S ainv2 = m.recip(m.mul(a, a));
  S apow = m.div(as, a);
  S rising = s;
  double fact = 2;
  for (int j = 1; j <= 6; ++j) {
    tail = m.add(tail, m.mul(m.mul(apow, rising), bern[j - 1] / fact));
    apow = m.mul(apow, ainv2);
    rising = m.mul(rising, m.mul(m.add(s, 2.0 * j - 1), m.add(s, 2.0 * j)));
    fact *= (2.0 * j + 1) * (2.0 * j + 2);
  }
  S r = m.add(sum, tail);
  S q_int = m.eq(q, m.floor(q));
  r = m.where(m.lt(q, -20.0), m.k(kNaN), r);
  r = m.where(m.and_(m.le(q, 0.0), m.not_(m.eq(s, m.floor(s)))), m.k(kNaN), r);
  r = m.where(m.and_(m.le(q, 0.0), q_int), m.k(kInf), r);
  r = m.where(m.eq(q, kInf), m.k(0.0), r);
  r = m.where(m.lt(s, 1.0), m.k(kNaN), r);
  r = m.where(m.eq(s, 1.0), m.k(kInf), r);
  return m.where(m.or_(m.isnan(s), m.isnan(q)), m.k(kNaN), r);
}

void special_zeta(Ctx& c) {
  M d{c, DType::Double};
  S r = hurwitz_zeta(d, c.operand("self", DType::Double), c.operand("other", DType::Double));
  c.set_output(0, c.cast(r, c.out_dtype()));
}

// Regularized incomplete gamma P(a, x) (igamma) and Q = 1 - P (igammac), in
// float64: for x < a + 1 the series P = x^a e^-x / Gamma(a + 1) *
// sum_n x^n / ((a+1) ... (a+n)), else Legendre's continued fraction
// Q = x^a e^-x / Gamma(a) / (x+1-a - 1(1-a) / (x+3-a - 2(2-a) / ...)), each
// 200 terms deep (full float64 precision for a up to a few hundred; the
// other of P, Q as 1 minus it). torch's special values: a < 0 or x < 0 NaN;
// a = 0: P = 1 for x > 0 (NaN at 0); x = 0: P = 0; a = inf: P = 0 (NaN for
// x = inf); x = inf: P = 1.
S incomplete_gamma(M& m, const S& a, const S& x, bool upper) {
  constexpr int kDepth = 200;
  S ok = m.and_(m.and_(m.gt(a, 0.0), m.gt(x, 0.0)), m.and_(m.lt(a, kInf), m.lt(x, kInf)));
  S aa = m.where(ok, a, m.k(1.0)), xx = m.where(ok, x, m.k(1.0));
  S pre = m.exp(m.sub(m.sub(m.mul(aa, m.log(xx)), xx), lgamma_(m, aa)));
  S term = m.k(1.0), sum = m.k(1.0);
  for (int n = 1; n <= kDepth; ++n) {
    term = m.mul(term, m.div(xx, m.add(aa, static_cast<double>(n))));
    sum = m.add(sum, term);
  }
  S p_series = m.div(m.mul(pre, sum), aa);
  S f = m.sub(m.add(xx, 2.0 * kDepth + 1), aa);
  for (int i = kDepth; i >= 1; --i) {
    S b = m.sub(m.add(xx, 2.0 * i - 1), aa);
    S ai = m.mul(m.add(aa, -static_cast<double>(i)), static_cast<double>(i));  // -i (i - a)
    f = m.add(b, m.div(ai, f));
  }
  S q_frac = m.div(pre, f);
  S series = m.lt(xx, m.add(aa, 1.0));
  S p = m.where(series, p_series, m.sub(m.k(1.0), q_frac));
  S q = m.where(series, m.sub(m.k(1.0), p_series), q_frac);
  S r = upper ? q : p;
  auto val = [&](double pv) { return m.k(upper ? 1.0 - pv : pv); };
  r = m.where(m.eq(x, kInf), val(1.0), r);
  r = m.where(m.eq(a, kInf), m.where(m.eq(x, kInf), m.k(kNaN), val(0.0)), r);
  r = m.where(m.eq(x, 0.0), val(0.0), r);
  r = m.where(m.eq(a, 0.0), m.where(m.gt(x, 0.0), val(1.0), m.k(kNaN)), r);
  r = m.where(m.or_(m.lt(a, 0.0), m.lt(x, 0.0)), m.k(kNaN), r);
  return m.where(m.or_(m.isnan(a), m.isnan(x)), m.k(kNaN), r);
}

template <bool Upper>
void igamma_op(Ctx& c) {
  M d{c, DType::Double};
  S r = incomplete_gamma(d, c.operand("self", DType::Double), c.operand("other", DType::Double),
                         Upper);
  c.set_output(0, c.cast(r, c.out_dtype()));
}

// polygamma(n, x), n >= 1: (-1)^(n+1) n! zeta(n+1, x) for x >= 0.5, and below
// the reflection psi_n(x) = (-1)^n psi_n(1-x) - pi d^n/dx^n cot(pi x), whose
// derivative is a polynomial in cot(pi x) (d/dx cot = -pi (1 + cot^2)).
S polygamma_(M& m, int64_t n, const S& x) {
  if (n == 0) return digamma_(m, x);
  double fact = 1;
  for (int64_t i = 2; i <= n; ++i) fact *= static_cast<double>(i);
  double sgn = n % 2 ? 1.0 : -1.0;
  S refl = m.lt(x, 0.5);
  S y = m.where(refl, m.sub(m.k(1.0), x), x);
  S pos = m.mul(hurwitz_zeta_int(m, n + 1, y), sgn * fact);
  // P_0(C) = C; P_{k+1}(C) = -(1 + C^2) P_k'(C); d^n cot(pi x) = pi^n P_n(C).
  std::vector<double> p{0, 1};
  for (int64_t k = 0; k < n; ++k) {
    std::vector<double> d(p.size() > 1 ? p.size() - 1 : 1, 0.0);
    for (size_t i = 1; i < p.size(); ++i) d[i - 1] = p[i] * static_cast<double>(i);
    std::vector<double> q(d.size() + 2, 0.0);
    for (size_t i = 0; i < d.size(); ++i) q[i] -= d[i], q[i + 2] -= d[i];
    p = q;
  }
  S cot = cotpi(m, x);
  S dcot = m.mul(m.poly(cot, p), std::pow(kPi, static_cast<double>(n + 1)));
  S neg = m.sub(m.mul(pos, n % 2 ? -1.0 : 1.0), dcot);
  S out = m.where(refl, neg, pos);
  S pole = m.and_(m.le(x, 0.0), m.eq(x, m.floor(x)));
  return m.where(pole, m.k(sgn * kInf), out);
}

void polygamma_op(Ctx& c) {
  int64_t n = c.i("n", 0);
  if (n < 0) c.fail("polygamma of negative order");
  unary_float(c, [n](M& m, const S& x) { return polygamma_(m, n, x); });
}

// mvlgamma(x, p) = p(p-1)/4 log(pi) + sum_{i<p} lgamma(x - i/2)
void mvlgamma_op(Ctx& c) {
  int64_t p = c.i("p");
  unary_float(c, [p](M& m, const S& x) {
    S r = m.k(static_cast<double>(p * (p - 1)) / 4.0 * std::log(kPi));
    for (int64_t i = 0; i < p; ++i)
      r = m.add(r, lgamma_(m, m.add(x, -0.5 * static_cast<double>(i))));
    return r;
  });
}

// erfinv: M. Giles' single-precision approximation in w = -log((1-x)(1+x)).
S erfinv_w(M& m, const S& x, const S& w) {
  S pa = m.poly(m.add(w, -2.5),
                {1.50140941, 0.246640727, -0.00417768164, -0.00125372503, 0.00021858087,
                 -4.39150654e-06, -3.5233877e-06, 3.43273939e-07, 2.81022636e-08});
  S pb = m.poly(m.add(m.sqrt(w), -3.0),
                {2.83297682, 1.00167406, 0.00943887047, -0.0076224613, 0.00573950773,
                 -0.00367342844, 0.00134934322, 0.000100950558, -0.000200214257});
  return m.mul(m.where(m.lt(w, 5.0), pa, pb), x);
}
UNARY(erfinv_op, {
  S w = m.neg(m.log(m.mul(m.sub(m.k(1.0), x), m.add(x, 1.0))));
  S r = erfinv_w(m, x, w);
  S ax = m.abs(x);
  r = m.where(m.eq(ax, 1.0), m.mul(x, m.k(kInf)), r);
  return m.where(m.gt(ax, 1.0), m.k(kNaN), r);
})
// ndtri(p) = sqrt(2) erfinv(2p - 1) with w = -log(4p(1-p)) (no cancellation);
// below p = 0.02425 P. J. Acklam's tail approximation in sqrt(-2 log p).
UNARY(ndtri_op, {
  S w = m.neg(m.log(m.mul(m.mul(x, 4.0), m.sub(m.k(1.0), x))));
  S mid = m.mul(erfinv_w(m, m.add(m.mul(x, 2.0), -1.0), w), M_SQRT2);
  S q = m.sqrt(m.mul(m.log(x), -2.0));
  S tail =
      m.div(m.poly(q, {2.938163982698783e+00, 4.374664141464968e+00, -2.549732539343734e+00,
                       -2.400758277161838e+00, -3.223964580411365e-01, -7.784894002430293e-03}),
            m.poly(q, {1.0, 3.754408661907416e+00, 2.445134137142996e+00, 3.224671290700398e-01,
                       7.784695709041462e-03}));
  S r = m.where(m.lt(x, 0.02425), tail, mid);
  r = m.where(m.eq(x, 0.0), m.k(-kInf), m.where(m.eq(x, 1.0), m.k(kInf), r));
  return m.where(m.or_(m.lt(x, 0.0), m.gt(x, 1.0)), m.k(kNaN), r);
})

// exp(z^2) erfc(z) for z >= 0 in float64 (onnxruntime has no float64 Erf):
// up to z = 3 from the Maclaurin series of erf (60 terms; cancellation costs
// < 1e-12 absolute, erfc(3) = 2.2e-5), beyond from the continued fraction
// erfc(z) = exp(-z^2) / sqrt(pi) / (z + (1/2) / (z + 1 / (z + (3/2) / ...))).
S erfcx_nonneg(const M& d, const S& z) {
  S zs = d.where(d.le(z, 3.0), z, d.k(3.0));
  S z2 = d.mul(zs, zs);
  S term = zs, sum = zs;
  for (int k = 1; k <= 60; ++k) {
    term = d.mul(term, d.mul(z2, -1.0 / k));
    sum = d.add(sum, d.mul(term, 1.0 / (2 * k + 1)));
  }
  S series = d.mul(d.exp(z2), d.sub(d.k(1.0), d.mul(sum, 2.0 / std::sqrt(kPi))));
  S zc = d.where(d.gt(z, 3.0), z, d.k(3.0));
  S t = zc;
  for (int k = 50; k >= 1; --k) t = d.add(zc, d.div(d.k(k / 2.0), t));
  S cf = d.recip(d.mul(t, std::sqrt(kPi)));
  return d.where(d.le(z, 3.0), series, cf);
}

// erfcx(x) = exp(x^2) erfc(x); x < 0: 2 exp(x^2) - erfcx(-x).
void special_erfcx(Ctx& c) {
  M d{c, DType::Double};
  S x = c.operand("self", DType::Double);
  S pos = erfcx_nonneg(d, d.abs(x));
  S r = d.where(d.lt(x, 0.0), d.sub(d.mul(d.exp(d.mul(x, x)), 2.0), pos), pos);
  c.set_output(0, c.cast(d.where(d.isnan(x), x, r), c.out_dtype()));
}

// log(ndtr(x)) = log(erfc(z) / 2), z = -x / sqrt(2): for z > 0 as
// log(erfcx(z) / 2) - z^2 (no underflow of erfc), else as
// log1p(-erfc(-z) / 2) (no cancellation near 1).
void special_log_ndtr(Ctx& c) {
  M d{c, DType::Double};
  S x = c.operand("self", DType::Double);
  S z = d.mul(x, -M_SQRT1_2);
  S z2 = d.mul(z, z);
  S e = erfcx_nonneg(d, d.abs(z));
  S lower = d.sub(d.log(d.mul(e, 0.5)), z2);
  S upper = d.log1p(d.mul(d.mul(d.exp(d.neg(z2)), e), -0.5));
  S r = d.where(d.gt(z, 0.0), lower, upper);
  c.set_output(0, c.cast(d.where(d.isnan(x), x, r), c.out_dtype()));
}

// ---- bitwise
}  // namespace

// Bitwise and / or / xor of integer tensors before opset 18 (no BitwiseAnd /
// Or / Xor): a Loop takes one bit of each operand per round, lowest first,
// in int64 (narrower types sign- or zero-extended: the op commutes with the
// extension). Mod 2 (fmod=0) is the low bit of a two's complement value and
// (x - bit) / 2 an exact arithmetic shift. After width - 1 rounds what is
// left of each operand is its sign (0 or -1; 0 or 1 for uint8), whose op
// gives the top bit, worth -2^(width - 1). `op`: '&', '|' or '^'.
std::string bitwise_by_bits(Ctx& c, char op) {
  DType t = c.out_dtype();
  if (!is_integral(t)) c.fail("bitwise ops are defined for integer and bool tensors");
  const int width = static_cast<int>(dtype_size(t)) * 8;
  const DType ct = DType::Int64;
  M m{c, ct};
  S x = c.operand("self", ct), y = c.operand("other", ct);
  x = c.b.op("Expand", {x, c.b.op("Shape", {y})});
  y = c.b.op("Expand", {y, c.b.op("Shape", {x})});
  auto bit_op = [&](const S& a, const S& b) {
    if (op == '&') return c.b.op("Min", {a, b});
    if (op == '|') return c.b.op("Max", {a, b});
    return m.abs(m.sub(a, b));
  };
  auto low_bit = [&](const S& v) {
    return c.b.op("Mod", {v, m.k(2)}, {Attr::Int("fmod", 0)}, c.type(v));
  };
  ValueType vt = c.type(x), pt{ct, Shape{}};
  c.b.begin_subgraph(c.node.name + "_bits");
  S iter = c.b.fresh_name("iter"), cond_in = c.b.fresh_name("cond_in");
  c.b.add_input(iter, pt);
  c.b.add_input(cond_in, ValueType{DType::Bool, Shape{}});
  S xi = c.b.fresh_name("x"), yi = c.b.fresh_name("y"), ri = c.b.fresh_name("r"),
    pi = c.b.fresh_name("p");
  c.b.add_input(xi, vt);
  c.b.add_input(yi, vt);
  c.b.add_input(ri, vt);
  c.b.add_input(pi, pt);
  S bx = low_bit(xi), by = low_bit(yi);
  S outs[] = {c.b.op("Identity", {cond_in}), m.div(m.sub(xi, bx), m.k(2)),
              m.div(m.sub(yi, by), m.k(2)), m.add(ri, m.mul(bit_op(bx, by), pi)),
              // 2^62 stays (2^63 would overflow; the last round's p is unused)
              m.mul(c.b.op("Min", {pi, m.k(4611686018427387904.0 / 2)}), m.k(2))};
  std::vector<ValueType> types{ValueType{DType::Bool, Shape{}}, vt, vt, vt, pt};
  for (size_t i = 0; i < 5; ++i) c.b.add_output(outs[i], types[i]);
  Graph body = c.b.end_subgraph();
  auto l = c.b.add_node(
      "Loop",
      {c.b.scalar_i64(width - 1), c.b.scalar(DType::Bool, 1), x, y, m.sub(x, x), c.b.scalar_i64(1)},
      4, {Attr::Subgraph("body", std::move(body))}, {vt, vt, vt, pt});
  S top = m.eq(bit_op(low_bit(l[0]), low_bit(l[1])), 1.0);
  S r = m.where(top, m.add(l[2], m.k(-std::ldexp(1.0, width - 1))), l[2]);
  return c.cast(r, t);
}

namespace {

void bitwise_xor_(Ctx& c) {
  DType t = c.out_dtype();
  if (t == DType::Bool) return logical_xor_(c);
  if (c.opset() < 18) return c.set_output(0, bitwise_by_bits(c, '^'));
  S x = c.operand("self", t), y = c.operand("other", t);
  ValueType vt{t, broadcast_shapes(c.type(x).shape, c.type(y).shape)};
  c.set_output(0, c.b.op("BitwiseXor", {x, y}, {}, vt));
}

void bitwise_not_(Ctx& c) {
  DType t = c.out_dtype();
  S x = c.operand("self", t);
  if (t == DType::Bool) return c.set_output(0, c.b.op("Not", {x}));
  if (c.opset() >= 18) return c.set_output(0, c.b.op("BitwiseNot", {x}, {}, c.type(x)));
  M m{c, t};
  if (t == DType::UInt8) return c.set_output(0, m.sub(m.k(255), x));
  c.set_output(0, m.sub(m.k(-1), x));  // ~x == -1 - x in two's complement
}

int bit_width(DType t) { return static_cast<int>(dtype_size(t)) * 8; }

// Shifts of integer tensors in 64 bits: BitShift works on unsigned types, so
// signed values go through uint64 (two's complement bits kept by Cast).
void shift(Ctx& c, bool left) {
  DType t = c.out_dtype();
  if (!is_integral(t)) c.fail("bit shifts are defined for integer tensors");
  bool is_unsigned =
      t == DType::UInt8 || t == DType::UInt16 || t == DType::UInt32 || t == DType::UInt64;
  int width = bit_width(t);
  M m{c, DType::Int64};
  S x = c.cast(c.operand("self", t), DType::Int64);
  S n = c.cast(c.operand("other", t), DType::Int64);
  S bad = m.or_(m.lt(n, 0.0), m.ge(n, static_cast<double>(width)));
  auto ushift = [&](const S& v, const S& s) {
    S uv = c.cast(v, DType::UInt64);
    S us = c.cast(s, DType::UInt64);
    ValueType vt{DType::UInt64, broadcast_shapes(c.type(uv).shape, c.type(us).shape)};
    S r = c.b.op("BitShift", {uv, us}, {Attr::Str("direction", left ? "LEFT" : "RIGHT")}, vt);
    return c.cast(r, DType::Int64);
  };
  S r;
  if (left) {
    r = m.where(bad, m.k(0), ushift(x, m.where(bad, m.k(0), n)));
  } else if (is_unsigned) {
    r = m.where(bad, m.k(0), ushift(x, m.where(bad, m.k(0), n)));
  } else {
    S nn = m.where(bad, m.k(width - 1), n);
    S neg = m.lt(x, 0.0);
    S pos_part = ushift(m.where(neg, m.sub(m.k(-1), x), x), nn);
    r = m.where(neg, m.sub(m.k(-1), pos_part), pos_part);
  }
  c.set_output(0, c.cast(r, t));
}
void lshift(Ctx& c) { shift(c, true); }
void rshift(Ctx& c) { shift(c, false); }

}  // namespace

void register_math(Registry& r) {
  const std::string p = "torch.ops.aten.";
  struct E {
    const char* target;
    ConvertFn fn;
  };
  const E table[] = {
      {"acos.default", acos_},
      {"asin.default", asin_},
      {"atan.default", atan_},
      {"acosh.default", acosh_},
      {"asinh.default", asinh_},
      {"atanh.default", atanh_},
      {"cosh.default", cosh_},
      {"sinh.default", sinh_},
      {"tan.default", tan_},
      {"deg2rad.default", deg2rad},
      {"rad2deg.default", rad2deg},
      {"erfc.default", erfc_},
      {"exp2.default", exp2_},
      {"expm1.default", expm1_},
      {"log1p.default", log1p_},
      {"log2.default", log2_},
      {"log10.default", log10_},
      {"sinc.default", sinc},
      {"special_spherical_bessel_j0.default", spherical_bessel_j0},
      {"special_entr.default", special_entr},
      {"special_ndtr.default", special_ndtr},
      {"special_erfcx.default", special_erfcx},
      {"special_log_ndtr.default", special_log_ndtr},
      {"trunc.default", trunc_},
      {"fix.default", trunc_},
      {"frac.default", frac},
      {"round.default", round_},
      {"round.decimals", round_},
      {"sign.default", sign_},
      {"sgn.default", sign_},
      {"signbit.default", signbit_},
      {"isnan.default", isnan_},
      {"isinf.default", isinf_},
      {"isposinf.default", isposinf},
      {"isneginf.default", isneginf},
      {"isfinite.default", isfinite_},
      {"isreal.default", isreal},
      {"atan2.default", atan2_},
      {"arctan2.default", atan2_},
      {"copysign.Tensor", copysign_},
      {"copysign.Scalar", copysign_},
      {"hypot.default", hypot_},
      {"logaddexp.default", logaddexp},
      {"logaddexp2.default", logaddexp2},
      {"xlogy.Tensor", xlogy_},
      {"xlogy.Scalar_Other", xlogy_},
      {"xlogy.Scalar_Self", xlogy_},
      {"special_xlog1py.default", xlog1py},
      {"special_zeta.default", special_zeta},
      {"special_zeta.self_scalar", special_zeta},
      {"special_zeta.other_scalar", special_zeta},
      {"igamma.default", igamma_op<false>},
      {"igammac.default", igamma_op<true>},
      {"special_xlog1py.other_scalar", xlog1py},
      {"special_xlog1py.self_scalar", xlog1py},
      {"ldexp.Tensor", ldexp_},
      {"fmax.default", fmax_},
      {"fmin.default", fmin_},
      {"fmod.Tensor", fmod_},
      {"fmod.Scalar", fmod_},
      {"remainder.Tensor", remainder_},
      {"gcd.default", gcd_},
      {"lcm.default", lcm_},
      {"remainder.Scalar", remainder_},
      {"remainder.Scalar_Tensor", remainder_},
      {"logit.default", logit_},
      {"heaviside.default", heaviside_},
      {"lerp.Scalar", lerp_},
      {"lerp.Tensor", lerp_},
      {"float_power.Tensor_Tensor", float_power_},
      {"float_power.Tensor_Scalar", float_power_},
      {"float_power.Scalar", float_power_},
      {"frexp.Tensor", frexp_},
      {"nextafter.default", nextafter_},
      {"nan_to_num.default", nan_to_num_},
      {"positive.default", identity},
      {"square.default", square_},
      {"logical_xor.default", logical_xor_},
      {"isclose.default", isclose_},
      {"addcmul.default", addcmul_},
      {"addcdiv.default", addcdiv_},
      {"i0.default", i0_},
      {"special_i0.default", i0_},
      {"special_i0e.default", i0e_},
      {"special_i1.default", i1_},
      {"special_i1e.default", i1e_},
      {"special_modified_bessel_i0.default", i0_},
      {"special_modified_bessel_i1.default", i1_},
      {"special_modified_bessel_k0.default", k0_},
      {"special_modified_bessel_k1.default", k1_},
      {"special_scaled_modified_bessel_k0.default", k0e_},
      {"special_scaled_modified_bessel_k1.default", k1e_},
      {"special_bessel_j0.default", j0_},
      {"special_bessel_j1.default", j1_},
      {"special_bessel_y0.default", y0_},
      {"special_bessel_y1.default", y1_},
      {"lgamma.default", lgamma_op},
      {"special_gammaln.default", lgamma_op},
      {"digamma.default", digamma_op},
      {"special_digamma.default", digamma_op},
      {"special_psi.default", digamma_op},
      {"polygamma.default", polygamma_op},
      {"special_polygamma.default", polygamma_op},
      {"mvlgamma.default", mvlgamma_op},
      {"special_multigammaln.default", mvlgamma_op},
      {"erfinv.default", erfinv_op},
      {"special_erfinv.default", erfinv_op},
      {"special_ndtri.default", ndtri_op},
      {"bitwise_xor.Tensor", bitwise_xor_},
      {"bitwise_xor.Scalar", bitwise_xor_},
      {"bitwise_xor.Scalar_Tensor", bitwise_xor_},
      {"__xor__.Tensor", bitwise_xor_},
      {"__xor__.Scalar", bitwise_xor_},
      {"bitwise_not.default", bitwise_not_},
      {"__lshift__.Tensor", lshift},
      {"__lshift__.Scalar", lshift},
      {"bitwise_left_shift.Tensor", lshift},
      {"bitwise_left_shift.Tensor_Scalar", lshift},
      {"bitwise_left_shift.Scalar_Tensor", lshift},
      {"__rshift__.Tensor", rshift},
      {"__rshift__.Scalar", rshift},
      {"bitwise_right_shift.Tensor", rshift},
      {"bitwise_right_shift.Tensor_Scalar", rshift},
      {"bitwise_right_shift.Scalar_Tensor", rshift},
  };
  for (auto& e : table) r.add(p + e.target, e.fn);
}

}  // namespace pt2onnx
