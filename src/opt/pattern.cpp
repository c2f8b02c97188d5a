#include "opt/pattern.h"

#include <algorithm>
#include <cstring>

namespace pt2onnx {

GraphIndex::GraphIndex(const Graph& g) : g_(g) {
  const size_t expected = g.initializers.size() + 2 * g.nodes.size() + g.outputs.size();
  names_.reserve(expected);
  values_.reserve(expected);
  for (size_t k = 0; k < g.initializers.size(); ++k) at(g.initializers[k].name).initializer = k;
  // Each (value, reading node) pair once, in node order: the consumer lists
  // are filled from it once every list's length is known.
  struct Read {
    uint32_t value;
    size_t node;
  };
  std::vector<Read> reads;
  reads.reserve(3 * g.nodes.size());
  // The last node counted in each value's consumers (a node reading a value twice is one).
  std::vector<size_t> last_reader;
  last_reader.reserve(expected);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    for (auto& in : n.inputs) {
      if (in.empty()) continue;
      const uint32_t id = id_of(in);
      Value& v = values_[id];
      ++v.readers;
      if (id >= last_reader.size()) last_reader.resize(values_.size(), kNone);
      if (last_reader[id] != k) {
        last_reader[id] = k;
        ++v.n_consumers;
        reads.push_back(Read{id, k});
      }
    }
    for (const Graph* s : subgraphs(n))
      for (auto& v : outer_reads(*s)) ++at(v).readers;
    for (auto& o : n.outputs)
      if (!o.empty()) at(o).producer = k;
  }
  for (auto& o : g.outputs) {
    Value& v = at(o.name);
    ++v.readers;
    v.output = true;
  }
  uint32_t next = 0;
  for (Value& v : values_) {
    v.first_consumer = next;
    next += v.n_consumers;
    v.n_consumers = 0;
  }
  consumers_.resize(next);
  for (const Read& r : reads) {
    Value& v = values_[r.value];
    consumers_[v.first_consumer + v.n_consumers++] = r.node;
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

std::span<const size_t> GraphIndex::consumers(const std::string& v) const {
  const Value* x = find(v);
  if (!x) return {};
  return {consumers_.data() + x->first_consumer, x->n_consumers};
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
  n.origin = like.origin;
  return n;
}

}  // namespace pt2onnx
