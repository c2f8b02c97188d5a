// Chebyshev polynomials of the first to fourth kind, T/U/V/W, and their
// shifted forms (special.chebyshev_polynomial_* and
// special.shifted_chebyshev_polynomial_*). The degree n is a tensor (torch
// truncates it to an integer per element), so the graph evaluates every case
// torch's kernel has and selects per element:
//   n < 0                    0
//   |y| == 1                 the closed values at +-1
//   |y| < 1, n > 6 (T) / 8   the trigonometric form (torch switches there too)
//   n <= 8                   the three-term recurrence, unrolled
//   |y| > 1, n > 8           the hyperbolic closed form
// with y = x (shifted: 2x - 1). Values are computed in float64 (onnxruntime
// has no float64 Acos: its float32 value gets one Newton step in float64).
#include <cmath>

#include "convert/context.h"
#include "convert/expr.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

enum class Kind { T, U, V, W };

constexpr int kUnrolled = 8;

struct Poly : Expr {
  std::string y, n;  // float64; n truncated toward zero
  Poly(Ctx& ctx, std::string y_, std::string n_)
      : Expr{ctx, DType::Double}, y(std::move(y_)), n(std::move(n_)) {}
  // (-1)^n for an integral n.
  std::string parity_sign() {
    std::string a = op("Abs", {n});
    std::string odd = sub(a, mul(k(2), op("Floor", {mul(a, k(0.5))})));
    return sub(k(1), mul(k(2), odd));
  }

  std::string recurrence(Kind kind) {
    std::string two_y = add(y, y);
    std::string p = k(1), q;
    switch (kind) {
      case Kind::T:
        q = y;
        break;
      case Kind::U:
        q = two_y;
        break;
      case Kind::V:
        q = sub(two_y, k(1));
        break;
      case Kind::W:
        q = add(two_y, k(1));
        break;
    }
    std::string r = where(eq(n, 0), p, q);
    for (int d = 2; d <= kUnrolled; ++d) {
      std::string next = sub(mul(two_y, q), p);
      p = q;
      q = next;
      r = where(eq(n, d), q, r);
    }
    return r;
  }

  // acos(y) for |y| <= 1 in float64: float32 Acos, then one Newton step on
  // cos(theta) = y (sin(theta) > 0 inside (-1, 1)).
  std::string acos() {
    std::string t0 = c.cast(op("Acos", {c.cast(y, DType::Float)}), DType::Double);
    std::string s = op("Sin", {t0});
    std::string safe = where(eq(s, 0), k(1), s);
    return add(t0, div(sub(op("Cos", {t0}), y), safe));
  }

  std::string trig(Kind kind) {
    std::string th = acos();
    std::string half = mul(th, k(0.5));
    std::string nh = mul(add(n, k(0.5)), th);
    switch (kind) {
      case Kind::T:
        return op("Cos", {mul(n, th)});
      case Kind::U:
        return div(op("Sin", {mul(add(n, k(1)), th)}), op("Sin", {th}));
      case Kind::V:
        return div(op("Cos", {nh}), op("Cos", {half}));
      case Kind::W:
        return div(op("Sin", {nh}), op("Sin", {half}));
    }
    return {};
  }

  // cosh / sinh from Exp (onnxruntime has no float64 Cosh / Sinh).
  std::string cosh(const std::string& a) {
    return mul(add(op("Exp", {a}), op("Exp", {op("Neg", {a})})), k(0.5));
  }
  std::string sinh(const std::string& a) {
    return mul(sub(op("Exp", {a}), op("Exp", {op("Neg", {a})})), k(0.5));
  }

  // |y| > 1: y = s cosh(t), s = sign(y). V and W swap under y -> -y.
  std::string hyperbolic(Kind kind) {
    std::string ay = op("Abs", {y});
    std::string big = op("Greater", {ay, k(1)});
    std::string z = where(big, ay, k(2));  // keeps the unused lanes finite
    std::string th = op("Log", {add(z, op("Sqrt", {sub(mul(z, z), k(1))}))});
    std::string neg = op("Less", {y, k(0)});
    std::string sgn = where(neg, parity_sign(), k(1));
    std::string nh = mul(add(n, k(0.5)), th), half = mul(th, k(0.5));
    std::string v;
    switch (kind) {
      case Kind::T:
        v = cosh(mul(n, th));
        break;
      case Kind::U:
        v = div(sinh(mul(add(n, k(1)), th)), sinh(th));
        break;
      case Kind::V:
      case Kind::W: {
        std::string c_form = div(cosh(nh), cosh(half)), s_form = div(sinh(nh), sinh(half));
        // V(cosh t) = cosh form, W(cosh t) = sinh form; on y < -1 they swap.
        bool v_kind = kind == Kind::V;
        v = where(neg, v_kind ? s_form : c_form, v_kind ? c_form : s_form);
        break;
      }
    }
    return mul(sgn, v);
  }

  // Values at y = +1 and y = -1.
  std::string at_one(Kind kind) {
    std::string pos = op("Greater", {y, k(0)});
    std::string sgn = parity_sign();
    std::string n1 = add(n, k(1)), n21 = add(add(n, n), k(1));
    switch (kind) {
      case Kind::T:
        return where(pos, k(1), sgn);
      case Kind::U:
        return where(pos, n1, mul(sgn, n1));
      case Kind::V:
        return where(pos, k(1), mul(sgn, n21));
      case Kind::W:
        return where(pos, n21, sgn);
    }
    return {};
  }
};

void chebyshev(Ctx& c, Kind kind, bool shifted) {
  DType t = c.out_dtype();
  std::string x = c.operand("x", DType::Double);
  std::string n = c.b.op("Cast", {c.operand("n", DType::Double)},
                         {Attr::Int("to", static_cast<int64_t>(DType::Int64))});
  std::string y = x;
  if (shifted) y = c.b.op("Sub", {c.b.op("Add", {x, x}), c.b.scalar(DType::Double, 1)});
  Poly p{c, y, c.cast(n, DType::Double)};
  std::string ay = p.op("Abs", {p.y});
  std::string inside = p.op("Less", {ay, p.k(1)});
  std::string trig_from = p.op("Greater", {p.n, p.k(kind == Kind::T ? 6 : kUnrolled)});
  std::string high = p.op("Greater", {p.n, p.k(kUnrolled)});
  std::string r = p.where(high, p.hyperbolic(kind), p.recurrence(kind));
  r = p.where(p.op("And", {inside, trig_from}), p.trig(kind), r);
  r = p.where(p.eq(ay, 1), p.at_one(kind), r);
  r = p.where(p.op("Less", {p.n, p.k(0)}), p.k(0), r);
  c.set_output(0, c.cast(r, t));
}

template <Kind K, bool Shifted>
void convert(Ctx& c) {
  chebyshev(c, K, Shifted);
}

}  // namespace

void register_chebyshev(Registry& r) {
  const std::string p = "torch.ops.aten.special_";
  for (const char* o : {".default", ".x_scalar", ".n_scalar"}) {
    r.add(p + "chebyshev_polynomial_t" + o, convert<Kind::T, false>);
    r.add(p + "chebyshev_polynomial_u" + o, convert<Kind::U, false>);
    r.add(p + "chebyshev_polynomial_v" + o, convert<Kind::V, false>);
    r.add(p + "chebyshev_polynomial_w" + o, convert<Kind::W, false>);
    r.add(p + "shifted_chebyshev_polynomial_t" + o, convert<Kind::T, true>);
    r.add(p + "shifted_chebyshev_polynomial_u" + o, convert<Kind::U, true>);
    r.add(p + "shifted_chebyshev_polynomial_v" + o, convert<Kind::V, true>);
    r.add(p + "shifted_chebyshev_polynomial_w" + o, convert<Kind::W, true>);
  }
}

}  // namespace pt2onnx
