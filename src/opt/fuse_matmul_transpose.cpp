// onnxruntime target: MatMul of a transposed operand becomes com.microsoft
// FusedMatMul, which reads the operand transposed instead of materializing
// the Transpose (a copy of the whole tensor per run), and takes a following
// scale as its alpha. The attention scores of the decomposed SDPA
// (src/convert/attention.cpp: MatMul(q, Transpose(k)) * scale) are the
// common case.
//
// Matches MatMul(A, B) where A and / or B is Transpose(X) with a perm that
// swaps the last two axes and keeps every other axis in place (rank >= 2),
// the Transpose's output read by that MatMul alone and X not a constant
// (fold_weight_transpose already stores a transposed weight in its
// transposed layout; FusedMatMul would only undo that). Float / float16 (the
// types onnxruntime's CPU kernel covers), both operands of rank >= 2. When
// the MatMul's result is read only by a Mul by a one-element float constant
// (of rank <= the result's), that Mul is absorbed: alpha = the constant, and
// the Mul is the node replaced; otherwise the MatMul is.
//
// Left alone: transposes that move other axes (e.g. [0, 2, 1, 3]), a
// Transpose read elsewhere too (it would be computed anyway), a Transpose of
// a constant, a MatMul without a transposed operand, the standard target.
#include <optional>

#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

namespace {

// Whether `n` swaps the last two axes of a rank-r tensor and nothing else.
bool swaps_last_two(const Node& n, size_t r) {
  if (r < 2) return false;
  std::vector<int64_t> p;
  if (const Attr* a = n.attr("perm")) {
    p = a->ints;
  } else {
    if (r != 2) return false;  // default perm reverses every axis
    return true;
  }
  if (p.size() != r) return false;
  for (size_t k = 0; k < r; ++k) {
    int64_t v = p[k] < 0 ? p[k] + static_cast<int64_t>(r) : p[k];
    int64_t want =
        k + 2 < r ? static_cast<int64_t>(k) : static_cast<int64_t>(k + 2 == r ? r - 1 : r - 2);
    if (v != want) return false;
  }
  return true;
}

}  // namespace

size_t fuse_matmul_transpose(Graph& g, const PassOptions& o) {
  if (!o.onnxruntime()) return 0;
  GraphIndex ix(g);
  Rewriter rw(g);
  size_t fused = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& mm = g.nodes[k];
    if (!is_op(&mm, "MatMul") || mm.inputs.size() != 2 || mm.outputs.size() != 1) continue;
    const ValueType* ty = ix.type(mm.outputs[0]);
    if (!ty || (ty->dtype != DType::Float && ty->dtype != DType::Float16)) continue;
    std::vector<std::string> ins = mm.inputs;
    int64_t trans[2] = {0, 0};
    bool ranks_ok = true;
    for (size_t j = 0; j < 2; ++j) {
      auto r = ix.rank(mm.inputs[j]);
      if (!r || *r < 2) ranks_ok = false;
      const Node* t = ix.producer(mm.inputs[j], "Transpose");
      if (!t || t->inputs.size() != 1 || ix.readers(mm.inputs[j]) != 1 ||
          ix.is_graph_output(mm.inputs[j]) || ix.constant(t->inputs[0]) || !r ||
          !swaps_last_two(*t, *r))
        continue;
      ins[j] = t->inputs[0];
      trans[j] = 1;
    }
    if (!ranks_ok || (!trans[0] && !trans[1])) continue;
    std::vector<Attr> attrs{Attr::Int("transA", trans[0]), Attr::Int("transB", trans[1])};
    // A following Mul by a scalar constant becomes alpha.
    size_t last = k;
    float alpha = 1.0f;
    const std::string& y = mm.outputs[0];
    auto consumers = ix.consumers(y);
    if (ix.readers(y) == 1 && !ix.is_graph_output(y) && consumers.size() == 1) {
      const Node& mul = g.nodes[consumers[0]];
      if (is_op(&mul, "Mul") && mul.inputs.size() == 2 && mul.outputs.size() == 1) {
        const std::string& s = mul.inputs[0] == y ? mul.inputs[1] : mul.inputs[0];
        const TensorData* c = ix.constant(s);
        auto sv = ix.scalar(s);
        auto ry = ix.rank(y);
        if (c && sv && c->numel() == 1 && c->dtype == ty->dtype && ry && c->dims.size() <= *ry) {
          alpha = static_cast<float>(*sv);
          last = consumers[0];
        }
      }
    }
    attrs.push_back(Attr::Float("alpha", alpha));
    const Node& replaced = g.nodes[last];
    rw.replace(last, {make_node("FusedMatMul", ins, replaced.outputs, std::move(attrs), replaced,
                                "com.microsoft")});
    ++fused;
  }
  rw.apply();
  return fused;
}

}  // namespace pt2onnx
