// GraphBuilder: the one way converters add to the ONNX graph. It gives every
// value a unique name and a type (dtype + shape, symbolic dims included),
// deduplicates small constants, and stamps each node with where it came from.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"
#include "ir/name_set.h"

namespace pt2onnx {

class GraphBuilder {
 public:
  explicit GraphBuilder(int opset) : opset_(opset) {}
  int opset() const { return opset_; }

  // Names that must stay free for values that will be bound later (FX names).
  void reserve_name(const std::string& n) { reserved_.insert(n); }
  std::string fresh_name(const std::string& base);
  bool name_taken(const std::string& n) const { return used_.contains(n) || reserved_.contains(n); }
  void claim_name(const std::string& n) { used_.insert(n); }
  bool is_used(const std::string& n) const { return used_.contains(n); }

  // Origin stamped on nodes created from now on (module_stack: the FX
  // node's nn_module_stack).
  void set_origin(std::string fx_node, std::string fx_target, std::string module_path,
                  const std::string& module_stack = {});

  // Adds a node. Output types are taken from `out_types` when given, else
  // inferred from the op and its inputs (see infer.cpp).
  std::vector<std::string> add_node(const std::string& op, std::vector<std::string> inputs,
                                    size_t n_outputs, std::vector<Attr> attrs = {},
                                    std::vector<ValueType> out_types = {},
                                    const std::string& domain = "");
  // Single-output convenience.
  std::string op(const std::string& op, std::vector<std::string> inputs,
                 std::vector<Attr> attrs = {}, std::optional<ValueType> out_type = std::nullopt);

  // A named initializer (weights: the name is the parameter's FQN).
  std::string initializer(const std::string& name, TensorData data);
  // An anonymous constant; equal small constants share one initializer.
  std::string constant(TensorData data);
  std::string const_i64(const std::vector<int64_t>& v);  // 1-D int64
  std::string scalar(DType t, double v);                 // 0-D of type t
  std::string scalar_i64(int64_t v) { return scalar(DType::Int64, static_cast<double>(v)); }
  // Value of an initializer, or nullptr when `v` is not a constant.
  const TensorData* constant_value(const std::string& v) const;
  // Small int64 constant as a vector (shape computations); nullopt if not one.
  std::optional<std::vector<int64_t>> const_ints(const std::string& v) const;

  void add_input(const std::string& name, ValueType t);
  void add_output(const std::string& name, ValueType t);

  // Nested graphs (If branches, Loop / Scan bodies). Between begin_subgraph()
  // and end_subgraph() nodes, inputs and outputs go to the new graph; values
  // of the enclosing scopes stay readable (type() looks through them) and
  // initializers (weights, constants) always go to the outermost graph,
  // which every scope can read. Names stay unique across all scopes.
  void begin_subgraph(const std::string& name);
  Graph end_subgraph();
  size_t scope_depth() const { return outer_.size(); }

  const ValueType& type(const std::string& v) const;
  // The type of `v`, or null when it has none (one lookup where has_type()
  // and type() make two).
  const ValueType* find_type(const std::string& v) const;
  bool has_type(const std::string& v) const { return find_type(v) != nullptr; }
  void set_type(const std::string& v, ValueType t) { graph_.types[v] = std::move(t); }
  size_t rank(const std::string& v) const;
  // The shape of `v`; an Error when its rank is unknown (an op inference
  // could not type), never a read of an empty optional.
  const Shape& shape(const std::string& v) const;

  // Renames value `from` to `to` in every node of the current scope and the
  // graphs nested in them (not for inputs / initializers).
  void rename_everywhere(const std::string& from, const std::string& to);
  bool is_initializer(const std::string& v) const { return initializer_index_.count(v) > 0; }
  // Renames the value `from` (an output of node index >= first_node) to `to`.
  bool rename_output(const std::string& from, const std::string& to, size_t first_node);

  // Records a non-default domain the model's nodes use (its opset_import).
  void use_domain(const std::string& domain, int64_t version) {
    root().domain_versions.emplace(domain, version);
  }

  // The graph of the current scope.
  Graph& graph() { return graph_; }
  const Graph& graph() const { return graph_; }
  Graph take() { return std::move(graph_); }

 private:
  std::string node_name(const std::string& op);
  void add_initializer(const std::string& unique_name, TensorData data);
  Graph& root() { return outer_.empty() ? graph_ : outer_.front(); }
  const Graph& root() const { return outer_.empty() ? graph_ : outer_.front(); }

  int opset_;
  Graph graph_;
  std::vector<Graph> outer_;  // enclosing scopes, outermost first
  // The next suffix to try after each base name (fresh_name, node_name).
  struct Counters {
    NameSet bases;
    std::vector<int> next;
    int& operator[](std::string_view base) {
      uint32_t id = bases.insert(base).first;
      if (id == next.size()) next.push_back(0);
      return next[id];
    }
  };
  NameSet used_, reserved_;
  std::unordered_map<std::string, size_t> initializer_index_;
  std::map<std::string, std::string> const_cache_;  // content key -> name
  Counters name_counter_;
  NameSet node_names_;  // node_name()'s namespace
  Counters node_counter_;
  // Stamped on the nodes made now; its FX node names them and their values.
  std::shared_ptr<const Origin> origin_;
  int node_seq_ = 0;
};

// Output types of an ONNX node from its inputs' types; unknown parts stay
// unknown. Implemented per op in infer.cpp.
std::vector<ValueType> infer_types(const GraphBuilder& b, const Node& n);

// Broadcast of two shapes, numpy rules, symbolic dims compared by expression.
std::optional<Shape> broadcast_shapes(const std::optional<Shape>& a, const std::optional<Shape>& b);

}  // namespace pt2onnx
