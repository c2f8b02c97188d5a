// onnxruntime target: a residual Add(a, b) whose sum feeds a normalization
// over the last axis becomes one com.microsoft operator:
//   SimplifiedLayerNormalization / RMSNormalization(Add(a, b), gamma)
//     -> SkipSimplifiedLayerNormalization(a, b, gamma; epsilon)
//   LayerNormalization(Add(a, b), gamma, beta?)
//     -> SkipLayerNormalization(a, b, gamma, beta?; epsilon)
// When the sum is also read elsewhere (the residual stream of the next
// layer, a graph output), the fused node gives it as its fourth output
// input_skip_bias_sum (outputs two and three unnamed). One kernel reads a
// and b once instead of writing the sum and reading it back. Runs after the
// norm fusions (fuse_rms_norm.cpp, fuse_layer_norm.cpp), whose output it
// extends.
//
// The fused node takes the Add's place (the sum's other readers come after
// it), so gamma and beta must be defined before the Add. Left alone, as the
// contrib schemas and kernels cannot take them: a and b of other shapes (a
// broadcasting Add) or of unknown shape, rank other than 2 ([tokens, hidden])
// or 3 ([batch, seq, hidden]), a type other than float / float16 / bfloat16
// or differing between x, gamma, beta and the output, gamma / beta that are
// not [hidden] vectors, a norm over another axis, a stash type other than
// float32, a norm whose mean / inv-std outputs are read.
#include <unordered_set>

#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

namespace {

bool skip_type(DType t) { return t == DType::Float || t == DType::Float16 || t == DType::BFloat16; }

}  // namespace

size_t fuse_skip_norm(Graph& g, const PassOptions& o) {
  if (!o.onnxruntime()) return 0;
  GraphIndex ix(g);
  Rewriter rw(g);
  size_t fused = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    bool simplified = is_op(&n, "SimplifiedLayerNormalization") || is_op(&n, "RMSNormalization");
    bool layer = is_op(&n, "LayerNormalization");
    if (!simplified && !layer) continue;
    size_t max_inputs = layer ? 3 : 2;
    if (n.inputs.size() < 2 || n.inputs.size() > max_inputs || n.outputs.empty()) continue;
    bool extra_read = false;
    for (size_t i = 1; i < n.outputs.size(); ++i)
      extra_read = extra_read || (!n.outputs[i].empty() && ix.readers(n.outputs[i]) > 0);
    if (extra_read) continue;
    const Attr* stash = n.attr("stash_type");
    if (stash && stash->i != 1) continue;
    // The residual Add.
    const std::string& x = n.inputs[0];
    auto ai = ix.producer_index(x);
    if (!ai || rw.touched(*ai)) continue;
    const Node& add = g.nodes[*ai];
    if (!is_op(&add, "Add") || add.inputs.size() != 2 || add.outputs.size() != 1) continue;
    const ValueType* ta = ix.type(add.inputs[0]);
    const ValueType* tb = ix.type(add.inputs[1]);
    const ValueType* tx = ix.type(x);
    const ValueType* ty = ix.type(n.outputs[0]);
    if (!ta || !tb || !tx || !ty || !ta->shape || !tb->shape || !tx->shape) continue;
    const Shape& s = *tx->shape;
    if ((s.size() != 2 && s.size() != 3) || !same_shape(*ta->shape, s) ||
        !same_shape(*tb->shape, s))
      continue;
    DType t = tx->dtype;
    if (!skip_type(t) || ta->dtype != t || tb->dtype != t || ty->dtype != t) continue;
    const Attr* axis = n.attr("axis");
    if (axis && !is_last_axis(axis->i, s.size())) continue;
    // gamma (and beta): [hidden] vectors of type t, defined before the Add.
    bool params_ok = true;
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      const std::string& p = n.inputs[i];
      if (p.empty()) continue;
      const ValueType* tp = ix.type(p);
      auto pi = ix.producer_index(p);
      params_ok = params_ok && tp && tp->dtype == t && tp->shape && tp->shape->size() == 1 &&
                  (*tp->shape)[0].same_as(s.back()) && (!pi || *pi < *ai);
    }
    if (!params_ok || n.inputs[1].empty()) continue;
    const Attr* e = n.attr("epsilon");
    float eps = e ? e->f : 1e-5f;
    std::vector<std::string> outs{n.outputs[0]};
    if (ix.readers(x) > 1) outs = {n.outputs[0], "", "", x};
    std::vector<std::string> in{add.inputs[0], add.inputs[1], n.inputs[1]};
    if (layer && n.inputs.size() == 3 && !n.inputs[2].empty()) in.push_back(n.inputs[2]);
    const char* op = simplified ? "SkipSimplifiedLayerNormalization" : "SkipLayerNormalization";
    rw.replace(*ai, {make_node(op, in, outs, {Attr::Float("epsilon", eps)}, n, "com.microsoft")});
    rw.remove(k);
    ++fused;
  }
  rw.apply();
  return fused;
}

}  // namespace pt2onnx
