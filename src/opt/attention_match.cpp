#include "opt/attention_match.h"

#include <cmath>

namespace pt2onnx {

namespace {

// The converter emits the same decomposition for both (torch.compile's
// graphs carry the CPU flash kernel AOTAutograd dispatches SDPA to).
bool is_sdpa(std::string_view target) {
  return target == "torch.ops.aten.scaled_dot_product_attention.default" ||
         target == "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default";
}

const Shape* shape_of(const GraphIndex& idx, const std::string& v) {
  const ValueType* t = idx.type(v);
  return t && t->shape ? &*t->shape : nullptr;
}

// The axes of an Unsqueeze (input since opset 13, attribute before).
std::optional<std::vector<int64_t>> unsqueeze_axes(const GraphIndex& idx, const Node& n) {
  if (n.inputs.size() > 1) return idx.ints(n.inputs[1]);
  if (const Attr* a = n.attr("axes")) return a->ints;
  return std::nullopt;
}

// A constant scalar, or the Cast of one (how float16 / bfloat16 scalars are
// written), rounded to the type cast to.
std::optional<double> const_scalar(const GraphIndex& idx, const std::string& v) {
  if (auto s = idx.scalar(v)) return s;
  const Node* c = idx.producer(v, "Cast");
  const Attr* to = c ? c->attr("to") : nullptr;
  if (!to) return std::nullopt;
  auto s = idx.scalar(c->inputs[0]);
  if (!s) return std::nullopt;
  switch (static_cast<DType>(to->i)) {
    case DType::Float:
      return static_cast<double>(static_cast<float>(*s));
    case DType::Double:
      return s;
    case DType::Float16:
      return half_to_float(float_to_half(static_cast<float>(*s)));
    case DType::BFloat16:
      return bfloat16_to_float(float_to_bfloat16(static_cast<float>(*s)));
    default:
      return std::nullopt;
  }
}

bool is_scalar(const GraphIndex& idx, const std::string& v, double want) {
  auto s = const_scalar(idx, v);
  return s && (*s == want || (std::isinf(want) && *s == want));
}

// A node of this SDPA (same FX node), producing `v`, of type `op`.
const Node* sdpa_node(const GraphIndex& idx, const std::string& v, std::string_view op,
                      const std::string& fx_node) {
  const Node* n = idx.producer(v, op);
  return n && n->fx_node() == fx_node && is_sdpa(n->fx_target()) ? n : nullptr;
}

// `limit` holds the size `d`: a constant equal to a static d, or
// Squeeze(Shape[start=a, end=a+1](x)) with x's dim a the same as d.
bool proves_dim(const GraphIndex& idx, const std::string& limit, const Dim& d) {
  if (auto s = idx.scalar(limit)) return d.is_static() && *s == static_cast<double>(d.value);
  const Node* sq = idx.producer(limit, "Squeeze");
  if (!sq) return false;
  const Node* sh = idx.producer(sq->inputs[0], "Shape");
  if (!sh) return false;
  const Attr* st = sh->attr("start");
  const Attr* en = sh->attr("end");
  const Shape* xs = shape_of(idx, sh->inputs[0]);
  if (!st || !en || !xs) return false;
  int64_t a = st->i < 0 ? st->i + static_cast<int64_t>(xs->size()) : st->i;
  int64_t b = en->i < 0 ? en->i + static_cast<int64_t>(xs->size()) : en->i;
  if (a < 0 || b != a + 1 || a >= static_cast<int64_t>(xs->size())) return false;
  return (*xs)[static_cast<size_t>(a)].same_as(d);
}

// Range(0, limit, 1): returns limit.
const Node* range_from_zero(const GraphIndex& idx, const std::string& v) {
  const Node* r = idx.producer(v, "Range");
  if (!r || r->inputs.size() != 3 || !is_scalar(idx, r->inputs[0], 0) ||
      !is_scalar(idx, r->inputs[2], 1))
    return nullptr;
  return r;
}

// The value under a chain of Unsqueeze of `v`, with `axis` (counted from the
// end) the only axis of v that may be other than 1.
std::optional<std::string> under_unsqueezes(const GraphIndex& idx, const std::string& v,
                                            int64_t axis_from_end) {
  const Shape* s = shape_of(idx, v);
  if (!s || s->size() < static_cast<size_t>(axis_from_end)) return std::nullopt;
  for (size_t i = 0; i < s->size(); ++i)
    if (i != s->size() - static_cast<size_t>(axis_from_end) && !(*s)[i].same_as(Dim::of(1)))
      return std::nullopt;
  std::string x = v;
  while (const Node* u = idx.producer(x, "Unsqueeze")) x = u->inputs[0];
  const Shape* xs = shape_of(idx, x);
  if (!xs || xs->size() != 1) return std::nullopt;
  return x;
}

// The converter's causal mask: LessOrEqual(cols, rows), cols[j] = j for
// j < S on the last axis, rows[i] = i for i < L on the axis before it.
bool is_converter_causal(const GraphIndex& idx, const std::string& c, const Dim& l, const Dim& s) {
  const Node* le = idx.producer(c, "LessOrEqual");
  if (!le || !is_sdpa(le->fx_target())) return false;
  auto cols = under_unsqueezes(idx, le->inputs[0], 1);
  auto rows = under_unsqueezes(idx, le->inputs[1], 2);
  if (!cols || !rows) return false;
  const Node* rc = range_from_zero(idx, *cols);
  const Node* rr = range_from_zero(idx, *rows);
  return rc && rr && proves_dim(idx, rc->inputs[1], s) && proves_dim(idx, rr->inputs[1], l);
}

// Undoes a head repeat: v = Reshape(Expand(Unsqueeze(base, axis 2))) whose
// types are [B,H,T,D] -> [B,H,1,T,D] -> [B,H,r,T,D] -> [B,H*r,T,D]. Returns
// (base, nodes) or nullopt when v is no such repeat.
std::optional<std::pair<std::string, std::vector<size_t>>> undo_repeat(const GraphIndex& idx,
                                                                       const std::string& v) {
  const Node* rs = idx.producer(v, "Reshape");
  if (!rs || idx.readers(v) != 1) return std::nullopt;
  const Node* ex = idx.producer(rs->inputs[0], "Expand");
  if (!ex || idx.readers(rs->inputs[0]) != 1) return std::nullopt;
  const Node* un = idx.producer(ex->inputs[0], "Unsqueeze");
  if (!un || idx.readers(ex->inputs[0]) != 1) return std::nullopt;
  auto axes = unsqueeze_axes(idx, *un);
  if (!axes || axes->size() != 1 || ((*axes)[0] != 2 && (*axes)[0] != -3)) return std::nullopt;
  const std::string& base = un->inputs[0];
  const Shape* b = shape_of(idx, base);
  const Shape* e = shape_of(idx, ex->outputs[0]);
  const Shape* r = shape_of(idx, v);
  if (!b || !e || !r || b->size() != 4 || e->size() != 5 || r->size() != 4) return std::nullopt;
  const Shape& B = *b;
  const Shape& E = *e;
  const Shape& R = *r;
  if (!E[0].same_as(B[0]) || !E[1].same_as(B[1]) || !E[3].same_as(B[2]) || !E[4].same_as(B[3]) ||
      !E[2].is_static() || !B[1].is_static())
    return std::nullopt;
  if (!R[0].same_as(B[0]) || !R[2].same_as(B[2]) || !R[3].same_as(B[3]) ||
      !R[1].same_as(Dim::of(B[1].value * E[2].value)))
    return std::nullopt;
  std::vector<size_t> nodes{*idx.producer_index(v), *idx.producer_index(rs->inputs[0]),
                            *idx.producer_index(ex->inputs[0])};
  return std::make_pair(base, nodes);
}

struct Cache {
  std::string past, fresh, present;
  size_t concat;
};

// base = Concat(past, fresh, axis 2), past a graph input, base a graph output
// read by one node besides.
std::optional<Cache> kv_cache(const GraphIndex& idx, const std::string& base) {
  const Node* c = idx.producer(base, "Concat");
  if (!c || c->inputs.size() != 2 || !idx.is_graph_output(base) || idx.readers(base) != 2)
    return std::nullopt;
  const Attr* axis = c->attr("axis");
  if (!axis || (axis->i != 2 && axis->i != -2)) return std::nullopt;
  bool input = false;
  for (auto& i : idx.graph().inputs) input = input || i.name == c->inputs[0];
  if (!input) return std::nullopt;
  return Cache{c->inputs[0], c->inputs[1], base, *idx.producer_index(base)};
}

bool attention_dtype(DType t) {
  return t == DType::Float || t == DType::Float16 || t == DType::BFloat16 || t == DType::Double;
}

}  // namespace

std::optional<SdpaMatch> match_sdpa(const GraphIndex& idx, size_t last) {
  const Graph& g = idx.graph();
  const Node& mm = g.nodes[last];
  // The fusions give their last node the output's type: a value without one
  // (a pass that left it untyped) is no match rather than a null read.
  if (!is_op(&mm, "MatMul") || !is_sdpa(mm.fx_target()) || mm.inputs.size() != 2 ||
      mm.outputs.size() != 1 || !idx.type(mm.outputs[0]))
    return std::nullopt;
  const std::string& fx = mm.fx_node();
  SdpaMatch m;
  m.last = last;
  auto add = [&](const std::string& v) { m.nodes.push_back(*idx.producer_index(v)); };

  // Post-softmax guard.
  std::string p = mm.inputs[0];
  if (idx.readers(p) != 1) return std::nullopt;
  std::string post_mask;
  bool nan_guard = false;
  std::string sm_out;
  if (const Node* w = sdpa_node(idx, p, "Where", fx)) {
    add(p);
    if (const Node* isnan = sdpa_node(idx, w->inputs[0], "IsNaN", fx)) {
      if (!is_scalar(idx, w->inputs[1], 0) || w->inputs[2] != isnan->inputs[0] ||
          idx.readers(w->inputs[0]) != 1)
        return std::nullopt;
      add(w->inputs[0]);
      nan_guard = true;
      sm_out = w->inputs[2];
      if (idx.readers(sm_out) != 2) return std::nullopt;
    } else {
      if (!is_scalar(idx, w->inputs[2], 0)) return std::nullopt;
      post_mask = w->inputs[0];
      sm_out = w->inputs[1];
      if (idx.readers(sm_out) != 1) return std::nullopt;
    }
  } else {
    sm_out = p;
  }
  const Node* sm = sdpa_node(idx, sm_out, "Softmax", fx);
  if (!sm) return std::nullopt;
  add(sm_out);
  {
    auto r = idx.rank(sm_out);
    const Attr* ax = sm->attr("axis");
    if (!r || *r != 4 || (ax && !is_last_axis(ax->i, *r))) return std::nullopt;
  }
  std::string s = sm->inputs[0];
  if (idx.readers(s) != 1) return std::nullopt;
  std::string causal_cond;
  if (const Node* w = sdpa_node(idx, s, "Where", fx)) {
    if (!is_scalar(idx, w->inputs[2], -INFINITY)) return std::nullopt;
    add(s);
    std::string cond = w->inputs[0];
    s = w->inputs[1];
    if (idx.readers(s) != 1) return std::nullopt;
    if (!post_mask.empty() && cond == post_mask) {
      m.mask_kind = SdpaMatch::Mask::Bool;
      m.mask = cond;
    } else if (post_mask.empty() && !nan_guard) {
      causal_cond = cond;  // proved below, once q and k are known
    } else {
      return std::nullopt;
    }
  } else if (const Node* a = sdpa_node(idx, s, "Add", fx)) {
    if (!nan_guard) return std::nullopt;
    add(s);
    m.mask_kind = SdpaMatch::Mask::Additive;
    m.mask = a->inputs[1];
    s = a->inputs[0];
    if (idx.readers(s) != 1) return std::nullopt;
  }
  if (m.mask_kind == SdpaMatch::Mask::None && (nan_guard || !post_mask.empty()))
    return std::nullopt;
  const Node* mul = sdpa_node(idx, s, "Mul", fx);
  if (!mul) return std::nullopt;
  add(s);
  auto scale = const_scalar(idx, mul->inputs[1]);
  if (!scale) return std::nullopt;
  m.scale = *scale;
  std::string qk = mul->inputs[0];
  const Node* qkmm = sdpa_node(idx, qk, "MatMul", fx);
  if (!qkmm || idx.readers(qk) != 1) return std::nullopt;
  add(qk);
  const Node* kt = sdpa_node(idx, qkmm->inputs[1], "Transpose", fx);
  if (!kt || idx.readers(qkmm->inputs[1]) != 1) return std::nullopt;
  const Attr* perm = kt->attr("perm");
  if (!perm || perm->ints != std::vector<int64_t>{0, 1, 3, 2}) return std::nullopt;
  add(qkmm->inputs[1]);
  m.q = qkmm->inputs[0];
  std::string k_rep = kt->inputs[0], v_rep = mm.inputs[1];

  // Shapes: q [B,Hq,L,D], k/v [B,Hkv,T,D].
  const Shape* qs = shape_of(idx, m.q);
  const ValueType* qt = idx.type(m.q);
  if (!qs || qs->size() != 4 || !attention_dtype(qt->dtype)) return std::nullopt;
  m.dtype = qt->dtype;
  if (!(*qs)[1].is_static() || !(*qs)[3].is_static()) return std::nullopt;
  m.q_heads = (*qs)[1].value;
  m.head_size = (*qs)[3].value;
  auto kr = undo_repeat(idx, k_rep);
  auto vr = undo_repeat(idx, v_rep);
  if (kr.has_value() != vr.has_value()) return std::nullopt;
  m.k = kr ? kr->first : k_rep;
  m.v = vr ? vr->first : v_rep;
  if (kr) {
    m.nodes.insert(m.nodes.end(), kr->second.begin(), kr->second.end());
    m.nodes.insert(m.nodes.end(), vr->second.begin(), vr->second.end());
  }
  const Shape* ks = shape_of(idx, m.k);
  const Shape* vs = shape_of(idx, m.v);
  if (!ks || !vs || ks->size() != 4 || vs->size() != 4) return std::nullopt;
  const Shape &Q = *qs, &K = *ks, &V = *vs;
  if (!K[1].is_static() || !(K[1] == V[1]) || !K[3].same_as(Q[3]) || !V[3].same_as(Q[3]) ||
      !K[2].same_as(V[2]) || !K[0].same_as(Q[0]) || !V[0].same_as(Q[0]))
    return std::nullopt;
  m.kv_heads = K[1].value;
  if (m.kv_heads <= 0 || m.q_heads % m.kv_heads != 0) return std::nullopt;
  if (!kr && m.kv_heads != m.q_heads && m.kv_heads != 1) return std::nullopt;
  for (auto& x : {m.k, m.v})
    if (idx.type(x)->dtype != m.dtype) return std::nullopt;

  // Masks: boolean / additive, shaped to broadcast to [B, Hq, L, T]
  // (fusions whose op wants all L rows expand a broadcast query axis).
  if (m.mask_kind != SdpaMatch::Mask::None) {
    const ValueType* mt = idx.type(m.mask);
    if (!mt || !mt->shape || mt->shape->size() < 2 || mt->shape->size() > 4) return std::nullopt;
    DType want = m.mask_kind == SdpaMatch::Mask::Bool ? DType::Bool : m.dtype;
    if (mt->dtype != want) return std::nullopt;
    const Shape& M = *mt->shape;
    size_t r = M.size();
    // The query axis may be broadcast (a padding mask [B, 1, 1, T]).
    if (!M[r - 1].same_as(K[2]) || (!M[r - 2].same_as(Q[2]) && !M[r - 2].same_as(Dim::of(1))))
      return std::nullopt;
    if (r >= 3 && !M[r - 3].same_as(Dim::of(1)) && !M[r - 3].same_as(Q[1])) return std::nullopt;
    if (r == 4 && !M[0].same_as(Dim::of(1)) && !M[0].same_as(Q[0])) return std::nullopt;
  }
  if (!causal_cond.empty()) {
    if (!is_converter_causal(idx, causal_cond, Q[2], K[2])) return std::nullopt;
    m.causal = true;
    m.causal_mask = causal_cond;
  }

  // KV cache.
  auto ck = kv_cache(idx, m.k);
  auto cv = kv_cache(idx, m.v);
  if (ck && cv) {
    m.cache = true;
    m.past_key = ck->past;
    m.key_new = ck->fresh;
    m.present_key = ck->present;
    m.past_value = cv->past;
    m.value_new = cv->fresh;
    m.present_value = cv->present;
    m.nodes.push_back(ck->concat);
    m.nodes.push_back(cv->concat);
  }
  return m;
}

std::string shape_slice(Emitter& e, const std::string& x, int64_t start, int64_t end, int opset) {
  const ValueType t{DType::Int64, Shape{Dim::of(end - start)}};
  if (opset >= 15) return e.op("Shape", {x}, t, {Attr::Int("start", start), Attr::Int("end", end)});
  const ValueType* xt = e.graph().type_of(x);
  const Dim rank =
      xt && xt->shape ? Dim::of(static_cast<int64_t>(xt->shape->size())) : Dim::unknown();
  std::string full = e.op("Shape", {x}, ValueType{DType::Int64, Shape{rank}});
  return e.op("Slice", {full, e.ints({start}), e.ints({end}), e.ints({0})}, t);
}

std::string expand_query_rows(Emitter& e, const std::string& mask, const std::string& q,
                              int opset) {
  const ValueType mt = *e.graph().type_of(mask);
  const Shape& M = *mt.shape;
  const Shape& Q = *e.graph().type_of(q)->shape;
  const size_t r = M.size();
  if (!M[r - 2].same_as(Dim::of(1)) || Q[2].same_as(Dim::of(1))) return mask;
  const ValueType one_i64{DType::Int64, Shape{Dim::of(1)}};
  std::string l = shape_slice(e, q, 2, 3, opset);
  std::string shape = e.op("Concat", {e.ints(std::vector<int64_t>(r - 2, 1)), l, e.ints({1})},
                           ValueType{DType::Int64, Shape{Dim::of(static_cast<int64_t>(r))}},
                           {Attr::Int("axis", 0)});
  Shape out = M;
  out[r - 2] = Q[2];
  return e.op("Expand", {mask, shape}, ValueType{mt.dtype, out});
}

std::string Emitter::op(const std::string& op_type, std::vector<std::string> inputs, ValueType type,
                        std::vector<Attr> attrs, const std::string& domain) {
  std::string out = names_(like_.outputs[0] + "__" + op_type);
  g_.types[out] = std::move(type);
  nodes_.push_back(make_node(op_type, std::move(inputs), {out}, std::move(attrs), like_, domain));
  nodes_.back().name = out;
  return out;
}

void Emitter::node(const std::string& op_type, std::vector<std::string> inputs,
                   std::vector<std::string> outputs, std::vector<Attr> attrs,
                   const std::string& domain) {
  nodes_.push_back(
      make_node(op_type, std::move(inputs), std::move(outputs), std::move(attrs), like_, domain));
}

std::string Emitter::ints(const std::vector<int64_t>& v) {
  std::string name = names_(like_.outputs[0] + "__const");
  std::vector<int64_t> dims{static_cast<int64_t>(v.size())};
  g_.initializers.push_back(Initializer{name, TensorData::from_vector(DType::Int64, dims, v)});
  g_.types[name] = static_type(DType::Int64, dims);
  return name;
}

std::string Emitter::scalar(DType t, double v) {
  std::string name = names_(like_.outputs[0] + "__const");
  TensorData d;
  if (t == DType::Float16) {
    d = TensorData::from_vector(t, {}, std::vector<uint16_t>{float_to_half(static_cast<float>(v))});
  } else if (t == DType::BFloat16) {
    d = TensorData::from_vector(t, {},
                                std::vector<uint16_t>{float_to_bfloat16(static_cast<float>(v))});
  } else {
    d = *TensorData::scalar(t, v);
  }
  g_.initializers.push_back(Initializer{name, std::move(d)});
  g_.types[name] = static_type(t, {});
  return name;
}

std::string zero_masked_rows(Emitter& e, const std::string& mask, bool additive, DType t,
                             const std::string& y, const ValueType& yt, int opset) {
  const ValueType* src = e.graph().type_of(mask);
  Shape rows = src->shape.value_or(Shape{});
  if (!rows.empty()) rows.back() = Dim::of(1);
  ValueType mt{src->dtype, rows};
  // Axes are an input from opset 18, an attribute before.
  std::string any =
      opset >= 18
          ? e.op("ReduceMax", {mask, e.ints({-1})}, mt, {Attr::Int("keepdims", 1)})
          : e.op("ReduceMax", {mask}, mt, {Attr::Int("keepdims", 1), Attr::Ints("axes", {-1})});
  if (additive)
    any = e.op("Greater", {any, e.scalar(t, -INFINITY)}, ValueType{DType::Bool, mt.shape});
  return e.op("Where", {any, y, e.scalar(t, 0.0)}, yt);
}

}  // namespace pt2onnx
