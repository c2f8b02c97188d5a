// Complex numbers. onnxruntime has no complex tensors, so (as torch.onnx does)
// a complex value is carried as a real tensor of its component type with one
// extra trailing dimension of 2 holding (real, imaginary):
//
//   torch (FX metadata)           ONNX value
//   complex64  [d0, ..., dn]  ->  float32 [d0, ..., dn, 2]
//   complex128 [d0, ..., dn]  ->  float64 [d0, ..., dn, 2]
//   complex32  [d0, ..., dn]  ->  float16 [d0, ..., dn, 2]
//
// The FX metadata keeps the complex dtype: c.out_dtype() and the dtype of an
// argument's metadata (is_complex_arg) say complex, while c.out_type() /
// Ctx::meta_type() give the carried real type and shape, so set_output, graph
// inputs / outputs and weights (convert_graph) all use the carried form.
// Graph inputs and outputs are therefore float [..., 2] tensors, which is what
// torch.view_as_real gives for the same complex tensor.
//
// For other families: an op that takes complex tensors must check
// is_complex_arg() and compute on the components (complex_part /
// complex_make in complex.h); add / sub / mul / div / reciprocal with a
// complex result go through complex_arith (real and complex operands mixed);
// elementwise ops that act on each component alike (neg, where, cat on a
// non-last dim, reshapes that keep the last dim) work on the carried form as long as the
// dims they use are those of the FX metadata (the extra dim is the last one:
// negative axes must be shifted by one).
#include "convert/complex.h"

#include <numbers>

#include "convert/registry.h"

namespace pt2onnx {

bool is_complex_arg(const Ctx& c, std::string_view name) {
  const schema::Argument* a = c.arg(name);
  if (!a || a->kind != schema::ArgKind::Tensor) return false;
  return is_complex(c.operand_class(name).first);
}

size_t torch_rank(const Ctx& c, std::string_view name, const std::string& v) {
  return c.rank(v) - (is_complex_arg(c, name) ? 1 : 0);
}

std::string complex_part(Ctx& c, const std::string& v, int part) {
  return c.b.op("Gather", {v, c.b.scalar_i64(part)}, {Attr::Int("axis", -1)});
}

std::string complex_make(Ctx& c, const std::string& re, const std::string& im) {
  std::string r = re, i = im;
  auto rs = c.type(re).static_dims(), is = c.type(im).static_dims();
  if (!rs || !is || *rs != *is) {
    // Broadcast each against the other (Expand broadcasts both ways).
    r = c.b.op("Expand", {re, c.b.op("Shape", {im})});
    i = c.b.op("Expand", {im, c.b.op("Shape", {r})});
  }
  return c.b.op("Concat", {c.unsqueeze(r, {-1}), c.unsqueeze(i, {-1})}, {Attr::Int("axis", -1)});
}

std::string complex_from_real(Ctx& c, const std::string& re) {
  DType t = c.dtype(re);
  std::string zero = c.b.op("Mul", {re, c.b.scalar(t, 0)});
  // Mul by 0 keeps NaN / inf; the imaginary part must be exactly 0.
  zero = c.b.op("Where", {c.b.op("IsNaN", {zero}), c.b.scalar(t, 0), zero});
  return c.b.op("Concat", {c.unsqueeze(re, {-1}), c.unsqueeze(zero, {-1})},
                {Attr::Int("axis", -1)});
}

std::string complex_abs(Ctx& c, const std::string& v) {
  std::string sq = c.b.op("Mul", {v, v});
  return c.b.op("Sqrt", {c.reduce("ReduceSum", sq, {-1}, false)});
}

std::string convert_dtype(Ctx& c, std::string_view name, DType t) {
  std::string x = c.tensor(name);
  bool from_c = is_complex_arg(c, name), to_c = is_complex(t);
  if (from_c && to_c) return c.cast(x, complex_component(t));
  if (to_c) return complex_from_real(c, c.cast(x, complex_component(t)));
  if (from_c) return c.cast(complex_part(c, x, 0), t);
  return c.cast(x, t);
}

void complex_arith(Ctx& c, const std::string& op, const char* a, const char* b) {
  DType t = complex_component(c.out_dtype());
  struct Operand {
    std::string v;  // carried [..., 2] when complex, else the real value
    bool cplx = false;
  };
  auto get = [&](const char* name) {
    if (is_complex_arg(c, name)) return Operand{c.cast(c.tensor(name), t), true};
    if (is_complex(c.operand_class(name).first))
      c.fail(std::string("a complex scalar operand ('") + name + "') is not supported");
    return Operand{c.operand(name, t), false};
  };
  Operand x = get(a), y = get(b);
  auto re = [&](const Operand& o) { return complex_part(c, o.v, 0); };
  auto im = [&](const Operand& o) { return complex_part(c, o.v, 1); };
  // A real operand against the carried form: one trailing dim, broadcast to both parts.
  auto lift = [&](const Operand& o) { return c.unsqueeze(o.v, {-1}); };
  auto as_complex = [&](const Operand& o) { return o.cplx ? o.v : complex_from_real(c, o.v); };
  std::string r;
  if (op == "Add" || op == "Sub") {
    std::string yv = as_complex(y);
    double alpha = c.f("alpha", 1.0);
    if (alpha != 1.0) yv = c.b.op("Mul", {yv, c.b.scalar(t, alpha)});
    r = c.b.op(op, {as_complex(x), yv});
  } else if (op == "Mul") {
    if (!x.cplx || !y.cplx) {
      r = c.b.op("Mul", {x.cplx ? x.v : lift(x), y.cplx ? y.v : lift(y)});
    } else {
      std::string xr = re(x), xi = im(x), yr = re(y), yi = im(y);
      r = complex_make(c, c.b.op("Sub", {c.b.op("Mul", {xr, yr}), c.b.op("Mul", {xi, yi})}),
                       c.b.op("Add", {c.b.op("Mul", {xr, yi}), c.b.op("Mul", {xi, yr})}));
    }
  } else if (op == "Div") {
    if (!y.cplx) {
      r = c.b.op("Div", {x.v, lift(y)});
    } else {
      // x / y = x * conj(y) / |y|^2
      std::string yr = re(y), yi = im(y);
      std::string den = c.b.op("Add", {c.b.op("Mul", {yr, yr}), c.b.op("Mul", {yi, yi})});
      std::string nr, ni;
      if (x.cplx) {
        std::string xr = re(x), xi = im(x);
        nr = c.b.op("Add", {c.b.op("Mul", {xr, yr}), c.b.op("Mul", {xi, yi})});
        ni = c.b.op("Sub", {c.b.op("Mul", {xi, yr}), c.b.op("Mul", {xr, yi})});
      } else {
        nr = c.b.op("Mul", {x.v, yr});
        ni = c.b.op("Neg", {c.b.op("Mul", {x.v, yi})});
      }
      r = complex_make(c, c.b.op("Div", {nr, den}), c.b.op("Div", {ni, den}));
    }
  } else {
    c.fail("complex " + op + " is not supported");
  }
  c.set_output(0, r);
}

namespace {

// Same value, another view of it (view_as_real / view_as_complex).
void same_value(Ctx& c) { c.set_output(0, c.tensor("self")); }

void complex_(Ctx& c) {
  DType t = complex_component(c.out_dtype());
  c.set_output(0, complex_make(c, c.cast(c.tensor("real"), t), c.cast(c.tensor("imag"), t)));
}

void polar(Ctx& c) {
  DType t = complex_component(c.out_dtype());
  std::string r = c.cast(c.tensor("abs"), t);
  std::string a = c.cast(c.tensor("angle"), t);
  c.set_output(0, complex_make(c, c.b.op("Mul", {r, c.b.op("Cos", {a})}),
                               c.b.op("Mul", {r, c.b.op("Sin", {a})})));
}

void real(Ctx& c) {
  std::string x = c.tensor("self");
  c.set_output(0, is_complex_arg(c, "self") ? complex_part(c, x, 0) : x);
}

void imag(Ctx& c) {
  if (!is_complex_arg(c, "self")) c.fail("imag is defined for complex tensors only");
  c.set_output(0, complex_part(c, c.tensor("self"), 1));
}

// conj / conj_physical: the imaginary part negated; real tensors unchanged.
// (The exported graph materializes conjugation here; resolve_conj is then a
// no-op.)
void conj(Ctx& c) {
  std::string x = c.tensor("self");
  if (!is_complex_arg(c, "self")) return c.set_output(0, x);
  c.set_output(0, complex_make(c, complex_part(c, x, 0), c.b.op("Neg", {complex_part(c, x, 1)})));
}

void identity(Ctx& c) { c.set_output(0, c.tensor("self")); }

// atan2(y, x) from Atan and the quadrant (ONNX has no Atan2).
std::string atan2(Ctx& c, const std::string& y, const std::string& x) {
  DType t = c.dtype(x);
  std::string zero = c.b.scalar(t, 0);
  std::string pi = c.b.scalar(t, std::numbers::pi);
  std::string half_pi = c.b.scalar(t, std::numbers::pi / 2);
  std::string base = c.b.op("Atan", {c.b.op("Div", {y, x})});
  std::string y_neg = c.b.op("Less", {y, zero});
  std::string x_neg = c.b.op("Less", {x, zero});
  std::string x_zero = c.b.op("Equal", {x, zero});
  // x < 0: +pi above the axis, -pi below it.
  std::string shift = c.b.op("Where", {y_neg, c.b.op("Neg", {pi}), pi});
  std::string r = c.b.op("Where", {x_neg, c.b.op("Add", {base, shift}), base});
  // x == 0: +-pi/2 by the sign of y, 0 at the origin.
  std::string on_axis =
      c.b.op("Where", {y_neg, c.b.op("Neg", {half_pi}),
                       c.b.op("Where", {c.b.op("Equal", {y, zero}), zero, half_pi})});
  return c.b.op("Where", {x_zero, on_axis, r});
}

void angle(Ctx& c) {
  DType t = c.out_dtype();
  std::string x = c.tensor("self");
  if (is_complex_arg(c, "self")) {
    std::string re = complex_part(c, x, 0), im = complex_part(c, x, 1);
    std::string a = atan2(c, im, re);
    // NaN in either part gives NaN.
    std::string nan = c.b.op("Or", {c.b.op("IsNaN", {re}), c.b.op("IsNaN", {im})});
    c.set_output(0, c.cast(c.b.op("Where", {nan, c.b.op("Add", {re, im}), a}), t));
    return;
  }
  // Real: pi for negative values, 0 otherwise, NaN stays NaN.
  std::string xf = c.cast(x, t);
  std::string r = c.b.op("Where", {c.b.op("Less", {xf, c.b.scalar(t, 0)}),
                                   c.b.scalar(t, std::numbers::pi), c.b.scalar(t, 0)});
  if (is_floating(t) && !is_integral(c.operand_class("self").first))
    r = c.b.op("Where", {c.b.op("IsNaN", {xf}), xf, r});
  c.set_output(0, r);
}

}  // namespace

void register_complex(Registry& r) {
  const std::string p = "torch.ops.aten.";
  for (const char* o : {"view_as_real.default", "view_as_complex.default",
                        "view_as_real_copy.default", "view_as_complex_copy.default"})
    r.add(p + o, same_value);
  r.add(p + "complex.default", complex_);
  r.add(p + "polar.default", polar);
  r.add(p + "real.default", real);
  r.add(p + "imag.default", imag);
  for (const char* o : {"conj.default", "_conj.default", "conj_physical.default",
                        "_conj_physical.default", "_conj_copy.default", "conj_physical_.default"})
    r.add(p + o, conj);
  for (const char* o : {"resolve_conj.default", "resolve_neg.default"}) r.add(p + o, identity);
  r.add(p + "angle.default", angle);
}

}  // namespace pt2onnx
