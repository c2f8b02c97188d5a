// Attention without a KV cache (encoders, cross attention) with as many key /
// value heads as query heads: the SDPA decomposition of convert/attention.cpp
// (matched by attention_match.h) becomes onnxruntime's com.microsoft
// MultiHeadAttention on the onnxruntime target:
//   query [B,L,N*D], key / value [B,T,N*D], attention_bias = the mask
//   (boolean -> 0 / -inf, additive as is, the decomposition's is_causal mask
//   as a boolean one), num_heads, scale  -> y [B,L,N*D]
// and y back to [B,N,L,D] (Reshape + Transpose). MultiHeadAttention gives
// NaN on query rows the mask hides entirely (checked, onnxruntime 1.32);
// torch gives zeros, so y is followed by Where(row has a key, y, 0).
//
// Left alone: other targets, KV caches (GroupQueryAttention / Attention take
// them), fewer key heads than query heads (a head repeat or broadcast),
// dtypes other than float / float16.
#include <cmath>

#include "opt/attention_match.h"
#include "opt/passes.h"

namespace pt2onnx {

size_t fuse_multi_head_attention(Graph& g, const PassOptions& o) {
  if (!o.onnxruntime()) return 0;
  GraphIndex idx(g);
  Rewriter rw(g);
  std::optional<FreshNames> names;
  size_t fused = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    auto m = match_sdpa(idx, k);
    if (!m || m->cache || m->kv_heads != m->q_heads) continue;
    if (m->dtype != DType::Float && m->dtype != DType::Float16) continue;
    bool clash = rw.touched(k);
    for (size_t n : m->nodes) clash = clash || rw.touched(n);
    if (clash) continue;
    if (m->causal) {
      const ValueType* ct = g.type_of(m->causal_mask);
      if (!ct || !ct->shape || ct->shape->size() < 2 || ct->shape->size() > 4) continue;
    }
    if (!names) names.emplace(g);
    const Node like = g.nodes[k];
    Emitter e(g, *names, like);
    const DType t = m->dtype;
    const int64_t n = m->q_heads, d = m->head_size;
    const Shape Q = *g.type_of(m->q)->shape;
    auto to_bsh = [&](const std::string& x) {
      const Shape s = *g.type_of(x)->shape;
      std::string tr = e.op("Transpose", {x}, ValueType{t, Shape{s[0], s[2], s[1], s[3]}},
                            {Attr::Ints("perm", {0, 2, 1, 3})});
      return e.op("Reshape", {tr, e.ints({0, 0, n * d})},
                  ValueType{t, Shape{s[0], s[2], Dim::of(n * d)}});
    };
    std::string q3 = to_bsh(m->q), k3 = to_bsh(m->k), v3 = to_bsh(m->v);
    std::string bias, bias_rows;
    std::string mask = m->mask_kind != SdpaMatch::Mask::None ? m->mask
                       : m->causal                           ? m->causal_mask
                                                             : "";
    if (!mask.empty()) {
      ValueType bt = *g.type_of(mask);
      bool boolean = bt.dtype == DType::Bool;
      bt.dtype = t;
      bias = boolean ? e.op("Where", {mask, e.scalar(t, 0.0), e.scalar(t, -INFINITY)}, bt) : mask;
      bias_rows = bias;
      if (bt.shape->size() < 4) {
        std::vector<int64_t> axes;
        while (bt.shape->size() + axes.size() < 4)
          axes.push_back(static_cast<int64_t>(axes.size()));
        Shape full(axes.size(), Dim::of(1));
        full.insert(full.end(), bt.shape->begin(), bt.shape->end());
        bias = e.op("Unsqueeze", {bias, e.ints(axes)}, ValueType{t, full});
      }
      // attention_bias is [B or 1, N or 1, L, T].
      bias = expand_query_rows(e, bias, m->q, o.opset);
    }
    const std::string y = like.outputs[0];
    const ValueType yt = *g.type_of(y);
    std::string y3 =
        e.op("MultiHeadAttention", {q3, k3, v3, "", "", bias},
             ValueType{t, Shape{Q[0], Q[2], Dim::of(n * d)}},
             {Attr::Int("num_heads", n), Attr::Float("scale", static_cast<float>(m->scale))},
             "com.microsoft");
    if (bias.empty()) e.nodes().back().inputs.resize(3);
    std::string y4 = e.op("Reshape", {y3, e.ints({0, 0, n, d})},
                          ValueType{t, Shape{Q[0], Q[2], Dim::of(n), Dim::of(d)}});
    std::string out = e.op("Transpose", {y4}, yt, {Attr::Ints("perm", {0, 2, 1, 3})});
    // The float bias before any Unsqueeze: ReduceMax of bool needs opset 20.
    if (!mask.empty()) out = zero_masked_rows(e, bias_rows, true, t, out, yt, o.opset);
    g.types.erase(out);
    e.nodes().back().outputs[0] = y;
    for (size_t x : m->nodes) rw.remove(x);
    rw.replace(k, std::move(e.nodes()));
    ++fused;
  }
  rw.apply();
  return fused;
}

}  // namespace pt2onnx
