// Common-subexpression elimination: identical small constants share one
// initializer, then identical nodes (same op, inputs and attributes) are
// computed once.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "opt/passes.h"

namespace pt2onnx {

namespace {

// Attribute values equal bit for bit (floats included: -0.0 is not 0.0, a
// NaN equals the same NaN).
bool same_attr(const Attr& a, const Attr& b) {
  if (a.name != b.name || a.kind != b.kind || a.ref != b.ref) return false;
  auto same_bytes = [](const void* x, const void* y, size_t n) {
    return n == 0 || std::memcmp(x, y, n) == 0;
  };
  switch (a.kind) {
    case Attr::Kind::Float:
      return same_bytes(&a.f, &b.f, sizeof a.f);
    case Attr::Kind::Int:
      return a.i == b.i;
    case Attr::Kind::String:
      return a.s == b.s;
    case Attr::Kind::Floats:
      return a.floats.size() == b.floats.size() &&
             same_bytes(a.floats.data(), b.floats.data(), a.floats.size() * sizeof(float));
    case Attr::Kind::Ints:
      return a.ints == b.ints;
    case Attr::Kind::Strings:
      return a.strings == b.strings;
    case Attr::Kind::Graph:  // not reached: nodes with graphs are never merged
      return a.g == b.g;
    case Attr::Kind::Tensor:
      return a.t->dtype == b.t->dtype && a.t->dims == b.t->dims && a.t->nbytes() == b.t->nbytes() &&
             same_bytes(a.t->bytes(), b.t->bytes(), a.t->nbytes());
  }
  return false;
}

// Same op on the same inputs with the same attributes (in the same order).
bool same_computation(const Node& a, const Node& b) {
  if (a.op_type != b.op_type || a.domain != b.domain || a.inputs != b.inputs ||
      a.outputs.size() != b.outputs.size() || a.attrs.size() != b.attrs.size())
    return false;
  for (size_t i = 0; i < a.attrs.size(); ++i)
    if (!same_attr(a.attrs[i], b.attrs[i])) return false;
  return true;
}

// A hash of what same_computation compares (attribute values by name and
// kind only: equal hashes are compared in full anyway).
size_t node_hash(const Node& n) {
  std::hash<std::string_view> h;
  size_t x = h(n.op_type) * 31 + n.outputs.size();
  auto mix = [&x](size_t v) { x ^= v + 0x9e3779b97f4a7c15ULL + (x << 6) + (x >> 2); };
  for (auto& in : n.inputs) mix(h(in));
  for (auto& a : n.attrs) {
    mix(h(a.name));
    mix(static_cast<size_t>(a.kind));
    if (a.kind == Attr::Kind::Int) mix(static_cast<size_t>(a.i));
    if (a.kind == Attr::Kind::Ints)
      for (auto v : a.ints) mix(static_cast<size_t>(v));
  }
  return x;
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
  // Nodes are bucketed by a hash of what makes them equal and compared
  // directly, and kept nodes are compacted in place: no key string or moved
  // copy per node (this pass runs up to four times on every graph).
  // Kept nodes by hash, in an open-addressing table of {hash, last kept
  // position}, each position chaining to the one before it with that hash (a
  // std::unordered_map of vectors allocated twice per node: 1.8% of a
  // 200k-node export's time). No two nodes of a chain compute the same.
  constexpr size_t kNone = SIZE_MAX;
  size_t slots = 16;
  while (slots < 2 * g.nodes.size()) slots *= 2;
  std::vector<std::pair<size_t, size_t>> table(slots, {0, kNone});
  std::vector<size_t> before(g.nodes.size(), kNone);  // by kept position
  auto slot = [&](size_t h) -> std::pair<size_t, size_t>& {
    for (size_t i = h & (slots - 1);; i = (i + 1) & (slots - 1))
      if (table[i].second == kNone || table[i].first == h) return table[i];
  };
  size_t w = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& n = g.nodes[k];
    // Inputs, and what the node's nested graphs read, follow the renames.
    rename_uses_in_node(n, rename);
    // Never merged: graphs are not compared; a custom domain's op may have
    // side effects or be random, which we cannot know.
    bool mergeable = !n.has_subgraphs() && n.domain.empty();
    if (mergeable) {
      const size_t h = node_hash(n);
      auto& head = slot(h);
      const Node* first = nullptr;
      for (size_t j = head.second; j != kNone; j = before[j])
        if (same_computation(g.nodes[j], n)) {
          first = &g.nodes[j];
          break;
        }
      const bool pinned =
          first && std::any_of(n.outputs.begin(), n.outputs.end(),
                               [&](const std::string& o) { return outputs.count(o); });
      if (first && !pinned) {
        for (size_t o = 0; o < n.outputs.size(); ++o) rename[n.outputs[o]] = first->outputs[o];
        ++changed;
        continue;
      }
      if (!first) {
        before[w] = head.second;
        head = {h, w};
      }
    }
    if (w != k) g.nodes[w] = std::move(n);
    ++w;
  }
  g.nodes.resize(w);
  return changed;
}

}  // namespace pt2onnx
