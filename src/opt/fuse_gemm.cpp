// MatMul + bias Add on 2-D operands becomes one Gemm.
//
// Matches Add(MatMul(A, B), bias) (either Add operand order) with A of rank
// 2, B a rank-2 constant [K, N] with K > 0 (onnxruntime's Gemm returns
// garbage for K == 0), bias of static shape [N] or [1, N], a float / float16 /
// double result, and the MatMul's output read by the Add alone (no graph
// output). Emits Gemm(A, B, bias), replacing the Add: one kernel that adds
// the bias while it writes the product (hand-written `x @ W + b`; nn.Linear
// on 2-D input already converts to Gemm). Both targets, any opset.
//
// Left alone: A of another rank (Gemm is 2-D only), a B that is not a
// constant (a dynamic weight is no Linear), a bias of another shape ([M, 1],
// [M, N]: Gemm would broadcast it too, but this pass keeps to the bias
// pattern), and a MatMul result read elsewhere (it would be computed twice).
#include <algorithm>

#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

size_t fuse_gemm(Graph& g, const PassOptions&) {
  // Only a MatMul of a rank-2 A can become a Gemm: transformer graphs have
  // almost none (their activations are [batch, seq, hidden]), and looking
  // for one costs a type lookup per MatMul, where the index costs a lookup
  // per value of the graph.
  if (std::none_of(g.nodes.begin(), g.nodes.end(), [&](const Node& n) {
        if (!is_op(&n, "MatMul") || n.inputs.size() != 2) return false;
        const ValueType* ta = g.type_of(n.inputs[0]);
        return ta && ta->shape && ta->shape->size() == 2;
      }))
    return 0;
  GraphIndex ix(g);
  Rewriter rw(g);
  size_t fused = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& add = g.nodes[k];
    if (!is_op(&add, "Add") || add.inputs.size() != 2 || add.outputs.size() != 1) continue;
    for (int j = 0; j < 2; ++j) {
      const std::string& prod = add.inputs[static_cast<size_t>(j)];
      const std::string& bias = add.inputs[static_cast<size_t>(1 - j)];
      const Node* mm = ix.producer(prod, "MatMul");
      if (!mm || mm->inputs.size() != 2 || ix.readers(prod) != 1 || ix.is_graph_output(prod))
        continue;
      const std::string& a = mm->inputs[0];
      const std::string& b = mm->inputs[1];
      const TensorData* w = ix.constant(b);
      const ValueType* ta = ix.type(a);
      const ValueType* tc = ix.type(bias);
      const ValueType* ty = ix.type(add.outputs[0]);
      if (!w || w->dims.size() != 2 || w->dims[0] <= 0 || !ta || !ta->shape ||
          ta->shape->size() != 2 || !tc || !tc->shape || !ty)
        continue;
      DType t = ty->dtype;
      if (t != DType::Float && t != DType::Float16 && t != DType::Double) continue;
      if (ta->dtype != t || w->dtype != t || tc->dtype != t) continue;
      const Shape& cs = *tc->shape;
      const int64_t n = w->dims[1];
      bool row = (cs.size() == 1 && cs[0].is_static() && cs[0].value == n) ||
                 (cs.size() == 2 && cs[0].is_static() && cs[0].value == 1 && cs[1].is_static() &&
                  cs[1].value == n);
      if (!row) continue;
      rw.replace(k, {make_node("Gemm", {a, b, bias}, add.outputs, {}, add)});
      ++fused;
      break;
    }
  }
  rw.apply();
  return fused;
}

}  // namespace pt2onnx
