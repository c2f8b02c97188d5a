// Removes Identity nodes: readers use the input directly. An Identity that
// names a graph output is kept unless its input can simply take that name.
#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

size_t remove_identity(Graph& g) {
  auto is_identity = [](const Node& n) {
    return n.op_type == "Identity" && n.domain.empty() && n.inputs.size() == 1;
  };
  if (std::none_of(g.nodes.begin(), g.nodes.end(), is_identity)) return 0;
  std::unordered_set<std::string> outputs;
  for (auto& o : g.outputs) outputs.insert(o.name);
  // Only a value a node of `g` produces can take another name; inputs,
  // initializers and (in a nested graph) enclosing-scope values cannot.
  // (Collected when first needed, before any output is renamed.)
  std::optional<std::unordered_set<std::string>> produced;
  // Readers of an Identity's output read its input instead: collected, then
  // applied in one walk of the graph (one walk per Identity was quadratic).
  // Chains resolve as they are collected: an Identity's input is looked up
  // first.
  std::unordered_map<std::string, std::string> renames;
  auto flush = [&] {
    if (renames.empty()) return;
    for (auto& m : g.nodes) rename_uses_in_node(m, renames);
    renames.clear();
  };
  size_t removed = 0;
  std::vector<bool> drop(g.nodes.size(), false);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& n = g.nodes[k];
    if (!is_identity(n)) continue;
    std::string in = n.inputs[0];
    if (auto r = renames.find(in); r != renames.end()) in = r->second;
    const std::string out = n.outputs[0];
    if (!outputs.count(out)) {
      renames[out] = in;
      drop[k] = true;
    } else {
      flush();
      if (!produced) {
        produced.emplace();
        for (auto& m : g.nodes)
          for (auto& o : m.outputs) produced->insert(o);
      }
      if (produced->count(in) && !outputs.count(in)) {
        // The producer of `in` writes the output directly.
        for (auto& m : g.nodes) {
          for (auto& o : m.outputs)
            if (o == in) o = out;
        }
        replace_uses(g, in, out);
        drop[k] = true;
      }
    }
    if (drop[k]) ++removed;
  }
  flush();
  if (!removed) return 0;
  size_t w = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (drop[k]) continue;
    if (w != k) g.nodes[w] = std::move(g.nodes[k]);
    ++w;
  }
  g.nodes.resize(w);
  return removed;
}

}  // namespace pt2onnx
