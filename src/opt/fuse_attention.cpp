// scaled_dot_product_attention, as convert/attention.cpp decomposes it (see
// attention_match.h for the pattern and what is proved), becomes one ONNX
// Attention (opset 23) in its 4-D form:
//   Attention(q [B,Hq,L,D], k [B,Hkv,S,D], v, attn_mask, past_key, past_value)
//     -> y, present_key, present_value
// Head repeats (GQA) are dropped (Attention groups heads itself, kv head
// h / (Hq / Hkv) for query head h, as the repeat does); a KV cache
// Concat(past, new, axis 2) becomes the op's past inputs and present outputs.
// The boolean (True = attend) or additive mask is passed as is. is_causal is
// set only without a cache and when L and S are the same size: Attention
// aligns its causal mask bottom-right (onnxruntime, checked), torch
// top-left; elsewhere the decomposition's own causal mask is passed as the
// boolean mask. Query rows a mask hides entirely give zeros in torch (and in
// the decomposition); the spec's softmax would give NaN there, so the output
// is followed by Where(row has a key, y, 0).
//
// Left alone: opset < 23, a scale that is not a constant scalar, interior
// values read elsewhere, a repeat whose types do not prove it, masks of other
// types or shapes, ranks other than 4, dropout (random masks).
#include "opt/attention_match.h"
#include "opt/passes.h"

namespace pt2onnx {

size_t fuse_attention(Graph& g, const PassOptions& o) {
  if (o.opset < 23) return 0;
  GraphIndex idx(g);
  Rewriter rw(g);
  std::optional<FreshNames> names;
  size_t fused = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    auto m = match_sdpa(idx, k);
    if (!m) continue;
    bool clash = rw.touched(k);
    for (size_t n : m->nodes) clash = clash || rw.touched(n);
    if (clash) continue;
    if (!names) names.emplace(g);
    const Node like = g.nodes[k];
    Emitter e(g, *names, like);
    const std::string y = like.outputs[0];
    const ValueType yt = *g.type_of(y);
    std::string mask;
    bool is_causal = false;
    if (m->mask_kind != SdpaMatch::Mask::None) {
      // onnxruntime's Attention wants the mask's query axis whole.
      mask = expand_query_rows(e, m->mask, m->q, o.opset);
    } else if (m->causal) {
      const Shape& qs = *g.type_of(m->q)->shape;
      const Shape& ks = *g.type_of(m->k)->shape;
      if (!m->cache && qs[2].same_as(ks[2]))
        is_causal = true;
      else
        mask = m->causal_mask;
    }
    std::vector<std::string> inputs{m->q, m->cache ? m->key_new : m->k,
                                    m->cache ? m->value_new : m->v, mask};
    std::vector<std::string> outputs{y};
    if (m->cache) {
      inputs.push_back(m->past_key);
      inputs.push_back(m->past_value);
      outputs.push_back(m->present_key);
      outputs.push_back(m->present_value);
    }
    while (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
    bool guard = m->mask_kind != SdpaMatch::Mask::None;
    if (guard) {
      outputs[0] = (*names)(y + "__attention");
      g.types[outputs[0]] = yt;
    }
    std::vector<Attr> attrs{Attr::Float("scale", static_cast<float>(m->scale))};
    if (is_causal) attrs.push_back(Attr::Int("is_causal", 1));
    e.node("Attention", inputs, outputs, std::move(attrs));
    if (guard) {
      std::string z = zero_masked_rows(e, m->mask, m->mask_kind == SdpaMatch::Mask::Additive,
                                       m->dtype, outputs[0], yt, o.opset);
      // The last node writes the pattern's output.
      Node& w = e.nodes().back();
      g.types.erase(z);
      w.outputs[0] = y;
    }
    for (size_t n : m->nodes) rw.remove(n);
    rw.replace(k, std::move(e.nodes()));
    ++fused;
  }
  rw.apply();
  return fused;
}

}  // namespace pt2onnx
