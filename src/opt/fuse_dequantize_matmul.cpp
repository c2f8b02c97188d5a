// A program's own quantized weights, multiplied as integers (onnxruntime
// target): torchao's weight-only configs and PT2E weights arrive as
//
//   MatMul(A, DequantizeLinear(q, scale, zero_point))       q [K, N]
//   MatMul(A, Transpose(DequantizeLinear(q, ...)))          q [N, K] (a Linear's)
//   Gemm(A, DequantizeLinear(q, ...), C, transB)
//   Mul(MatMul(A, Cast(q)), scale [N])                      torchao's int8 weight-only
//
// with q, scale and zero point constants, per output channel or in blocks
// along K. Each becomes com.microsoft MatMulNBits(A, q, scale, zero point)
// (+ Add C), which reads the integers as they are (4 bits when every value and
// zero point fits, else 8) instead of dequantizing the whole weight at every
// run. accuracy_level 0: onnxruntime computes in float, so the result is the
// program's (dequantized weight times A), not an approximation of it.
//
// Left alone: A dequantized too (a static QDQ pair, for onnxruntime's QDQ
// optimizer), other layouts (a block along N, 2-D blocks), block sizes
// MatMulNBits cannot take (not a power of 2, under 16), per-tensor zero
// points with per-channel scales of another length, and A of rank < 2.
#include <cmath>
#include <cstring>

#include "opt/blockwise.h"
#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

namespace {

bool power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// Integer element i of a 1-byte or packed 4-bit constant.
int int_at(const TensorData& d, int64_t i) {
  const uint8_t* p = d.bytes();
  switch (d.dtype) {
    case DType::Int8:
      return static_cast<int8_t>(p[i]);
    case DType::UInt8:
      return p[i];
    case DType::Int4: {
      int v = (p[i / 2] >> (4 * (i % 2))) & 0xF;
      return v >= 8 ? v - 16 : v;
    }
    default:  // UInt4
      return (p[i / 2] >> (4 * (i % 2))) & 0xF;
  }
}

bool integer_weight(const TensorData* d) {
  if (!d || d->dims.size() != 2 || d->lazy()) return false;
  if (d->dtype == DType::Int8 || d->dtype == DType::UInt8) return true;
  return is_4bit(d->dtype) && d->strides.empty();
}

// Element offset of (r, c) in a 2-D tensor.
int64_t offset(const TensorData& d, int64_t r, int64_t c) {
  if (d.strides.empty()) return r * d.dims[1] + c;
  return r * d.strides[0] + c * d.strides[1];
}

// The weight as MatMul's B [K, N], and where its scale / zero point of
// element (k, n) lie: q (k, n) at q's (k, n), or (n, k) when `transposed`;
// scales per column (`block` 0) or per (block of K, column).
struct Weight {
  std::string name;  // q's initializer
  const TensorData* q = nullptr;
  const TensorData* scale = nullptr;
  const TensorData* zp = nullptr;  // null: 0
  bool transposed = false;
  int64_t K = 0, N = 0;
  int64_t block = 0;  // 0: one scale per column
};

// A constant read through shape-only ops (Reshape, Flatten, Squeeze,
// Unsqueeze, Identity, a Cast to its own type): the converters reshape
// scales that way, and only their values in order matter here.
const TensorData* flat_constant(const GraphIndex& ix, std::string v) {
  for (int hops = 0; hops < 4; ++hops) {
    if (const TensorData* d = ix.constant(v)) return d->is_contiguous() ? d : nullptr;
    const Node* p = ix.producer(v);
    if (!p || !p->domain.empty() || p->inputs.empty()) return nullptr;
    const std::string& op = p->op_type;
    if (op == "Cast") {
      const ValueType* in = ix.type(p->inputs[0]);
      const ValueType* out = ix.type(v);
      if (!in || !out || in->dtype != out->dtype) return nullptr;
    } else if (op != "Reshape" && op != "Flatten" && op != "Squeeze" && op != "Unsqueeze" &&
               op != "Identity") {
      return nullptr;
    }
    v = p->inputs[0];
  }
  return nullptr;
}

// Scale / zero point index of block b of column n.
int64_t param_index(const Weight& w, int64_t b, int64_t n) {
  if (w.scale->numel() == 1) return 0;
  if (w.block == 0) return n;
  return w.transposed ? n * ((w.K + w.block - 1) / w.block) + b : b * w.N + n;
}

// DequantizeLinear(q, scale, zp) as B (or, `transposed`, B's transpose).
std::optional<Weight> dq_weight(const GraphIndex& ix, const Node& dq, bool transposed) {
  if (dq.inputs.size() < 2) return std::nullopt;
  Weight w;
  w.name = dq.inputs[0];
  w.q = ix.constant(dq.inputs[0]);
  w.scale = flat_constant(ix, dq.inputs[1]);
  w.zp = dq.inputs.size() > 2 && !dq.inputs[2].empty() ? flat_constant(ix, dq.inputs[2]) : nullptr;
  if (!integer_weight(w.q) || !w.scale || w.scale->lazy() || !w.scale->is_contiguous())
    return std::nullopt;
  if (dq.inputs.size() > 2 && !dq.inputs[2].empty() && (!w.zp || !w.zp->is_contiguous()))
    return std::nullopt;
  w.transposed = transposed;
  w.K = w.q->dims[transposed ? 1 : 0];
  w.N = w.q->dims[transposed ? 0 : 1];
  const Attr* ax = dq.attr("axis");
  const Attr* bs = dq.attr("block_size");
  int64_t axis = ax ? ax->i : 1;
  if (axis < 0) axis += 2;
  const int64_t block = bs ? bs->i : 0;
  const int64_t k_axis = transposed ? 1 : 0;
  if (w.scale->numel() == 1 && block == 0) {
    w.block = 0;  // per tensor: every column the same scale
  } else if (block == 0 && axis == 1 - k_axis && w.scale->numel() == w.N) {
    w.block = 0;  // per output channel
  } else if (block > 0 && axis == k_axis && power_of_two(block) && block >= 16 &&
             w.scale->numel() == w.N * ((w.K + block - 1) / block)) {
    w.block = block;
  } else {
    return std::nullopt;
  }
  if (w.zp && w.zp->numel() != w.scale->numel()) return std::nullopt;
  return w;
}

// The integers, scales and zero points as MatMulNBits takes them.
BlockQuantized to_unsigned(const Weight& w, BlockPlan& pl) {
  const bool is_signed = w.q->dtype == DType::Int8 || w.q->dtype == DType::Int4;
  pl.block = w.block ? w.block
                     : std::max<int64_t>(16, int64_t{1} << static_cast<int>(
                                                 std::ceil(std::log2(static_cast<double>(w.K)))));
  pl.blocks = (w.K + pl.block - 1) / pl.block;
  // 4 bits when every value and zero point fits.
  bool four = is_4bit(w.q->dtype);
  if (!four) {
    const int lo = is_signed ? -8 : 0, hi = is_signed ? 7 : 15;
    four = true;
    for (int64_t r = 0; r < w.q->dims[0] && four; ++r)
      for (int64_t c = 0; c < w.q->dims[1] && four; ++c) {
        int v = int_at(*w.q, offset(*w.q, r, c));
        four = v >= lo && v <= hi;
      }
    for (int64_t i = 0; w.zp && i < w.zp->numel() && four; ++i) {
      int v = int_at(*w.zp, i);
      four = v >= lo && v <= hi;
    }
  }
  pl.bits = four ? 4 : 8;
  const int shift = is_signed ? 1 << (pl.bits - 1) : 0;
  BlockQuantized qz;
  qz.K = w.K;
  qz.N = w.N;
  qz.q.resize(static_cast<size_t>(w.K * w.N));
  qz.scale.resize(static_cast<size_t>(w.N * pl.blocks));
  qz.zp.resize(qz.scale.size());
  pl.symmetric = true;
  for (int64_t n = 0; n < w.N; ++n) {
    for (int64_t k = 0; k < w.K; ++k) {
      int64_t at = w.transposed ? offset(*w.q, n, k) : offset(*w.q, k, n);
      qz.q[static_cast<size_t>(n * w.K + k)] = static_cast<uint8_t>(int_at(*w.q, at) + shift);
    }
    for (int64_t b = 0; b < pl.blocks; ++b) {
      const int64_t pi = param_index(w, b, n);
      const size_t o = static_cast<size_t>(n * pl.blocks + b);
      qz.scale[o] = static_cast<float>(*element_as_double(*w.scale, static_cast<size_t>(pi)));
      qz.zp[o] = static_cast<uint8_t>((w.zp ? int_at(*w.zp, pi) : 0) + shift);
      if (qz.zp[o] != (1 << (pl.bits - 1))) pl.symmetric = false;
    }
  }
  return qz;
}

// MatMul(A, Cast(q)) * s (torchao's Int8WeightOnlyConfig): the weight, with
// s a per-column constant.
std::optional<Weight> cast_weight(const GraphIndex& ix, const Node& cast, const TensorData* s,
                                  int64_t N) {
  const TensorData* q = ix.constant(cast.inputs[0]);
  if (!integer_weight(q) || is_4bit(q->dtype) || !s || s->lazy() || !s->is_contiguous())
    return std::nullopt;
  if (s->numel() != N || (s->dtype != DType::Float && s->dtype != DType::Float16))
    return std::nullopt;
  Weight w;
  w.name = cast.inputs[0];
  w.q = q;
  w.scale = s;
  w.K = q->dims[0];
  w.N = q->dims[1];
  return w;
}

}  // namespace

size_t fuse_dequantize_matmul(Graph& g, const PassOptions& o) {
  if (!o.onnxruntime()) return 0;
  GraphIndex ix(g);
  FreshNames names(g);
  Rewriter rw(g);
  std::vector<Initializer> added;
  size_t fused = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    const bool matmul = is_op(&n, "MatMul"), gemm = is_op(&n, "Gemm"), mul = is_op(&n, "Mul");
    if (!matmul && !gemm && !mul) continue;
    if (n.outputs.size() != 1 || n.inputs.size() < 2 || rw.touched(k)) continue;
    std::optional<Weight> w;
    std::string a, bias, y = n.outputs[0];
    size_t replaced = k;
    if (mul) {
      // Mul(MatMul(A, Cast(q)), s), the MatMul read only here.
      const std::string& mm_out = n.inputs[0];
      const Node* mm = ix.producer(mm_out, "MatMul");
      auto mi = ix.producer_index(mm_out);
      if (!mm || !mi || ix.readers(mm_out) != 1 || ix.is_graph_output(mm_out)) continue;
      const Node* cast = ix.producer(mm->inputs[1], "Cast");
      const ValueType* yt = ix.type(mm_out);
      if (!cast || !yt || !yt->shape || yt->shape->empty() || !yt->shape->back().is_static())
        continue;
      w = cast_weight(ix, *cast, flat_constant(ix, n.inputs[1]), yt->shape->back().value);
      if (!w) continue;
      // s scales columns: [N] or [1, .., 1, N] (N values shaped [N, 1] would
      // scale rows).
      const ValueType* st = ix.type(n.inputs[1]);
      if (!st || !st->shape || st->shape->empty() || st->shape->size() > yt->shape->size() ||
          !st->shape->back().same_as(yt->shape->back()))
        continue;
      bool columns = true;
      for (size_t d = 0; d + 1 < st->shape->size(); ++d)
        columns = columns && (*st->shape)[d].same_as(Dim::of(1));
      if (!columns) continue;
      a = mm->inputs[0];
      rw.remove(*mi);
    } else {
      bool transposed = false;
      std::string b = n.inputs[1];
      if (gemm) {
        auto tb = plain_gemm(n);
        if (!tb) continue;
        transposed = *tb;
        if (n.inputs.size() > 2) bias = n.inputs[2];
      } else if (const Node* t = ix.producer(b, "Transpose")) {
        const Attr* perm = t->attr("perm");
        if (!perm || perm->ints != std::vector<int64_t>{1, 0}) continue;
        b = t->inputs[0];
        transposed = true;
      }
      const Node* dq = ix.producer(b, "DequantizeLinear");
      if (!dq) continue;
      w = dq_weight(ix, *dq, transposed);
      if (!w) continue;
      a = n.inputs[0];
    }
    // A quantized activation (PT2E's static QDQ pairs) is left to
    // onnxruntime's QDQ optimizer, which makes the pair an integer kernel.
    if (ix.producer(a, "DequantizeLinear")) continue;
    const ValueType* at = ix.type(a);
    if (!at || (at->dtype != DType::Float && at->dtype != DType::Float16) || !at->shape ||
        at->shape->size() < 2)
      continue;
    BlockPlan pl;
    BlockQuantized qz = to_unsigned(*w, pl);
    std::string base = w->name;  // a Linear's weight; `W.T` views are W
    if (base.size() > 2 && base.compare(base.size() - 2, 2, ".T") == 0)
      base.resize(base.size() - 2);
    BlockInitializers m = matmul_nbits_inputs(qz, pl, at->dtype, base, names);
    for (auto& i : m.inits) added.push_back(std::move(i));
    std::vector<std::string> in{a, m.b, m.scale};
    if (!pl.symmetric) in.push_back(m.zp);
    std::vector<Node> out;
    std::string mm_out = bias.empty() ? y : names(y + "_no_bias");
    out.push_back(make_node("MatMulNBits", in, {mm_out},
                            {Attr::Int("K", w->K), Attr::Int("N", w->N), Attr::Int("bits", pl.bits),
                             Attr::Int("block_size", pl.block), Attr::Int("accuracy_level", 0)},
                            n, "com.microsoft"));
    if (!bias.empty()) {
      if (const ValueType* yt = ix.type(y)) g.types[mm_out] = *yt;
      out.push_back(make_node("Add", {mm_out, bias}, {y}, {}, n));
    }
    rw.replace(replaced, std::move(out));
    ++fused;
  }
  if (!fused) return 0;
  rw.apply();
  add_block_initializers(g, added, true);
  return fused;
}

}  // namespace pt2onnx
