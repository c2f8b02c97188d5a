// Removes Identity nodes: readers use the input directly. An Identity that
// names a graph output is kept unless its input can simply take that name.
#include <unordered_set>

#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

size_t remove_identity(Graph& g) {
  // Only a value a node of `g` produces can take another name; inputs,
  // initializers and (in a nested graph) enclosing-scope values cannot.
  std::unordered_set<std::string> outputs, produced;
  for (auto& o : g.outputs) outputs.insert(o.name);
  for (auto& n : g.nodes)
    for (auto& o : n.outputs) produced.insert(o);
  size_t removed = 0;
  std::vector<bool> drop(g.nodes.size(), false);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& n = g.nodes[k];
    if (n.op_type != "Identity" || !n.domain.empty() || n.inputs.size() != 1) continue;
    const std::string in = n.inputs[0], out = n.outputs[0];
    if (!outputs.count(out)) {
      replace_uses(g, out, in);
      drop[k] = true;
    } else if (produced.count(in) && !outputs.count(in)) {
      // The producer of `in` writes the output directly.
      for (auto& m : g.nodes) {
        for (auto& o : m.outputs)
          if (o == in) o = out;
      }
      replace_uses(g, in, out);
      drop[k] = true;
    }
    if (drop[k]) ++removed;
  }
  if (!removed) return 0;
  std::vector<Node> nodes;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    if (!drop[k]) nodes.push_back(std::move(g.nodes[k]));
  g.nodes = std::move(nodes);
  return removed;
}

}  // namespace pt2onnx
