// onnxruntime target: projections sharing an input become one packed MatMul.
//
// Matches 2-4 MatMul(A, W_i) reading the same activation A (rank >= 2) with
// W_i 2-D float / float16 initializers of equal K ([K, N_i]) and the same
// type, each W_i read by its MatMul alone: the Q / K / V projections of an
// attention, the gate / up projections of a gated MLP. Emits, at the first
// MatMul's position, MatMul(A, W) with W = the W_i concatenated along N, and
// Split(axis -1, [N_1, N_2, ...]) into the original outputs; the other
// MatMuls are removed. One pass over A instead of several, one GEMM call.
//
// W is new owned bytes: a copy of the projection weights made at export time
// (named `<first weight>.packed`); the W_i are no longer read and are dropped.
//
// Not in fusions() (pass_list.cpp): it did not run measurably faster.
// onnxruntime 1.32 CPU, 2 intra-op threads, target onnxruntime, opset 18,
// interleaved runs, medians (ratio packed / unpacked), on a shared 2-core
// machine under load (load average 10-13, so single runs vary by +-10%):
// transformers LLaMA hidden 128 / 2 layers: prefill 128 tokens 1.09, 0.97,
// 1.13, 1.01; decode past 128: 0.93, 0.98, 0.97, 1.00; decode batch 4 past
// 512: 0.95, 0.96, 0.94, 0.97. Hidden 512 / 4 layers / vocab 32000: prefill
// 0.95, 1.01, 0.96; decode past 128: 1.14, 1.06, 0.98; decode batch 4 past
// 512: 1.02, 1.00, 1.00. Outputs identical (max diff 0).
//
// Left alone: weights that are not constants or are read elsewhere too
// (tied weights: packing would write their bytes twice), different K or
// types, a MatMul whose A differs, single projections.
#include <cstring>
#include <map>

#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

size_t fuse_qkv_matmul(Graph& g, const PassOptions& o) {
  if (!o.onnxruntime()) return 0;
  GraphIndex ix(g);
  // Candidate MatMuls by their activation input, in graph order.
  std::map<std::string, std::vector<size_t>> by_input;
  std::vector<std::string> order;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (!is_op(&n, "MatMul") || n.inputs.size() != 2 || n.outputs.size() != 1) continue;
    const TensorData* w = ix.constant(n.inputs[1]);
    auto r = ix.rank(n.inputs[0]);
    if (!w || w->dims.size() != 2 || !r || *r < 2 || ix.constant(n.inputs[0])) continue;
    if (w->dtype != DType::Float && w->dtype != DType::Float16) continue;
    if (ix.readers(n.inputs[1]) != 1 || ix.is_graph_output(n.inputs[1])) continue;
    const ValueType* ty = ix.type(n.outputs[0]);
    if (!ty || !ty->shape || ty->shape->size() != *r) continue;
    auto& v = by_input[n.inputs[0]];
    if (v.empty()) order.push_back(n.inputs[0]);
    v.push_back(k);
  }
  FreshNames fresh(g);
  Rewriter rw(g);
  std::vector<Initializer> added;
  size_t fused = 0;
  for (const std::string& a : order) {
    std::vector<size_t> group = by_input[a];
    if (group.size() < 2) continue;
    // Same K and type as the first; at most 4.
    const TensorData& w0 = *ix.constant(g.nodes[group[0]].inputs[1]);
    std::vector<size_t> same;
    for (size_t k : group) {
      const TensorData& w = *ix.constant(g.nodes[k].inputs[1]);
      if (w.dims[0] == w0.dims[0] && w.dtype == w0.dtype && same.size() < 4) same.push_back(k);
    }
    if (same.size() < 2) continue;
    const int64_t kdim = w0.dims[0];
    const size_t es = dtype_size(w0.dtype);
    int64_t total = 0;
    std::vector<int64_t> splits;
    std::vector<std::vector<uint8_t>> parts;
    for (size_t k : same) {
      const TensorData& w = *ix.constant(g.nodes[k].inputs[1]);
      splits.push_back(w.dims[1]);
      total += w.dims[1];
      parts.push_back(w.is_contiguous() ? std::vector<uint8_t>(w.bytes(), w.bytes() + w.nbytes())
                                        : w.contiguous_copy());
    }
    // Row r of W: row r of each W_i, side by side.
    std::vector<uint8_t> packed(static_cast<size_t>(kdim * total) * es);
    size_t off = 0;
    for (int64_t r = 0; r < kdim; ++r)
      for (size_t i = 0; i < parts.size(); ++i) {
        size_t row = static_cast<size_t>(splits[i]) * es;
        std::memcpy(packed.data() + off, parts[i].data() + static_cast<size_t>(r) * row, row);
        off += row;
      }
    const Node& first = g.nodes[same[0]];
    std::string wname = fresh(first.inputs[1] + ".packed");
    std::string sname = fresh(first.inputs[1] + ".packed_split");
    std::string y = fresh(first.outputs[0] + ".packed");
    added.push_back(
        Initializer{wname, TensorData::from_bytes(w0.dtype, {kdim, total}, std::move(packed))});
    g.types[wname] = static_type(w0.dtype, {kdim, total});
    added.push_back(Initializer{
        sname,
        TensorData::from_vector(DType::Int64, {static_cast<int64_t>(splits.size())}, splits)});
    g.types[sname] = static_type(DType::Int64, {static_cast<int64_t>(splits.size())});
    ValueType yt = *ix.type(first.outputs[0]);
    yt.shape->back() = Dim::of(total);
    g.types[y] = yt;
    std::vector<std::string> outs;
    for (size_t k : same) outs.push_back(g.nodes[k].outputs[0]);
    std::vector<Node> nodes;
    nodes.push_back(make_node("MatMul", {a, wname}, {y}, {}, first));
    nodes.push_back(make_node("Split", {y, sname}, outs, {Attr::Int("axis", -1)}, first));
    rw.replace(same[0], std::move(nodes));
    for (size_t i = 1; i < same.size(); ++i) rw.remove(same[i]);
    ++fused;
  }
  rw.apply();
  for (auto& i : added) g.initializers.push_back(std::move(i));
  return fused;
}

}  // namespace pt2onnx
