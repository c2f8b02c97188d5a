// A Linear on rank > 2 input written flattened becomes MatMul + Add again.
//
// AOTAutograd (torch.compile's graphs) lowers nn.Linear on [..., K] input to
// view([-1, K]) -> addmm -> view([..., N]), which converts to
// Reshape -> Gemm -> Reshape; torch.export keeps aten.linear, which converts
// to MatMul + Add. The fusions after this pass (BiasGelu, SkipLayerNorm,
// attention's projections, packed QKV) are written for the latter, so the
// same model compiled ran ~12% slower than exported (BERT-base,
// bench/compile_backend.md). Matches Reshape(Gemm(Reshape(X), B, C)) with
// X of rank >= 3 (the inner Reshape to rank 2 may feed several Gemms), the
// Gemm's output read by the outer Reshape alone, the Gemm plain (alpha =
// beta = 1, no transA), B a rank-2 constant, C absent or of static shape
// [N] / [1, N], and the outer Reshape's result of X's leading dims (the same
// static sizes or symbols) then N, or static dims holding N (a projection
// viewed per head). Emits MatMul(X, B), Add(C), and the outer Reshape again
// in the per-head case.
// Runs before the fusions, on both targets.
#include <algorithm>

#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

namespace {

int64_t int_attr(const Node& n, std::string_view name, int64_t dflt) {
  const Attr* a = n.attr(name);
  return a ? a->i : dflt;
}

float float_attr(const Node& n, std::string_view name, float dflt) {
  const Attr* a = n.attr(name);
  return a ? a->f : dflt;
}

}  // namespace

size_t unflatten_gemm(Graph& g, const PassOptions&) {
  // Most graphs have no Gemm (torch.export keeps Linear as addmm only on 2-D
  // inputs): a scan of the op types costs far less than the index.
  if (std::none_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return is_op(&n, "Gemm"); }))
    return 0;
  GraphIndex ix(g);
  Rewriter rw(g);
  size_t changed = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& outer = g.nodes[k];
    if (!is_op(&outer, "Reshape") || outer.inputs.empty() || outer.outputs.size() != 1) continue;
    const std::string& y2 = outer.inputs[0];
    const Node* gemm = ix.producer(y2, "Gemm");
    if (!gemm || gemm->inputs.size() < 2 || gemm->outputs.size() != 1 || ix.readers(y2) != 1 ||
        ix.is_graph_output(y2))
      continue;
    if (int_attr(*gemm, "transA", 0) != 0 || int_attr(*gemm, "transB", 0) != 0 ||
        float_attr(*gemm, "alpha", 1.0f) != 1.0f || float_attr(*gemm, "beta", 1.0f) != 1.0f)
      continue;
    const std::string& a2 = gemm->inputs[0];
    const Node* inner = ix.producer(a2, "Reshape");
    if (!inner || inner->inputs.empty()) continue;  // (shared by q, k, v: each rewritten)
    const std::string& x = inner->inputs[0];
    const TensorData* w = ix.constant(gemm->inputs[1]);
    const ValueType* tx = ix.type(x);
    const ValueType* ty = ix.type(outer.outputs[0]);
    if (!w || w->dims.size() != 2 || !tx || !tx->shape || !ty || !ty->shape) continue;
    const int64_t kdim = w->dims[0];
    const int64_t n = w->dims[1];
    const Shape& xs = *tx->shape;
    const Shape& ys = *ty->shape;
    if (xs.size() < 3 || ys.size() < xs.size() || !xs.back().is_static() ||
        xs.back().value != kdim || outer.inputs.size() != 2)
      continue;
    // The outer Reshape keeps X's leading dims; the rest (N, or heads x head
    // size when the projection is viewed per head at once) holds N values.
    bool same_lead = true;
    for (size_t d = 0; d + 1 < xs.size(); ++d)
      same_lead = same_lead && !xs[d].is_unknown() && xs[d] == ys[d];
    int64_t rest = 1;
    for (size_t d = xs.size() - 1; d < ys.size(); ++d)
      rest = ys[d].is_static() ? rest * ys[d].value : -1;
    if (!same_lead || rest != n || tx->dtype != ty->dtype) continue;
    const bool split = ys.size() > xs.size();
    Shape flat(xs.begin(), xs.end() - 1);
    flat.push_back(Dim::of(n));
    std::string bias;
    if (gemm->inputs.size() > 2 && !gemm->inputs[2].empty()) {
      bias = gemm->inputs[2];
      const ValueType* tc = ix.type(bias);
      if (!tc || !tc->shape || tc->dtype != ty->dtype) continue;
      const Shape& cs = *tc->shape;
      bool row = (cs.size() == 1 && cs[0].is_static() && cs[0].value == n) ||
                 (cs.size() == 2 && cs[0].is_static() && cs[0].value == 1 && cs[1].is_static() &&
                  cs[1].value == n);
      if (!row) continue;
    }
    std::vector<Node> nodes;
    const std::string& b = gemm->inputs[1];
    const std::string& y = outer.outputs[0];
    const ValueType flat_type{ty->dtype, flat};
    std::string out = split ? y + "__linear" : y;
    if (split) g.types[out] = flat_type;
    if (bias.empty()) {
      nodes.push_back(make_node("MatMul", {x, b}, {out}, {}, *gemm));
    } else {
      std::string prod = y + "__matmul";
      g.types[prod] = flat_type;
      nodes.push_back(make_node("MatMul", {x, b}, {prod}, {}, *gemm));
      nodes.push_back(make_node("Add", {prod, bias}, {out}, {}, *gemm));
    }
    if (split) nodes.push_back(make_node("Reshape", {out, outer.inputs[1]}, {y}, {}, outer));
    rw.replace(k, std::move(nodes));
    ++changed;
  }
  rw.apply();
  return changed;
}

}  // namespace pt2onnx
