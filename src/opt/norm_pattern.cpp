#include "opt/norm_pattern.h"

#include <cmath>

namespace pt2onnx {

namespace {

// keepdims of a Reduce* node (default 1).
bool keeps_dims(const Node& n) {
  const Attr* a = n.attr("keepdims");
  return !a || a->i == 1;
}

// The single reduced axis of a Reduce* node, from its axes input or attribute.
std::optional<int64_t> single_axis(const GraphIndex& ix, const Node& n) {
  std::vector<int64_t> axes;
  if (n.inputs.size() >= 2 && !n.inputs[1].empty()) {
    auto v = ix.ints(n.inputs[1]);
    if (!v) return std::nullopt;
    axes = *v;
  } else if (const Attr* a = n.attr("axes")) {
    axes = a->ints;
  }
  if (axes.size() != 1) return std::nullopt;
  return axes[0];
}

// A one-element constant of rank <= r (so it broadcasts without growing a
// rank-r value).
std::optional<double> small_scalar(const GraphIndex& ix, const std::string& v, size_t r) {
  const TensorData* t = ix.constant(v);
  if (!t || t->dims.size() > r) return std::nullopt;
  return ix.scalar(v);
}

bool read_once(const GraphIndex& ix, const std::string& v) { return ix.readers(v) == 1; }

// The other input of a two-input node reading `v` once; nullopt otherwise.
std::optional<std::string> other_input(const Node& n, const std::string& v) {
  if (n.inputs.size() != 2) return std::nullopt;
  if (n.inputs[0] == v && n.inputs[1] != v) return n.inputs[1];
  if (n.inputs[1] == v && n.inputs[0] != v) return n.inputs[0];
  return std::nullopt;
}

}  // namespace

std::optional<Dim> last_dim(const GraphIndex& ix, const std::string& v) {
  const ValueType* t = ix.type(v);
  if (!t || !t->shape || t->shape->empty()) return std::nullopt;
  return t->shape->back();
}

std::optional<LastAxisMean> match_last_axis_mean(const GraphIndex& ix, const std::string& v) {
  if (!read_once(ix, v)) return std::nullopt;
  auto reduce = [&](const Node* n) -> std::optional<std::string> {
    if (!n || n->inputs.empty() || n->outputs.size() != 1 || !keeps_dims(*n)) return std::nullopt;
    auto rank = ix.rank(n->inputs[0]);
    auto axis = single_axis(ix, *n);
    if (!rank || !axis || !is_last_axis(*axis, *rank)) return std::nullopt;
    return n->inputs[0];
  };
  if (const Node* m = ix.producer(v, "ReduceMean")) {
    auto in = reduce(m);
    if (!in) return std::nullopt;
    return LastAxisMean{*in, {*ix.producer_index(v)}};
  }
  const Node* div = ix.producer(v, "Div");
  if (!div || div->inputs.size() != 2) return std::nullopt;
  const Node* sum = ix.producer(div->inputs[0], "ReduceSum");
  if (!sum || !read_once(ix, div->inputs[0])) return std::nullopt;
  auto in = reduce(sum);
  if (!in) return std::nullopt;
  auto d = last_dim(ix, *in);
  auto rank = ix.rank(*in);
  auto n = small_scalar(ix, div->inputs[1], *rank);
  if (!d || !d->is_static() || !n || *n != static_cast<double>(d->value)) return std::nullopt;
  return LastAxisMean{*in, {*ix.producer_index(v), *ix.producer_index(div->inputs[0])}};
}

std::optional<Square> match_square(const GraphIndex& ix, const std::string& v) {
  if (!read_once(ix, v)) return std::nullopt;
  if (const Node* m = ix.producer(v, "Mul")) {
    if (m->inputs.size() == 2 && m->inputs[0] == m->inputs[1])
      return Square{m->inputs[0], 2, *ix.producer_index(v)};
    return std::nullopt;
  }
  if (const Node* p = ix.producer(v, "Pow")) {
    if (p->inputs.size() != 2) return std::nullopt;
    auto rank = ix.rank(p->inputs[0]);
    auto e = rank ? small_scalar(ix, p->inputs[1], *rank) : std::nullopt;
    if (e && *e == 2.0) return Square{p->inputs[0], 1, *ix.producer_index(v)};
  }
  return std::nullopt;
}

std::vector<InvStdScale> match_inv_std_scale(const GraphIndex& ix, size_t k) {
  const Node& n = ix.graph().nodes[k];
  std::vector<InvStdScale> out;
  // The op first: this runs on every node, and the rank is a lookup.
  if (n.domain.size() || n.inputs.size() != 2 || n.outputs.size() != 1 ||
      (n.op_type != "Div" && n.op_type != "Mul"))
    return out;
  auto rank = ix.rank(n.outputs[0]);
  if (!rank) return out;
  // v = Add(var, eps), read once.
  auto add_eps = [&](const std::string& v, InvStdScale& s) {
    const Node* add = ix.producer(v, "Add");
    if (!add || add->inputs.size() != 2 || !read_once(ix, v)) return false;
    for (int i = 0; i < 2; ++i) {
      auto e = small_scalar(ix, add->inputs[1 - i], *rank);
      if (!e || !(*e >= 0) || !std::isfinite(*e) || ix.constant(add->inputs[i])) continue;
      s.var = add->inputs[i];
      s.eps = *e;
      s.nodes.push_back(*ix.producer_index(v));
      return true;
    }
    return false;
  };
  // s = Sqrt(Add(var, eps)), read once.
  auto sqrt_of = [&](const std::string& v, InvStdScale& s) {
    const Node* sq = ix.producer(v, "Sqrt");
    if (!sq || sq->inputs.size() != 1 || !read_once(ix, v)) return false;
    s.nodes.push_back(*ix.producer_index(v));
    return add_eps(sq->inputs[0], s);
  };
  if (n.op_type == "Div") {
    InvStdScale s;
    s.x = n.inputs[0];
    if (sqrt_of(n.inputs[1], s)) out.push_back(s);
    return out;
  }
  if (n.op_type != "Mul") return out;
  for (int i = 0; i < 2; ++i) {
    const std::string& r = n.inputs[1 - i];
    InvStdScale s;
    s.x = n.inputs[i];
    if (s.x == r) continue;
    const Node* p = ix.producer(r);
    if (!p || !p->domain.empty() || p->outputs.size() != 1 ||
        (p->op_type != "Reciprocal" && p->op_type != "Div" && p->op_type != "Pow") ||
        !read_once(ix, r))
      continue;
    s.nodes.push_back(*ix.producer_index(r));
    bool ok = false;
    if (p->op_type == "Reciprocal" && p->inputs.size() == 1) {
      ok = sqrt_of(p->inputs[0], s);
    } else if (p->op_type == "Div" && p->inputs.size() == 2) {
      auto one = small_scalar(ix, p->inputs[0], *rank);
      ok = one && *one == 1.0 && sqrt_of(p->inputs[1], s);
    } else if (p->op_type == "Pow" && p->inputs.size() == 2) {
      auto e = small_scalar(ix, p->inputs[1], *rank);
      ok = e && *e == -0.5 && add_eps(p->inputs[0], s);
    }
    if (ok) out.push_back(s);
  }
  return out;
}

AffineTail match_affine_tail(const GraphIndex& ix, const std::string& y, const Dim& d,
                             bool allow_bias, DType allow_cast_to) {
  AffineTail t;
  std::string cur = y;
  const Graph& g = ix.graph();
  while (read_once(ix, cur)) {
    auto cs = ix.consumers(cur);
    if (cs.size() != 1) break;
    const Node& c = g.nodes[cs[0]];
    if (!c.domain.empty() || c.outputs.size() != 1) break;
    const ValueType* ct = ix.type(cur);
    if (!ct) break;
    auto other = other_input(c, cur);
    bool param_ok = other && is_feature_vector(ix, *other, d) && ix.type(*other) &&
                    ix.type(*other)->dtype == ct->dtype;
    if (c.op_type == "Mul" && param_ok && t.weight.empty() && t.bias.empty()) {
      t.weight = *other;
      t.weight_after_cast = t.cast_at.has_value();
    } else if (c.op_type == "Add" && allow_bias && param_ok && t.bias.empty()) {
      t.bias = *other;
    } else if (c.op_type == "Cast" && allow_cast_to != DType::Undefined && !t.cast_at &&
               c.attr("to") && c.attr("to")->i == static_cast<int64_t>(allow_cast_to)) {
      t.cast_at = t.nodes.size();
    } else {
      break;
    }
    t.nodes.push_back(cs[0]);
    cur = c.outputs[0];
  }
  t.out = cur;
  return t;
}

bool read_only_inside(const GraphIndex& ix, const std::vector<std::string>& values,
                      const std::vector<size_t>& reads) {
  for (size_t i = 0; i < values.size(); ++i)
    if (ix.readers(values[i]) != reads[i]) return false;
  return true;
}

bool is_feature_vector(const GraphIndex& ix, const std::string& v, const Dim& d) {
  const ValueType* t = ix.type(v);
  return t && t->shape && t->shape->size() == 1 && (*t->shape)[0].same_as(d);
}

std::optional<std::string> add_ones(Graph& g, FreshNames& names, const std::string& base, DType t,
                                    const Dim& d) {
  if (!d.is_static()) return std::nullopt;
  size_t n = static_cast<size_t>(d.value);
  TensorData data;
  if (t == DType::Float) {
    data = TensorData::from_vector(t, {d.value}, std::vector<float>(n, 1.0f));
  } else if (t == DType::Double) {
    data = TensorData::from_vector(t, {d.value}, std::vector<double>(n, 1.0));
  } else if (t == DType::Float16) {
    data = TensorData::from_vector(t, {d.value}, std::vector<uint16_t>(n, float_to_half(1.0f)));
  } else if (t == DType::BFloat16) {
    data = TensorData::from_vector(t, {d.value}, std::vector<uint16_t>(n, float_to_bfloat16(1.0f)));
  } else {
    return std::nullopt;
  }
  std::string name = names(base);
  g.types[name] = static_type(t, {d.value});
  g.initializers.push_back(Initializer{name, std::move(data)});
  return name;
}

}  // namespace pt2onnx
