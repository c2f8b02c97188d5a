// Removes nodes whose outputs nobody reads and initializers nobody uses
// (reads from nested graphs count). A nested graph's inputs are its
// signature and stay. Model-local functions no node calls (any more) go too.
#include <set>

#include "ir/name_set.h"
#include "opt/passes.h"

namespace pt2onnx {

namespace {

void collect_calls(const std::vector<Node>& nodes,
                   std::set<std::pair<std::string, std::string>>& out) {
  for (auto& n : nodes) {
    if (!n.domain.empty()) out.emplace(n.domain, n.op_type);
    for (const Graph* s : subgraphs(n)) collect_calls(s->nodes, out);
  }
}

size_t remove_uncalled_functions(Graph& g) {
  if (g.functions.empty()) return 0;
  std::set<std::pair<std::string, std::string>> called;
  collect_calls(g.nodes, called);
  // Functions may call functions: grow the set to its fixed point.
  for (size_t before = 0; before != called.size();) {
    before = called.size();
    for (auto& f : g.functions)
      if (called.count({f.domain, f.name})) collect_calls(f.nodes, called);
  }
  size_t n = g.functions.size();
  std::erase_if(g.functions, [&](const Function& f) { return !called.count({f.domain, f.name}); });
  return n - g.functions.size();
}

}  // namespace

size_t remove_unused(Graph& g) {
  // Read values, found walking back from the outputs. A NameSet: this pass
  // runs after every fusion that changed the graph and in every clean-up.
  NameSet live(2 * g.nodes.size() + g.outputs.size());
  for (auto& o : g.outputs) live.insert(o.name);
  std::vector<bool> keep(g.nodes.size(), false);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    for (auto& o : n.outputs)
      if (live.contains(o)) keep[i] = true;
    if (keep[i]) {
      for (auto& in : n.inputs)
        if (!in.empty()) live.insert(in);
      // Values a nested graph (If branch, Loop body) reads from this scope.
      for (const Graph* s : subgraphs(n))
        for (auto& v : outer_reads(*s)) live.insert(v);
    }
  }
  // Compacted in place: most runs remove nothing and move nothing.
  size_t w = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!keep[i]) continue;
    if (w != i) g.nodes[w] = std::move(g.nodes[i]);
    ++w;
  }
  size_t removed = g.nodes.size() - w;
  g.nodes.resize(w);
  const size_t inits = g.initializers.size();
  std::erase_if(g.initializers, [&](const Initializer& i) { return !live.contains(i.name); });
  removed += inits - g.initializers.size();
  return removed + remove_uncalled_functions(g);
}

}  // namespace pt2onnx
