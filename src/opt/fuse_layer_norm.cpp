// Layer normalization written by hand (BERT-era and ConvNeXt-style code,
// `(x - u) / sqrt(s + eps)`) becomes one LayerNormalization (opset >= 17, both
// targets):
//   mean = mean of x over the last axis, keepdims (ReduceMean, or ReduceSum
//          then Div by the static last dim)
//   d    = Sub(x, mean)
//   var  = the same mean of Mul(d, d) or Pow(d, 2)
//   y    = Div(d, Sqrt(Add(var, eps))), or Mul(d, Reciprocal(Sqrt(...))),
//          Mul(d, Div(1, Sqrt(...))), Mul(d, Pow(Add(var, eps), -0.5))
//   optional Mul by gamma, then optional Add of beta, each of shape
//   [last dim] (either operand order).
// Emits LayerNormalization(x, gamma or ones, beta?; axis = -1, epsilon): one
// kernel instead of nine nodes, and the form the residual Add fusion
// (fuse_skip_norm.cpp) extends on the onnxruntime target.
//
// Left alone: statistics over another axis or several axes, keepdims = 0,
// the unbiased variance (divided by n - 1), an epsilon inside the mean or
// outside the square root, a d that differs between the square and the
// scaling, a mean of another x, a value inside the pattern read elsewhere.
// A gamma / beta that is not a [last dim] vector of x's type stays after the
// fused node (gamma of ones, no beta).
#include <unordered_set>

#include "opt/norm_pattern.h"
#include "opt/passes.h"

namespace pt2onnx {

namespace {

struct Plan {
  size_t end;
  std::string input, gamma, beta;
  Dim d;
  DType type;
  double eps;
};

}  // namespace

size_t fuse_layer_norm(Graph& g, const PassOptions& o) {
  if (o.opset < 17) return 0;
  GraphIndex ix(g);
  std::unordered_set<size_t> claimed;
  std::vector<Plan> plans;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (claimed.count(k)) continue;
    for (const InvStdScale& s : match_inv_std_scale(ix, k)) {
      auto var = match_last_axis_mean(ix, s.var);
      if (!var) continue;
      auto sq = match_square(ix, var->input);
      if (!sq || sq->x != s.x) continue;
      // d = Sub(x, mean(x)), read only by the square and the scaling.
      const Node* sub = ix.producer(s.x, "Sub");
      if (!sub || sub->inputs.size() != 2 || ix.readers(s.x) != sq->reads_of_x + 1) continue;
      const std::string& x = sub->inputs[0];
      auto mean = match_last_axis_mean(ix, sub->inputs[1]);
      if (!mean || mean->input != x) continue;
      const ValueType* xt = ix.type(x);
      auto d = last_dim(ix, x);
      if (!xt || !d ||
          !(xt->dtype == DType::Float || xt->dtype == DType::Float16 ||
            xt->dtype == DType::BFloat16))
        continue;
      AffineTail tail = match_affine_tail(ix, g.nodes[k].outputs[0], *d, true, DType::Undefined);
      std::vector<size_t> nodes = tail.nodes;
      nodes.push_back(k);
      nodes.push_back(sq->node);
      nodes.push_back(*ix.producer_index(s.x));
      for (size_t i : s.nodes) nodes.push_back(i);
      for (size_t i : var->nodes) nodes.push_back(i);
      for (size_t i : mean->nodes) nodes.push_back(i);
      bool free = true;
      for (size_t i : nodes) free = free && !claimed.count(i);
      if (!free || (tail.weight.empty() && !d->is_static())) continue;
      claimed.insert(nodes.begin(), nodes.end());
      size_t end = tail.nodes.empty() ? k : tail.nodes.back();
      plans.push_back(Plan{end, x, tail.weight, tail.bias, *d, xt->dtype, s.eps});
      break;
    }
  }
  if (plans.empty()) return 0;
  FreshNames names(g);
  Rewriter rw(g);
  for (const Plan& p : plans) {
    const Node& last = g.nodes[p.end];
    std::string gamma = p.gamma;
    if (gamma.empty()) gamma = *add_ones(g, names, "layer_norm_ones", p.type, p.d);
    std::vector<std::string> in{p.input, gamma};
    if (!p.beta.empty()) in.push_back(p.beta);
    rw.replace(
        p.end,
        {make_node("LayerNormalization", in, {last.outputs[0]},
                   {Attr::Int("axis", -1), Attr::Float("epsilon", static_cast<float>(p.eps))},
                   last)});
  }
  return rw.apply();
}

}  // namespace pt2onnx
