// Activations: relu, leaky_relu, hardtanh, gelu (exact and tanh), silu,
// sigmoid, tanh, softmax, log_softmax.
#include <cmath>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

std::string input(Ctx& c) { return c.tensor("self"); }

void relu(Ctx& c) { c.set_output(0, c.b.op("Relu", {input(c)})); }
void sigmoid(Ctx& c) { c.set_output(0, c.b.op("Sigmoid", {input(c)})); }
void tanh_(Ctx& c) { c.set_output(0, c.b.op("Tanh", {input(c)})); }

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
    // 0.5 * x * (1 + erf(x / sqrt(2)))
    inner = c.b.op("Erf", {c.b.op("Mul", {x, k(M_SQRT1_2)})});
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
}

}  // namespace pt2onnx
