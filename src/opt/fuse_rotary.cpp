// Rotary position embedding written by hand (transformers' apply_rotary_pos_emb)
// becomes one RotaryEmbedding: ONNX RotaryEmbedding-23 for the standard
// target at opset >= 23, com.microsoft RotaryEmbedding for the onnxruntime
// target (any opset). Other targets / opsets: nothing to emit, nothing done.
//
// Matched (x: rank 4, last dim D static and even, h = D / 2; operand orders
// of Add / Mul free):
//   rotate_half:  Add(Mul(x, C), Mul(Concat(Neg(Slice(x, h:)), Slice(x, :h), axis=-1), S))
//   interleaved:  Add(Mul(x, C), Mul(R, S)), R = Reshape(Concat(Unsqueeze(Neg(
//                 Slice(x, 1::2), -1)), Unsqueeze(Slice(x, 0::2), -1), axis=-1)) merging
//                 the last two axes (GPT-J's rotate_every_two)
//   partial:      x = Slice(k, :rd) and the rotation's output concatenated
//                 with Slice(k, rd:) on the last axis (GPT-NeoX, Phi, GPT-J):
//                 the fused op reads k, rotary_embedding_dim = rd.
// The fused ops use one cos / sin value per rotated pair, so C (and S) must be
// proven equal on both elements of each pair: C is reached from a value `a`
// of shape [B, S, h] (B, S those of x) through
//   rotate_half: Concat(a, a, axis=-1);  interleaved: Reshape(Expand(
//   Unsqueeze(a, -1)) to [..., h, 2]) merging the last two axes
//   (repeat_interleave by 2),
// then elementwise ops (Cos, Sin, Neg, Cast, Identity, Mul / Div by a
// one-element constant) and one Unsqueeze at the head axis (1: x is
// [B, H, S, D]; 2: x is [B, S, H, D]), in any order. The cache passed is those
// same elementwise ops applied to `a` (computed once per C; CSE merges
// across layers). x as [B, S, H, D] goes to the op as [B, S, H * D]
// (num_heads = H, static) and back.
// com.microsoft's caches are [max_position, h] rows picked by position_ids:
// the per-(batch, position) cache goes flattened to [B * S, h] with
// position_ids = b * S + s, which picks the same rows.
//
// A cache of batch 1 read by an x of another batch (transformers' positions
// without position_ids: cache_position[None]) is expanded to x's batch first;
// the ops take no batch broadcast.
//
// Left alone: C / S not proven pair-equal, or of another batch (other than
// 1) / sequence shape than x; Slice boundaries other than
// h / steps other than 1 (2 interleaved); the Neg on the first half (or the
// even elements); interior values read outside the pattern or graph outputs;
// unknown ranks / dims; dtypes other than float, float16, bfloat16.
#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <unordered_map>

#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

namespace {

bool interior(const GraphIndex& ix, const std::string& v) {
  return ix.readers(v) == 1 && !ix.is_graph_output(v);
}

std::optional<Shape> shape_of(const GraphIndex& ix, const std::string& v) {
  const ValueType* t = ix.type(v);
  if (!t || !t->shape) return std::nullopt;
  return *t->shape;
}

std::optional<int64_t> last_dim(const GraphIndex& ix, const std::string& v) {
  auto s = shape_of(ix, v);
  if (!s || s->empty() || !s->back().is_static()) return std::nullopt;
  return s->back().value;
}

// A single axis from a one-element constant, normalized for rank r.
std::optional<int64_t> one_axis(const GraphIndex& ix, const std::string& v, size_t r) {
  auto a = ix.ints(v);
  if (!a || a->size() != 1) return std::nullopt;
  int64_t ax = (*a)[0] < 0 ? (*a)[0] + static_cast<int64_t>(r) : (*a)[0];
  if (ax < 0 || ax >= static_cast<int64_t>(r)) return std::nullopt;
  return ax;
}

// Slice(x, start, end, axes=[last], step) with start >= 0, end clamped to the
// static last dim.
struct LastSlice {
  std::string x;
  int64_t start, end, step;
};
std::optional<LastSlice> last_slice(const GraphIndex& ix, const std::string& v) {
  const Node* n = ix.producer(v, "Slice");
  if (!n || n->inputs.size() < 4 || n->inputs[3].empty()) return std::nullopt;
  auto r = ix.rank(n->inputs[0]);
  auto d = last_dim(ix, n->inputs[0]);
  if (!r || !d) return std::nullopt;
  auto ax = one_axis(ix, n->inputs[3], *r);
  if (!ax || *ax != static_cast<int64_t>(*r) - 1) return std::nullopt;
  auto s = ix.ints(n->inputs[1]);
  auto e = ix.ints(n->inputs[2]);
  if (!s || !e || s->size() != 1 || e->size() != 1) return std::nullopt;
  int64_t step = 1;
  if (n->inputs.size() > 4 && !n->inputs[4].empty()) {
    auto st = ix.ints(n->inputs[4]);
    if (!st || st->size() != 1) return std::nullopt;
    step = (*st)[0];
  }
  int64_t start = (*s)[0], end = (*e)[0];
  if (start < 0) start += *d;
  if (end < 0) end += *d;
  if (start < 0 || end < start) return std::nullopt;
  return LastSlice{n->inputs[0], start, std::min(end, *d), step};
}

// Where a cos / sin operand comes from: `a` (shape [B, S, h]) through the
// elementwise ops `replay` (applied in order), unsqueezed at `head_axis`.
struct CacheSource {
  std::string a;
  std::vector<const Node*> replay;
  int64_t head_axis = -1;
};

bool scalar_constant_operand(const GraphIndex& ix, const std::string& c, const std::string& other) {
  const TensorData* t = ix.constant(c);
  auto r = ix.rank(other);
  return t && t->numel() == 1 && r && t->dims.size() <= *r;
}

// The last two values of a shape tensor of `len` elements: a constant, or a
// Concat whose last input is a constant of two or more values.
std::optional<std::array<int64_t, 2>> trailing_ints(const GraphIndex& ix, const std::string& v,
                                                    size_t len) {
  const ValueType* t = ix.type(v);
  if (!t || !t->shape || t->shape->size() != 1 || !(*t->shape)[0].is_static() ||
      (*t->shape)[0].value != static_cast<int64_t>(len))
    return std::nullopt;
  auto vals = ix.ints(v);
  if (!vals) {
    const Node* c = ix.producer(v, "Concat");
    if (!c || c->inputs.empty()) return std::nullopt;
    vals = ix.ints(c->inputs.back());
  }
  if (!vals || vals->size() < 2) return std::nullopt;
  return std::array<int64_t, 2>{(*vals)[vals->size() - 2], vals->back()};
}

// The value `v` (rank 4 after the head Unsqueeze) traced back to its pair-
// duplicated source; nullopt when equality of the pair elements is not proven.
std::optional<CacheSource> trace_cache(const GraphIndex& ix, std::string v, bool interleaved) {
  CacheSource src;
  bool duplicated = false;
  for (int steps = 0; steps < 16 && !duplicated; ++steps) {
    const Node* n = ix.producer(v);
    if (!n || !n->domain.empty()) return std::nullopt;
    const std::string& op = n->op_type;
    if (op == "Unsqueeze" && n->inputs.size() == 2) {
      auto r = ix.rank(n->outputs[0]);
      if (!r || *r != 4 || src.head_axis >= 0) return std::nullopt;
      auto ax = one_axis(ix, n->inputs[1], *r);
      if (!ax || (*ax != 1 && *ax != 2)) return std::nullopt;
      src.head_axis = *ax;
      v = n->inputs[0];
    } else if (op == "Cos" || op == "Sin" || op == "Neg" || op == "Cast" || op == "Identity") {
      src.replay.push_back(n);
      v = n->inputs[0];
    } else if ((op == "Mul" || op == "Div") && n->inputs.size() == 2) {
      if (scalar_constant_operand(ix, n->inputs[1], n->inputs[0])) {
        v = n->inputs[0];
      } else if (op == "Mul" && scalar_constant_operand(ix, n->inputs[0], n->inputs[1])) {
        v = n->inputs[1];
      } else {
        return std::nullopt;
      }
      src.replay.push_back(n);
    } else if (!interleaved && op == "Concat" && n->inputs.size() == 2 &&
               n->inputs[0] == n->inputs[1]) {
      auto r = ix.rank(n->outputs[0]);
      const Attr* axis = n->attr("axis");
      if (!r || !axis || !is_last_axis(axis->i, *r)) return std::nullopt;
      v = n->inputs[0];
      duplicated = true;
    } else if (interleaved && op == "Reshape") {
      // Reshape(Expand(Unsqueeze(a, -1), [..., h, 2])) to [..., 2h]: the
      // Expand input is a's shape plus a last axis of 1, the Expand's shape
      // ends in (h, 2), and the Reshape output keeps a's leading dims; with
      // as many elements in and out, the Expand broadcast only the last axis
      // and the Reshape merges the last two: each pair holds one a element.
      const Node* e = ix.producer(n->inputs[0], "Expand");
      if (!e || e->inputs.size() != 2) return std::nullopt;
      const Node* u = ix.producer(e->inputs[0], "Unsqueeze");
      auto ein = shape_of(ix, e->inputs[0]);
      auto out = shape_of(ix, n->outputs[0]);
      if (!u || u->inputs.size() != 2 || !ein || !out || ein->size() < 2 ||
          out->size() + 1 != ein->size())
        return std::nullopt;
      auto ax = one_axis(ix, u->inputs[1], ein->size());
      if (!ax || *ax != static_cast<int64_t>(ein->size()) - 1) return std::nullopt;
      const Dim& h = (*ein)[ein->size() - 2];
      auto tail = trailing_ints(ix, e->inputs[1], ein->size());
      if (!h.is_static() || !tail || (*tail)[0] != h.value || (*tail)[1] != 2 ||
          !out->back().is_static() || out->back().value != 2 * h.value)
        return std::nullopt;
      for (size_t i = 0; i + 1 < out->size(); ++i)
        if (!(*ein)[i].same_as((*out)[i])) return std::nullopt;
      v = u->inputs[0];
      duplicated = true;
    } else {
      return std::nullopt;
    }
  }
  if (!duplicated) return std::nullopt;
  // The head Unsqueeze may come before the duplication (GPT-J).
  if (src.head_axis < 0) {
    const Node* u = ix.producer(v, "Unsqueeze");
    auto r = ix.rank(v);
    if (!u || u->inputs.size() != 2 || !r || *r != 4) return std::nullopt;
    auto ax = one_axis(ix, u->inputs[1], 4);
    if (!ax || (*ax != 1 && *ax != 2)) return std::nullopt;
    src.head_axis = *ax;
    v = u->inputs[0];
  }
  if (ix.rank(v) != 3u) return std::nullopt;
  std::reverse(src.replay.begin(), src.replay.end());
  src.a = v;
  return src;
}

// x's rotated operand in the rotate_half form: Concat(Neg(Slice(x, h:D)),
// Slice(x, 0:h)); `nodes` gets the interior values.
std::optional<std::string> rotate_half_source(const GraphIndex& ix, const std::string& r,
                                              std::vector<std::string>& interiors) {
  const Node* cat = ix.producer(r, "Concat");
  if (!cat || cat->inputs.size() != 2) return std::nullopt;
  auto rank = ix.rank(r);
  const Attr* axis = cat->attr("axis");
  if (!rank || !axis || !is_last_axis(axis->i, *rank)) return std::nullopt;
  const Node* neg = ix.producer(cat->inputs[0], "Neg");
  if (!neg) return std::nullopt;
  auto hi = last_slice(ix, neg->inputs[0]);
  auto lo = last_slice(ix, cat->inputs[1]);
  if (!hi || !lo || hi->x != lo->x || hi->step != 1 || lo->step != 1) return std::nullopt;
  auto d = last_dim(ix, hi->x);
  if (!d || *d % 2 || lo->start != 0 || lo->end != *d / 2 || hi->start != *d / 2 || hi->end != *d)
    return std::nullopt;
  interiors.insert(interiors.end(), {cat->inputs[0], cat->inputs[1], neg->inputs[0]});
  return hi->x;
}

// The same for rotate_every_two: Reshape(Concat(Unsqueeze(Neg(Slice(x, 1::2)), -1),
// Unsqueeze(Slice(x, 0::2), -1), axis=-1)) merging the last two axes.
std::optional<std::string> interleaved_source(const GraphIndex& ix, const std::string& r,
                                              std::vector<std::string>& interiors) {
  const Node* re = ix.producer(r, "Reshape");
  if (!re) return std::nullopt;
  const Node* cat = ix.producer(re->inputs[0], "Concat");
  if (!cat || cat->inputs.size() != 2) return std::nullopt;
  auto crank = ix.rank(cat->outputs[0]);
  const Attr* axis = cat->attr("axis");
  if (!crank || *crank != 5 || !axis || !is_last_axis(axis->i, *crank)) return std::nullopt;
  std::string un[2];
  for (int i = 0; i < 2; ++i) {
    const Node* u = ix.producer(cat->inputs[i], "Unsqueeze");
    if (!u || u->inputs.size() != 2) return std::nullopt;
    auto ax = one_axis(ix, u->inputs[1], 5);
    if (!ax || *ax != 4) return std::nullopt;
    un[i] = u->inputs[0];
  }
  const Node* neg = ix.producer(un[0], "Neg");
  if (!neg) return std::nullopt;
  auto odd = last_slice(ix, neg->inputs[0]);
  auto even = last_slice(ix, un[1]);
  if (!odd || !even || odd->x != even->x || odd->step != 2 || even->step != 2 || odd->start != 1 ||
      even->start != 0)
    return std::nullopt;
  auto d = last_dim(ix, odd->x);
  if (!d || *d % 2 || odd->end != *d || even->end != *d) return std::nullopt;
  // The merge: Reshape's output is x's shape.
  auto xs = shape_of(ix, odd->x);
  auto rs = shape_of(ix, r);
  if (!xs || !rs || xs->size() != rs->size()) return std::nullopt;
  for (size_t i = 0; i < xs->size(); ++i)
    if (!(*xs)[i].same_as((*rs)[i])) return std::nullopt;
  interiors.insert(interiors.end(),
                   {re->inputs[0], cat->inputs[0], cat->inputs[1], un[0], neg->inputs[0], un[1]});
  return odd->x;
}

struct Match {
  size_t last;        // the node replaced (the Add, or the partial Concat)
  std::string input;  // what the fused op rotates (k when partial)
  CacheSource cos, sin;
  bool interleaved = false;
  int64_t rotary_dim = 0;  // set when partial
  Shape shape;             // of `input`
  bool batch_one = false;  // caches of batch 1, x of another batch
};

std::optional<Match> match_add(const GraphIndex& ix, size_t index) {
  const Node& add = ix.graph().nodes[index];
  if (!is_op(&add, "Add") || add.inputs.size() != 2) return std::nullopt;
  for (int order = 0; order < 2; ++order) {
    const Node* m1 = ix.producer(add.inputs[order], "Mul");
    const Node* m2 = ix.producer(add.inputs[1 - order], "Mul");
    if (!m1 || !m2 || m1 == m2) continue;
    for (int o2 = 0; o2 < 2; ++o2) {
      const std::string& r = m2->inputs[o2];
      const std::string& s = m2->inputs[1 - o2];
      for (bool interleaved : {false, true}) {
        std::vector<std::string> interiors{m1->outputs[0], m2->outputs[0], r};
        auto x = interleaved ? interleaved_source(ix, r, interiors)
                             : rotate_half_source(ix, r, interiors);
        if (!x) continue;
        std::string c;
        if (m1->inputs[0] == *x)
          c = m1->inputs[1];
        else if (m1->inputs[1] == *x)
          c = m1->inputs[0];
        else
          continue;
        bool ok = std::all_of(interiors.begin(), interiors.end(),
                              [&](const std::string& v) { return interior(ix, v); });
        auto xs = shape_of(ix, *x);
        const ValueType* xt = ix.type(*x);
        if (!ok || !xs || xs->size() != 4 || !xt) continue;
        if (xt->dtype != DType::Float && xt->dtype != DType::Float16 &&
            xt->dtype != DType::BFloat16)
          continue;
        auto cs = trace_cache(ix, c, interleaved);
        auto ss = trace_cache(ix, s, interleaved);
        if (!cs || !ss || cs->head_axis != ss->head_axis) continue;
        // Caches: [B, S, D / 2] with x's B and S.
        int64_t seq_axis = cs->head_axis == 1 ? 2 : 1;
        bool shapes = true, batch_one = false;
        for (const std::string& a : {cs->a, ss->a}) {
          auto as = shape_of(ix, a);
          shapes = shapes && as && as->size() == 3 &&
                   ((*as)[0].same_as((*xs)[0]) || (*as)[0].same_as(Dim::of(1))) &&
                   (*as)[1].same_as((*xs)[static_cast<size_t>(seq_axis)]) && (*as)[2].is_static() &&
                   2 * (*as)[2].value == xs->back().value;
          batch_one = batch_one || (shapes && !(*as)[0].same_as((*xs)[0]));
        }
        if (!shapes) continue;
        Match m{index, *x, *cs, *ss, interleaved, 0, *xs, batch_one};
        return m;
      }
    }
  }
  return std::nullopt;
}

// x = Slice(k, 0:rd), the rotation's output concatenated with Slice(k, rd:):
// the match moved to that Concat, reading k.
void extend_partial(const GraphIndex& ix, Match& m) {
  const Node& add = ix.graph().nodes[m.last];
  auto rot = last_slice(ix, m.input);
  if (!rot || rot->start != 0 || rot->step != 1) return;
  // x read by the pattern alone: Mul(x, C) and the two Slices.
  if (ix.readers(m.input) != 3 || ix.is_graph_output(m.input)) return;
  if (!interior(ix, add.outputs[0])) return;
  auto users = ix.consumers(add.outputs[0]);
  if (users.size() != 1) return;
  const Node& cat = ix.graph().nodes[users[0]];
  const Attr* axis = cat.attr("axis");
  if (!is_op(&cat, "Concat") || cat.inputs.size() != 2 || cat.inputs[0] != add.outputs[0] ||
      !axis || !is_last_axis(axis->i, 4))
    return;
  auto pass = last_slice(ix, cat.inputs[1]);
  auto dk = last_dim(ix, rot->x);
  auto ks = shape_of(ix, rot->x);
  if (!pass || !dk || !ks || pass->x != rot->x || pass->step != 1 || pass->start != rot->end ||
      pass->end != *dk || !interior(ix, cat.inputs[1]) || rot->end >= *dk)
    return;
  m.rotary_dim = rot->end;
  m.last = users[0];
  m.input = rot->x;
  m.shape = *ks;
}

class Emitter {
 public:
  Emitter(Graph& g, const GraphIndex& ix, const PassOptions& o) : g_(g), ix_(ix), o_(o), names_(g) {
    for (auto& n : g.nodes) names_.take(n.name);
  }

  std::vector<Node> emit(const Match& m) {
    const Node& last = g_.nodes[m.last];
    const Shape& xs = m.shape;
    bool bshd = m.cos.head_axis == 2;
    int64_t heads = bshd ? xs[2].value : xs[1].value;
    int64_t d = xs[3].value;
    if ((bshd || m.rotary_dim) && !(bshd ? xs[2] : xs[1]).is_static()) return {};
    std::vector<Node> out;
    std::string cos = cache(m.cos, out);
    std::string sin = cache(m.sin, out);
    if (m.batch_one) {
      cos = to_batch_of(cos, m.input, xs[0], last, out);
      sin = to_batch_of(sin, m.input, xs[0], last, out);
    }
    DType dt = g_.type_of(m.input)->dtype;
    std::string x = m.input;
    std::string y = last.outputs[0];
    if (bshd) {
      x = fresh(m.input + "_3d", dt, {xs[0], xs[1], Dim::of(heads * d)});
      out.push_back(node("Reshape", {m.input, ints({0, 0, -1})}, {x}, {}, last));
      y = fresh(last.outputs[0] + "_3d", dt, {xs[0], xs[1], Dim::of(heads * d)});
    }
    std::vector<Attr> attrs;
    if (m.interleaved) attrs.push_back(Attr::Int("interleaved", 1));
    bool attrs_needed = bshd || m.rotary_dim;
    if (attrs_needed) {
      attrs.push_back(Attr::Int("num_heads", heads));
      attrs.push_back(Attr::Int("rotary_embedding_dim", m.rotary_dim ? m.rotary_dim : d));
    }
    if (o_.onnxruntime()) {
      auto [pos, cos_flat] = flat(cos, last, out);
      std::string sin_flat = flat(sin, last, out).second;
      out.push_back(
          node("RotaryEmbedding", {x, pos, cos_flat, sin_flat}, {y}, attrs, last, "com.microsoft"));
    } else {
      out.push_back(node("RotaryEmbedding", {x, cos, sin}, {y}, attrs, last));
    }
    if (bshd)
      out.push_back(node("Reshape", {y, ints({0, 0, heads, d})}, {last.outputs[0]}, {}, last));
    return out;
  }

 private:
  // make_node with a node name unique in the graph.
  Node node(std::string op, std::vector<std::string> in, std::vector<std::string> outs,
            std::vector<Attr> attrs, const Node& like, std::string domain = "") {
    Node n = make_node(op, std::move(in), std::move(outs), std::move(attrs), like, domain);
    n.name = names_(n.name);
    return n;
  }

  std::string fresh(const std::string& base, DType t, Shape s) {
    std::string n = names_(base);
    g_.types[n] = ValueType{t, std::move(s)};
    return n;
  }

  std::string ints(const std::vector<int64_t>& v, bool scalar = false) {
    std::string key = std::to_string(scalar);
    for (int64_t i : v) key += "," + std::to_string(i);
    auto it = consts_.find(key);
    if (it != consts_.end()) return it->second;
    std::vector<int64_t> dims;
    if (!scalar) dims.push_back(static_cast<int64_t>(v.size()));
    std::string n = names_("rotary_const");
    g_.initializers.push_back(Initializer{n, TensorData::from_vector(DType::Int64, dims, v)});
    g_.types[n] = static_type(DType::Int64, dims);
    consts_[key] = n;
    return n;
  }

  // The half-size cache: the elementwise ops of `s` applied to s.a.
  std::string cache(const CacheSource& s, std::vector<Node>& out) {
    std::string key = s.a;
    for (const Node* n : s.replay) key += "|" + n->outputs[0];
    auto it = caches_.find(key);
    if (it != caches_.end()) return it->second;
    Shape shape = *g_.type_of(s.a)->shape;
    std::string v = s.a;
    for (const Node* n : s.replay) {
      std::vector<std::string> in = n->inputs;
      for (auto& i : in)
        if (ix_.constant(i) == nullptr) i = v;
      std::string o = fresh(n->outputs[0] + "_half", g_.type_of(n->outputs[0])->dtype, shape);
      Node copy = node(n->op_type, in, {o}, n->attrs, *n);
      out.push_back(std::move(copy));
      v = o;
    }
    caches_[key] = v;
    return v;
  }

  // Dims [start, end) of x's shape as `to`: Shape's start / end exist from
  // opset 15; before it, the whole shape and a Slice.
  void shape_range(const std::string& x, int64_t start, int64_t end, const std::string& to,
                   const Node& like, std::vector<Node>& out) {
    if (o_.opset >= 15) {
      out.push_back(
          node("Shape", {x}, {to}, {Attr::Int("start", start), Attr::Int("end", end)}, like));
      return;
    }
    const ValueType* t = g_.type_of(x);
    const Dim rank =
        t && t->shape ? Dim::of(static_cast<int64_t>(t->shape->size())) : Dim::unknown();
    std::string shape = fresh(x + "_shape", DType::Int64, {rank});
    out.push_back(node("Shape", {x}, {shape}, {}, like));
    out.push_back(node("Slice", {shape, ints({start}), ints({end}), ints({0})}, {to}, {}, like));
  }

  // c [1, S, h] expanded to x's batch B: Expand(c, [B, 1, 1]).
  std::string to_batch_of(const std::string& c, const std::string& x, const Dim& b,
                          const Node& like, std::vector<Node>& out) {
    std::string key = c + "#" + b.sym + "#" + std::to_string(b.value);
    auto it = expanded_.find(key);
    if (it != expanded_.end()) return it->second;
    std::string bx = fresh(x + "_batch", DType::Int64, {Dim::of(1)});
    shape_range(x, 0, 1, bx, like, out);
    std::string shape = fresh(c + "_batch_shape", DType::Int64, {Dim::of(3)});
    out.push_back(node("Concat", {bx, ints({1, 1})}, {shape}, {Attr::Int("axis", 0)}, like));
    const ValueType* t = g_.type_of(c);
    std::string y = fresh(c + "_batched", t->dtype, {b, (*t->shape)[1], (*t->shape)[2]});
    out.push_back(node("Expand", {c, shape}, {y}, {}, like));
    expanded_[key] = y;
    return y;
  }

  // com.microsoft's form: position_ids b * S + s and the cache as [B * S, h].
  std::pair<std::string, std::string> flat(const std::string& c, const Node& like,
                                           std::vector<Node>& out) {
    const ValueType* t = g_.type_of(c);
    const Shape& cs = *t->shape;
    auto& [pos, flat_cache] = flat_[c];
    if (!flat_cache.empty()) return {pos, flat_cache};
    // Position ids: one set per [B, S] (cos and sin share it).
    std::string bs_key = cs[0].sym + "#" + std::to_string(cs[0].value) + "," + cs[1].sym + "#" +
                         std::to_string(cs[1].value);
    auto it = positions_.find(bs_key);
    if (it != positions_.end()) {
      pos = it->second;
    } else {
      Dim bs = Dim::unknown();
      if (cs[0].is_static() && cs[1].is_static()) bs = Dim::of(cs[0].value * cs[1].value);
      // Range(0, B * S) as [B, S]: Shape [B, S], ReduceProd, Range, Reshape.
      std::string bs2 = fresh(c + "_bs_shape", DType::Int64, {Dim::of(2)});
      shape_range(c, 0, 2, bs2, like, out);
      std::string n = fresh(c + "_bs", DType::Int64, {});
      out.push_back(node("ReduceProd", {bs2}, {n}, {Attr::Int("keepdims", 0)}, like));
      std::string range = fresh(c + "_range", DType::Int64, {bs});
      out.push_back(node("Range", {ints({0}, true), n, ints({1}, true)}, {range}, {}, like));
      pos = fresh("rotary_position_ids", DType::Int64, {cs[0], cs[1]});
      out.push_back(node("Reshape", {range, bs2}, {pos}, {}, like));
      positions_[bs_key] = pos;
    }
    flat_cache = fresh(c + "_flat", t->dtype, {Dim::unknown(), cs[2]});
    out.push_back(node("Reshape", {c, ints({-1, cs[2].value})}, {flat_cache}, {}, like));
    return {pos, flat_cache};
  }

  Graph& g_;
  const GraphIndex& ix_;
  const PassOptions& o_;
  FreshNames names_;
  std::unordered_map<std::string, std::string> consts_, caches_, positions_, expanded_;
  std::unordered_map<std::string, std::pair<std::string, std::string>> flat_;
};

}  // namespace

size_t fuse_rotary(Graph& g, const PassOptions& o) {
  if (!o.onnxruntime() && o.opset < 23) return 0;
  GraphIndex ix(g);
  std::vector<Match> matches;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    auto m = match_add(ix, k);
    if (!m) continue;
    extend_partial(ix, *m);
    matches.push_back(std::move(*m));
  }
  if (matches.empty()) return 0;
  // Graph order of the replaced nodes: shared caches are made at the first.
  std::sort(matches.begin(), matches.end(),
            [](const Match& a, const Match& b) { return a.last < b.last; });
  Emitter emit(g, ix, o);
  Rewriter rw(g);
  size_t fused = 0;
  for (const Match& m : matches) {
    if (rw.touched(m.last)) continue;
    auto nodes = emit.emit(m);
    if (nodes.empty()) continue;
    rw.replace(m.last, std::move(nodes));
    ++fused;
  }
  rw.apply();
  return fused;
}

}  // namespace pt2onnx
