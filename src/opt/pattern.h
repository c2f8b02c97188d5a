// What the fusion passes ask of a graph while matching (who produces a value,
// how many read it, constant values) and how they rewrite it.
//
// A fusion replaces the last node of the pattern it matched by the fused
// node(s), in place: every input the fused node reads is defined before that
// position, so the node order stays topological. The pattern's other nodes
// are left for remove_unused, which runs after the fusions; matchers require
// the values inside a pattern to be read only inside it, so nothing is
// computed twice.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "ir/name_set.h"

namespace pt2onnx {

class GraphIndex {
 public:
  explicit GraphIndex(const Graph& g);

  // The node producing `v` (nullptr for inputs, initializers, outer values).
  const Node* producer(const std::string& v) const;
  // The same, only when it is the default-domain op `op`.
  const Node* producer(const std::string& v, std::string_view op) const;
  std::optional<size_t> producer_index(const std::string& v) const;
  // Reads of `v`: node inputs (each occurrence), reads of nested graphs, and
  // graph outputs.
  size_t readers(const std::string& v) const;
  bool is_graph_output(const std::string& v) const;
  // The nodes reading `v` as an input, in graph order (each node once).
  std::span<const size_t> consumers(const std::string& v) const;

  // The initializer named `v`, or nullptr.
  const TensorData* constant(const std::string& v) const;
  // The value of a one-element numeric constant (any rank), as a double.
  std::optional<double> scalar(const std::string& v) const;
  // The values of a small int64 / int32 constant.
  std::optional<std::vector<int64_t>> ints(const std::string& v) const;
  const ValueType* type(const std::string& v) const { return g_.type_of(v); }
  // Rank of `v` when known.
  std::optional<size_t> rank(const std::string& v) const;

  const Graph& graph() const { return g_; }

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);
  // Everything known of one value name, by its id in names_. Every pass
  // builds an index (bench/node_scaling.md), so the build makes no
  // allocation per value: the consumer lists of all values share one array.
  struct Value {
    size_t producer = kNone;
    size_t initializer = kNone;
    size_t readers = 0;
    uint32_t first_consumer = 0, n_consumers = 0;  // in consumers_
    bool output = false;
  };
  const Value* find(const std::string& v) const {
    uint32_t id = names_.find(v);
    return id == NameSet::kNone ? nullptr : &values_[id];
  }
  // The id of `v` (its facts: values_[id]), added when new.
  uint32_t id_of(const std::string& v) {
    uint32_t id = names_.insert(v).first;
    if (id == values_.size()) values_.emplace_back();
    return id;
  }
  Value& at(const std::string& v) { return values_[id_of(v)]; }
  const Graph& g_;
  NameSet names_;
  std::vector<Value> values_;
  std::vector<size_t> consumers_;
};

// True when `n` is the default-domain op `op` (any opset).
inline bool is_op(const Node* n, std::string_view op) {
  return n && n->op_type == op && n->domain.empty();
}

// A Gemm that is A times B (+ C): no transA, alpha and beta 1. Returns its
// transB (B given as [N, K]); nullopt for any other Gemm.
inline std::optional<bool> plain_gemm(const Node& n) {
  const Attr* ta = n.attr("transA");
  const Attr* al = n.attr("alpha");
  const Attr* be = n.attr("beta");
  if ((ta && ta->i) || (al && al->f != 1.0f) || (be && be->f != 1.0f)) return std::nullopt;
  const Attr* tb = n.attr("transB");
  return tb && tb->i;
}

// Whether `axis` (possibly negative) names the last axis of a rank-r value.
inline bool is_last_axis(int64_t axis, size_t rank) {
  return axis == -1 || (rank > 0 && axis == static_cast<int64_t>(rank) - 1);
}

// Collects a fusion's edits and applies them in one sweep: nodes replaced in
// place, nodes inserted before a position, nodes removed.
class Rewriter {
 public:
  explicit Rewriter(Graph& g) : g_(g) {}
  // Puts `nodes` at the position of node `index` (which they replace).
  void replace(size_t index, std::vector<Node> nodes);
  void remove(size_t index);
  bool touched(size_t index) const { return edits_.count(index) > 0; }
  // Applies every edit; returns the number of positions edited.
  size_t apply();

 private:
  Graph& g_;
  std::unordered_map<size_t, std::optional<std::vector<Node>>> edits_;  // nullopt: removed
};

// Node k of g computes `in` unchanged: every reader reads `in` from now on.
// Returns true when node k can be dropped; when its output is a graph output
// (`graph_output`) it becomes Identity(in) instead (remove_identity settles
// it) and false is returned.
bool forward_to_input(Graph& g, size_t k, const std::string& in, bool graph_output);

// A node of the default domain (or `domain`) with its origin copied from
// `like` (module path, FX node and target, module stack).
Node make_node(std::string op_type, std::vector<std::string> inputs,
               std::vector<std::string> outputs, std::vector<Attr> attrs, const Node& like,
               std::string domain = "");

}  // namespace pt2onnx
