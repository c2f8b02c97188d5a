// Common-subexpression elimination: identical small constants share one
// initializer, then identical nodes (same op, inputs and attributes) are
// computed once.
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "opt/passes.h"

namespace pt2onnx {

namespace {

void append_attr(std::string& key, const Attr& a) {
  key += a.name;
  key += '=';
  switch (a.kind) {
    case Attr::Kind::Float:
      key.append(reinterpret_cast<const char*>(&a.f), sizeof a.f);
      break;
    case Attr::Kind::Int:
      key += std::to_string(a.i);
      break;
    case Attr::Kind::String:
      key += a.s;
      break;
    case Attr::Kind::Floats:
      key.append(reinterpret_cast<const char*>(a.floats.data()), a.floats.size() * sizeof(float));
      break;
    case Attr::Kind::Ints:
      for (auto v : a.ints) key.append(std::to_string(v)).append(",");
      break;
    case Attr::Kind::Strings:
      for (auto& s : a.strings) key.append(s).append("\x1f");
      break;
    case Attr::Kind::Graph:  // not reached: nodes with graphs are never merged
      key.append(std::to_string(reinterpret_cast<uintptr_t>(a.g.get())));
      break;
    case Attr::Kind::Tensor:
      key.append(std::to_string(static_cast<int>(a.t->dtype))).append(":");
      for (auto d : a.t->dims) key.append(std::to_string(d)).append(",");
      key.append(reinterpret_cast<const char*>(a.t->bytes()), a.t->nbytes());
      break;
  }
  key += '\x1e';
}

}  // namespace

size_t eliminate_common_subexpressions(Graph& g) {
  std::unordered_set<std::string> outputs;
  for (auto& o : g.outputs) outputs.insert(o.name);
  size_t changed = 0;

  // 1. Equal small constants (owned bytes, not weight views).
  std::unordered_map<std::string, std::string> rename;
  {
    std::unordered_map<std::string, std::string> seen;
    std::vector<Initializer> kept;
    for (auto& init : g.initializers) {
      const TensorData& t = init.data;
      if (t.owned && t.is_contiguous() && t.nbytes() <= 4096 && !outputs.count(init.name)) {
        std::string key = std::to_string(static_cast<int>(t.dtype));
        key.append("|");
        for (auto d : t.dims) key.append(std::to_string(d)).append(",");
        key.append(reinterpret_cast<const char*>(t.bytes()), t.nbytes());
        auto [it, inserted] = seen.emplace(std::move(key), init.name);
        if (!inserted) {
          rename[init.name] = it->second;
          ++changed;
          continue;
        }
      }
      kept.push_back(std::move(init));
    }
    g.initializers = std::move(kept);
  }

  // 2. Identical nodes, in order (inputs are already renamed when reached).
  std::unordered_map<std::string, size_t> seen;
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (auto& n : g.nodes) {
    // Inputs, and what the node's nested graphs read, follow the renames.
    rename_uses_in_node(n, rename);
    // Never merged: graphs are not compared; a custom domain's op may have
    // side effects or be random, which we cannot know.
    if (n.has_subgraphs() || !n.domain.empty()) {
      kept.push_back(std::move(n));
      continue;
    }
    bool pinned = false;
    for (auto& o : n.outputs) pinned |= outputs.count(o) > 0;
    std::string key;
    key.append(n.domain).append("|").append(n.op_type).append("|");
    for (auto& in : n.inputs) key.append(in).append("\x1f");
    key.append("|").append(std::to_string(n.outputs.size())).append("|");
    for (auto& a : n.attrs) append_attr(key, a);
    auto it = seen.find(key);
    if (it != seen.end() && !pinned) {
      const Node& first = kept[it->second];
      for (size_t k = 0; k < n.outputs.size(); ++k) rename[n.outputs[k]] = first.outputs[k];
      ++changed;
      continue;
    }
    if (it == seen.end()) seen.emplace(std::move(key), kept.size());
    kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  return changed;
}

}  // namespace pt2onnx
