// Shape and index arithmetic on symbolic dims, reduced to the fewest nodes.
//
// Converters lower ATen index / mask code literally: a tensor index i becomes
// Where(Less(i, 0), Add(i, n), i) (negative indices wrap), an attention mask
// starts from ConstantOfShape(true) and And-s in comparisons, arange(n) + 0
// keeps its Add. Where i comes from a Range from 0 or a Shape, these are
// provably no-ops. The pass tracks, value by value in graph order, two facts:
//
//   non-negative (integers): every element is >= 0 and <= a bound.
//     Sources: Shape / Size (bound 2^48: no tensor dim reaches it), small
//     constants with no negative element, Range(start >= 0, limit, delta > 0)
//     (start + k * delta >= start), ConstantOfShape of a value >= 0, a Cast
//     of a bool or of such a value to a type that holds the bound. Kept by
//     the ops that only move or select elements (Unsqueeze, Squeeze,
//     Reshape, Expand, Flatten, Transpose, Identity, Slice, Gather, GatherND,
//     GatherElements, Tile, Concat of such values), by Add and Mul of two
//     such values while the bounds' sum / product stays below 2^62 (so
//     int64 arithmetic cannot wrap), by Min / Max of such values and by
//     Where choosing between two.
//   all true / all false (bools): constants, ConstantOfShape(true / false),
//     comparisons of a non-negative value with a constant whose elements
//     settle them (v < c with c <= 0: false; v >= c with c <= 0: true;
//     v <= c, v == c with c < 0: false; v > c with c < 0: true; and the
//     mirrored forms c > v ...), And / Or / Not of such values, and the
//     element-moving ops above.
//
// With those facts (each rewrite forwards one input, so the node goes):
//   Where(c, x, y), c all true                -> x
//   Where(c, x, y), c all false               -> y
//   And(a, b), b all true (or a)              -> the other input
//   Or(a, b), b all false (or a)              -> the other input
//   Add(a, 0), Add(0, a), Sub(a, 0), Mul(a, 1), Mul(1, a), integer a -> a;
//   Mul(a, 1), Mul(1, a), Div(a, 1), float a -> a
//   Concat(a, e, ...), every e empty along the axis (static 0) -> a
// each only when the dropped inputs broadcast into the kept one's shape (by
// the value types: every dim of theirs, right-aligned, is 1 or the same
// symbol / number), so the result's shape is the kept input's. The index
// normalisation above is then Where(all false, ., i) -> i. And one rewrite
// of an input:
//   Where(And(a, b), x, y), a all true, a broadcasting into x or y
//                                             -> Where(b, x, y)
// (a bidirectional mask's all-true query-side factor): the result's shape
// already holds a's; the And goes when no other node reads it.
//
// Advanced indexing by full aranges (x[arange(b)[:, None], arange(s)[None, :]],
// the padding mask's lookup):
//   GatherND(data, stack(Unsqueeze(Range(0, n_j, 1)) + zeros ...)) -> Unsqueeze(data)
// when each arange runs along its own axis, in order, and n_j is data's dim j
// by the value types (see gather_nd_of_aranges); where n_j is not provably
// data's dim j (a KV cache's past + new length against the attention mask's
// own length), data is first gathered by that Range on axis j: x[:, arange(t)]
// as torch reads it, an index past the axis an error as there.
//
// Shape pieces (opset >= 15, where Shape has start / end), x of known rank:
//   Gather(Shape[s:e](x), [k, k+1, ..., k+m])  -> Shape[s+k : s+k+m+1](x)
//   Slice(Shape[s:e](x), [a], [b])             -> Shape[s+a : s+b](x)
//                                                 (axis 0, step 1, clamped
//                                                 like Slice)
//   Concat(Shape[a:b](x), Shape[b:c](x), ...)  -> Shape[a:c](x) when every
//                                                 piece is of x and they are
//                                                 adjacent, in order
// Each replaces the last node by one Shape; the old Shape goes when nothing
// else reads it.
//
// Left alone: indices of unknown sign (graph inputs, a Range from a symbolic
// start, a Sub), comparisons with a constant of the wrong sign (i < 1 may
// hold), float arithmetic (x + 0 turns -0 into +0), a Where whose dropped
// inputs could widen the result's shape, Gather of a Shape with
// non-contiguous or non-constant indices, Slice with steps, a Concat mixing
// shape pieces of different values or with a constant; a GatherND whose
// aranges start elsewhere than 0, step otherwise than 1, or run along the
// same axis or out of order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

namespace {

constexpr double kDimBound = 281474976710656.0;  // 2^48
constexpr double kSafe = 4611686018427387904.0;  // 2^62
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Fact {
  bool nonneg = false;  // integer elements in [0, bound]
  double bound = kInf;
  int truth = -1;     // bool: 1 all true, 0 all false, -1 unknown
  bool zero = false;  // integers, all 0
};

Fact nonneg(double bound) { return Fact{true, bound, -1}; }
Fact truth(int t) { return Fact{false, kInf, t}; }

// Elements of a small bool / int32 / int64 constant (any rank) as int64.
std::optional<std::vector<int64_t>> const_values(const GraphIndex& idx, const std::string& v) {
  const TensorData* t = idx.constant(v);
  if (!t || !t->is_contiguous() || t->numel() > 4096) return std::nullopt;
  std::vector<int64_t> out(static_cast<size_t>(t->numel()));
  for (size_t k = 0; k < out.size(); ++k) {
    if (t->dtype == DType::Int64) {
      std::memcpy(&out[k], t->bytes() + 8 * k, 8);
    } else if (t->dtype == DType::Int32) {
      int32_t x;
      std::memcpy(&x, t->bytes() + 4 * k, 4);
      out[k] = x;
    } else if (t->dtype == DType::Bool) {
      out[k] = t->bytes()[k] != 0;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

// Whether `a` broadcasts into `b` without widening it: rank(a) <= rank(b)
// and each dim of a, right-aligned, is 1 or equal to b's.
bool fits(const GraphIndex& idx, const std::string& a, const std::string& b) {
  const ValueType* ta = idx.type(a);
  const ValueType* tb = idx.type(b);
  if (!ta || !tb || !ta->shape || !tb->shape) return false;
  const Shape& sa = *ta->shape;
  const Shape& sb = *tb->shape;
  if (sa.size() > sb.size()) return false;
  for (size_t i = 1; i <= sa.size(); ++i) {
    const Dim& da = sa[sa.size() - i];
    const Dim& db = sb[sb.size() - i];
    if (!((da.is_static() && da.value == 1) || da.same_as(db))) return false;
  }
  return true;
}

bool is_int(const GraphIndex& idx, const std::string& v) {
  const ValueType* t = idx.type(v);
  return t && is_integral(t->dtype);
}

// [start, end) of a Shape node over a rank-r input, as Shape clamps them.
std::pair<int64_t, int64_t> shape_range(const Node& n, int64_t r) {
  auto norm = [&](const Attr* a, int64_t dflt) {
    if (!a) return dflt;
    int64_t v = a->i < 0 ? a->i + r : a->i;
    return std::clamp<int64_t>(v, 0, r);
  };
  int64_t s = norm(n.attr("start"), 0), e = norm(n.attr("end"), r);
  return {s, std::max(s, e)};
}

class Folder {
 public:
  Folder(Graph& g, const PassOptions& o) : g_(g), o_(o), idx_(g) {
    for (auto& out : g.outputs) outputs_.insert(out.name);
  }

  size_t run() {
    for (size_t k = 0; k < g_.nodes.size(); ++k) visit(k);
    if (!changed_) return 0;
    std::vector<Node> kept;
    kept.reserve(g_.nodes.size());
    for (size_t k = 0; k < g_.nodes.size(); ++k) {
      if (auto it = before_.find(k); it != before_.end())
        for (Node& n : it->second) kept.push_back(std::move(n));
      if (!drop_.count(k)) kept.push_back(std::move(g_.nodes[k]));
    }
    g_.nodes = std::move(kept);
    return changed_;
  }

 private:
  Fact fact(const std::string& v) {
    if (auto it = facts_.find(v); it != facts_.end()) return it->second;
    Fact f;
    if (auto c = const_values(idx_, v)) {
      const ValueType* t = idx_.type(v);
      if (t && t->dtype == DType::Bool) {
        bool all1 = std::all_of(c->begin(), c->end(), [](int64_t x) { return x != 0; });
        bool all0 = std::all_of(c->begin(), c->end(), [](int64_t x) { return x == 0; });
        f.truth = all1 ? 1 : all0 ? 0 : -1;
      } else if (std::all_of(c->begin(), c->end(), [](int64_t x) { return x >= 0; })) {
        f = nonneg(c->empty() ? 0.0 : static_cast<double>(*std::max_element(c->begin(), c->end())));
        f.zero = std::all_of(c->begin(), c->end(), [](int64_t x) { return x == 0; });
      }
    }
    learn(v, f);
    return f;
  }

  // Only what says something is kept: most values are float tensors, whose
  // fact is the default, which fact() finds again without the map (a map
  // entry per value cost more than the rest of the pass).
  void learn(const std::string& v, const Fact& f) {
    if (f.nonneg || f.truth != -1 || f.zero)
      facts_[v] = f;
    else
      facts_.erase(v);
  }

  // Node k computes input `in` unchanged: readers read `in` from now on.
  void forward(size_t k, const std::string& in) {
    Node& n = g_.nodes[k];
    learn(n.outputs[0], fact(in));
    if (forward_to_input(g_, k, in, outputs_.count(n.outputs[0]) > 0)) drop_.insert(k);
    ++changed_;
  }

  void replace_by_shape(size_t k, const std::string& x, int64_t s, int64_t e) {
    Node& n = g_.nodes[k];
    Node sh = make_node("Shape", {x}, n.outputs, {Attr::Int("start", s), Attr::Int("end", e)}, n);
    sh.name = n.name;
    n = std::move(sh);
    learn(n.outputs[0], nonneg(kDimBound));
    ++changed_;
  }

  // The input of Shape[s:e] producing `v`, with its range, for x of known rank.
  struct Piece {
    std::string x;
    int64_t s, e;
  };
  std::optional<Piece> piece(const std::string& v) {
    const Node* p = idx_.producer(v, "Shape");
    if (!p) return std::nullopt;
    auto r = idx_.rank(p->inputs[0]);
    if (!r) return std::nullopt;
    auto [s, e] = shape_range(*p, static_cast<int64_t>(*r));
    return Piece{p->inputs[0], s, e};
  }

  bool simplify(size_t k);
  bool gather_nd_of_aranges(size_t k);
  bool fold_shape_piece(size_t k);
  Fact infer(const Node& n);
  void visit(size_t k) {
    if (!g_.nodes[k].domain.empty() || g_.nodes[k].outputs.size() != 1) return;
    if (simplify(k) || gather_nd_of_aranges(k)) return;
    if (o_.opset >= 15 && fold_shape_piece(k)) return;
    learn(g_.nodes[k].outputs[0], infer(g_.nodes[k]));
  }

  Graph& g_;
  const PassOptions& o_;
  GraphIndex idx_;
  std::unordered_set<std::string> outputs_;
  std::unordered_map<std::string, Fact> facts_;
  std::unordered_set<size_t> drop_;
  // Nodes to insert before node k (its rewrite reads them).
  std::unordered_map<size_t, std::vector<Node>> before_;
  size_t changed_ = 0;
};

bool Folder::simplify(size_t k) {
  const Node& n = g_.nodes[k];
  const auto& in = n.inputs;
  if (n.op_type == "Concat" && in.size() >= 2) {
    // Concat whose other inputs are empty along the axis (Phi-3's rotary
    // over the whole head concatenates q[..., d:], of size 0): the one
    // non-empty input, when the result's type is that input's.
    const Attr* ax = n.attr("axis");
    const ValueType* yt = idx_.type(n.outputs[0]);
    if (!ax || !yt || !yt->shape) return false;
    const int64_t r = static_cast<int64_t>(yt->shape->size());
    const int64_t a = ax->i < 0 ? ax->i + r : ax->i;
    if (a < 0 || a >= r) return false;
    std::optional<size_t> kept;
    for (size_t i = 0; i < in.size(); ++i) {
      const ValueType* t = idx_.type(in[i]);
      if (!t || !t->shape || static_cast<int64_t>(t->shape->size()) != r) return false;
      if ((*t->shape)[static_cast<size_t>(a)].same_as(Dim::of(0))) continue;
      if (kept) return false;
      kept = i;
    }
    if (!kept) return false;
    const ValueType* kt = idx_.type(in[*kept]);
    if (kt->dtype != yt->dtype) return false;
    for (int64_t d = 0; d < r; ++d)
      if (!(*kt->shape)[static_cast<size_t>(d)].same_as((*yt->shape)[static_cast<size_t>(d)]))
        return false;
    forward(k, in[*kept]);
    return true;
  }
  if (n.op_type == "Where" && in.size() == 3) {
    // Where(And(a, b), x, y) with a all true: a only broadcasts, and x (or
    // y) already has a's shape in it, so the condition can be b.
    if (const Node* c = idx_.producer(in[0], "And"); c && c->inputs.size() == 2) {
      for (size_t side = 0; side < 2; ++side) {
        const std::string& a = c->inputs[side];
        if (fact(a).truth == 1 && (fits(idx_, a, in[1]) || fits(idx_, a, in[2]))) {
          g_.nodes[k].inputs[0] = c->inputs[1 - side];
          ++changed_;
          break;
        }
      }
    }
    int t = fact(in[0]).truth;
    if (t == 1 && fits(idx_, in[0], in[1]) && fits(idx_, in[2], in[1])) {
      forward(k, in[1]);
      return true;
    }
    if (t == 0 && fits(idx_, in[0], in[2]) && fits(idx_, in[1], in[2])) {
      forward(k, in[2]);
      return true;
    }
    return false;
  }
  if ((n.op_type == "And" || n.op_type == "Or") && in.size() == 2) {
    // The neutral element: true for And, false for Or.
    const int neutral = n.op_type == "And" ? 1 : 0;
    for (int side = 0; side < 2; ++side) {
      const std::string& drop = in[static_cast<size_t>(side)];
      const std::string& keep = in[static_cast<size_t>(1 - side)];
      if (fact(drop).truth == neutral && fits(idx_, drop, keep)) {
        forward(k, keep);
        return true;
      }
    }
    return false;
  }
  if ((n.op_type == "Add" || n.op_type == "Sub" || n.op_type == "Mul") && in.size() == 2 &&
      is_int(idx_, in[0]) && is_int(idx_, in[1])) {
    const int64_t neutral = n.op_type == "Mul" ? 1 : 0;
    auto is_neutral = [&](const std::string& v) {
      auto c = const_values(idx_, v);
      return c && !c->empty() &&
             std::all_of(c->begin(), c->end(), [&](int64_t x) { return x == neutral; });
    };
    // Sub(0, a) is -a: only the second input may drop there.
    for (int side = 1; side >= (n.op_type == "Sub" ? 1 : 0); --side) {
      const std::string& drop = in[static_cast<size_t>(side)];
      const std::string& keep = in[static_cast<size_t>(1 - side)];
      if (is_neutral(drop) && fits(idx_, drop, keep)) {
        forward(k, keep);
        return true;
      }
    }
  }
  if ((n.op_type == "Mul" || n.op_type == "Div") && in.size() == 2 && !is_int(idx_, in[0])) {
    // Float x * 1 and x / 1 are x exactly (NaN, infinities and -0
    // included; x + 0 is not: -0 + 0 is +0). transformers scale rotary
    // caches by attention_scaling, 1.0 for the default rope. 1 / x is not x.
    for (int side = 1; side >= (n.op_type == "Div" ? 1 : 0); --side) {
      const std::string& one = in[static_cast<size_t>(side)];
      const std::string& keep = in[static_cast<size_t>(1 - side)];
      const auto s = idx_.scalar(one);
      if (s && *s == 1.0 && fits(idx_, one, keep)) {
        forward(k, keep);
        return true;
      }
    }
  }
  return false;
}

std::optional<std::vector<int64_t>> axes_of(const GraphIndex& idx, const Node& n) {
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) return idx.ints(n.inputs[1]);
  if (const Attr* a = n.attr("axes")) return a->ints;
  return std::nullopt;
}

// GatherND(data, stack_last(i_0 + z, ..., i_{K-1} + z)) where each i_j is
// arange(n_j) = Range(0, n_j, 1) unsqueezed to vary along one axis q_j of
// the index shape P (q_0 < q_1 < ...), n_j is data's dim j (the same symbol
// or number in the value types) and z is zeros (Mul by 0, sums of those):
// torch's x[arange(b)[:, None], arange(s)[None, :]] lowered literally. P is
// data's dims j at q_j and 1 elsewhere, so out[p, rest] = data[p[q_0], ...,
// p[q_{K-1}], rest]: data with 1s inserted at P's other axes, an Unsqueeze.
bool Folder::gather_nd_of_aranges(size_t k) {
  const Node& n = g_.nodes[k];
  if (n.op_type != "GatherND" || n.inputs.size() != 2) return false;
  if (const Attr* b = n.attr("batch_dims"); b && b->i != 0) return false;
  const std::string data = n.inputs[0];
  const ValueType* td = idx_.type(data);
  if (!td || !td->shape) return false;
  const Shape& dd = *td->shape;
  std::vector<std::string> parts{n.inputs[1]};
  if (const Node* cat = idx_.producer(n.inputs[1], "Concat")) {
    auto r = idx_.rank(n.inputs[1]);
    const Attr* ax = cat->attr("axis");
    if (!r || !ax || (ax->i != -1 && ax->i != static_cast<int64_t>(*r) - 1)) return false;
    parts = cat->inputs;
  }
  const size_t K = parts.size();
  if (K > dd.size()) return false;
  std::vector<int64_t> q;
  std::vector<std::string> ranges;  // the Range of each index
  std::vector<Dim> lens;            // and its length
  size_t M = 0;
  for (size_t j = 0; j < K; ++j) {
    const Node* u = idx_.producer(parts[j], "Unsqueeze");
    if (!u) return false;
    const std::string& w = u->inputs[0];
    auto rw = idx_.rank(w);
    auto ua = axes_of(idx_, *u);
    if (!rw || !ua || ua->size() != 1 || ((*ua)[0] != -1 && (*ua)[0] != static_cast<int64_t>(*rw)))
      return false;
    if (j == 0) M = *rw;
    if (*rw != M || M == 0) return false;
    // w = i + z, z + i or i.
    std::string i = w;
    if (const Node* a = idx_.producer(w, "Add"); a && a->inputs.size() == 2) {
      if (fact(a->inputs[1]).zero)
        i = a->inputs[0];
      else if (fact(a->inputs[0]).zero)
        i = a->inputs[1];
    }
    // i = arange unsqueezed (through any chain of Unsqueeze) to rank M: q_j
    // is where the arange's axis ends up.
    std::vector<const Node*> chain;
    std::string r = i;
    while (const Node* ui = idx_.producer(r, "Unsqueeze")) {
      chain.push_back(ui);
      r = ui->inputs[0];
    }
    int64_t qj = 0, rank = 1;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      auto a = axes_of(idx_, **it);
      if (!a) return false;
      const int64_t out_rank = rank + static_cast<int64_t>(a->size());
      std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
      for (auto x : *a) {
        if (x < 0) x += out_rank;
        if (x < 0 || x >= out_rank || inserted[static_cast<size_t>(x)]) return false;
        inserted[static_cast<size_t>(x)] = true;
      }
      int64_t slot = 0, moved = -1;
      for (int64_t pos = 0; pos < out_rank; ++pos) {
        if (inserted[static_cast<size_t>(pos)]) continue;
        if (slot++ == qj) moved = pos;
      }
      qj = moved;
      rank = out_rank;
    }
    if (rank != static_cast<int64_t>(M) || qj < 0) return false;
    const Node* range = idx_.producer(r, "Range");
    const ValueType* tr = idx_.type(r);
    if (!range || idx_.scalar(range->inputs[0]) != 0.0 || idx_.scalar(range->inputs[2]) != 1.0 ||
        !tr || !tr->shape || tr->shape->size() != 1 || (*tr->shape)[0].is_unknown())
      return false;
    if (!q.empty() && qj <= q.back()) return false;
    q.push_back(qj);
    ranges.push_back(r);
    lens.push_back((*tr->shape)[0]);
  }
  // Every stacked index has shape P: n_j at q_j, 1 elsewhere.
  for (size_t j = 0; j < K; ++j) {
    const Shape& p = *idx_.type(idx_.producer(parts[j])->inputs[0])->shape;
    for (size_t a = 0; a < M; ++a) {
      auto it = std::find(q.begin(), q.end(), static_cast<int64_t>(a));
      bool ok = it != q.end() ? p[a].same_as(lens[static_cast<size_t>(it - q.begin())])
                              : (p[a].is_static() && p[a].value == 1);
      if (!ok) return false;
    }
  }
  std::vector<int64_t> axes;
  for (size_t a = 0; a < M; ++a)
    if (std::find(q.begin(), q.end(), static_cast<int64_t>(a)) == q.end())
      axes.push_back(static_cast<int64_t>(a));
  // Axes whose arange is not provably the whole axis: data[.., arange(n_j), ..].
  Node& node = g_.nodes[k];
  std::optional<FreshNames> fresh;
  std::string v = data;
  Shape vs = dd;
  std::vector<Node> gathers;
  for (size_t j = 0; j < K; ++j) {
    if (lens[j].same_as(dd[j])) continue;
    if (!fresh) fresh.emplace(g_);
    vs[j] = lens[j];
    std::string out = (*fresh)(node.outputs[0] + "_rows");
    g_.types[out] = ValueType{td->dtype, vs};
    gathers.push_back(make_node("Gather", {v, ranges[j]}, {out},
                                {Attr::Int("axis", static_cast<int64_t>(j))}, node));
    v = out;
  }
  if (!gathers.empty()) before_[k] = std::move(gathers);
  if (axes.empty()) {
    if (v == data) {
      forward(k, data);
      return true;
    }
    Node id = make_node("Identity", {v}, node.outputs, {}, node);
    id.name = node.name;
    node = std::move(id);
    ++changed_;
    return true;
  }
  Node un;
  if (o_.opset >= 13) {
    if (!fresh) fresh.emplace(g_);
    std::string name = (*fresh)(node.outputs[0] + "_axes");
    const auto na = static_cast<int64_t>(axes.size());
    g_.initializers.push_back(Initializer{name, TensorData::from_vector(DType::Int64, {na}, axes)});
    g_.types[name] = static_type(DType::Int64, {na});
    un = make_node("Unsqueeze", {v, name}, node.outputs, {}, node);
  } else {
    un = make_node("Unsqueeze", {v}, node.outputs, {Attr::Ints("axes", axes)}, node);
  }
  un.name = node.name;
  learn(node.outputs[0], fact(data));
  node = std::move(un);
  ++changed_;
  return true;
}

bool Folder::fold_shape_piece(size_t k) {
  const Node& n = g_.nodes[k];
  const auto& in = n.inputs;
  if (n.op_type == "Gather" && in.size() == 2) {
    const Attr* ax = n.attr("axis");
    if (ax && ax->i != 0 && ax->i != -1) return false;
    auto p = piece(in[0]);
    auto i = idx_.ints(in[1]);
    const ValueType* ti = idx_.type(in[1]);
    // A 1-D index keeps the result 1-D, like Shape's.
    if (!p || !i || i->empty() || !ti || !ti->shape || ti->shape->size() != 1) return false;
    const int64_t len = p->e - p->s;
    std::vector<int64_t> ks = *i;
    for (auto& v : ks) {
      if (v < 0) v += len;
      if (v < 0 || v >= len) return false;
    }
    for (size_t j = 1; j < ks.size(); ++j)
      if (ks[j] != ks[j - 1] + 1) return false;
    replace_by_shape(k, p->x, p->s + ks.front(), p->s + ks.back() + 1);
    return true;
  }
  if (n.op_type == "Slice" && in.size() >= 3) {
    auto p = piece(in[0]);
    if (!p) return false;
    auto st = idx_.ints(in[1]), en = idx_.ints(in[2]);
    if (!st || !en || st->size() != 1 || en->size() != 1) return false;
    if (in.size() > 3 && !in[3].empty()) {
      auto a = idx_.ints(in[3]);
      if (!a || a->size() != 1 || ((*a)[0] != 0 && (*a)[0] != -1)) return false;
    }
    if (in.size() > 4 && !in[4].empty()) {
      auto s = idx_.ints(in[4]);
      if (!s || s->size() != 1 || (*s)[0] != 1) return false;
    }
    const int64_t len = p->e - p->s;
    auto clamp = [&](int64_t v) {
      if (v < 0) v += len;
      return std::clamp<int64_t>(v, 0, len);
    };
    int64_t a = clamp((*st)[0]), b = std::max(a, clamp((*en)[0]));
    replace_by_shape(k, p->x, p->s + a, p->s + b);
    return true;
  }
  if (n.op_type == "Concat" && in.size() >= 2) {
    const Attr* ax = n.attr("axis");
    if (!ax || (ax->i != 0 && ax->i != -1)) return false;
    auto first = piece(in[0]);
    if (!first) return false;
    int64_t end = first->e;
    for (size_t j = 1; j < in.size(); ++j) {
      auto p = piece(in[j]);
      if (!p || p->x != first->x || p->s != end) return false;
      end = p->e;
    }
    replace_by_shape(k, first->x, first->s, end);
    return true;
  }
  return false;
}

Fact Folder::infer(const Node& n) {
  const std::string& op = n.op_type;
  const auto& in = n.inputs;
  if (in.empty()) return {};
  if (op == "Shape" || op == "Size") return nonneg(kDimBound);
  if (op == "Range" && in.size() == 3) {
    Fact s = fact(in[0]), l = fact(in[1]);
    auto d = idx_.scalar(in[2]);
    if (!s.nonneg || !d || !(*d > 0)) return {};
    return nonneg(std::max(s.bound, l.nonneg ? l.bound : kInf));
  }
  if (op == "ConstantOfShape") {
    const Attr* v = n.attr("value");
    if (!v || !v->t || v->t->numel() != 1) return {};
    const TensorData& t = *v->t;
    if (t.dtype == DType::Bool) return truth(t.bytes()[0] != 0 ? 1 : 0);
    if (t.dtype == DType::Int64) {
      int64_t x;
      std::memcpy(&x, t.bytes(), 8);
      if (x >= 0) return nonneg(static_cast<double>(x));
    }
    return {};
  }
  static const std::unordered_set<std::string> kMove = {
      "Unsqueeze", "Squeeze", "Reshape", "Expand",   "Flatten",        "Transpose",
      "Identity",  "Slice",   "Gather",  "GatherND", "GatherElements", "Tile"};
  if (kMove.count(op)) return fact(in[0]);
  if (op == "Concat" || op == "Min" || op == "Max") {
    Fact f = fact(in[0]);
    for (size_t j = 1; j < in.size(); ++j) {
      Fact o = fact(in[j]);
      f.nonneg = f.nonneg && o.nonneg;
      f.bound = std::max(f.bound, o.bound);
      if (f.truth != o.truth) f.truth = -1;
    }
    if (op != "Concat") f.truth = -1;
    return f;
  }
  if (op == "Where" && in.size() == 3) {
    Fact a = fact(in[1]), b = fact(in[2]);
    int t = fact(in[0]).truth;
    if (t == 1) return a;
    if (t == 0) return b;
    Fact f;
    f.nonneg = a.nonneg && b.nonneg;
    f.bound = std::max(a.bound, b.bound);
    f.truth = a.truth == b.truth ? a.truth : -1;
    return f;
  }
  if ((op == "Add" || op == "Mul") && in.size() == 2) {
    Fact a = fact(in[0]), b = fact(in[1]);
    if (is_int(idx_, in[0]) && ((op == "Mul" && (a.zero || b.zero)) || (a.zero && b.zero))) {
      Fact z = nonneg(0);
      z.zero = true;
      return z;
    }
    if (!a.nonneg || !b.nonneg) return {};
    double bound = op == "Add" ? a.bound + b.bound : a.bound * b.bound;
    return bound < kSafe ? nonneg(bound) : Fact{};
  }
  if (op == "Cast") {
    const Attr* to = n.attr("to");
    const ValueType* t = idx_.type(in[0]);
    if (!to || !t) return {};
    const auto dt = static_cast<DType>(to->i);
    Fact f = fact(in[0]);
    if (t->dtype == DType::Bool) {
      if (dt == DType::Bool) return f;
      f = nonneg(1);  // 0 or 1
    } else if (dt == DType::Bool || !is_integral(t->dtype) || !f.nonneg) {
      return {};
    }
    if (dt == DType::Int64 || dt == DType::UInt64) return f;
    if ((dt == DType::Int32 || dt == DType::UInt32) && f.bound < 2147483648.0) return f;
    return {};
  }
  if (op == "Not") {
    int t = fact(in[0]).truth;
    return truth(t == -1 ? -1 : 1 - t);
  }
  if ((op == "And" || op == "Or") && in.size() == 2) {
    int a = fact(in[0]).truth, b = fact(in[1]).truth;
    const int absorbing = op == "And" ? 0 : 1;  // decides alone
    if (a == absorbing || b == absorbing) return truth(absorbing);
    if (a == 1 - absorbing && b == 1 - absorbing) return truth(1 - absorbing);
    return {};
  }
  static const std::unordered_set<std::string> kCompare = {"Less", "LessOrEqual", "Greater",
                                                           "GreaterOrEqual", "Equal"};
  if (kCompare.count(op) && in.size() == 2) {
    // v OP c with v >= 0 and c a constant; c OP v is v (mirrored OP) c.
    std::string o = op;
    std::string v = in[0], c = in[1];
    if (!fact(v).nonneg) {
      std::swap(v, c);
      static const std::unordered_map<std::string, std::string> kMirror = {
          {"Less", "Greater"},
          {"LessOrEqual", "GreaterOrEqual"},
          {"Greater", "Less"},
          {"GreaterOrEqual", "LessOrEqual"},
          {"Equal", "Equal"}};
      o = kMirror.at(op);
    }
    auto cv = const_values(idx_, c);
    if (!fact(v).nonneg || !cv || cv->empty()) return {};
    const int64_t hi = *std::max_element(cv->begin(), cv->end());
    if (o == "Less" && hi <= 0) return truth(0);
    if ((o == "LessOrEqual" || o == "Equal") && hi < 0) return truth(0);
    if (o == "Greater" && hi < 0) return truth(1);
    if (o == "GreaterOrEqual" && hi <= 0) return truth(1);
    return {};
  }
  return {};
}

}  // namespace

size_t fold_shape_arithmetic(Graph& g, const PassOptions& o) {
  size_t n = Folder(g, o).run();
  // What the rewrites orphaned goes now, so the passes after this one count
  // only live readers.
  if (n) remove_unused(g);
  return n;
}

}  // namespace pt2onnx
