// Decoder self-attention with a KV cache (the SDPA decomposition of
// convert/attention.cpp, matched by attention_match.h, whose k / v are
// Concat(past, new, axis 2) of graph inputs written to graph outputs)
// becomes onnxruntime's com.microsoft GroupQueryAttention:
//   query [B,L,Hq*D], key / value [B,L,Hkv*D] (the new rows), past_key /
//   past_value [B,Hkv,P,D], seqlens_k int32 [B] = P + L - 1,
//   total_sequence_length int32 = P + L, attention_bias = the model's mask
//   (0 / -inf), query_seqlens int32 [B] = L  -> y [B,L,Hq*D], present_key,
//   present_value
// with num_heads, kv_num_heads and scale; y goes back to [B,Hq,L,D]
// (Reshape + Transpose, which onnxruntime cancels against the model's own).
// GroupQueryAttention always applies its causal mask (key j visible to query
// i when j <= P + i); it is exact only when the model's mask hides at least
// that, so the pass proves it: the boolean mask is an And-tree with a leaf
// LessOrEqual(cols, rows), cols[j] = j over the keys, rows[i] = i + P' with
// P' either 0 or the size of the cache's sequence axis (transformers'
// cache_position), or the decomposition's own is_causal mask (top-left,
// P' = 0). The rest of the mask rides in attention_bias, so left padding
// stays exact: a leaf equal to GroupQueryAttention's own mask (P' = P, one
// row per query) is left out of it, so a decoder's per-step mask arithmetic
// is only the padding leaf (transformers' [B, 1, 1, T], expanded to the
// query rows), and no bias at all when nothing else is left. Sizes come from
// the graph inputs holding them (input_ids, attention_mask), one Shape each
// for the whole model. onnxruntime gives zeros for fully masked rows, as
// torch does, in float32; in float16 it gives NaN, so there the whole mask
// goes in the bias and the rows it hides are zeroed after it.
//
// query_seqlens (all L) is what lets onnxruntime's CPU kernel run a batch of
// several multi-token chunks over a cache (without it: batch 1 only).
//
// Rotary inside: when q and the new k are each the output of a com.microsoft
// RotaryEmbedding (fuse_rotary's, BNSH input, whole head rotated) sharing
// position ids, caches and layout, read only by the attention, GQA rotates
// them itself (do_rotary): the caches go in as cos_cache / sin_cache and the
// rotary's position ids as position_ids. fuse_rotary's caches hold a row per
// (batch, position), picked by position_ids b * S + s; those are contiguous
// per batch row, so GQA's first-prompt reading (position_ids[b][0] + s) picks
// the same rows. GQA wants at least total_sequence_length cache rows: the
// caches are padded with that many zero rows, never read.
//
// Left alone (for fuse_attention's standard Attention, when the opset has
// it): other targets, no cache, additive masks, masks not proved causal, a
// head size not a multiple of 8 (the CPU kernel refuses it), dtypes other
// than float / float16, new keys of another length than the queries.
#include <cmath>

#include "opt/attention_match.h"
#include "opt/passes.h"

namespace pt2onnx {

namespace {

const Shape* shape_of(const GraphIndex& idx, const std::string& v) {
  const ValueType* t = idx.type(v);
  return t && t->shape ? &*t->shape : nullptr;
}

bool is_scalar(const GraphIndex& idx, const std::string& v, double want) {
  auto s = idx.scalar(v);
  return s && *s == want;
}

bool range_from_zero(const GraphIndex& idx, const std::string& v) {
  const Node* r = idx.producer(v, "Range");
  return r && r->inputs.size() == 3 && is_scalar(idx, r->inputs[0], 0) &&
         is_scalar(idx, r->inputs[2], 1);
}

// v's values along axis -axis_from_end (every other axis of size 1), through
// Unsqueezes: the 1-D value below.
std::optional<std::string> vector_below(const GraphIndex& idx, const std::string& v,
                                        size_t axis_from_end) {
  const Shape* s = shape_of(idx, v);
  if (!s || s->size() < axis_from_end) return std::nullopt;
  for (size_t i = 0; i < s->size(); ++i)
    if (i != s->size() - axis_from_end && !(*s)[i].same_as(Dim::of(1))) return std::nullopt;
  std::string x = v;
  while (const Node* u = idx.producer(x, "Unsqueeze")) x = u->inputs[0];
  const Shape* xs = shape_of(idx, x);
  if (!xs || xs->size() != 1) return std::nullopt;
  return x;
}

// x is the cache's length (past's axis 2).
bool is_past_length(const GraphIndex& idx, const std::string& x, const Dim& past) {
  const Node* sq = idx.producer(x, "Squeeze");
  const Node* sh = sq ? idx.producer(sq->inputs[0], "Shape") : nullptr;
  if (!sh) return false;
  const Attr* st = sh->attr("start");
  const Attr* en = sh->attr("end");
  const Shape* xs = shape_of(idx, sh->inputs[0]);
  return st && en && xs && xs->size() == 4 && st->i == 2 && en->i == 3 && (*xs)[2].same_as(past);
}

// What a mask leaf says about keys j and queries i.
enum class Causal {
  No,       // nothing proved
  Implies,  // leaf[.., i, j] implies j <= i + P (P: the cache's length)
  Same,     // leaf[.., i, j] == (j <= i + P): GroupQueryAttention's own mask
};

// le = LessOrEqual(cols, rows) with cols[j] = j over the T keys and rows[i]
// = i + P' over the L queries (P' 0 or P): Implies; Same when P' is P and
// rows has one entry per query.
Causal causal_leaf(const GraphIndex& idx, const std::string& mask, const Dim& past,
                   const Dim& total, const Dim& queries) {
  const Node* le = idx.producer(mask, "LessOrEqual");
  if (!le) return Causal::No;
  const Shape* cs = shape_of(idx, le->inputs[0]);
  if (!cs || cs->empty() || !cs->back().same_as(total)) return Causal::No;
  auto cols = vector_below(idx, le->inputs[0], 1);
  if (!cols) return Causal::No;
  std::string c = *cols;
  if (const Node* add = idx.producer(c, "Add")) {
    if (is_scalar(idx, add->inputs[1], 0))
      c = add->inputs[0];
    else if (is_scalar(idx, add->inputs[0], 0))
      c = add->inputs[1];
    else
      return Causal::No;
  }
  if (!range_from_zero(idx, c)) return Causal::No;
  auto rows = vector_below(idx, le->inputs[1], 2);
  if (!rows) return Causal::No;
  const Shape* rs = shape_of(idx, le->inputs[1]);
  const bool per_query = rs && rs->size() >= 2 && (*rs)[rs->size() - 2].same_as(queries);
  if (range_from_zero(idx, *rows)) return Causal::Implies;  // P' = 0
  const Node* add = idx.producer(*rows, "Add");
  if (!add) return Causal::No;
  for (int s = 0; s < 2; ++s) {
    const std::string& a = add->inputs[s];
    const std::string& p = add->inputs[1 - s];
    if (!range_from_zero(idx, a)) continue;
    if (is_past_length(idx, p, past)) return per_query ? Causal::Same : Causal::Implies;
    if (is_scalar(idx, p, 0)) return Causal::Implies;
  }
  return Causal::No;
}

// The leaves of mask's And-tree but those equal to GroupQueryAttention's own
// causal mask, in `rest`; true when one leaf implies it.
bool split_causal(const GraphIndex& idx, const std::string& mask, const Dim& past, const Dim& total,
                  const Dim& queries, std::vector<std::string>& rest, int depth = 0) {
  if (depth <= 8) {
    if (const Node* a = idx.producer(mask, "And")) {
      bool l = split_causal(idx, a->inputs[0], past, total, queries, rest, depth + 1);
      bool r = split_causal(idx, a->inputs[1], past, total, queries, rest, depth + 1);
      return l || r;
    }
  }
  Causal c = depth <= 8 ? causal_leaf(idx, mask, past, total, queries) : Causal::No;
  if (c != Causal::Same) rest.push_back(mask);
  return c != Causal::No;
}

// A size read from the graph input that has it (every layer reads the same,
// so CSE leaves one Shape for the model); nullopt when no input has it.
std::optional<std::string> input_dim(const Graph& g, Emitter& e, const Dim& d, int opset) {
  if (d.is_static()) return e.ints({d.value});
  if (d.is_unknown()) return std::nullopt;
  for (const GraphIO& in : g.inputs) {
    if (!in.type.shape) continue;
    const Shape& s = *in.type.shape;
    for (size_t a = 0; a < s.size(); ++a)
      if (s[a].same_as(d))
        return shape_slice(e, in.name, static_cast<int64_t>(a), static_cast<int64_t>(a) + 1, opset);
  }
  return std::nullopt;
}

// The rotary GQA can do itself, applied to x (see the header comment).
struct InnerRotary {
  std::string x, position_ids, cos, sin;
  bool interleaved = false;
};

std::optional<InnerRotary> inner_rotary(const GraphIndex& idx, const std::string& v,
                                        int64_t head_size) {
  const Node* r = idx.producer(v);
  if (!r || r->op_type != "RotaryEmbedding" || r->domain != "com.microsoft" ||
      r->inputs.size() != 4 || r->outputs.size() != 1 || idx.readers(v) != 1 ||
      idx.is_graph_output(v))
    return std::nullopt;
  // BNSH input, every element of the head rotated (no num_heads /
  // rotary_embedding_dim: those belong to the 3-D and partial forms).
  if (r->attr("num_heads") || r->attr("rotary_embedding_dim")) return std::nullopt;
  const Shape* xs = shape_of(idx, r->inputs[0]);
  const Shape* cs = shape_of(idx, r->inputs[2]);
  const Shape* ss = shape_of(idx, r->inputs[3]);
  if (!xs || xs->size() != 4 || !cs || !ss || cs->size() != 2 || ss->size() != 2 ||
      !(*cs)[1].same_as(Dim::of(head_size / 2)) || !(*ss)[1].same_as(Dim::of(head_size / 2)))
    return std::nullopt;
  const Attr* il = r->attr("interleaved");
  return InnerRotary{r->inputs[0], r->inputs[1], r->inputs[2], r->inputs[3], il && il->i != 0};
}

}  // namespace

size_t fuse_group_query_attention(Graph& g, const PassOptions& o) {
  if (!o.onnxruntime()) return 0;
  GraphIndex idx(g);
  Rewriter rw(g);
  std::optional<FreshNames> names;
  size_t fused = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    auto m = match_sdpa(idx, k);
    if (!m || !m->cache) continue;
    if (m->dtype != DType::Float && m->dtype != DType::Float16) continue;
    if (m->head_size % 8 != 0) continue;
    const Shape& Q = *shape_of(idx, m->q);
    const Shape* KN = shape_of(idx, m->key_new);
    const Shape* VN = shape_of(idx, m->value_new);
    const Shape* PK = shape_of(idx, m->past_key);
    const Shape* PV = shape_of(idx, m->past_value);
    const Shape& K = *shape_of(idx, m->k);
    if (!KN || !VN || !PK || !PV || KN->size() != 4 || VN->size() != 4 || PK->size() != 4 ||
        PV->size() != 4 || !(*KN)[2].same_as(Q[2]) || !(*VN)[2].same_as(Q[2]))
      continue;
    std::string mask;
    std::vector<std::string> rest;  // the mask's leaves other than the causal one
    if (m->mask_kind == SdpaMatch::Mask::Bool &&
        split_causal(idx, m->mask, (*PK)[2], K[2], Q[2], rest) && (*PV)[2].same_as((*PK)[2])) {
      mask = m->mask;
    } else if (m->mask_kind == SdpaMatch::Mask::None && m->causal) {
      mask = m->causal_mask;  // top-left: stricter than GroupQueryAttention's with a cache
      rest = {mask};
    } else {
      continue;
    }
    if (const Shape* ms = shape_of(idx, mask); !ms || ms->size() < 2 || ms->size() > 4) continue;
    bool clash = rw.touched(k);
    for (size_t n : m->nodes) clash = clash || rw.touched(n);
    if (clash) continue;
    if (!names) names.emplace(g);
    const Node like = g.nodes[k];
    Emitter e(g, *names, like);
    const DType t = m->dtype;
    const int64_t hq = m->q_heads, hkv = m->kv_heads, d = m->head_size;
    // BNSH -> BSNH -> [B, S, N*H].
    auto to_bsh = [&](const std::string& x, int64_t heads) {
      const Shape& s = *shape_of(idx, x);
      std::string tr = e.op("Transpose", {x}, ValueType{t, Shape{s[0], s[2], s[1], s[3]}},
                            {Attr::Ints("perm", {0, 2, 1, 3})});
      return e.op("Reshape", {tr, e.ints({0, 0, heads * d})},
                  ValueType{t, Shape{s[0], s[2], Dim::of(heads * d)}});
    };
    auto rq = inner_rotary(idx, m->q, d);
    auto rk = inner_rotary(idx, m->key_new, d);
    const bool rotary = rq && rk && rq->position_ids == rk->position_ids && rq->cos == rk->cos &&
                        rq->sin == rk->sin && rq->interleaved == rk->interleaved;
    std::string q3 = to_bsh(rotary ? rq->x : m->q, hq);
    std::string k3 = to_bsh(rotary ? rk->x : m->key_new, hkv);
    std::string v3 = to_bsh(m->value_new, hkv);
    auto i64 = [](Shape s) { return ValueType{DType::Int64, std::move(s)}; };
    auto i32 = [](Shape s) { return ValueType{DType::Int32, std::move(s)}; };
    auto shape_at = [&](const std::string& x, int64_t a) {
      return shape_slice(e, x, a, a + 1, o.opset);
    };
    // GroupQueryAttention applies the causal leaf itself, so the bias needs
    // only the rest: one leaf of rank >= 2 whose key axis is the keys' and
    // whose query axis is 1 or the queries' (transformers' padding mask,
    // [B, 1, 1, T]). Computing it alone skips the causal mask's arithmetic
    // every step. The whole mask stays where zero_masked_rows needs the rows
    // it hides (float16), or the rest is not that one leaf.
    const bool float32 = t == DType::Float && o.dtype == DType::Float;
    std::string bias_mask = mask;
    if (rest.empty()) {
      bias_mask.clear();
    } else if (rest.size() == 1 && float32) {
      const Shape* rs = shape_of(idx, rest[0]);
      const Shape& M = *shape_of(idx, mask);
      if (rs && rs->size() >= 2 && rs->size() <= 4 && rs->back().same_as(M.back()) &&
          ((*rs)[rs->size() - 2].same_as(Dim::of(1)) || (*rs)[rs->size() - 2].same_as(Q[2]))) {
        bias_mask = rest[0];
      }
    }
    // Sizes: from the graph inputs holding them (one Shape for all layers),
    // else from the mask the bias reads (computed anyway; the whole mask's
    // dims the matcher proved: [.., L, T], the batch when it has one), else
    // from this layer's q and cache. Never from the rotated q / k, which
    // GroupQueryAttention rotates itself.
    const std::string& qx = rotary ? rq->x : m->q;
    const Shape* BM = bias_mask.empty() ? nullptr : shape_of(idx, bias_mask);
    const int64_t br = BM ? static_cast<int64_t>(BM->size()) : 0;
    // Dim x: an input's Shape, else axis `a` of the bias mask when it is x.
    auto size = [&](const Dim& x, int64_t a) -> std::optional<std::string> {
      if (auto v = input_dim(g, e, x, o.opset)) return v;
      if (BM && a >= 0 && a < br && (*BM)[static_cast<size_t>(a)].same_as(x))
        return shape_at(bias_mask, a);
      return std::nullopt;
    };
    std::string batch = size(Q[0], br == 4 ? 0 : -1).value_or("");
    if (batch.empty()) batch = shape_at(qx, 0);
    std::string qlen = size(Q[2], br - 2).value_or("");
    if (qlen.empty()) qlen = shape_at(qx, 2);
    std::string total = size(K[2], br - 1).value_or("");
    if (total.empty()) total = e.op("Add", {shape_at(m->past_key, 2), qlen}, i64({Dim::of(1)}));
    auto cast32 = [&](const std::string& x, Shape s) {
      return e.op("Cast", {x}, i32(std::move(s)),
                  {Attr::Int("to", static_cast<int64_t>(DType::Int32))});
    };
    std::string seqlens =
        e.op("Expand",
             {cast32(e.op("Sub", {total, e.ints({1})}, i64({Dim::of(1)})), {Dim::of(1)}), batch},
             i32({Q[0]}));
    std::string total32 = cast32(e.op("Squeeze", {total, e.ints({0})}, i64({})), {});
    std::string qlens = e.op("Expand", {cast32(qlen, {Dim::of(1)}), batch}, i32({Q[0]}));
    // The mask as a bias of rank 4: 0 where attended, -inf elsewhere, one row
    // per query (GroupQueryAttention takes no broadcast over them).
    std::string bias, bias_rows;
    if (!bias_mask.empty()) {
      ValueType bt = *g.type_of(bias_mask);
      bt.dtype = t;
      bias = e.op("Where", {bias_mask, e.scalar(t, 0.0), e.scalar(t, -INFINITY)}, bt);
      bias_rows = bias;  // before any Unsqueeze (for zero_masked_rows)
      Shape s = *bt.shape;
      if (s.size() < 4) {
        std::vector<int64_t> axes;
        while (s.size() + axes.size() < 4) axes.push_back(static_cast<int64_t>(axes.size()));
        Shape full(axes.size(), Dim::of(1));
        full.insert(full.end(), s.begin(), s.end());
        s = full;
        bias = e.op("Unsqueeze", {bias, e.ints(axes)}, ValueType{t, s});
      }
      if (!s[2].same_as(Q[2])) {
        std::string rows = e.op("Concat", {e.ints({1, 1}), qlen, e.ints({1})}, i64({Dim::of(4)}),
                                {Attr::Int("axis", 0)});
        s[2] = Q[2];
        bias = e.op("Expand", {bias, rows}, ValueType{t, s});
      }
    }
    const std::string y = like.outputs[0];
    const ValueType yt = *g.type_of(y);
    std::string y3 = (*names)(y + "__gqa");
    g.types[y3] = ValueType{t, Shape{Q[0], Q[2], Dim::of(hq * d)}};
    std::vector<std::string> inputs{q3,      k3, v3, m->past_key, m->past_value, seqlens,
                                    total32, "", "", "",          bias,          "",
                                    "",      "", "", "",          qlens};
    std::vector<Attr> attrs{Attr::Int("num_heads", hq), Attr::Int("kv_num_heads", hkv),
                            Attr::Float("scale", static_cast<float>(m->scale))};
    if (rotary) {
      // total_sequence_length zero rows after the cache rows (see the header).
      std::string pads = e.op("Concat", {e.ints({0, 0}), total, e.ints({0})}, i64({Dim::of(4)}),
                              {Attr::Int("axis", 0)});
      auto padded = [&](const std::string& c) {
        ValueType ct = *g.type_of(c);
        ct.shape = Shape{Dim::unknown(), (*ct.shape)[1]};
        return e.op("Pad", {c, pads}, ct);
      };
      inputs[7] = padded(rq->cos);
      inputs[8] = padded(rq->sin);
      inputs[9] = rq->position_ids;
      attrs.push_back(Attr::Int("do_rotary", 1));
      if (rq->interleaved) attrs.push_back(Attr::Int("rotary_interleaved", 1));
    }
    e.node("GroupQueryAttention", inputs, {y3, m->present_key, m->present_value}, attrs,
           "com.microsoft");
    std::string y4 = e.op("Reshape", {y3, e.ints({0, 0, hq, d})},
                          ValueType{t, Shape{Q[0], Q[2], Dim::of(hq), Dim::of(d)}});
    std::string out = e.op("Transpose", {y4}, yt, {Attr::Ints("perm", {0, 2, 1, 3})});
    // onnxruntime's float16 kernel gives NaN rows where the bias hides every
    // key (float32: zeros, as torch), and a NaN row of a left-padded position
    // would reach the next layer's cache: zero them as torch does.
    if (!float32 && !bias_rows.empty())
      out = zero_masked_rows(e, bias_rows, true, t, out, yt, o.opset);
    g.types.erase(out);
    e.nodes().back().outputs[0] = y;
    for (size_t n : m->nodes) rw.remove(n);
    rw.replace(k, std::move(e.nodes()));
    ++fused;
  }
  rw.apply();
  return fused;
}

}  // namespace pt2onnx
