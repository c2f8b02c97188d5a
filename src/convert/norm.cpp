// Normalization: batch_norm (running or batch statistics), native_batch_norm,
// _native_batch_norm_legit*, _batch_norm_with_update/_no_update, layer_norm,
// native_layer_norm, group_norm, native_group_norm, instance_norm, rms_norm.
// Where the ONNX operator is newer than the opset (LayerNormalization 17,
// GroupNormalization 21, RMSNormalization 23) the statistics are decomposed.
#include <cmath>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

// Low-precision floats are normalized in float32 (as torch's kernels do).
DType compute_type(DType t) {
  return (t == DType::Float16 || t == DType::BFloat16) ? DType::Float : t;
}

// A constant filled with `v`, shaped like `shape` (a 1-D int64 value), in type t.
std::string filled(Ctx& c, DType t, const std::string& shape, double v) {
  return c.b.op("Expand", {c.b.scalar(t, v), shape});
}

// Size of the channel axis (1) of x (0 when the input is unbatched rank 1).
std::string channels(Ctx& c, const std::string& x) {
  return c.dim_value(x, c.rank(x) == 1 ? 0 : 1);
}

// An empty 1-D tensor of type t (the unused statistics torch returns in eval mode).
std::string empty(Ctx& c, DType t) { return c.b.constant(TensorData::from_bytes(t, {0}, {})); }

// Per-channel vector [C] -> [C, 1, ..., 1] to broadcast against rank-r input.
std::string per_channel(Ctx& c, const std::string& v, size_t r) {
  if (r <= 2) return v;
  std::vector<int64_t> axes;
  for (size_t k = 1; k + 1 < r; ++k) axes.push_back(static_cast<int64_t>(k));
  return c.unsqueeze(v, axes);
}

struct Normalized {
  std::string y;       // (x - mean) * invstd, in the compute type
  std::string mean;    // keepdims
  std::string invstd;  // keepdims
};

// Statistics of x over `axes` (biased variance), x already in the compute type.
Normalized normalize(Ctx& c, const std::string& x, const std::vector<int64_t>& axes, double eps) {
  DType t = c.dtype(x);
  Normalized r;
  r.mean = c.reduce("ReduceMean", x, axes, true);
  std::string d = c.b.op("Sub", {x, r.mean});
  std::string var = c.reduce("ReduceMean", c.b.op("Mul", {d, d}), axes, true);
  std::string sd = c.b.op("Sqrt", {c.b.op("Add", {var, c.b.scalar(t, eps)})});
  r.invstd = c.b.op("Reciprocal", {sd});
  r.y = c.b.op("Mul", {d, r.invstd});
  return r;
}

// y * weight + bias with weight/bias cast to y's type and shaped by `shape_fn`.
template <typename F>
std::string affine(Ctx& c, std::string y, const std::optional<std::string>& w,
                   const std::optional<std::string>& bias, F shape_fn) {
  DType t = c.dtype(y);
  if (w) y = c.b.op("Mul", {y, shape_fn(c.cast(*w, t))});
  if (bias) y = c.b.op("Add", {y, shape_fn(c.cast(*bias, t))});
  return y;
}

// ---- batch norm

// `update_at`: index of the new running mean / var outputs of the functional
// forms (-1: none). `inplace`: the op updates its running_mean / running_var
// arguments in place (torch.export's training IR: batch_norm,
// native_batch_norm, _native_batch_norm_legit, _batch_norm_with_update), so
// later reads of them, and the "<buffer>_updated" outputs of
// TrainingMode::Training, see the new values.
//
// Batch statistics are decomposed (ReduceMean ...) rather than written as
// BatchNormalization with training_mode = 1 (opset 14), as torch.onnx
// (dynamo=False) does: onnxruntime (1.32, CPU) writes that op's running_mean /
// running_var outputs in place over its running_mean / running_var
// initializers when the outputs are not graph outputs, so the model's state
// drifts from run to run and any other reader of the statistics sees the
// overwritten values; and ONNX updates the running variance with the biased
// batch variance where torch uses the unbiased one.
void emit_batch_norm(Ctx& c, bool training, bool stats_args, int update_at = -1,
                     bool inplace = false) {
  std::string x = c.tensor("input");
  DType t = c.dtype(x);
  std::optional<std::string> mean, var;
  if (stats_args) mean = c.opt_tensor("running_mean"), var = c.opt_tensor("running_var");
  if (!mean || !var) training = true;
  float eps = static_cast<float>(c.f("eps", 1e-5));
  auto w = c.opt_tensor("weight");
  auto bias = c.opt_tensor("bias");
  size_t r = c.rank(x);
  if (!training) {
    std::string ch = c.b.op("Shape", {*mean});
    std::string ws = w ? c.cast(*w, t) : filled(c, t, ch, 1.0);
    std::string bs = bias ? c.cast(*bias, t) : filled(c, t, ch, 0.0);
    bool unbatched = r == 1;
    if (unbatched) x = c.unsqueeze(x, {0});
    std::string y = c.b.op("BatchNormalization", {x, ws, bs, c.cast(*mean, t), c.cast(*var, t)},
                           {Attr::Float("epsilon", eps)});
    if (unbatched) y = c.squeeze(y, {0});
    c.set_output(0, y);
    for (size_t i = 1; i < c.n_outputs(); ++i) {
      // The functional forms return the running statistics, unchanged in eval.
      int k = static_cast<int>(i) - update_at;
      if (update_at >= 0 && k >= 0 && k < 2)
        c.set_output(i, c.b.op("Identity", {c.cast(k == 0 ? *mean : *var, c.out_dtype(i))}));
      else
        c.set_output(i, empty(c, c.out_dtype(i)));
    }
    return;
  }
  // Batch statistics over every axis but the channel axis (1).
  DType ct = compute_type(t);
  std::vector<int64_t> axes;
  for (size_t k = 0; k < r; ++k)
    if (k != 1) axes.push_back(static_cast<int64_t>(k));
  std::string xf = c.cast(x, ct);
  Normalized n = normalize(c, xf, axes, eps);
  std::string y =
      affine(c, n.y, w, bias, [&](const std::string& v) { return per_channel(c, v, r); });
  c.set_output(0, c.cast(y, t));
  std::string flat = c.b.const_i64({-1});
  if (c.n_outputs() > 1) {
    c.set_output(1, c.cast(c.reshape(n.mean, flat), c.out_dtype(1)));
    c.set_output(2, c.cast(c.reshape(n.invstd, flat), c.out_dtype(2)));
  }
  // Running statistics: (1 - momentum) * running + momentum * batch (the
  // variance unbiased).
  auto updated = [&](bool is_var) {
    std::string running = c.cast(c.tensor(is_var ? "running_var" : "running_mean"), ct);
    std::string stat = c.reshape(n.mean, flat);
    if (is_var) {
      std::string d = c.b.op("Sub", {xf, n.mean});
      std::string ss = c.reshape(c.reduce("ReduceSum", c.b.op("Mul", {d, d}), axes, true), flat);
      std::string count =
          c.cast(c.b.op("Div", {c.b.op("Size", {xf}), c.b.op("Size", {running})}), ct);
      stat = c.b.op("Div", {ss, c.b.op("Sub", {count, c.b.scalar(ct, 1.0)})});
    }
    double m = c.f("momentum", 0.1);
    return c.b.op("Add", {c.b.op("Mul", {running, c.b.scalar(ct, 1.0 - m)}),
                          c.b.op("Mul", {stat, c.b.scalar(ct, m)})});
  };
  for (size_t i = 3; i < c.n_outputs(); ++i) {
    if (update_at < 0 || static_cast<int>(i) < update_at) {
      c.set_output(i, empty(c, c.out_dtype(i)));
      continue;
    }
    c.set_output(i, c.cast(updated(static_cast<int>(i) == update_at + 1), c.out_dtype(i)));
  }
  if (inplace && mean && var) {
    c.env.values[c.arg("running_mean")->name] = c.cast(updated(false), c.dtype(*mean));
    c.env.values[c.arg("running_var")->name] = c.cast(updated(true), c.dtype(*var));
  }
}

void batch_norm(Ctx& c) { emit_batch_norm(c, c.flag("training", false), true, -1, true); }
void batch_norm_no_training(Ctx& c) { emit_batch_norm(c, false, true); }
void batch_norm_training(Ctx& c) { emit_batch_norm(c, true, true, -1, true); }
void batch_norm_no_stats(Ctx& c) { emit_batch_norm(c, true, false); }
void batch_norm_functional(Ctx& c) { emit_batch_norm(c, c.flag("training", false), true, 3); }
void batch_norm_with_update_functional(Ctx& c) { emit_batch_norm(c, true, true, 4); }

// ---- layer norm

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
  // native_layer_norm: (out, mean, rstd); ONNX computes the stats in float32
  // (stash_type), torch records them in the input type.
  std::vector<ValueType> types{c.out_type(0), c.out_type(1), c.out_type(2)};
  types[1].dtype = types[2].dtype = DType::Float;
  auto outs = c.b.add_node("LayerNormalization", in, 3, attrs, types);
  c.set_output(0, outs[0]);
  for (size_t i = 1; i < 3; ++i) c.set_output(i, c.cast(outs[i], c.out_dtype(i)));
}

// Below opset 17: mean / variance over the trailing normalized dims.
void layer_norm_decomposed(Ctx& c) {
  std::string x = c.tensor("input");
  DType t = c.dtype(x);
  DType ct = compute_type(t);
  size_t k = c.ints("normalized_shape", {}).size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < k; ++i) axes.push_back(-static_cast<int64_t>(k - i));
  Normalized n = normalize(c, c.cast(x, ct), axes, c.f("eps", 1e-5));
  std::string y = affine(c, n.y, c.opt_tensor("weight"), c.opt_tensor("bias"),
                         [](const std::string& v) { return v; });
  c.set_output(0, c.cast(y, t));
  if (c.n_outputs() > 1) {
    c.set_output(1, c.cast(n.mean, c.out_dtype(1)));
    c.set_output(2, c.cast(n.invstd, c.out_dtype(2)));
  }
}

// ---- group norm

// x [N, C, *] -> statistics per (N, group) over [C/G, *].
void emit_group_norm(Ctx& c, int64_t groups, double eps) {
  std::string x = c.tensor("input");
  DType t = c.dtype(x);
  DType ct = compute_type(t);
  size_t r = c.rank(x);
  auto w = c.opt_tensor("weight");
  auto bias = c.opt_tensor("bias");
  if (c.n_outputs() == 1 && c.opset() >= 21 && r >= 3) {
    std::string ch = channels(c, x);
    std::string ws = w ? c.cast(*w, t) : filled(c, t, ch, 1.0);
    std::string bs = bias ? c.cast(*bias, t) : filled(c, t, ch, 0.0);
    c.set_output(0, c.b.op("GroupNormalization", {x, ws, bs},
                           {Attr::Float("epsilon", static_cast<float>(eps)),
                            Attr::Int("num_groups", groups)},
                           c.out_type(0)));
    return;
  }
  std::string xf = c.cast(x, ct);
  std::string grouped = c.reshape(xf, c.b.const_i64({0, groups, -1}));
  Normalized n = normalize(c, grouped, {2}, eps);
  std::string y = c.reshape(n.y, c.b.op("Shape", {x}));
  y = affine(c, y, w, bias, [&](const std::string& v) { return per_channel(c, v, r); });
  c.set_output(0, c.cast(y, t));
  if (c.n_outputs() > 1) {
    c.set_output(1, c.cast(c.squeeze(n.mean, {2}), c.out_dtype(1)));
    c.set_output(2, c.cast(c.squeeze(n.invstd, {2}), c.out_dtype(2)));
  }
}

void group_norm(Ctx& c) { emit_group_norm(c, c.i("num_groups"), c.f("eps", 1e-5)); }
void native_group_norm(Ctx& c) { emit_group_norm(c, c.i("group"), c.f("eps", 1e-5)); }

// ---- instance norm

void instance_norm(Ctx& c) {
  std::string x = c.tensor("input");
  DType t = c.dtype(x);
  float eps = static_cast<float>(c.f("eps", 1e-5));
  auto w = c.opt_tensor("weight");
  auto bias = c.opt_tensor("bias");
  auto mean = c.opt_tensor("running_mean"), var = c.opt_tensor("running_var");
  size_t r = c.rank(x);
  if (!c.flag("use_input_stats", true) && mean && var) {
    std::string ch = channels(c, x);
    std::string ws = w ? c.cast(*w, t) : filled(c, t, ch, 1.0);
    std::string bs = bias ? c.cast(*bias, t) : filled(c, t, ch, 0.0);
    c.set_output(0, c.b.op("BatchNormalization", {x, ws, bs, c.cast(*mean, t), c.cast(*var, t)},
                           {Attr::Float("epsilon", eps)}));
    return;
  }
  if (r >= 3) {
    std::string ch = channels(c, x);
    DType kt = c.kernel_type("InstanceNormalization", t);
    std::string ws = w ? c.cast(*w, kt) : filled(c, kt, ch, 1.0);
    std::string bs = bias ? c.cast(*bias, kt) : filled(c, kt, ch, 0.0);
    c.set_output(0, c.cast(c.b.op("InstanceNormalization", {c.cast(x, kt), ws, bs},
                                  {Attr::Float("epsilon", eps)}),
                           t));
    return;
  }
  // (N, C): each element is its own instance.
  std::vector<int64_t> axes;
  for (size_t k = 2; k < r; ++k) axes.push_back(static_cast<int64_t>(k));
  Normalized n = normalize(c, c.cast(x, compute_type(t)), axes, eps);
  c.set_output(0, c.cast(affine(c, n.y, w, bias, [](const std::string& v) { return v; }), t));
}

// ---- rms norm

double default_eps(DType t) {
  switch (t) {
    case DType::Float16:
      return 0.0009765625;
    case DType::BFloat16:
      return 0.0078125;
    case DType::Double:
      return 2.220446049250313e-16;
    default:
      return 1.1920928955078125e-07;
  }
}

void rms_norm(Ctx& c) {
  std::string x = c.tensor("input");
  DType t = c.dtype(x);
  auto shape = c.ints("normalized_shape", {});
  size_t k = shape.size();
  double eps = c.has("eps") ? c.f("eps", 0.0) : default_eps(t);
  auto w = c.opt_tensor("weight");
  if (c.opset() >= 23) {
    std::string ws = w ? c.cast(*w, t) : filled(c, t, c.b.const_i64(shape), 1.0);
    c.set_output(0, c.b.op("RMSNormalization", {x, ws},
                           {Attr::Int("axis", -static_cast<int64_t>(k)),
                            Attr::Float("epsilon", static_cast<float>(eps))},
                           c.out_type(0)));
    return;
  }
  DType ct = compute_type(t);
  std::string xf = c.cast(x, ct);
  std::vector<int64_t> axes;
  for (size_t i = 0; i < k; ++i) axes.push_back(-static_cast<int64_t>(k - i));
  std::string ms = c.reduce("ReduceMean", c.b.op("Mul", {xf, xf}), axes, true);
  std::string rs =
      c.b.op("Reciprocal", {c.b.op("Sqrt", {c.b.op("Add", {ms, c.b.scalar(ct, eps)})})});
  std::string y = c.b.op("Mul", {xf, rs});
  if (w) y = c.b.op("Mul", {y, c.cast(*w, ct)});
  c.set_output(0, c.cast(y, t));
}

}  // namespace

void register_norm(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "batch_norm.default", batch_norm);
  r.add(p + "native_batch_norm.default", batch_norm);
  r.add(p + "_native_batch_norm_legit.default", batch_norm);
  r.add(p + "_native_batch_norm_legit.no_stats", batch_norm_no_stats);
  r.add(p + "_native_batch_norm_legit_no_training.default", batch_norm_no_training);
  r.add(p + "_batch_norm_no_update.default", batch_norm_no_training);
  r.add(p + "_batch_norm_with_update.default", batch_norm_training);
  r.add(p + "_native_batch_norm_legit_functional.default", batch_norm_functional);
  r.add(p + "_batch_norm_with_update_functional.default", batch_norm_with_update_functional);
  r.add(p + "layer_norm.default", layer_norm, 17);
  r.add(p + "native_layer_norm.default", layer_norm, 17);
  r.add(p + "layer_norm.default", layer_norm_decomposed, 1, 16);
  r.add(p + "native_layer_norm.default", layer_norm_decomposed, 1, 16);
  r.add(p + "group_norm.default", group_norm);
  r.add(p + "native_group_norm.default", native_group_norm);
  r.add(p + "instance_norm.default", instance_norm);
  r.add(p + "rms_norm.default", rms_norm);
}

}  // namespace pt2onnx
