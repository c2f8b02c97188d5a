// Removes Identity nodes: readers use the input directly. An Identity that
// names a graph output is kept unless its input can simply take that name.
// A Mul by a one-element constant 1 (or Div by one) whose output has the
// other operand's type is an Identity too (x * 1 == x in IEEE arithmetic,
// NaN and -0 included): transformers' rotary caches are scaled by
// attention_scaling, 1.0 for the default rope.
#include <unordered_set>

#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

namespace {

void times_one_to_identity(Graph& g) {
  GraphIndex idx(g);
  for (Node& n : g.nodes) {
    const bool mul = is_op(&n, "Mul"), div = is_op(&n, "Div");
    if ((!mul && !div) || n.inputs.size() != 2 || n.outputs.size() != 1) continue;
    for (size_t s = 0; s < 2; ++s) {
      if (div && s == 0) continue;  // 1 / x is not x
      auto one = idx.scalar(n.inputs[s]);
      if (!one || *one != 1.0) continue;
      const std::string& x = n.inputs[1 - s];
      const ValueType* xt = idx.type(x);
      const ValueType* yt = idx.type(n.outputs[0]);
      if (!xt || !yt || !xt->shape || !yt->shape || xt->dtype != yt->dtype ||
          *xt->shape != *yt->shape)
        continue;
      bool known = true;
      for (const Dim& d : *xt->shape) known &= !d.is_unknown();
      if (!known) continue;
      std::string in = x;
      n.op_type = "Identity";
      n.inputs = {in};
      n.attrs.clear();
      break;
    }
  }
}

}  // namespace

size_t remove_identity(Graph& g) {
  times_one_to_identity(g);
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
