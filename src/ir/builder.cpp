#include "ir/builder.h"

#include <cstring>

#include "pt2onnx/error.h"

namespace pt2onnx {

std::string GraphBuilder::fresh_name(const std::string& base) {
  if (!reserved_.contains(base) && used_.insert(base).second) return base;
  int& k = name_counter_[base];
  std::string n;
  do {
    n = base + "__" + std::to_string(k++);
  } while (reserved_.contains(n) || !used_.insert(n).second);
  return n;
}

void GraphBuilder::set_origin(std::string fx_node, std::string fx_target, std::string module_path,
                              const std::string& module_stack) {
  // One shared string per distinct stack (consecutive FX nodes repeat it).
  std::shared_ptr<const std::string> stack = origin_ ? origin_->module_stack : nullptr;
  if (module_stack.empty())
    stack.reset();
  else if (!stack || *stack != module_stack)
    stack = std::make_shared<const std::string>(module_stack);
  if (fx_node.empty() && fx_target.empty() && module_path.empty() && !stack)
    origin_.reset();
  else
    origin_ = std::make_shared<const Origin>(
        Origin{std::move(fx_node), std::move(fx_target), std::move(module_path), std::move(stack)});
}

std::string GraphBuilder::node_name(const std::string& op) {
  // Node names are unique among nodes only (ONNX keeps them apart from value
  // names), so they have a set of their own: smaller sets, and no prefixed
  // copy of each name (fresh_name was ~28% of convert on a 200k-node graph).
  static const std::string kNoFxNode;
  const std::string& fx = origin_ ? origin_->fx_node : kNoFxNode;
  std::string base = fx.empty() ? op : fx + "/" + op;
  if (node_names_.insert(base).second) return base;
  int& k = node_counter_[base];
  std::string n;
  do {
    n = base + "__" + std::to_string(k++);
  } while (!node_names_.insert(n).second);
  return n;
}

std::vector<std::string> GraphBuilder::add_node(const std::string& op,
                                                std::vector<std::string> inputs, size_t n_outputs,
                                                std::vector<Attr> attrs,
                                                std::vector<ValueType> out_types,
                                                const std::string& domain) {
  for (auto& in : inputs)
    if (!in.empty() && !has_type(in))
      throw Error("internal: node " + op + " uses value '" + in + "' that has not been defined");
  Node n;
  n.op_type = op;
  n.domain = domain;
  n.name = node_name(op);
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.origin = origin_;
  std::string base = origin_ && !origin_->fx_node.empty() ? origin_->fx_node : "v";
  for (size_t i = 0; i < n_outputs; ++i) n.outputs.push_back(fresh_name(base));
  if (out_types.empty()) out_types = infer_types(*this, n);
  for (size_t i = 0; i < n_outputs; ++i)
    graph_.types[n.outputs[i]] = i < out_types.size() ? out_types[i] : ValueType{};
  graph_.nodes.push_back(std::move(n));
  ++node_seq_;
  return graph_.nodes.back().outputs;
}

std::string GraphBuilder::op(const std::string& op, std::vector<std::string> inputs,
                             std::vector<Attr> attrs, std::optional<ValueType> out_type) {
  std::vector<ValueType> t;
  if (out_type) t.push_back(*out_type);
  return add_node(op, std::move(inputs), 1, std::move(attrs), std::move(t))[0];
}

std::string GraphBuilder::initializer(const std::string& name, TensorData data) {
  std::string n = fresh_name(name);
  add_initializer(n, std::move(data));
  return n;
}

void GraphBuilder::add_initializer(const std::string& n, TensorData data) {
  Graph& r = root();
  r.types[n] = static_type(data.dtype, data.dims);
  initializer_index_[n] = r.initializers.size();
  r.initializers.push_back(Initializer{n, std::move(data)});
}

std::string GraphBuilder::constant(TensorData data) {
  constexpr size_t kDedupBytes = 4096;  // equal small constants share one initializer
  std::string key;
  if (data.nbytes() <= kDedupBytes && data.is_contiguous()) {
    key.append(std::to_string(static_cast<int>(data.dtype))).append("|");
    for (auto d : data.dims) key.append(std::to_string(d)).append(",");
    key.append("|");
    key.append(reinterpret_cast<const char*>(data.bytes()), data.nbytes());
    auto it = const_cache_.find(key);
    if (it != const_cache_.end()) return it->second;
  }
  std::string n = fresh_name("const");
  add_initializer(n, std::move(data));
  if (!key.empty()) const_cache_.emplace(std::move(key), n);
  return n;
}

std::string GraphBuilder::const_i64(const std::vector<int64_t>& v) {
  return constant(TensorData::from_vector(DType::Int64, {static_cast<int64_t>(v.size())}, v));
}

std::string GraphBuilder::scalar(DType t, double v) {
  if (auto d = TensorData::scalar(t, v)) return constant(std::move(*d));
  if (t == DType::Float16 || t == DType::BFloat16) {
    // Made in float32; a Cast rounds it exactly as the runtime would.
    return op("Cast", {scalar(DType::Float, v)}, {Attr::Int("to", static_cast<int64_t>(t))},
              ValueType{t, Shape{}});
  }
  throw Error("internal: cannot make a scalar constant of type " + std::string(dtype_name(t)));
}

const TensorData* GraphBuilder::constant_value(const std::string& v) const {
  auto it = initializer_index_.find(v);
  return it == initializer_index_.end() ? nullptr : &root().initializers[it->second].data;
}

std::optional<std::vector<int64_t>> GraphBuilder::const_ints(const std::string& v) const {
  const TensorData* t = constant_value(v);
  if (!t || t->numel() > 64 || !t->is_contiguous()) return std::nullopt;
  std::vector<int64_t> r(static_cast<size_t>(t->numel()));
  if (t->dtype == DType::Int64) {
    // An empty constant: r.data() may be null, which memcpy must not get even for 0 bytes
    // (UBSan, found by fuzz_pipeline).
    if (!r.empty()) std::memcpy(r.data(), t->bytes(), r.size() * 8);
  } else if (t->dtype == DType::Int32) {
    for (size_t i = 0; i < r.size(); ++i) r[i] = t->as<int32_t>()[i];
  } else {
    return std::nullopt;
  }
  return r;
}

void GraphBuilder::add_input(const std::string& name, ValueType t) {
  claim_name(name);
  graph_.types[name] = t;
  graph_.inputs.push_back(GraphIO{name, std::move(t)});
}

void GraphBuilder::add_output(const std::string& name, ValueType t) {
  graph_.outputs.push_back(GraphIO{name, std::move(t)});
}

const ValueType* GraphBuilder::find_type(const std::string& v) const {
  if (auto* t = graph_.type_of(v)) return t;
  for (size_t i = outer_.size(); i-- > 0;)
    if (auto* t = outer_[i].type_of(v)) return t;
  return nullptr;
}

const ValueType& GraphBuilder::type(const std::string& v) const {
  const ValueType* t = find_type(v);
  if (!t) throw Error("internal: value '" + v + "' has no type");
  return *t;
}

void GraphBuilder::begin_subgraph(const std::string& name) {
  outer_.push_back(std::move(graph_));
  graph_ = Graph{};
  graph_.name = fresh_name(name);
}

Graph GraphBuilder::end_subgraph() {
  if (outer_.empty()) throw Error("internal: end_subgraph() without begin_subgraph()");
  Graph sub = std::move(graph_);
  graph_ = std::move(outer_.back());
  outer_.pop_back();
  return sub;
}

size_t GraphBuilder::rank(const std::string& v) const { return shape(v).size(); }

const Shape& GraphBuilder::shape(const std::string& v) const {
  const ValueType& t = type(v);
  if (!t.shape) throw Error("internal: rank of value '" + v + "' is unknown");
  return *t.shape;
}

void GraphBuilder::rename_everywhere(const std::string& from, const std::string& to) {
  replace_uses_deep(graph_, from, to);
  for (auto& n : graph_.nodes)
    for (auto& o : n.outputs)
      if (o == from) o = to;
  ValueType t = std::move(graph_.types[from]);
  graph_.types.erase(from);
  graph_.types[to] = std::move(t);
  used_.insert(to);
}

bool GraphBuilder::rename_output(const std::string& from, const std::string& to,
                                 size_t first_node) {
  if (initializer_index_.count(from)) return false;
  for (size_t i = graph_.nodes.size(); i-- > first_node;) {
    for (auto& o : graph_.nodes[i].outputs) {
      if (o != from) continue;
      // Uses of `from` can only be in later nodes of the same conversion.
      for (size_t j = i + 1; j < graph_.nodes.size(); ++j)
        replace_uses_in_node(graph_.nodes[j], from, to);
      o = to;
      ValueType t = std::move(graph_.types[from]);
      graph_.types.erase(from);
      graph_.types[to] = std::move(t);
      used_.insert(to);
      return true;
    }
  }
  return false;
}

}  // namespace pt2onnx
