// Removes nodes whose outputs nobody reads and initializers nobody uses
// (reads from nested graphs count). A nested graph's inputs are its
// signature and stay. Model-local functions no node calls (any more) go too.
#include <set>
#include <unordered_set>

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
  std::unordered_set<std::string> live;
  for (auto& o : g.outputs) live.insert(o.name);
  std::vector<bool> keep(g.nodes.size(), false);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    for (auto& o : n.outputs)
      if (live.count(o)) keep[i] = true;
    if (keep[i]) {
      for (auto& in : n.inputs)
        if (!in.empty()) live.insert(in);
      // Values a nested graph (If branch, Loop body) reads from this scope.
      for (const Graph* s : subgraphs(n))
        for (auto& v : outer_reads(*s)) live.insert(v);
    }
  }
  size_t removed = 0;
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (keep[i])
      nodes.push_back(std::move(g.nodes[i]));
    else
      ++removed;
  }
  g.nodes = std::move(nodes);
  std::vector<Initializer> inits;
  inits.reserve(g.initializers.size());
  for (auto& init : g.initializers) {
    if (live.count(init.name))
      inits.push_back(std::move(init));
    else
      ++removed;
  }
  g.initializers = std::move(inits);
  return removed + remove_uncalled_functions(g);
}

}  // namespace pt2onnx
