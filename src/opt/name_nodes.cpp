// Node names, settled once, last: every pass names the nodes it makes after
// the node they replace (make_node: "<like>/<op>"), which says where a node
// came from but repeats whenever a pass makes two nodes of one type from one
// node (a GatherND split into one Gather per axis) or runs twice on one
// node. ONNX consumers refuse a graph with two nodes of one name, so rather
// than have each pass guard against it, this pass makes the names unique: the
// first node of a name keeps it, each later one gets "<name>_<k>" (a k no
// node uses). Names are unique across the main graph and its nested graphs
// together (one namespace is stricter than ONNX's per-graph rule, and it
// keeps a name pointing at one node of the file), and within each function
// body. Deterministic: the same graph gets the same names.
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "opt/passes.h"

namespace pt2onnx {

namespace {

class Namer {
 public:
  // Every name in the namespace first, so a new name never takes one that a
  // later node holds.
  void collect(const std::vector<Node>& nodes) {
    for (auto& n : nodes) {
      taken_.insert(n.name);
      for (const Graph* s : subgraphs(n)) collect(s->nodes);
    }
  }

  size_t settle(std::vector<Node>& nodes) {
    size_t renamed = 0;
    for (auto& n : nodes) {
      if (!n.name.empty() && !kept_.insert(n.name).second) {
        int& k = next_[n.name];
        std::string name;
        do name = n.name + "_" + std::to_string(++k);
        while (taken_.count(name));
        taken_.insert(name);
        kept_.insert(name);
        n.name = std::move(name);
        ++renamed;
      }
      for (Graph* s : subgraphs(n)) renamed += settle(s->nodes);
    }
    return renamed;
  }

 private:
  std::unordered_set<std::string> taken_;  // every name, original or given
  std::unordered_set<std::string> kept_;   // the names of the nodes walked so far
  std::unordered_map<std::string, int> next_;
};

// Whether every non-empty name of `nodes` (nested graphs included) is unique:
// the common case, checked without copying a name.
bool unique(const std::vector<Node>& nodes, std::unordered_set<std::string_view>& seen) {
  for (auto& n : nodes) {
    if (!n.name.empty() && !seen.insert(n.name).second) return false;
    for (const Graph* s : subgraphs(n))
      if (!unique(s->nodes, seen)) return false;
  }
  return true;
}

size_t settle(std::vector<Node>& nodes) {
  std::unordered_set<std::string_view> seen;
  seen.reserve(nodes.size());
  if (unique(nodes, seen)) return 0;
  Namer namer;
  namer.collect(nodes);
  return namer.settle(nodes);
}

}  // namespace

size_t name_nodes(Graph& g) {
  size_t renamed = settle(g.nodes);
  for (Function& f : g.functions) renamed += settle(f.nodes);
  return renamed;
}

}  // namespace pt2onnx
