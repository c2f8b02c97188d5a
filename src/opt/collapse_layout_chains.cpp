// Collapses chains of layout / type ops into one node (or none):
//
//   Transpose(Transpose(x, p1), p2)    -> Transpose(x, p) with p[i] = p1[p2[i]],
//                                         or x when p is the identity;
//   Transpose(x, identity perm)        -> x;
//   Reshape(R(x), s), R one of Reshape / Unsqueeze / Squeeze / Flatten, s a
//   constant                           -> Reshape(x, s'): these ops keep the
//                                         row-major element order and count;
//                                         s' is s with each 0 (a copy of
//                                         R's dim i) made R's static dim, kept
//                                         where x's dim i is the same symbol,
//                                         or made the one -1 when all other
//                                         entries are positive constants;
//   Reshape(x, s) with s resolving to x's own (symbolic) shape -> x;
//   Unsqueeze(Unsqueeze(x, a1), a2)    -> Unsqueeze(x, a) (a: where both
//                                         inserted axes end up);
//   Squeeze(Squeeze(x, a1), a2)        -> Squeeze(x, a) (a: x's axes both
//                                         removed);
//   Squeeze(Unsqueeze(x, a), a)        -> x;
//   Unsqueeze / Squeeze(Reshape(x, s), a), s a constant with no 0
//                                      -> Reshape(x, s with 1s inserted at a /
//                                         with a's entries, all 1, removed);
//   Cast(Cast(x, t1), t2)              -> Cast(x, t2) when every value of x's
//                                         type is exact in t1 (a widening
//                                         cast: the second cast sees x's
//                                         value itself);
//   Cast(x, t) with x of type t        -> x.
//
// Why: converters emit one node per ATen op, so a chain of unsqueezes
// (attention masks), a view of a view or a dtype round trip reaches the file
// as a chain; each node is a kernel launch and an intermediate tensor.
//
// Left alone: a chain whose inner value is read by anything else (or is a
// graph output): it would be computed twice; Reshape(Reshape) whose outer
// shape is not a constant, or has a 0 copying a symbolic dim of the inner
// value that the rules above cannot restate; axes that
// are not constants, or negative axes of an input of unknown rank; Squeeze
// without axes; Cast chains through a narrowing or lossy type (float ->
// int -> float, int64 -> int32 -> int64, float -> float16 -> float, ...).
#include <algorithm>
#include <numeric>
#include <optional>
#include <unordered_set>

#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

namespace {

std::optional<std::vector<int64_t>> axes_of(const GraphIndex& idx, const Node& n) {
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) return idx.ints(n.inputs[1]);
  if (const Attr* a = n.attr("axes")) return a->ints;
  return std::nullopt;
}

// Axes made non-negative for a value of `rank`, sorted; nullopt when out of
// range or repeated.
std::optional<std::vector<int64_t>> normalized(std::vector<int64_t> axes, int64_t rank) {
  for (auto& a : axes) {
    if (a < 0) a += rank;
    if (a < 0 || a >= rank) return std::nullopt;
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) return std::nullopt;
  return axes;
}

std::optional<std::vector<int64_t>> perm_of(const GraphIndex& idx, const Node& n) {
  if (const Attr* p = n.attr("perm")) return p->ints;
  auto r = idx.rank(n.inputs[0]);
  if (!r) return std::nullopt;
  std::vector<int64_t> p(*r);
  std::iota(p.rbegin(), p.rend(), 0);
  return p;
}

bool is_identity_perm(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// Every value of `from` is exactly representable in `to`.
bool exact_in(DType from, DType to) {
  if (from == to) return true;
  auto in = [&](std::initializer_list<DType> l) {
    return std::find(l.begin(), l.end(), to) != l.end();
  };
  using D = DType;
  switch (from) {
    case D::Bool:
      return in({D::UInt8, D::Int8, D::UInt16, D::Int16, D::UInt32, D::Int32, D::UInt64, D::Int64,
                 D::Float16, D::BFloat16, D::Float, D::Double});
    case D::UInt8:
      return in({D::UInt16, D::Int16, D::UInt32, D::Int32, D::UInt64, D::Int64, D::Float16,
                 D::BFloat16, D::Float, D::Double});
    case D::Int8:
      return in({D::Int16, D::Int32, D::Int64, D::Float16, D::BFloat16, D::Float, D::Double});
    case D::UInt16:
      return in({D::UInt32, D::Int32, D::UInt64, D::Int64, D::Float, D::Double});
    case D::Int16:
      return in({D::Int32, D::Int64, D::Float, D::Double});
    case D::UInt32:
      return in({D::UInt64, D::Int64, D::Double});
    case D::Int32:
      return in({D::Int64, D::Double});
    case D::Float16:
    case D::BFloat16:
      return in({D::Float, D::Double});
    case D::Float:
      return in({D::Double});
    default:
      return false;
  }
}

// Whether Reshape(x, shape) returns x's own shape: same rank, each entry a 0
// copying x's dim, x's static dim itself, or the one -1 (then the remaining
// dim, all others being x's).
bool reshape_is_identity(const GraphIndex& idx, const Node& n) {
  auto s = idx.ints(n.inputs[1]);
  const ValueType* t = idx.type(n.inputs[0]);
  if (!s || !t || !t->shape || s->size() != t->shape->size()) return false;
  const Attr* az = n.attr("allowzero");
  bool allowzero = az && az->i;
  int minus = 0;
  for (size_t i = 0; i < s->size(); ++i) {
    int64_t v = (*s)[i];
    const Dim& d = (*t->shape)[i];
    if (v == 0 && !allowzero) continue;
    if (v == -1) {
      ++minus;
      continue;
    }
    if (!(d.is_static() && d.value == v)) return false;
  }
  return minus <= 1;
}

class Collapser {
 public:
  Collapser(Graph& g, const GraphIndex& idx) : g_(g), idx_(idx) {
    for (auto& o : g.outputs) outputs_.insert(o.name);
  }

  // The producer of `v` when it is an `op` node this chain may absorb: its
  // output read once (by the outer node) and not a graph output, and not
  // edited in this sweep.
  const Node* inner(const std::string& v, std::initializer_list<std::string_view> ops) {
    auto k = idx_.producer_index(v);
    if (!k || touched_.count(*k) || idx_.readers(v) != 1 || outputs_.count(v)) return nullptr;
    const Node& p = g_.nodes[*k];
    for (auto op : ops)
      if (is_op(&p, op)) return &p;
    return nullptr;
  }

  std::string ints(const std::string& base, const std::vector<int64_t>& v) {
    // The taken names are collected on the first constant a sweep makes:
    // most sweeps make none. Until finish(), no value of the graph goes away.
    if (!fresh_) fresh_.emplace(g_);
    std::string name = (*fresh_)(base);
    const auto n = static_cast<int64_t>(v.size());
    g_.initializers.push_back(Initializer{name, TensorData::from_vector(DType::Int64, {n}, v)});
    g_.types[name] = static_type(DType::Int64, {n});
    return name;
  }

  // Node k (the outer one) now reads `x` through `node`; the inner node goes.
  void collapse(size_t k, const Node& in, Node node) {
    size_t i = *idx_.producer_index(in.outputs[0]);
    touched_.insert(k);
    touched_.insert(i);
    drop_.insert(i);
    g_.nodes[k] = std::move(node);
    ++changed_;
  }

  // Node k computes its input `in` unchanged: readers read `in` instead (a
  // graph output keeps its name through an Identity, for remove_identity).
  // `skipped`, when given, is the inner node of the pair k forms with it
  // (read by k alone, see inner()): it goes too, or it would stay as a dead
  // reader of `in` and keep the next sweep from collapsing `in`'s chain.
  void forward(size_t k, const std::string& in, const Node* skipped = nullptr) {
    Node& n = g_.nodes[k];
    touched_.insert(k);
    if (skipped) {
      size_t i = *idx_.producer_index(skipped->outputs[0]);
      touched_.insert(i);
      drop_.insert(i);
    }
    if (auto p = idx_.producer_index(in)) touched_.insert(*p);  // it gains readers
    if (forward_to_input(g_, k, in, outputs_.count(n.outputs[0]) > 0)) drop_.insert(k);
    ++changed_;
  }

  void visit(size_t k);
  void reshape_then_axes(size_t k, const Node& rs);

  // The outer shape of Reshape(y, shape), y = R(x), made to read x: each 0
  // (a copy of y's dim i) becomes y's static dim, stays 0 where x's dim i is
  // the same, or becomes the one -1 (then it is numel / the other dims, all
  // positive constants: y's dim i again). False when that is not possible.
  bool resolve_zeros(std::vector<int64_t>& shape, const std::string& y, const std::string& x) {
    const ValueType* ty = idx_.type(y);
    const ValueType* tx = idx_.type(x);
    bool minus = std::count(shape.begin(), shape.end(), -1) > 0, made_minus = false;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] != 0) continue;
      if (!ty || !ty->shape || i >= ty->shape->size()) return false;
      const Dim& d = (*ty->shape)[i];
      if (d.is_static() && d.value > 0) {
        shape[i] = d.value;
      } else if (tx && tx->shape && i < tx->shape->size() && !d.is_static() &&
                 (*tx->shape)[i].same_as(d)) {
        continue;  // x's dim i is y's
      } else if (!minus && !d.is_static()) {
        shape[i] = -1;
        minus = made_minus = true;
      } else {
        return false;
      }
    }
    // A -1 made here needs the other dims positive constants (a 0 there
    // could make it ambiguous).
    if (made_minus && std::count(shape.begin(), shape.end(), 0)) return false;
    return true;
  }

  size_t finish() {
    if (drop_.empty()) return changed_;
    std::vector<Node> kept;
    kept.reserve(g_.nodes.size());
    for (size_t k = 0; k < g_.nodes.size(); ++k)
      if (!drop_.count(k)) kept.push_back(std::move(g_.nodes[k]));
    g_.nodes = std::move(kept);
    return changed_;
  }

 private:
  Graph& g_;
  const GraphIndex& idx_;
  std::optional<FreshNames> fresh_;
  std::unordered_set<std::string> outputs_;
  std::unordered_set<size_t> touched_, drop_;
  size_t changed_ = 0;
};

// Unsqueeze / Squeeze(Reshape(x, s), a), s a constant without 0: the
// Reshape to s with 1s inserted at a (or a's entries, each 1, removed).
void Collapser::reshape_then_axes(size_t k, const Node& rs) {
  const Node& n = g_.nodes[k];
  auto s = idx_.ints(rs.inputs[1]);
  auto a = axes_of(idx_, n);
  if (!s || !a || std::count(s->begin(), s->end(), 0)) return;
  const auto r = static_cast<int64_t>(s->size());
  std::vector<int64_t> shape;
  if (n.op_type == "Unsqueeze") {
    auto axes = normalized(*a, r + static_cast<int64_t>(a->size()));
    if (!axes) return;
    size_t j = 0;
    for (int64_t pos = 0; pos < r + static_cast<int64_t>(axes->size()); ++pos)
      shape.push_back(std::binary_search(axes->begin(), axes->end(), pos) ? 1 : (*s)[j++]);
  } else {
    auto axes = normalized(*a, r);
    if (!axes) return;
    for (int64_t d = 0; d < r; ++d) {
      bool gone = std::binary_search(axes->begin(), axes->end(), d);
      if (gone && (*s)[static_cast<size_t>(d)] != 1) return;
      if (!gone) shape.push_back((*s)[static_cast<size_t>(d)]);
    }
  }
  Node m =
      make_node("Reshape", {rs.inputs[0], ints(n.outputs[0] + "_shape", shape)}, n.outputs, {}, n);
  m.name = n.name;
  collapse(k, rs, std::move(m));
}

void Collapser::visit(size_t k) {
  if (touched_.count(k)) return;
  const Node& n = g_.nodes[k];
  if (!n.domain.empty() || n.inputs.empty() || n.inputs[0].empty() || n.outputs.size() != 1) return;
  const std::string& x = n.inputs[0];

  if (n.op_type == "Transpose") {
    auto p2 = perm_of(idx_, n);
    if (!p2) return;
    if (const Node* in = inner(x, {"Transpose"})) {
      auto p1 = perm_of(idx_, *in);
      if (!p1 || p1->size() != p2->size()) return;
      std::vector<int64_t> p(p2->size());
      for (size_t i = 0; i < p.size(); ++i) {
        auto j = (*p2)[i];
        if (j < 0 || j >= static_cast<int64_t>(p1->size())) return;
        p[i] = (*p1)[static_cast<size_t>(j)];
      }
      const std::string src = in->inputs[0];
      if (is_identity_perm(p)) {
        forward(k, src, in);
      } else {
        Node t = make_node("Transpose", {src}, n.outputs, {Attr::Ints("perm", p)}, n);
        t.name = n.name;
        collapse(k, *in, std::move(t));
      }
    } else if (is_identity_perm(*p2)) {
      forward(k, x);
    }
    return;
  }

  if (n.op_type == "Reshape" && n.inputs.size() == 2) {
    if (reshape_is_identity(idx_, n)) return forward(k, x);
    auto s = idx_.ints(n.inputs[1]);
    const Attr* az = n.attr("allowzero");
    if (!s) return;
    const Node* in = inner(x, {"Reshape", "Unsqueeze", "Squeeze", "Flatten"});
    if (!in) return;
    std::vector<int64_t> shape = *s;
    if (!(az && az->i) && !resolve_zeros(shape, x, in->inputs[0])) return;
    Node r = n;
    r.inputs[0] = in->inputs[0];
    if (shape != *s) r.inputs[1] = ints(n.outputs[0] + "_shape", shape);
    collapse(k, *in, std::move(r));
    return;
  }

  if (n.op_type == "Unsqueeze" || n.op_type == "Squeeze") {
    const bool unsq = n.op_type == "Unsqueeze";
    if (const Node* rs = inner(x, {"Reshape"})) return reshape_then_axes(k, *rs);
    const Node* in = inner(x, {"Unsqueeze", "Squeeze"});
    if (!in) return;
    auto r = idx_.rank(in->inputs[0]);
    auto a1 = axes_of(idx_, *in);
    auto a2 = axes_of(idx_, n);
    if (!r || !a1 || !a2) return;
    const auto rank = static_cast<int64_t>(*r);
    const auto n1 = static_cast<int64_t>(a1->size()), n2 = static_cast<int64_t>(a2->size());
    std::vector<int64_t> axes;
    if (in->op_type == "Unsqueeze" && !unsq) {
      // Squeeze(Unsqueeze(x, a), a) = x.
      auto u = normalized(*a1, rank + n1);
      auto s = normalized(*a2, rank + n1);
      if (u && s && *u == *s) forward(k, in->inputs[0], in);
      return;
    }
    if (in->op_type != n.op_type) return;
    if (unsq) {
      // Output positions: the outer's axes; the remaining slots hold the
      // inner's output in order, its inserted axes among them.
      auto o = normalized(*a2, rank + n1 + n2);
      auto i = normalized(*a1, rank + n1);
      if (!o || !i) return;
      std::vector<bool> inserted(static_cast<size_t>(rank + n1 + n2), false);
      for (auto a : *o) inserted[static_cast<size_t>(a)] = true;
      int64_t slot = 0;
      for (int64_t pos = 0; pos < rank + n1 + n2; ++pos) {
        if (inserted[static_cast<size_t>(pos)]) continue;
        if (std::binary_search(i->begin(), i->end(), slot)) axes.push_back(pos);
        ++slot;
      }
      axes.insert(axes.end(), o->begin(), o->end());
    } else {
      // x's axes that survive the inner squeeze, in order; the outer picks
      // among them.
      auto i = normalized(*a1, rank);
      auto o = normalized(*a2, rank - n1);
      if (!i || !o) return;
      std::vector<int64_t> kept;
      for (int64_t d = 0; d < rank; ++d)
        if (!std::binary_search(i->begin(), i->end(), d)) kept.push_back(d);
      axes = *i;
      for (auto a : *o) axes.push_back(kept[static_cast<size_t>(a)]);
    }
    std::sort(axes.begin(), axes.end());
    Node m = n;
    m.inputs[0] = in->inputs[0];
    if (n.inputs.size() > 1) {
      m.inputs[1] = ints(n.outputs[0] + "_axes", axes);
    } else {
      m.attrs = {Attr::Ints("axes", axes)};
    }
    collapse(k, *in, std::move(m));
    return;
  }

  if (n.op_type == "Cast") {
    const Attr* to = n.attr("to");
    const ValueType* tx = idx_.type(x);
    if (!to || !tx) return;
    const auto t2 = static_cast<DType>(to->i);
    if (tx->dtype == t2) return forward(k, x);
    const Node* in = inner(x, {"Cast"});
    if (!in) return;
    const ValueType* t0 = idx_.type(in->inputs[0]);
    if (!t0 || t0->dtype == DType::Undefined || !exact_in(t0->dtype, tx->dtype)) return;
    Node c = n;
    c.inputs[0] = in->inputs[0];
    if (t0->dtype == t2) {
      // A round trip through a wider type: x itself.
      collapse(k, *in, std::move(c));    // drops the inner Cast ...
      g_.nodes[k].op_type = "Identity";  // ... and this one becomes x's copy
      g_.nodes[k].attrs.clear();
      return;
    }
    collapse(k, *in, std::move(c));
  }
}

}  // namespace

size_t collapse_layout_chains(Graph& g, const PassOptions&) {
  size_t total = 0;
  // Each sweep collapses pairs; a chain of n nodes takes about log2(n) sweeps.
  for (int sweep = 0; sweep < 16; ++sweep) {
    GraphIndex idx(g);
    Collapser c(g, idx);
    for (size_t k = 0; k < g.nodes.size(); ++k) c.visit(k);
    size_t n = c.finish();
    if (!n) break;
    total += n;
  }
  return total;
}

}  // namespace pt2onnx
