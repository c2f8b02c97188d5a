// Activations: relu, leaky_relu, hardtanh, gelu (exact and tanh), silu,
// sigmoid, tanh, softmax, log_softmax, _safe_softmax, elu / celu / selu,
// glu, hard/soft shrink, hardsigmoid, hardswish, log_sigmoid, mish, prelu,
// rrelu, softplus, threshold. Half types compute in float32 (torch's opmath)
// and round once at the end.
#include <cmath>

#include "convert/context.h"
#include "convert/expr.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

std::string input(Ctx& c) { return c.tensor("self"); }

void relu(Ctx& c) { c.set_output(0, c.b.op("Relu", {input(c)})); }
// Integer inputs give a float result.
void sigmoid(Ctx& c) { c.set_output(0, c.b.op("Sigmoid", {c.cast(input(c), c.out_dtype())})); }
void tanh_(Ctx& c) { c.set_output(0, c.b.op("Tanh", {c.cast(input(c), c.out_dtype())})); }

void leaky_relu(Ctx& c) {
  float slope = static_cast<float>(c.f("negative_slope", 0.01));
  c.set_output(0, c.b.op("LeakyRelu", {input(c)}, {Attr::Float("alpha", slope)}));
}

void hardtanh(Ctx& c) {
  std::string x = input(c);
  DType t = c.dtype(x);
  double lo = c.f("min_val", -1.0), hi = c.f("max_val", 1.0);
  c.set_output(0, c.b.op("Clip", {x, c.b.scalar(t, lo), c.b.scalar(t, hi)}));
}

void relu6(Ctx& c) {
  std::string x = input(c);
  DType t = c.dtype(x);
  c.set_output(0, c.b.op("Clip", {x, c.b.scalar(t, 0.0), c.b.scalar(t, 6.0)}));
}

void gelu(Ctx& c) {
  std::string x = input(c);
  std::string approx = c.str("approximate").value_or("none");
  if (approx != "none" && approx != "tanh") c.fail("unknown gelu approximation '" + approx + "'");
  if (c.opset() >= 20) {
    c.set_output(0, c.b.op("Gelu", {x}, {Attr::Str("approximate", approx)}));
    return;
  }
  DType t = c.dtype(x);
  auto k = [&](double v) { return c.b.scalar(t, v); };
  std::string inner;
  if (approx == "none") {
    // 0.5 * x * (1 + erf(x / sqrt(2))), with the Div: onnxruntime's load-time
    // GeluFusion recognises x / sqrt(2), not x * sqrt(1/2) (measured: BERT-base
    // at opset 18 kept 12 Erf / 36 Mul unfused with the Mul form).
    inner = c.b.op("Erf", {c.b.op("Div", {x, k(M_SQRT2)})});
  } else {
    // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
    std::string x3 = c.b.op("Mul", {c.b.op("Mul", {x, x}), x});
    std::string s = c.b.op("Add", {x, c.b.op("Mul", {x3, k(0.044715)})});
    inner = c.b.op("Tanh", {c.b.op("Mul", {s, k(std::sqrt(2.0 / M_PI))})});
  }
  std::string half_x = c.b.op("Mul", {x, k(0.5)});
  c.set_output(0, c.b.op("Mul", {half_x, c.b.op("Add", {inner, k(1.0)})}));
}

void silu(Ctx& c) {
  std::string x = input(c);
  c.set_output(0, c.b.op("Mul", {x, c.b.op("Sigmoid", {x})}));
}

void softmax_like(Ctx& c, const char* op) {
  std::string x = input(c);
  x = c.cast(x, c.out_dtype());  // softmax(x, dtype=...) / half_to_float
  int64_t dim = c.i("dim");
  if (c.rank(x) == 0) {
    // Softmax of a scalar is 1 (log: 0); ONNX needs rank >= 1.
    std::string y = c.b.op(op, {c.unsqueeze(x, {0})}, {Attr::Int("axis", 0)});
    c.set_output(0, c.squeeze(y, {0}));
    return;
  }
  c.set_output(0, c.b.op(op, {x}, {Attr::Int("axis", dim)}));
}
void softmax(Ctx& c) { softmax_like(c, "Softmax"); }
void log_softmax(Ctx& c) { softmax_like(c, "LogSoftmax"); }

// One pointwise activation: the input in the compute type, and the emitter.
struct Pw : Expr {
  std::string x;
  Pw(Ctx& ctx, const std::string& v) : Expr{ctx, opmath(ctx.out_dtype())}, x(v) {
    x = c.cast(x, t);
  }
  // log(1 + exp(v))
  std::string log1p_exp(const std::string& v) { return op("Log", {add(op("Exp", {v}), k(1.0))}); }
  void done(const std::string& y, size_t i = 0) { c.set_output(i, c.cast(y, c.out_dtype(i))); }
};

// x > 0 ? x * scale : (exp(x * input_scale) - 1) * alpha * scale
void emit_elu(Ctx& c, double alpha, double scale, double input_scale) {
  Pw p(c, input(c));
  std::string neg = p.sub(p.op("Exp", {p.mul(p.x, p.k(input_scale))}), p.k(1.0));
  neg = p.mul(neg, p.k(alpha * scale));
  p.done(p.where(p.op("Greater", {p.x, p.k(0.0)}), p.mul(p.x, p.k(scale)), neg));
}
void elu(Ctx& c) { emit_elu(c, c.f("alpha", 1.0), c.f("scale", 1.0), c.f("input_scale", 1.0)); }
void celu(Ctx& c) {
  double a = c.f("alpha", 1.0);
  emit_elu(c, a, 1.0, 1.0 / a);
}
void selu(Ctx& c) {
  emit_elu(c, 1.6732632423543772848170429916717, 1.0507009873554804934193349852946, 1.0);
}

// a * sigmoid(b), a and b the two halves of `dim`.
void glu(Ctx& c) {
  std::string x = input(c);
  int64_t dim = Ctx::norm_axis(c.i("dim", -1), c.rank(x));
  const Dim& d = c.shape(x)[static_cast<size_t>(dim)];
  std::string a, b;
  if (d.is_static()) {
    int64_t h = d.value / 2;
    ValueType vt = c.type(x);
    (*vt.shape)[static_cast<size_t>(dim)] = Dim::of(h);
    auto parts =
        c.b.add_node("Split", {x, c.b.const_i64({h, h})}, 2, {Attr::Int("axis", dim)}, {vt, vt});
    a = parts[0], b = parts[1];
  } else {
    std::string half = c.b.op("Div", {c.dim_value(x, dim), c.b.const_i64({2})});
    std::string ax = c.b.const_i64({dim});
    a = c.b.op("Slice", {x, c.b.const_i64({0}), half, ax});
    b = c.b.op("Slice", {x, half, c.b.const_i64({INT64_MAX}), ax});
  }
  Pw p(c, a);
  std::string bb = c.cast(b, p.t);
  p.done(p.mul(p.x, p.op("Sigmoid", {bb})));
}

// hardshrink: x inside [-lambd, lambd] -> 0 (NaN passes through).
void hardshrink(Ctx& c) {
  Pw p(c, input(c));
  double l = c.f("lambd", 0.5);
  std::string inside =
      p.op("And", {p.op("GreaterOrEqual", {p.x, p.k(-l)}), p.op("LessOrEqual", {p.x, p.k(l)})});
  p.done(p.where(inside, p.k(0.0), p.x));
}

// softshrink: x > l ? x - l : x < -l ? x + l : x * 0
void softshrink(Ctx& c) {
  Pw p(c, input(c));
  double l = c.f("lambd", 0.5);
  std::string lo = p.where(p.op("Less", {p.x, p.k(-l)}), p.add(p.x, p.k(l)), p.mul(p.x, p.k(0.0)));
  p.done(p.where(p.op("Greater", {p.x, p.k(l)}), p.sub(p.x, p.k(l)), lo));
}

// min(max(x + 3, 0), 6) / 6
std::string relu6_plus3_div6(Pw& p) {
  std::string v = p.c.b.op("Clip", {p.add(p.x, p.k(3.0)), p.k(0.0), p.k(6.0)});
  return p.op("Div", {v, p.k(6.0)});
}
void hardsigmoid(Ctx& c) {
  Pw p(c, input(c));
  p.done(relu6_plus3_div6(p));
}
void hardswish(Ctx& c) {
  Pw p(c, input(c));
  p.done(p.mul(p.x, relu6_plus3_div6(p)));
}

// log_sigmoid: min(x, 0) - log1p(exp(-|x|)); the forward's buffer (CPU) is exp(-|x|).
void log_sigmoid(Ctx& c) {
  Pw p(c, input(c));
  std::string z = p.op("Exp", {p.op("Neg", {p.op("Abs", {p.x})})});
  std::string y = p.sub(p.op("Min", {p.x, p.k(0.0)}), p.op("Log", {p.add(z, p.k(1.0))}));
  p.done(y);
  if (c.n_outputs() > 1) p.done(z, 1);
}

// x * tanh(log1p(exp(x)))
void mish(Ctx& c) {
  Pw p(c, input(c));
  p.done(p.mul(p.x, p.op("Tanh", {p.log1p_exp(p.x)})));
}

// softplus: beta * x > threshold ? x : log1p(exp(beta * x)) / beta
void softplus(Ctx& c) {
  Pw p(c, input(c));
  double beta = c.f("beta", 1.0), th = c.f("threshold", 20.0);
  std::string bx = p.mul(p.x, p.k(beta));
  std::string soft = p.op("Div", {p.log1p_exp(bx), p.k(beta)});
  p.done(p.where(p.op("Greater", {bx, p.k(th)}), p.x, soft));
}

// threshold: x <= threshold ? value : x (ints exact)
void threshold(Ctx& c) {
  std::string x = input(c);
  DType t = c.out_dtype();
  x = c.cast(x, t);
  std::string th = c.operand("threshold", t), v = c.operand("value", t);
  c.set_output(0, c.b.op("Where", {c.b.op("LessOrEqual", {x, th}), v, x}));
}

// x >= 0 ? x : x * w
std::string prelu_core(Pw& p, const std::string& w) {
  return p.where(p.op("GreaterOrEqual", {p.x, p.k(0.0)}), p.x, p.mul(p.x, w));
}
void prelu_kernel(Ctx& c) {
  Pw p(c, input(c));
  std::string w = c.cast(c.tensor("weight"), p.t);
  p.done(prelu_core(p, w));
}
// prelu: weight of C elements applies along dim 1 (one element: everywhere).
void prelu(Ctx& c) {
  Pw p(c, input(c));
  std::string w = c.cast(c.tensor("weight"), p.t);
  size_t r = c.rank(p.x);
  const ValueType& wt = c.type(w);
  bool single = wt.shape && wt.shape->size() <= 1 &&
                (wt.shape->empty() || ((*wt.shape)[0].is_static() && (*wt.shape)[0].value == 1));
  if (single) {
    w = c.reshape(w, c.b.const_i64({}));
  } else if (r >= 2) {
    std::vector<int64_t> shape(r - 1, 1);
    shape[0] = -1;
    w = c.reshape(w, c.b.const_i64(shape));
  }
  p.done(prelu_core(p, w));
}

// rrelu: eval is leaky_relu with slope (lower + upper) / 2; training draws the
// slope of each non-positive element uniformly from [lower, upper].
// rrelu_with_noise_functional also returns the noise: unchanged in eval, the
// slopes (1 for positive elements) in training.
void rrelu(Ctx& c) {
  Pw p(c, input(c));
  double lo = c.f("lower", 0.125), hi = c.f("upper", 1.0 / 3.0);
  bool with_noise = c.n_outputs() > 1;
  if (!c.flag("training", false)) {
    p.done(prelu_core(p, p.k((lo + hi) / 2.0)));
    if (with_noise) c.set_output(1, c.tensor("noise"));
    return;
  }
  std::string r = c.b.op(
      "RandomUniformLike", {p.x},
      {Attr::Int("dtype", static_cast<int64_t>(p.t)), Attr::Float("low", static_cast<float>(lo)),
       Attr::Float("high", static_cast<float>(hi))},
      c.type(p.x));
  std::string neg = p.op("LessOrEqual", {p.x, p.k(0.0)});
  p.done(p.where(neg, p.mul(p.x, r), p.x));
  if (with_noise) p.done(p.where(neg, r, p.k(1.0)), 1);
}

// softmax that gives 0 (not NaN) on slices that are entirely -inf.
void safe_softmax(Ctx& c) {
  std::string x = c.cast(input(c), c.out_dtype());
  int64_t dim = c.i("dim");
  size_t r = c.rank(x);
  if (r == 0) return softmax_like(c, "Softmax");
  dim = Ctx::norm_axis(dim, r);
  DType t = c.dtype(x);
  std::string sm = c.b.op("Softmax", {x}, {Attr::Int("axis", dim)});
  std::string is_ninf = c.cast(c.b.op("Equal", {x, c.b.scalar(t, -INFINITY)}), DType::Int32);
  std::string all_ninf = c.cast(c.reduce("ReduceMin", is_ninf, {dim}, true), DType::Bool);
  c.set_output(0, c.b.op("Where", {all_ninf, c.b.scalar(t, 0.0), sm}));
}

}  // namespace

void register_activation(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "relu.default", relu);
  r.add(p + "sigmoid.default", sigmoid);
  r.add(p + "tanh.default", tanh_);
  r.add(p + "leaky_relu.default", leaky_relu);
  r.add(p + "hardtanh.default", hardtanh);
  r.add(p + "relu6.default", relu6);
  r.add(p + "gelu.default", gelu);
  r.add(p + "silu.default", silu);
  for (const char* o : {"softmax.int", "_softmax.default"}) r.add(p + o, softmax);
  for (const char* o : {"log_softmax.int", "_log_softmax.default"}) r.add(p + o, log_softmax);
  r.add(p + "_safe_softmax.default", safe_softmax);
  r.add(p + "elu.default", elu);
  r.add(p + "celu.default", celu);
  r.add(p + "selu.default", selu);
  r.add(p + "glu.default", glu);
  r.add(p + "hardshrink.default", hardshrink);
  r.add(p + "softshrink.default", softshrink);
  r.add(p + "hardsigmoid.default", hardsigmoid);
  r.add(p + "hardswish.default", hardswish);
  for (const char* o : {"log_sigmoid.default", "log_sigmoid_forward.default"})
    r.add(p + o, log_sigmoid);
  r.add(p + "mish.default", mish);
  r.add(p + "softplus.default", softplus);
  r.add(p + "threshold.default", threshold);
  r.add(p + "prelu.default", prelu);
  r.add(p + "_prelu_kernel.default", prelu_kernel);
  for (const char* o : {"rrelu.default", "rrelu_with_noise_functional.default"})
    r.add(p + o, rrelu);
}

}  // namespace pt2onnx
