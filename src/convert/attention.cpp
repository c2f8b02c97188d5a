// scaled_dot_product_attention, decomposed into MatMul / Softmax / MatMul with
// the boolean or additive mask (rows it hides entirely give zeros, as
// torch's CPU kernels), is_causal (top-left aligned, as torch), a
// custom scale, grouped-query attention (enable_gqa) and dropout; the dropout
// family (identity unless train; else random masks as torch draws them:
// elementwise, per channel for the feature_ forms, alpha-preserving for the
// alpha_ forms).
#include <cmath>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

// Keep mask (1 with probability 1 - p, else 0) in type t, shaped `shape`.
std::string keep_mask(Ctx& c, const std::string& shape, double p, DType t) {
  std::string z = c.b.op("ConstantOfShape", {shape}, {}, ValueType{DType::Float, std::nullopt});
  std::string u =
      c.b.op("RandomUniformLike", {z}, {Attr::Int("dtype", static_cast<int64_t>(DType::Float))},
             ValueType{DType::Float, std::nullopt});
  std::string keep = c.b.op("Less", {u, c.b.scalar(DType::Float, 1.0 - p)});
  return c.cast(keep, t);
}

// Noise shape: x's shape, or (N, C, 1, ...) for the feature forms.
std::string noise_shape(Ctx& c, const std::string& x, bool feature) {
  size_t r = c.rank(x);
  if (!feature || r < 2) return c.b.op("Shape", {x});
  std::string lead = c.b.op("Shape", {x}, {Attr::Int("end", 2)});
  if (r == 2) return lead;
  return c.b.op("Concat", {lead, c.b.const_i64(std::vector<int64_t>(r - 2, 1))},
                {Attr::Int("axis", 0)});
}

// Returns (output, keep mask or "" when identity).
std::pair<std::string, std::string> emit_dropout(Ctx& c, const std::string& x, double p, bool train,
                                                 bool feature, bool alpha) {
  if (!train || p == 0.0) return {x, ""};
  DType t = c.dtype(x);
  std::string keep = keep_mask(c, noise_shape(c, x, feature), p, t);
  if (!alpha) {
    if (p >= 1.0) return {c.b.op("Mul", {x, c.b.scalar(t, 0.0)}), keep};
    std::string scaled = c.b.op("Mul", {keep, c.b.scalar(t, 1.0 / (1.0 - p))});
    return {c.b.op("Mul", {x, scaled}), keep};
  }
  // torch: a = 1 / sqrt((alpha^2 p + 1)(1 - p)); y = x * keep * a + (keep - 1) * alpha * a + alpha
  // * a * p
  const double al = 1.7580993408473766;
  double a = 1.0 / std::sqrt((al * al * p + 1.0) * (1.0 - p));
  std::string bterm = c.b.op(
      "Add", {c.b.op("Mul", {c.b.op("Sub", {keep, c.b.scalar(t, 1.0)}), c.b.scalar(t, al * a)}),
              c.b.scalar(t, al * a * p)});
  std::string noise = c.b.op("Mul", {keep, c.b.scalar(t, a)});
  return {c.b.op("Add", {c.b.op("Mul", {x, noise}), bterm}), keep};
}

// Repeats the head axis (-3) of k/v from kv heads to q heads (GQA):
// [.., Hkv, S, D] -> [.., Hkv, 1, S, D] -> expand [.., Hkv, rep, S, D] -> [.., Hq, S, D].
std::string repeat_heads(Ctx& c, const std::string& v, int64_t rep) {
  const Shape& s = c.shape(v);
  size_t r = s.size();
  const Dim& d = s[r - 1];
  if (!d.is_static()) c.fail("GQA needs a static head size");
  std::string u = c.unsqueeze(v, {static_cast<int64_t>(r) - 2});
  std::vector<int64_t> ones(r + 1, 1);
  ones[r - 2] = rep;
  // Typed, so the attention fusions can prove the repeat from its types.
  DType t = c.dtype(v);
  Shape es(s.begin(), s.end());
  es.insert(es.begin() + static_cast<std::ptrdiff_t>(r) - 2, Dim::of(rep));
  Shape rs(s.begin(), s.end());
  rs[r - 3] = Dim::of(s[r - 3].value * rep);
  std::string e = c.b.op("Expand", {u, c.b.const_i64(ones)}, {}, ValueType{t, es});
  // Leading batch dims copied (0), heads and head size static, S inferred (-1).
  std::vector<int64_t> target(r - 3, 0);
  target.push_back(s[r - 3].value * rep);
  target.push_back(-1);
  target.push_back(d.value);
  return c.b.op("Reshape", {e, c.b.const_i64(target)}, {}, ValueType{t, rs});
}

// scaled_dot_product_attention; `flash_cpu`: the op AOTAutograd dispatches it
// to on CPU (torch.compile's graphs), _scaled_dot_product_flash_attention_for_cpu:
// the same arguments but enable_gqa (head counts that differ are grouped
// queries all the same), and a second output, the logsumexp of each query
// row's scaled, masked scores (float32 for float16 / bfloat16 inputs).
void sdpa_impl(Ctx& c, bool flash_cpu) {
  std::string q = c.tensor("query"), k = c.tensor("key"), v = c.tensor("value");
  DType t = c.dtype(q);
  const Shape& qs = c.shape(q);
  const Shape& ks = c.shape(k);
  size_t r = qs.size();
  const Dim& e = qs[r - 1];
  double scale;
  if (c.has("scale")) {
    scale = c.f("scale", 1.0);
  } else {
    if (!e.is_static()) c.fail("attention head size must be static to compute the default scale");
    scale = 1.0 / std::sqrt(static_cast<double>(e.value));
  }
  // The key length for the causal mask: read from the key before any head
  // repeat (its size is torch's; a repeat's Reshape would be read again).
  const std::string k_in = k;
  if ((flash_cpu || c.flag("enable_gqa", false)) && r >= 3) {
    const Dim& hq = qs[r - 3];
    const Dim& hk = ks[r - 3];
    if (!hq.is_static() || !hk.is_static()) c.fail("GQA needs static head counts");
    if (hq.value != hk.value) {
      k = repeat_heads(c, k, hq.value / hk.value);
      v = repeat_heads(c, v, hq.value / hk.value);
    }
  }
  std::vector<int64_t> perm;
  for (size_t i = 0; i < c.rank(k); ++i) perm.push_back(static_cast<int64_t>(i));
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  std::string kt = c.transpose(k, perm);
  std::string scores = c.b.op("MatMul", {q, kt});
  scores = c.b.op("Mul", {scores, c.b.scalar(t, scale)});

  auto mask = c.opt_tensor("attn_mask");
  const bool bool_mask = mask && c.dtype(*mask) == DType::Bool;
  if (mask) {
    if (bool_mask) {
      std::string neg = c.b.scalar(t, -INFINITY);
      scores = c.b.op("Where", {*mask, scores, neg});
    } else {
      scores = c.b.op("Add", {scores, c.cast(*mask, t)});
    }
  }
  if (c.flag("is_causal", false)) {
    // mask[i, j] = j <= i over (L, S), built once per pair of lengths.
    const Dim& ld = qs[r - 2];
    const Dim& sd = ks[ks.size() - 2];
    std::string key;
    if (!ld.is_unknown() && !sd.is_unknown())
      key = "causal:" + (ld.is_static() ? std::to_string(ld.value) : ld.sym) + "," +
            (sd.is_static() ? std::to_string(sd.value) : sd.sym);
    std::string causal;
    if (auto it = c.env.cache.find(key); !key.empty() && it != c.env.cache.end()) {
      causal = it->second;
    } else {
      std::string l = c.squeeze(c.dim_value(q, -2), {0});
      std::string s = c.squeeze(c.dim_value(k_in, -2), {0});
      std::string zero = c.b.scalar_i64(0), one = c.b.scalar_i64(1);
      std::string rows = c.unsqueeze(c.b.op("Range", {zero, l, one}), {1});
      std::string cols = c.unsqueeze(c.b.op("Range", {zero, s, one}), {0});
      causal = c.b.op("LessOrEqual", {cols, rows});
      if (!key.empty()) c.env.cache.emplace(key, causal);
    }
    scores = c.b.op("Where", {causal, scores, c.b.scalar(t, -INFINITY)});
  }
  if (flash_cpu) {
    DType lse_t = t == DType::Float16 || t == DType::BFloat16 ? DType::Float : t;
    c.set_output(1, c.reduce("ReduceLogSumExp", c.cast(scores, lse_t), {-1}, false));
  }
  std::string p = c.b.op("Softmax", {scores}, {Attr::Int("axis", -1)});
  // A query row the mask hides entirely (a left-padded position) gets
  // softmax(-inf, ..., -inf) = NaN; torch's CPU kernels give it zeros, and a
  // NaN there would reach every later position through the next layer's keys
  // and values. Zero such rows as torch does.
  if (bool_mask)
    p = c.b.op("Where", {*mask, p, c.b.scalar(t, 0.0)});
  else if (mask)
    p = c.b.op("Where", {c.b.op("IsNaN", {p}), c.b.scalar(t, 0.0), p});
  p = emit_dropout(c, p, c.f("dropout_p", 0.0), true, false, false).first;
  c.set_output(0, c.b.op("MatMul", {p, v}, {}, c.out_type()));
}

void sdpa(Ctx& c) { sdpa_impl(c, false); }
void sdpa_flash_cpu(Ctx& c) { sdpa_impl(c, true); }

}  // namespace

// The dropout ops themselves are in random.cpp; sdpa's dropout_p uses emit_dropout.
void register_attention(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "scaled_dot_product_attention.default", sdpa);
  r.add(p + "_scaled_dot_product_flash_attention_for_cpu.default", sdpa_flash_cpu);
}

}  // namespace pt2onnx
