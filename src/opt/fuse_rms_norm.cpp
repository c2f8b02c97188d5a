// RMS normalization written by hand, as transformers' LlamaRMSNorm and most
// decoders write it, becomes one operator:
//   x^2 (Mul(x, x) or Pow(x, 2))
//   -> mean over the last axis, keepdims (ReduceMean, or ReduceSum then Div
//      by the static last dim)
//   -> Add(eps) -> Sqrt -> Reciprocal (or Div(1, .)), or Pow(., -0.5),
//   -> Mul(x, .) (or Div(x, Sqrt(.)))
//   -> optional Mul by a weight of shape [last dim] (either operand order),
// optionally inside Cast(x_half -> float32) ... Cast(-> half) (the weight
// Mul before or after the Cast back; a float32 weight before it keeps the
// Casts outside the fused op). Emits, with axis = -1 and the stash type
// float32 (statistics in float32, like the pattern):
//   - target onnxruntime (any opset): SimplifiedLayerNormalization(X, scale)
//     (default domain, an onnxruntime operator), which its residual Add
//     fusion (fuse_skip_norm.cpp) extends further;
//   - standard target, opset >= 23: RMSNormalization(X, scale).
// Without a weight the scale is an initializer of ones. One kernel instead of
// seven elementwise / reduction nodes and their temporaries.
//
// Left alone: a reduction over another axis or several axes, keepdims = 0, an
// epsilon inside the mean or outside the square root (1 / (sqrt(ms) + eps)),
// a divisor other than the reduced dim, different x in the square and the
// scaling, a value inside the pattern read elsewhere. A weight that is not a
// [last dim] vector of the same type stays a Mul after the fused node (scale
// of ones), as does one read after a normalized value read elsewhere.
#include <unordered_set>

#include "opt/norm_pattern.h"
#include "opt/passes.h"

namespace pt2onnx {

namespace {

bool norm_type(DType t) { return t == DType::Float || t == DType::Float16 || t == DType::BFloat16; }

struct Plan {
  size_t end;          // node replaced by the fused one
  std::string input;   // X
  std::string weight;  // empty: ones
  Dim d;
  DType out_type;
  double eps;
};

}  // namespace

size_t fuse_rms_norm(Graph& g, const PassOptions& o) {
  if (!o.onnxruntime() && o.opset < 23) return 0;
  GraphIndex ix(g);
  std::unordered_set<size_t> claimed;
  std::vector<Plan> plans;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (claimed.count(k)) continue;
    for (const InvStdScale& s : match_inv_std_scale(ix, k)) {
      auto mean = match_last_axis_mean(ix, s.var);
      if (!mean) continue;
      auto sq = match_square(ix, mean->input);
      if (!sq || sq->x != s.x) continue;
      const ValueType* xt = ix.type(s.x);
      auto d = last_dim(ix, s.x);
      if (!xt || !d || !norm_type(xt->dtype)) continue;
      // Cast(x_half -> float) before, read only by the pattern.
      const Node* pre = ix.producer(s.x, "Cast");
      DType half = DType::Undefined;
      if (pre && pre->inputs.size() == 1 && xt->dtype == DType::Float &&
          ix.readers(s.x) == sq->reads_of_x + 1) {
        const ValueType* ht = ix.type(pre->inputs[0]);
        if (ht && (ht->dtype == DType::Float16 || ht->dtype == DType::BFloat16)) half = ht->dtype;
      }
      const std::string& y = g.nodes[k].outputs[0];
      AffineTail tail = match_affine_tail(ix, y, *d, false, half);
      std::string input = s.x;
      std::vector<size_t> chain = tail.nodes;
      std::vector<size_t> nodes;
      if (tail.cast_at && (tail.weight.empty() || tail.weight_after_cast)) {
        input = pre->inputs[0];
        nodes.push_back(*ix.producer_index(s.x));
      } else if (tail.cast_at) {
        chain.resize(*tail.cast_at);  // a float weight before the Cast back
      }
      size_t end = chain.empty() ? k : chain.back();
      const ValueType* ot = ix.type(g.nodes[end].outputs[0]);
      if (!ot || !norm_type(ot->dtype)) continue;
      nodes.insert(nodes.end(), chain.begin(), chain.end());
      nodes.push_back(k);
      nodes.push_back(sq->node);
      for (size_t i : s.nodes) nodes.push_back(i);
      for (size_t i : mean->nodes) nodes.push_back(i);
      bool free = true;
      for (size_t i : nodes) free = free && !claimed.count(i);
      if (!free) continue;
      if (tail.weight.empty() && !d->is_static()) continue;  // no ones of a symbolic size
      claimed.insert(nodes.begin(), nodes.end());
      plans.push_back(Plan{end, input, tail.weight, *d, ot->dtype, s.eps});
      break;
    }
  }
  if (plans.empty()) return 0;
  FreshNames names(g);
  Rewriter rw(g);
  for (const Plan& p : plans) {
    const Node& last = g.nodes[p.end];
    std::string scale = p.weight;
    if (scale.empty()) scale = *add_ones(g, names, "rms_norm_ones", p.out_type, p.d);
    std::vector<Attr> attrs{Attr::Int("axis", -1),
                            Attr::Float("epsilon", static_cast<float>(p.eps)),
                            Attr::Int("stash_type", 1)};
    const char* op = o.onnxruntime() ? "SimplifiedLayerNormalization" : "RMSNormalization";
    rw.replace(p.end, {make_node(op, {p.input, scale}, {last.outputs[0]}, attrs, last)});
  }
  return rw.apply();
}

}  // namespace pt2onnx
