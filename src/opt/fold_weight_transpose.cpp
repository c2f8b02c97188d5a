// Transpose of an initializer (Linear weights reach MatMul as W^T) becomes an
// initializer in the transposed layout, so runtimes do not fold the Transpose
// at every load (onnxruntime copies the weight, then prepacks the copy). The
// new initializer is a strided view of the same bytes: nothing is copied here;
// the writer transposes while it streams the tensor out. Only initializers the
// Transpose nodes (all with the same perm) are the only readers of are folded,
// so no weight is written twice (tied embedding / lm_head weights keep their
// Transpose). The folded tensor is named `<weight>.T` (2-D) or
// `<weight>.perm_<p...>`, not `<weight>`: under the weight's own name a square
// weight in the other layout would be silently wrong for tools that map
// initializers back to the state_dict by name.
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "opt/passes.h"

namespace pt2onnx {

namespace {

std::vector<int64_t> perm_of(const Node& n, size_t rank) {
  std::vector<int64_t> p;
  if (const Attr* a = n.attr("perm")) {
    p = a->ints;
    for (auto& v : p)
      if (v < 0) v += static_cast<int64_t>(rank);
  } else {
    for (size_t k = rank; k-- > 0;) p.push_back(static_cast<int64_t>(k));
  }
  return p;
}

bool is_permutation(const std::vector<int64_t>& p, size_t rank) {
  if (p.size() != rank) return false;
  std::vector<bool> seen(rank, false);
  for (auto v : p) {
    if (v < 0 || v >= static_cast<int64_t>(rank) || seen[static_cast<size_t>(v)]) return false;
    seen[static_cast<size_t>(v)] = true;
  }
  return true;
}

}  // namespace

size_t fold_weight_transpose(Graph& g) {
  // Readers of each initializer: top-level Transpose nodes (by index), or a
  // mark that something else reads it.
  std::unordered_map<std::string, size_t> init_index;
  for (size_t k = 0; k < g.initializers.size(); ++k) init_index[g.initializers[k].name] = k;
  struct Uses {
    std::vector<size_t> transposes;
    bool other = false;
  };
  std::unordered_map<std::string, Uses> uses;
  auto other_use = [&](const std::string& v) {
    if (init_index.count(v)) uses[v].other = true;
  };
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    bool transpose = n.op_type == "Transpose" && n.domain.empty() && n.inputs.size() == 1 &&
                     n.outputs.size() == 1;
    for (auto& in : n.inputs) {
      if (transpose && init_index.count(in))
        uses[in].transposes.push_back(k);
      else
        other_use(in);
    }
    for (const Graph* s : subgraphs(n))
      for (auto& v : outer_reads(*s)) other_use(v);
  }
  for (auto& o : g.outputs) other_use(o.name);

  std::unordered_set<std::string> outputs;
  for (auto& o : g.outputs) outputs.insert(o.name);
  std::optional<FreshNames> fresh_name;  // made on the first fold
  std::vector<bool> drop(g.nodes.size(), false);
  std::unordered_map<std::string, std::string> renames;  // Transpose output -> view
  size_t folded = 0;
  // In initializer order, each folded view taking its source's place (the
  // source has no reader left): the output stays deterministic.
  for (auto& init : g.initializers) {
    auto it = uses.find(init.name);
    if (it == uses.end() || it->second.other || it->second.transposes.empty()) continue;
    const std::vector<size_t>& transposes = it->second.transposes;
    const TensorData& src = init.data;
    const size_t rank = src.dims.size();
    std::vector<int64_t> perm = perm_of(g.nodes[transposes[0]], rank);
    if (rank < 2 || dtype_size(src.dtype) == 0 || !is_permutation(perm, rank)) continue;
    bool same = true;
    for (size_t k : transposes)
      same &= perm_of(g.nodes[k], rank) == perm && !outputs.count(g.nodes[k].outputs[0]);
    if (!same) continue;

    std::vector<int64_t> strides = src.strides;
    if (strides.empty()) {
      strides.assign(rank, 1);
      for (size_t d = rank - 1; d-- > 0;) strides[d] = strides[d + 1] * src.dims[d + 1];
    }
    TensorData view = src;  // same bytes (and file), permuted dims and strides
    view.strides.assign(rank, 0);
    for (size_t d = 0; d < rank; ++d) {
      view.dims[d] = src.dims[static_cast<size_t>(perm[d])];
      view.strides[d] = strides[static_cast<size_t>(perm[d])];
    }
    if (view.is_contiguous()) view.strides.clear();

    if (!fresh_name) fresh_name.emplace(FreshNames::few(g));
    std::string base = init.name;
    if (rank == 2) {
      base += ".T";
    } else {
      base += ".perm";
      for (auto p : perm) base += "_" + std::to_string(p);
    }
    std::string fresh = (*fresh_name)(base);
    g.types[fresh] = static_type(view.dtype, view.dims);
    for (size_t k : transposes) {
      drop[k] = true;
      renames[g.nodes[k].outputs[0]] = fresh;
    }
    init = Initializer{fresh, std::move(view)};
    ++folded;
  }
  if (!folded) return 0;
  size_t w = 0;  // compacted in place
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (drop[k]) continue;
    rename_uses_in_node(g.nodes[k], renames);
    if (w != k) g.nodes[w] = std::move(g.nodes[k]);
    ++w;
  }
  g.nodes.resize(w);
  return folded;
}

}  // namespace pt2onnx
