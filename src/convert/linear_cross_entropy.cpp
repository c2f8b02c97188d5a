// torch.nn.functional.linear_cross_entropy's chunked custom ops
// (torch_nn::_linear_cross_entropy_batch_chunked[_no_reduction]): the
// cross entropy of linear(input, linear_weight, linear_bias) against class
// indices, computed whole (chunking only bounds torch's memory). The
// scalar-reduction op also returns the gradients torch precomputes in its
// forward (input, linear_weight, linear_bias), or empty tensors when they
// were not requested.
//   z = x W^T + b, logp = log_softmax(z), v_i = (t_i != ignore_index)
//   l_i = v_i w[t_i] (-logp[i, t_i])
//   mean: sum l_i / sum v_i w[t_i]; sum: sum l_i
//   dL/dz_i = v_i w[t_i] (p_i - onehot(t_i)) / (mean ? sum v_i w[t_i] : 1)
// (torch's chunked op has no label smoothing.)
#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

struct Lce {
  std::string x, z, logp, valid_f, wt, onehot, w;  // w: class weights [C] (ones if absent)
  DType t;
  int64_t classes;
};

Lce forward(Ctx& c, DType t) {
  Lce r;
  r.t = t;
  r.x = c.cast(c.tensor("input"), t);
  std::string W = c.cast(c.tensor("linear_weight"), t);
  const Shape& ws = c.shape(W);
  if (ws.size() != 2 || !ws[0].is_static()) c.fail("linear_weight must be [C, in] with static C");
  r.classes = ws[0].value;
  std::string target = c.tensor("target");
  if (is_floating(c.dtype(target)))
    c.fail("class-probability targets are not handled by the chunked op (class indices only)");
  target = c.cast(target, DType::Int64);
  r.z = c.b.op("MatMul", {r.x, c.transpose(W, {1, 0})});
  if (auto bias = c.opt_tensor("linear_bias")) r.z = c.b.op("Add", {r.z, c.cast(*bias, t)});
  r.logp = c.b.op("LogSoftmax", {r.z}, {Attr::Int("axis", -1)});
  int64_t ignore = c.i("ignore_index", -100);
  std::string valid = c.b.op("Not", {c.b.op("Equal", {target, c.b.scalar_i64(ignore)})});
  r.valid_f = c.cast(valid, t);  // [N]
  // Ignored targets index class 0 (masked out afterwards).
  std::string safe = c.b.op("Where", {valid, target, c.b.scalar_i64(0)});
  std::string range =
      c.b.op("Range", {c.b.scalar_i64(0), c.b.scalar_i64(r.classes), c.b.scalar_i64(1)});
  r.onehot = c.cast(c.b.op("Equal", {c.unsqueeze(safe, {-1}), range}), t);  // [N, C]
  if (auto w = c.opt_tensor("weight"))
    r.w = c.cast(*w, t);
  else
    r.w = c.b.op("Expand", {c.b.scalar(t, 1.0), c.b.const_i64({r.classes})});
  r.wt = c.b.op("Mul", {c.b.op("ReduceSum", {c.b.op("Mul", {r.onehot, r.w}), c.b.const_i64({-1})},
                               {Attr::Int("keepdims", 0)}),
                        r.valid_f});  // w[t_i] v_i, [N]
  return r;
}

// Per-sample losses [N].
std::string per_sample(Ctx& c, Lce& r) {
  std::string neg = c.b.op("Neg", {r.logp});
  std::string nll = c.b.op("ReduceSum", {c.b.op("Mul", {neg, r.onehot}), c.b.const_i64({-1})},
                           {Attr::Int("keepdims", 0)});
  std::string l = c.b.op("Mul", {nll, r.wt});
  return l;
}

DType compute_type(Ctx& c) {
  DType t = c.out_dtype(0);
  if (auto acc = c.scalar_type("acc_dtype"); acc && is_floating(*acc)) return *acc;
  return t;
}

// An empty tensor of output i's type (a zero-length slice of `like`).
std::string empty_like_output(Ctx& c, size_t i, const std::string& like) {
  ValueType ot = c.out_type(i);
  std::vector<int64_t> dims;
  for (auto& d : *ot.shape) dims.push_back(d.is_static() ? d.value : 0);
  std::string flat = c.reshape(like, c.b.const_i64({-1}));
  flat = c.b.op("Slice", {flat, c.b.const_i64({0}), c.b.const_i64({0}), c.b.const_i64({0})});
  return c.reshape(c.cast(flat, ot.dtype), c.b.const_i64(dims));
}

void chunked(Ctx& c) {
  DType t = compute_type(c);
  Lce r = forward(c, t);
  if (c.f("label_smoothing", 0.0) != 0.0)
    c.fail("label_smoothing: torch's chunked linear_cross_entropy op does not support it either");
  std::string reduction = c.str("reduction").value_or("mean");
  std::string l = per_sample(c, r);
  std::string loss = c.b.op("ReduceSum", {l, c.b.const_i64({0})}, {Attr::Int("keepdims", 0)});
  std::string denom;  // dL/dl_i scale
  if (reduction == "mean") {
    denom = c.b.op("ReduceSum", {r.wt, c.b.const_i64({0})}, {Attr::Int("keepdims", 0)});
    loss = c.b.op("Div", {loss, denom});
  } else if (reduction != "sum") {
    c.fail("reduction '" + reduction + "' is not a scalar reduction");
  }
  c.set_output(0, c.cast(loss, c.out_dtype(0)));
  bool gi = c.flag("compute_input_grad", false), gw = c.flag("compute_linear_weight_grad", false),
       gb = c.flag("compute_linear_bias_grad", false);
  std::string dz;
  if (gi || gw || gb) {
    std::string p = c.b.op("Softmax", {r.z}, {Attr::Int("axis", -1)});
    dz = c.b.op("Mul", {c.b.op("Sub", {p, r.onehot}), c.unsqueeze(r.wt, {-1})});
    if (!denom.empty()) dz = c.b.op("Div", {dz, denom});
  }
  std::string W = c.cast(c.tensor("linear_weight"), t);
  c.set_output(
      1, gi ? c.cast(c.b.op("MatMul", {dz, W}), c.out_dtype(1)) : empty_like_output(c, 1, r.x));
  c.set_output(2, gw ? c.cast(c.b.op("MatMul", {c.transpose(dz, {1, 0}), r.x}), c.out_dtype(2))
                     : empty_like_output(c, 2, r.x));
  c.set_output(
      3, gb ? c.cast(c.b.op("ReduceSum", {dz, c.b.const_i64({0})}, {Attr::Int("keepdims", 0)}),
                     c.out_dtype(3))
            : empty_like_output(c, 3, r.x));
}

void chunked_no_reduction(Ctx& c) {
  DType t = compute_type(c);
  Lce r = forward(c, t);
  c.set_output(0, c.cast(per_sample(c, r), c.out_dtype(0)));
}

}  // namespace

void register_linear_cross_entropy(Registry& r) {
  r.add("torch.ops.torch_nn._linear_cross_entropy_batch_chunked.default", chunked);
  r.add("torch.ops.torch_nn._linear_cross_entropy_batch_chunked_no_reduction.default",
        chunked_no_reduction);
}

}  // namespace pt2onnx
