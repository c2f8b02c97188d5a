// Backward (gradient) ops that appear in exported graphs: softmax /
// log_softmax backward, dropout backward, max_pool{2,3}d_with_indices
// backward (the gradient scattered back to the argmax positions), and the
// pointwise activation backwards (threshold, gelu, silu, sigmoid, tanh,
// hardtanh, leaky_relu, hardsigmoid, hardswish, softplus).
#include <cmath>
#include <numbers>

#include "convert/context.h"
#include "convert/expr.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

using Ex = Expr;

// grad_input = output * (grad - sum(grad * output, dim))
void softmax_backward(Ctx& c) {
  Ex e{c, c.out_dtype()};
  std::string g = c.operand("grad_output", e.t), y = c.operand("output", e.t);
  size_t r = c.rank(g);
  if (r == 0) return c.set_output(0, e.mul(y, e.sub(g, e.mul(g, y))));
  int64_t dim = Ctx::norm_axis(c.i("dim"), r);
  std::string s = c.reduce("ReduceSum", e.mul(g, y), {dim}, true);
  c.set_output(0, e.mul(y, e.sub(g, s)));
}

// grad_input = grad - exp(output) * sum(grad, dim)
void log_softmax_backward(Ctx& c) {
  Ex e{c, c.out_dtype()};
  std::string g = c.operand("grad_output", e.t), y = c.operand("output", e.t);
  size_t r = c.rank(g);
  std::string s = r == 0 ? g : c.reduce("ReduceSum", g, {Ctx::norm_axis(c.i("dim"), r)}, true);
  c.set_output(0, e.sub(g, e.mul(e.op("Exp", {y}), s)));
}

// grad * mask * scale
void native_dropout_backward(Ctx& c) {
  Ex e{c, c.out_dtype()};
  std::string g = c.operand("grad_output", e.t), m = c.operand("mask", e.t);
  c.set_output(0, e.mul(e.mul(g, m), e.k(c.f("scale", 1.0))));
}

// The pooled gradient added into a zero tensor shaped like `self` at the
// flat per-plane indices the forward pass recorded (ties add up).
void max_pool_backward(Ctx& c, size_t n) {
  // float16 / bfloat16 add up in float32 (onnxruntime's ScatterElements has no
  // 16-bit float add), then round once.
  DType out = c.out_dtype();
  Ex e{c, opmath(out)};
  std::string g = c.operand("grad_output", e.t);
  std::string self = c.tensor("self");
  std::string idx = c.cast(c.tensor("indices"), DType::Int64);
  size_t r = c.rank(self);
  if (r < n + 1) c.fail("input rank below the pooled dims");
  // [lead..., spatial...] -> [lead, prod(spatial)]: lead = the batch/channel dims.
  std::string full = c.b.op("Shape", {self});
  auto lead_n = static_cast<int64_t>(r - n);
  std::string lead = c.shape_part(self, 0, lead_n);
  std::string flat_in = c.b.op("Concat", {lead, c.b.const_i64({-1})}, {Attr::Int("axis", 0)});
  std::string g2 = c.reshape(g, flat_in);
  std::string i2 = c.reshape(idx, flat_in);
  std::string zeros =
      c.reshape(c.b.op("Expand", {e.k(0.0), c.b.op("Shape", {self})}), flat_in);  // [lead..., HW]
  std::string r_out;
  if (c.opset() >= 16) {
    r_out = c.b.op("ScatterElements", {zeros, i2, g2},
                   {Attr::Int("axis", lead_n), Attr::Str("reduction", "add")}, c.type(zeros));
  } else {
    // One-hot matrix product: [.., 1, L] @ [.., L, HW] (Equal against a range).
    std::string hw = c.shape_part(zeros, lead_n, lead_n + 1);
    std::string range = c.b.op("Range", {c.b.scalar_i64(0), c.squeeze(hw, {0}), c.b.scalar_i64(1)});
    std::string onehot = c.cast(c.b.op("Equal", {c.unsqueeze(i2, {-1}), range}), e.t);
    r_out = c.squeeze(c.b.op("MatMul", {c.unsqueeze(g2, {-2}), onehot}), {-2});
  }
  c.set_output(0, c.cast(c.reshape(r_out, full), out));
}
void max_pool2d_backward(Ctx& c) { max_pool_backward(c, 2); }
void max_pool3d_backward(Ctx& c) { max_pool_backward(c, 3); }

// The gradient where `cond` holds, else 0.
void grad_where(Ctx& c, Ex& e, const std::string& cond, const std::string& g) {
  c.set_output(0, e.where(cond, g, e.k(0.0)));
}

void threshold_backward(Ctx& c) {
  Ex e{c, c.out_dtype()};
  std::string g = c.operand("grad_output", e.t), x = c.operand("self", e.t);
  std::string th = c.operand("threshold", e.t);
  // torch: self <= threshold ? 0 : grad
  c.set_output(0, e.where(e.op("LessOrEqual", {x, th}), e.k(0.0), g));
}

void gelu_backward(Ctx& c) {
  Ex e{c, c.out_dtype()};
  std::string g = c.operand("grad_output", e.t), x = c.operand("self", e.t);
  std::string approx = c.str("approximate").value_or("none");
  std::string d;
  if (approx == "tanh") {
    // y = tanh(k (x + a x^3)); d = 0.5 (1 + y) + 0.5 x (1 - y^2) k (1 + 3 a x^2)
    const double k = std::sqrt(2.0 / std::numbers::pi), a = 0.044715;
    std::string x2 = e.mul(x, x);
    std::string inner = e.mul(e.k(k), e.add(x, e.mul(e.k(a), e.mul(x2, x))));
    std::string y = e.op("Tanh", {inner});
    std::string left = e.mul(e.k(0.5), e.add(e.k(1.0), y));
    std::string dinner = e.mul(e.k(k), e.add(e.k(1.0), e.mul(e.k(3 * a), x2)));
    std::string right = e.mul(e.mul(e.mul(e.k(0.5), x), e.sub(e.k(1.0), e.mul(y, y))), dinner);
    d = e.add(left, right);
  } else if (approx == "none") {
    // Phi(x) + x phi(x)
    std::string cdf =
        e.mul(e.k(0.5), e.add(e.k(1.0), e.op("Erf", {e.mul(x, e.k(1.0 / std::numbers::sqrt2))})));
    std::string pdf = e.mul(e.k(1.0 / std::sqrt(2.0 * std::numbers::pi)),
                            e.op("Exp", {e.mul(e.k(-0.5), e.mul(x, x))}));
    d = e.add(cdf, e.mul(x, pdf));
  } else {
    c.fail("unknown approximate='" + approx + "'");
  }
  c.set_output(0, e.mul(g, d));
}

void silu_backward(Ctx& c) {
  Ex e{c, c.out_dtype()};
  std::string g = c.operand("grad_output", e.t), x = c.operand("self", e.t);
  std::string s = e.op("Sigmoid", {x});
  // s * (1 + x (1 - s))
  std::string d = e.mul(s, e.add(e.k(1.0), e.mul(x, e.sub(e.k(1.0), s))));
  c.set_output(0, e.mul(g, d));
}

void sigmoid_backward(Ctx& c) {
  Ex e{c, c.out_dtype()};
  std::string g = c.operand("grad_output", e.t), y = c.operand("output", e.t);
  c.set_output(0, e.mul(g, e.mul(y, e.sub(e.k(1.0), y))));
}

void tanh_backward(Ctx& c) {
  Ex e{c, c.out_dtype()};
  std::string g = c.operand("grad_output", e.t), y = c.operand("output", e.t);
  c.set_output(0, e.mul(g, e.sub(e.k(1.0), e.mul(y, y))));
}

void hardtanh_backward(Ctx& c) {
  Ex e{c, c.out_dtype()};
  std::string g = c.operand("grad_output", e.t), x = c.operand("self", e.t);
  std::string lo = c.operand("min_val", e.t), hi = c.operand("max_val", e.t);
  // torch: (x <= min || x >= max) ? 0 : grad
  std::string inside = e.op("And", {e.op("Greater", {x, lo}), e.op("Less", {x, hi})});
  grad_where(c, e, inside, g);
}

void leaky_relu_backward(Ctx& c) {
  Ex e{c, c.out_dtype()};
  std::string g = c.operand("grad_output", e.t), x = c.operand("self", e.t);
  std::string slope = c.operand("negative_slope", e.t);
  c.set_output(0, e.where(e.op("Greater", {x, e.k(0.0)}), g, e.mul(g, slope)));
}

void hardsigmoid_backward(Ctx& c) {
  Ex e{c, c.out_dtype()};
  std::string g = c.operand("grad_output", e.t), x = c.operand("self", e.t);
  std::string inside = e.op("And", {e.op("Greater", {x, e.k(-3.0)}), e.op("Less", {x, e.k(3.0)})});
  grad_where(c, e, inside, e.mul(g, e.k(1.0 / 6.0)));
}

void hardswish_backward(Ctx& c) {
  Ex e{c, c.out_dtype()};
  std::string g = c.operand("grad_output", e.t), x = c.operand("self", e.t);
  // x < -3: 0; x <= 3: grad (x / 3 + 0.5); else grad
  std::string mid = e.mul(g, e.add(e.mul(x, e.k(1.0 / 3.0)), e.k(0.5)));
  std::string r = e.where(e.op("LessOrEqual", {x, e.k(3.0)}), mid, g);
  c.set_output(0, e.where(e.op("Less", {x, e.k(-3.0)}), e.k(0.0), r));
}

void softplus_backward(Ctx& c) {
  Ex e{c, c.out_dtype()};
  std::string g = c.operand("grad_output", e.t), x = c.operand("self", e.t);
  std::string beta = c.operand("beta", e.t), th = c.operand("threshold", e.t);
  std::string bx = e.mul(x, beta);
  // x * beta > threshold ? grad : grad * sigmoid(x * beta)
  std::string soft = e.mul(g, e.op("Sigmoid", {bx}));
  c.set_output(0, e.where(e.op("Greater", {bx, th}), g, soft));
}

}  // namespace

void register_backward(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "_softmax_backward_data.default", softmax_backward);
  r.add(p + "_log_softmax_backward_data.default", log_softmax_backward);
  r.add(p + "native_dropout_backward.default", native_dropout_backward);
  r.add(p + "max_pool2d_with_indices_backward.default", max_pool2d_backward);
  r.add(p + "max_pool3d_with_indices_backward.default", max_pool3d_backward);
  r.add(p + "threshold_backward.default", threshold_backward);
  r.add(p + "gelu_backward.default", gelu_backward);
  r.add(p + "silu_backward.default", silu_backward);
  r.add(p + "sigmoid_backward.default", sigmoid_backward);
  r.add(p + "tanh_backward.default", tanh_backward);
  r.add(p + "hardtanh_backward.default", hardtanh_backward);
  r.add(p + "leaky_relu_backward.default", leaky_relu_backward);
  r.add(p + "hardsigmoid_backward.default", hardsigmoid_backward);
  r.add(p + "hardswish_backward.default", hardswish_backward);
  r.add(p + "softplus_backward.default", softplus_backward);
}

}  // namespace pt2onnx
