// Normalization: batch_norm (inference), layer_norm, native_layer_norm.
#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

// A constant filled with `v`, shaped [n], in type t (missing affine params).
std::string filled(Ctx& c, DType t, int64_t n, double v) {
  std::string s = c.b.scalar(t, v);
  return c.b.op("Expand", {s, c.b.const_i64({n})});
}

void emit_batch_norm(Ctx& c, bool training) {
  if (training)
    c.fail("batch_norm in training mode (batch statistics) is not exported; call model.eval()");
  std::string x = c.tensor("input");
  DType t = c.dtype(x);
  std::string mean = c.tensor("running_mean"), var = c.tensor("running_var");
  auto mdims = c.type(mean).static_dims();
  if (!mdims || mdims->size() != 1) c.fail("running_mean must be a 1-D tensor of static size");
  int64_t ch = (*mdims)[0];
  std::string w = c.has("weight") ? c.tensor("weight") : filled(c, t, ch, 1.0);
  std::string bias = c.has("bias") ? c.tensor("bias") : filled(c, t, ch, 0.0);
  float eps = static_cast<float>(c.f("eps", 1e-5));
  bool unbatched = c.rank(x) == 1;
  if (unbatched) x = c.unsqueeze(x, {0});
  std::string y =
      c.b.op("BatchNormalization", {x, w, bias, mean, var}, {Attr::Float("epsilon", eps)});
  if (unbatched) y = c.squeeze(y, {0});
  c.set_output(0, y);
}

void batch_norm(Ctx& c) { emit_batch_norm(c, c.flag("training", false)); }
void batch_norm_no_training(Ctx& c) { emit_batch_norm(c, false); }

void layer_norm(Ctx& c) {
  std::string x = c.tensor("input");
  DType t = c.dtype(x);
  auto shape = c.ints("normalized_shape", {});
  int64_t axis = -static_cast<int64_t>(shape.size());
  float eps = static_cast<float>(c.f("eps", 1e-5));
  std::string w;
  if (c.has("weight")) {
    w = c.tensor("weight");
  } else {
    // LayerNormalization requires a scale: ones of the normalized shape.
    w = c.b.op("Expand", {c.b.scalar(t, 1.0), c.b.const_i64(shape)});
  }
  std::vector<std::string> in{x, w};
  if (c.has("bias")) in.push_back(c.tensor("bias"));
  std::vector<Attr> attrs{Attr::Int("axis", axis), Attr::Float("epsilon", eps)};
  if (c.n_outputs() == 1) {
    c.set_output(0, c.b.op("LayerNormalization", in, attrs, c.out_type(0)));
    return;
  }
  // native_layer_norm: (out, mean, rstd); stats are computed in float32.
  std::vector<ValueType> types{c.out_type(0), c.out_type(1), c.out_type(2)};
  auto outs = c.b.add_node("LayerNormalization", in, 3, attrs, types);
  for (size_t i = 0; i < 3; ++i) c.set_output(i, outs[i]);
}

}  // namespace

void register_norm(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "batch_norm.default", batch_norm);
  r.add(p + "_native_batch_norm_legit_no_training.default", batch_norm_no_training);
  r.add(p + "layer_norm.default", layer_norm, 17);
  r.add(p + "native_layer_norm.default", layer_norm, 17);
}

}  // namespace pt2onnx
