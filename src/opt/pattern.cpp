#include "opt/pattern.h"

#include <cstring>

namespace pt2onnx {

GraphIndex::GraphIndex(const Graph& g) : g_(g) {
  values_.reserve(g.initializers.size() + 2 * g.nodes.size() + g.outputs.size());
  for (size_t k = 0; k < g.initializers.size(); ++k)
    values_[g.initializers[k].name].initializer = k;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    for (auto& in : n.inputs) {
      if (in.empty()) continue;
      Value& v = values_[in];
      ++v.readers;
      if (v.consumers.empty() || v.consumers.back() != k) v.consumers.push_back(k);
    }
    for (const Graph* s : subgraphs(n))
      for (auto& v : outer_reads(*s)) ++values_[v].readers;
    for (auto& o : n.outputs)
      if (!o.empty()) values_[o].producer = k;
  }
  for (auto& o : g.outputs) {
    Value& v = values_[o.name];
    ++v.readers;
    v.output = true;
  }
}

std::optional<size_t> GraphIndex::producer_index(const std::string& v) const {
  const Value* x = find(v);
  if (!x || x->producer == kNone) return std::nullopt;
  return x->producer;
}

const Node* GraphIndex::producer(const std::string& v) const {
  auto k = producer_index(v);
  return k ? &g_.nodes[*k] : nullptr;
}

const Node* GraphIndex::producer(const std::string& v, std::string_view op) const {
  const Node* n = producer(v);
  return is_op(n, op) ? n : nullptr;
}

size_t GraphIndex::readers(const std::string& v) const {
  const Value* x = find(v);
  return x ? x->readers : 0;
}

bool GraphIndex::is_graph_output(const std::string& v) const {
  const Value* x = find(v);
  return x && x->output;
}

const std::vector<size_t>& GraphIndex::consumers(const std::string& v) const {
  static const std::vector<size_t> kNoConsumers;
  const Value* x = find(v);
  return x ? x->consumers : kNoConsumers;
}

const TensorData* GraphIndex::constant(const std::string& v) const {
  const Value* x = find(v);
  return x && x->initializer != kNone ? &g_.initializers[x->initializer].data : nullptr;
}

std::optional<double> GraphIndex::scalar(const std::string& v) const {
  const TensorData* t = constant(v);
  if (!t || t->numel() != 1) return std::nullopt;
  const uint8_t* p = t->bytes();
  switch (t->dtype) {
    case DType::Float: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::Double: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DType::Float16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return half_to_float(h);
    }
    case DType::BFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bfloat16_to_float(h);
    }
    case DType::Int64: {
      int64_t i;
      std::memcpy(&i, p, 8);
      return static_cast<double>(i);
    }
    case DType::Int32: {
      int32_t i;
      std::memcpy(&i, p, 4);
      return i;
    }
    default:
      return std::nullopt;
  }
}

std::optional<std::vector<int64_t>> GraphIndex::ints(const std::string& v) const {
  const TensorData* t = constant(v);
  if (!t || t->dims.size() > 1 || !t->is_contiguous() || t->numel() > 64) return std::nullopt;
  std::vector<int64_t> out(static_cast<size_t>(t->numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t->dtype == DType::Int64) {
      std::memcpy(&out[i], t->bytes() + 8 * i, 8);
    } else if (t->dtype == DType::Int32) {
      int32_t x;
      std::memcpy(&x, t->bytes() + 4 * i, 4);
      out[i] = x;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

std::optional<size_t> GraphIndex::rank(const std::string& v) const {
  const ValueType* t = type(v);
  if (!t || !t->shape) return std::nullopt;
  return t->shape->size();
}

void Rewriter::replace(size_t index, std::vector<Node> nodes) { edits_[index] = std::move(nodes); }

void Rewriter::remove(size_t index) { edits_[index] = std::nullopt; }

size_t Rewriter::apply() {
  if (edits_.empty()) return 0;
  std::vector<Node> out;
  out.reserve(g_.nodes.size() + edits_.size());
  for (size_t k = 0; k < g_.nodes.size(); ++k) {
    auto it = edits_.find(k);
    if (it == edits_.end()) {
      out.push_back(std::move(g_.nodes[k]));
    } else if (it->second) {
      for (auto& n : *it->second) out.push_back(std::move(n));
    }
  }
  g_.nodes = std::move(out);
  size_t n = edits_.size();
  edits_.clear();
  return n;
}

bool forward_to_input(Graph& g, size_t k, const std::string& in, bool graph_output) {
  Node& n = g.nodes[k];
  if (graph_output) {
    Node id = make_node("Identity", {in}, {n.outputs[0]}, {}, n);
    id.name = n.name;
    n = std::move(id);
    return false;
  }
  replace_uses_deep(g, n.outputs[0], in);
  return true;
}

Node make_node(std::string op_type, std::vector<std::string> inputs,
               std::vector<std::string> outputs, std::vector<Attr> attrs, const Node& like,
               std::string domain) {
  Node n;
  n.op_type = std::move(op_type);
  n.domain = std::move(domain);
  n.name = like.name + "/" + n.op_type;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  n.module_path = like.module_path;
  n.fx_node = like.fx_node;
  n.fx_target = like.fx_target;
  n.module_stack = like.module_stack;
  return n;
}

}  // namespace pt2onnx
