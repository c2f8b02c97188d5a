// Weights handed to the runtime by reference (Options::weights_by_reference,
// the torch.compile backend): a Linear weight reaches MatMul as W^T, which
// fold_weight_transpose stores as a strided view that must be copied into
// the transposed layout before the runtime can read it (340 MB for
// BERT-base, most of a first call's conversion time). Here the operator reads
// W in its own layout instead, so W stays the caller's bytes: Gemm's B with
// transB flipped (standard ONNX), and on the onnxruntime target MatMul as
// com.microsoft FusedMatMul(transB=1). onnxruntime prepacks a constant B of
// either operator from W's layout (MatMul<float>::PrePack honours transB),
// so the steady state is the same as for a transposed copy.
//
// Folded back: a 2-D initializer whose strides are those of the transpose of
// a contiguous tensor (a view fold_weight_transpose made), not lazily
// converted or scaled, read only as input B (1) of top-level MatMul (float,
// A of known rank >= 2), FusedMatMul or Gemm nodes, and not a graph output
// or read by a nested graph. It takes the name of the weight it views
// (`W.T` -> `W` when that name is free), so no name says the wrong layout.
#include <unordered_map>
#include <unordered_set>

#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

namespace {

// Whether `t` is the transpose of a contiguous [d1, d0] tensor, as a view.
bool transposed_view(const TensorData& t) {
  return t.dims.size() == 2 && t.strides.size() == 2 && t.strides[0] == 1 &&
         t.strides[1] == t.dims[0] && t.dims[0] > 1 && t.dims[1] > 1 && !t.lazy() && t.src_fd < 0;
}

}  // namespace

size_t read_weights_transposed(Graph& g, const PassOptions& o) {
  if (!o.weights_by_reference) return 0;
  std::unordered_map<std::string, size_t> candidates;  // initializer -> index
  for (size_t k = 0; k < g.initializers.size(); ++k)
    if (transposed_view(g.initializers[k].data)) candidates[g.initializers[k].name] = k;
  if (candidates.empty()) return 0;

  GraphIndex ix(g);
  std::unordered_set<std::string> refused;
  std::unordered_map<std::string, std::vector<size_t>> readers;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      if (!candidates.count(n.inputs[j])) continue;
      bool ok = j == 1;
      if (ok && is_op(&n, "MatMul")) {
        auto ra = ix.rank(n.inputs[0]);
        ok = o.onnxruntime() && n.outputs.size() == 1 && ra && *ra >= 2 &&
             g.initializers[candidates[n.inputs[j]]].data.dtype == DType::Float;
      } else if (ok) {
        ok = is_op(&n, "Gemm") || (n.op_type == "FusedMatMul" && n.domain == "com.microsoft");
      }
      ok = ok && n.inputs[0] != n.inputs[1];
      if (ok)
        readers[n.inputs[j]].push_back(k);
      else
        refused.insert(n.inputs[j]);
    }
    for (const Graph* s : subgraphs(n))
      for (auto& v : outer_reads(*s))
        if (candidates.count(v)) refused.insert(v);
  }
  for (auto& out : g.outputs)
    if (candidates.count(out.name)) refused.insert(out.name);

  FreshNames fresh = FreshNames::few(g);
  std::unordered_map<std::string, std::string> renames;
  size_t changed = 0;
  for (size_t k = 0; k < g.initializers.size(); ++k) {  // in order: deterministic names
    const std::string name = g.initializers[k].name;
    auto it = readers.find(name);
    if (!candidates.count(name) || refused.count(name) || it == readers.end()) continue;
    Initializer& init = g.initializers[k];
    std::swap(init.data.dims[0], init.data.dims[1]);
    init.data.strides.clear();
    for (size_t n : it->second) {
      Node& node = g.nodes[n];
      if (node.op_type == "MatMul") {
        node.op_type = "FusedMatMul";
        node.domain = "com.microsoft";
        node.attrs = {Attr::Int("transA", 0), Attr::Int("transB", 1), Attr::Float("alpha", 1.0f)};
        continue;
      }
      bool set = false;
      for (auto& a : node.attrs)
        if (a.name == "transB") {
          a.i = a.i ? 0 : 1;
          set = true;
        }
      if (!set) node.attrs.push_back(Attr::Int("transB", 1));
    }
    std::string base = name.size() > 2 && name.ends_with(".T") ? name.substr(0, name.size() - 2)
                                                               : name + ".untransposed";
    std::string to = fresh(base);
    fresh.take(name);  // the old name stays taken: nodes still read it until the renames
    g.types.erase(name);
    g.types[to] = static_type(init.data.dtype, init.data.dims);
    renames[name] = to;
    init.name = to;
    ++changed;
  }
  if (!renames.empty())
    for (auto& n : g.nodes) rename_uses_in_node(n, renames);
  return changed;
}

}  // namespace pt2onnx
