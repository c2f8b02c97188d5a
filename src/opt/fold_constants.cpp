// Constant folding of small shape and constant computations: nodes whose
// inputs are all small constants (or Shape of a statically shaped value) are
// evaluated here and become initializers. Weights are never folded (that
// would copy them); only tensors up to kMaxElements are produced.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "opt/passes.h"

namespace pt2onnx {

namespace {

constexpr int64_t kMaxElements = 4096;

// A small constant: integers (and bools) in `i`, floats in `f`.
struct Const {
  DType t = DType::Undefined;
  std::vector<int64_t> dims;
  std::vector<int64_t> i;
  std::vector<double> f;
  bool is_float() const { return is_floating(t); }
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : dims) n *= d;
    return n;
  }
};

std::optional<Const> load(const TensorData& d) {
  if (d.numel() > kMaxElements || !d.is_contiguous()) return std::nullopt;
  Const c;
  c.t = d.dtype;
  c.dims = d.dims;
  size_t n = static_cast<size_t>(d.numel());
  switch (d.dtype) {
    case DType::Int64:
      c.i.assign(d.as<int64_t>(), d.as<int64_t>() + n);
      break;
    case DType::Int32:
      c.i.assign(d.as<int32_t>(), d.as<int32_t>() + n);
      break;
    case DType::Bool:
      c.i.assign(d.as<uint8_t>(), d.as<uint8_t>() + n);
      break;
    case DType::Float:
      c.f.assign(d.as<float>(), d.as<float>() + n);
      break;
    case DType::Double:
      c.f.assign(d.as<double>(), d.as<double>() + n);
      break;
    default:
      return std::nullopt;
  }
  return c;
}

TensorData store(const Const& c) {
  switch (c.t) {
    case DType::Int64:
      return TensorData::from_vector(c.t, c.dims, c.i);
    case DType::Int32: {
      std::vector<int32_t> v(c.i.begin(), c.i.end());
      return TensorData::from_vector(c.t, c.dims, v);
    }
    case DType::Bool: {
      std::vector<uint8_t> v;
      for (auto x : c.i) v.push_back(x != 0);
      return TensorData::from_vector(c.t, c.dims, v);
    }
    case DType::Float: {
      std::vector<float> v(c.f.begin(), c.f.end());
      return TensorData::from_vector(c.t, c.dims, v);
    }
    default:
      return TensorData::from_vector(c.t, c.dims, c.f);
  }
}

int64_t axis_of(int64_t a, size_t r) { return a < 0 ? a + static_cast<int64_t>(r) : a; }

using Inputs = std::vector<const Const*>;
using Eval = std::function<std::optional<Const>(const Node&, const Inputs&)>;

std::optional<Const> eval_concat(const Node& n, const Inputs& in) {
  if (in.empty()) return std::nullopt;
  Const r = *in[0];
  const Attr* axis = n.attr("axis");
  if (r.dims.size() != 1 || !axis || axis_of(axis->i, 1) != 0) return std::nullopt;
  for (size_t k = 1; k < in.size(); ++k) {
    if (in[k]->t != r.t || in[k]->dims.size() != 1) return std::nullopt;
    r.i.insert(r.i.end(), in[k]->i.begin(), in[k]->i.end());
    r.f.insert(r.f.end(), in[k]->f.begin(), in[k]->f.end());
    r.dims[0] += in[k]->dims[0];
  }
  return r;
}

// The dims a Reshape of r to `arg` gives; nullopt for a shape that does not
// hold r's elements (an invalid node): its dims would not match the bytes
// stored, and the writer would read past them.
std::optional<std::vector<int64_t>> reshape_dims(const Node& n, const Const& r,
                                                 const std::vector<int64_t>& arg) {
  const Attr* az = n.attr("allowzero");
  std::vector<int64_t> dims = arg;
  int64_t known = 1, neg = -1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 0 && !(az && az->i)) {
      if (d >= r.dims.size()) return std::nullopt;
      dims[d] = r.dims[d];
    }
    if (dims[d] == -1 && neg < 0)
      neg = static_cast<int64_t>(d);
    else if (dims[d] < 0 || __builtin_mul_overflow(known, dims[d], &known))
      return std::nullopt;
  }
  if (neg >= 0) {
    if (known == 0) return std::nullopt;
    dims[static_cast<size_t>(neg)] = r.numel() / known;
    known *= dims[static_cast<size_t>(neg)];
  }
  if (known != r.numel()) return std::nullopt;
  return dims;
}

std::optional<Const> eval_reshape_like(const Node& n, const Inputs& in) {
  // Unsqueeze / Squeeze / Reshape / Identity only change dims.
  Const r = *in[0];
  const std::string& op = n.op_type;
  if (op == "Identity") return r;
  if (in.size() < 2) return std::nullopt;
  const auto& arg = in[1]->i;
  if (op == "Unsqueeze") {
    size_t rank = r.dims.size() + arg.size();
    std::vector<int64_t> dims;
    std::vector<bool> added(rank, false);
    // Axes out of range or repeated (an invalid node) are left to the checker:
    // folding them would write past `added` or read past r.dims.
    for (auto a : arg) {
      int64_t k = axis_of(a, rank);
      if (k < 0 || k >= static_cast<int64_t>(rank) || added[static_cast<size_t>(k)])
        return std::nullopt;
      added[static_cast<size_t>(k)] = true;
    }
    size_t k = 0;
    for (size_t d = 0; d < rank; ++d) dims.push_back(added[d] ? 1 : r.dims[k++]);
    r.dims = dims;
  } else if (op == "Squeeze") {
    std::vector<int64_t> dims;
    for (size_t d = 0; d < r.dims.size(); ++d) {
      bool sq = false;
      for (auto a : arg) sq |= axis_of(a, r.dims.size()) == static_cast<int64_t>(d);
      if (!sq) dims.push_back(r.dims[d]);
    }
    r.dims = dims;
  } else {  // Reshape
    auto dims = reshape_dims(n, r, arg);
    if (!dims) return std::nullopt;
    r.dims = *dims;
  }
  return r;
}

std::optional<Const> eval_gather(const Node& n, const Inputs& in) {
  const Const& x = *in[0];
  const Const& idx = *in[1];
  const Attr* ax = n.attr("axis");
  if (x.dims.size() != 1 || (ax && axis_of(ax->i, 1) != 0)) return std::nullopt;
  Const r;
  r.t = x.t;
  r.dims = idx.dims;
  for (auto k : idx.i) {
    if (k < 0) k += x.dims[0];
    if (k < 0 || k >= x.dims[0]) return std::nullopt;
    if (x.is_float())
      r.f.push_back(x.f[static_cast<size_t>(k)]);
    else
      r.i.push_back(x.i[static_cast<size_t>(k)]);
  }
  return r;
}

std::optional<Const> eval_cast(const Node& n, const Inputs& in) {
  Const r = *in[0];
  const Attr* to_attr = n.attr("to");
  if (!to_attr) return std::nullopt;
  DType to = static_cast<DType>(to_attr->i);
  if (to == r.t) return r;
  if (to != DType::Int64 && to != DType::Int32 && to != DType::Bool && to != DType::Float &&
      to != DType::Double)
    return std::nullopt;
  bool from_f = r.is_float(), to_f = is_floating(to);
  if (from_f && !to_f) {
    for (auto v : r.f) r.i.push_back(to == DType::Bool ? v != 0 : static_cast<int64_t>(v));
    r.f.clear();
  } else if (!from_f && to_f) {
    for (auto v : r.i) r.f.push_back(static_cast<double>(v));
    r.i.clear();
  } else if (to == DType::Bool) {
    for (auto& v : r.i) v = v != 0;
  } else if (to == DType::Int32) {
    for (auto& v : r.i) v = static_cast<int32_t>(v);
  } else if (to == DType::Float) {
    for (auto& v : r.f) v = static_cast<float>(v);
  }
  r.t = to;
  return r;
}

// Elementwise integer arithmetic with scalar broadcasting.
std::optional<Const> eval_arith(const Node& n, const Inputs& in) {
  const Const& a = *in[0];
  const Const& b = *in[1];
  if (a.t != b.t || a.is_float() || a.t == DType::Bool) return std::nullopt;
  bool as = a.numel() == 1, bs = b.numel() == 1;
  if (!(a.dims == b.dims || as || bs)) return std::nullopt;
  Const r = (a.numel() >= b.numel()) ? a : b;
  if (a.dims.size() != b.dims.size() && !(as && a.dims.empty()) && !(bs && b.dims.empty()))
    return std::nullopt;
  size_t cnt = r.i.size();
  for (size_t k = 0; k < cnt; ++k) {
    int64_t x = a.i[as ? 0 : k], y = b.i[bs ? 0 : k];
    const std::string& op = n.op_type;
    if (op == "Add")
      r.i[k] = x + y;
    else if (op == "Sub")
      r.i[k] = x - y;
    else if (op == "Mul")
      r.i[k] = x * y;
    else if (op == "Div") {
      if (y == 0) return std::nullopt;
      r.i[k] = x / y;
    } else
      return std::nullopt;
  }
  return r;
}

std::optional<Const> eval_slice(const Node&, const Inputs& in) {
  const Const& x = *in[0];
  if (x.dims.size() != 1 || in.size() < 3) return std::nullopt;
  if (in.size() > 3 && (in[3]->i.size() != 1 || axis_of(in[3]->i[0], 1) != 0)) return std::nullopt;
  int64_t step = in.size() > 4 ? in[4]->i.at(0) : 1;
  if (step != 1) return std::nullopt;
  int64_t len = x.dims[0];
  auto clampi = [&](int64_t v) {
    if (v < 0) v += len;
    return std::clamp<int64_t>(v, 0, len);
  };
  int64_t s = clampi(in[1]->i.at(0)), e = clampi(in[2]->i.at(0));
  Const r;
  r.t = x.t;
  r.dims = {std::max<int64_t>(0, e - s)};
  for (int64_t k = s; k < e; ++k) {
    if (x.is_float())
      r.f.push_back(x.f[static_cast<size_t>(k)]);
    else
      r.i.push_back(x.i[static_cast<size_t>(k)]);
  }
  return r;
}

const std::unordered_map<std::string, Eval>& evaluators() {
  static const std::unordered_map<std::string, Eval> m = {
      {"Concat", eval_concat},
      {"Unsqueeze", eval_reshape_like},
      {"Squeeze", eval_reshape_like},
      {"Reshape", eval_reshape_like},
      {"Identity", eval_reshape_like},
      {"Gather", eval_gather},
      {"Cast", eval_cast},
      {"Add", eval_arith},
      {"Sub", eval_arith},
      {"Mul", eval_arith},
      {"Div", eval_arith},
      {"Slice", eval_slice},
  };
  return m;
}

}  // namespace

size_t fold_constants(Graph& g) {
  std::unordered_set<std::string> outputs;
  for (auto& o : g.outputs) outputs.insert(o.name);
  std::unordered_map<std::string, Const> consts;
  for (auto& init : g.initializers)
    if (init.data.owned)
      if (auto c = load(init.data)) consts.emplace(init.name, std::move(*c));

  size_t folded = 0;
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (auto& n : g.nodes) {
    std::optional<Const> result;
    if (n.domain.empty() && n.outputs.size() == 1) {
      if (n.op_type == "Shape") {
        // Shape of a statically shaped value is a constant.
        const ValueType* t = g.type_of(n.inputs[0]);
        if (t && t->has_static_shape()) {
          Const c;
          c.t = DType::Int64;
          for (auto& d : *t->shape) c.i.push_back(d.value);
          int64_t r = static_cast<int64_t>(c.i.size());
          const Attr* s = n.attr("start");
          const Attr* e = n.attr("end");
          int64_t b = s ? std::clamp(axis_of(s->i, c.i.size()), int64_t{0}, r) : 0;
          int64_t en = e ? std::clamp(axis_of(e->i, c.i.size()), int64_t{0}, r) : r;
          c.i = std::vector<int64_t>(c.i.begin() + b, c.i.begin() + std::max(b, en));
          c.dims = {static_cast<int64_t>(c.i.size())};
          result = c;
        }
      } else if (auto ev = evaluators().find(n.op_type); ev != evaluators().end()) {
        Inputs in;
        bool all = true;
        for (auto& name : n.inputs) {
          auto it = consts.find(name);
          if (name.empty() || it == consts.end()) {
            all = false;
            break;
          }
          in.push_back(&it->second);
        }
        if (all && !in.empty()) result = ev->second(n, in);
      }
    }
    // A graph output stays computed: checked only for what would fold (each
    // node's output name hashed against the outputs was 1.2% of a 200k-node
    // export's time).
    if (result && result->numel() <= kMaxElements && !outputs.count(n.outputs[0])) {
      g.initializers.push_back(Initializer{n.outputs[0], store(*result)});
      g.types[n.outputs[0]] = static_type(result->t, result->dims);
      consts.emplace(n.outputs[0], std::move(*result));
      ++folded;
      continue;
    }
    kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  return folded;
}

}  // namespace pt2onnx
