// Weight quantization at export (Options::quantize; pt2onnx.export(quantize=)).
//
// The float weights MatMul and Gemm read as B (Linear layers, lm heads) become
// 4- or 8-bit integers with a float scale per block of `block_size` values
// along K (and per output column), computed here from the weight's own bytes
// (the caller's memory, a mapped checkpoint, a bfloat16 checkpoint read as is),
// column by column on a few threads: no float copy of a weight is made, and
// the float weight is then unused and dropped. What the file holds instead:
//
//   onnxruntime target: com.microsoft MatMulNBits(A, B [N, blocks, block
//     bytes] uint8, scales [N * blocks], zero points packed) — the operator
//     onnxruntime-genai's builder and onnxruntime's MatMulNBits quantizer
//     write; a Gemm's bias becomes an Add after it.
//   standard target: DequantizeLinear(q [K, N], scale, zero point) + MatMul:
//     per channel (axis 1) at opset 13 and later for 8 bits; blocked (axis 0,
//     block_size) and 4-bit types need opset 21.
//
// With `embeddings`, the float tables Gather reads rows of (axis 0, row
// length a multiple of the block) are quantized the same way, per row:
// com.microsoft GatherBlockQuantized (onnxruntime) or Gather + blocked
// DequantizeLinear of the rows read (standard, opset 21); see embedding_nodes.
//
// Symmetric blocks take the scale that maps the block's largest-magnitude
// value onto the type's most negative integer (-8 / -128), so the whole
// signed range is used (onnxruntime's own blockwise quantizer does the same);
// asymmetric ones span [min(0, min), max(0, max)] with a zero point.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>

#include "opt/blockwise.h"
#include "opt/passes.h"
#include "opt/pattern.h"
#include "pt2onnx/error.h"

namespace pt2onnx {

namespace {

// Element (k, n) of a weight read as B [K, N], whatever its strides, as the
// float type it is stored in.
struct Source {
  const uint8_t* p = nullptr;
  DType t = DType::Float;
  int64_t K = 0, N = 0, sk = 0, sn = 0;
  float at(int64_t k, int64_t n) const {
    const int64_t i = k * sk + n * sn;
    if (t == DType::Float) {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return t == DType::Float16 ? half_to_float(h) : bfloat16_to_float(h);
  }
};

// `d` read as B [K, N] (`transposed`: d is [N, K], B its transpose).
// nullopt: not a 2-D float weight this pass reads (per-channel-scaled weights
// of a folded batch norm are left as they are).
std::optional<Source> source_of(const TensorData& d, bool transposed) {
  if (d.dims.size() != 2 || (d.scale && !d.owned)) return std::nullopt;
  DType st = d.lazy() ? d.stored_type() : d.dtype;
  if (st != DType::Float && st != DType::Float16 && st != DType::BFloat16) return std::nullopt;
  Source s;
  s.p = d.lazy() ? d.data : d.bytes();
  s.t = st;
  int64_t s0 = d.strides.empty() ? d.dims[1] : d.strides[0];
  int64_t s1 = d.strides.empty() ? 1 : d.strides[1];
  if (transposed) {
    s.K = d.dims[1], s.N = d.dims[0], s.sk = s1, s.sn = s0;
  } else {
    s.K = d.dims[0], s.N = d.dims[1], s.sk = s0, s.sn = s1;
  }
  return s;
}

void quantize_columns(const Source& s, const BlockPlan& pl, int64_t n0, int64_t n1,
                      BlockQuantized& out) {
  const int64_t K = s.K;
  const float top = static_cast<float>((1 << pl.bits) - 1);
  const float neg = -static_cast<float>(1 << (pl.bits - 1));
  std::vector<float> col(static_cast<size_t>(K));
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t k = 0; k < K; ++k) col[static_cast<size_t>(k)] = s.at(k, n);
    for (int64_t b = 0; b < pl.blocks; ++b) {
      const int64_t k0 = b * pl.block, k1 = std::min(K, k0 + pl.block);
      float scale, zp;
      if (pl.symmetric) {
        float m = 0;
        for (int64_t k = k0; k < k1; ++k)
          if (std::fabs(col[static_cast<size_t>(k)]) > std::fabs(m))
            m = col[static_cast<size_t>(k)];
        scale = m / neg;
        zp = -neg;
      } else {
        float mn = 0, mx = 0;
        for (int64_t k = k0; k < k1; ++k) {
          mn = std::min(mn, col[static_cast<size_t>(k)]);
          mx = std::max(mx, col[static_cast<size_t>(k)]);
        }
        scale = (mx - mn) / top;
        zp = scale != 0 ? std::clamp(std::nearbyint(-mn / scale), 0.0f, top) : 0.0f;
      }
      const size_t sb = static_cast<size_t>(n * pl.blocks + b);
      out.scale[sb] = scale;
      out.zp[sb] = static_cast<uint8_t>(zp);
      uint8_t* q = out.q.data() + n * K;
      for (int64_t k = k0; k < k1; ++k) {
        float v = scale != 0 ? std::nearbyint(col[static_cast<size_t>(k)] / scale) + zp : zp;
        q[k] = static_cast<uint8_t>(std::clamp(v, 0.0f, top));
      }
    }
  }
}

BlockQuantized quantize(const Source& s, const BlockPlan& pl) {
  BlockQuantized r;
  r.K = s.K;
  r.N = s.N;
  r.q.resize(static_cast<size_t>(s.K * s.N));
  r.scale.resize(static_cast<size_t>(s.N * pl.blocks));
  r.zp.resize(r.scale.size());
  // Columns are independent: a few threads, each a contiguous range.
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 8);
  const int64_t per = (s.N + threads - 1) / threads;
  if (s.K * s.N < (1 << 16) || threads == 1) {
    quantize_columns(s, pl, 0, s.N, r);
    return r;
  }
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) {
    int64_t n0 = t * per, n1 = std::min(s.N, n0 + per);
    if (n0 < n1) pool.emplace_back([&, n0, n1] { quantize_columns(s, pl, n0, n1, r); });
  }
  for (auto& t : pool) t.join();
  return r;
}

// DequantizeLinear's inputs for B [K, N]: q (int4 / int8 when symmetric,
// uint4 / uint8 with zero points), scales and zero points [blocks, N], or
// [N] per channel (one block).
BlockInitializers dq_inputs(const BlockQuantized& qz, const Source& s, const BlockPlan& pl,
                            DType st, const std::string& base, FreshNames& names) {
  const bool four = pl.bits == 4;
  const DType qt =
      pl.symmetric ? (four ? DType::Int4 : DType::Int8) : (four ? DType::UInt4 : DType::UInt8);
  const int offset = pl.symmetric ? 1 << (pl.bits - 1) : 0;  // symmetric: stored signed
  const size_t count = static_cast<size_t>(s.K * s.N);
  std::vector<uint8_t> q(four ? (count + 1) / 2 : count, 0);
  for (int64_t k = 0; k < s.K; ++k)
    for (int64_t n = 0; n < s.N; ++n) {
      const size_t i = static_cast<size_t>(k * s.N + n);
      const auto v = static_cast<uint8_t>(qz.q[static_cast<size_t>(n * s.K + k)] - offset);
      if (four)
        put_nibble(q, i, v);
      else
        q[i] = v;
    }
  const bool per_channel = pl.blocks == 1;
  std::vector<int64_t> pd =
      per_channel ? std::vector<int64_t>{s.N} : std::vector<int64_t>{pl.blocks, s.N};
  // Scales / zero points [blocks, N] from column-major [N, blocks].
  std::vector<float> sc(qz.scale.size());
  std::vector<uint8_t> zp(qz.zp.size());
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t blk = 0; blk < pl.blocks; ++blk) {
      sc[static_cast<size_t>(blk * s.N + n)] = qz.scale[static_cast<size_t>(n * pl.blocks + blk)];
      zp[static_cast<size_t>(blk * s.N + n)] = qz.zp[static_cast<size_t>(n * pl.blocks + blk)];
    }
  BlockInitializers m;
  m.b = names(base + (four ? "_q4" : "_q8"));
  m.inits.push_back({m.b, TensorData::from_bytes(qt, {s.K, s.N}, std::move(q))});
  m.scale = names(base + "_scales");
  m.inits.push_back({m.scale, floats_as(st, pd, sc)});
  if (!pl.symmetric) {
    m.zp = names(base + "_zero_points");
    if (four) {
      std::vector<uint8_t> z((zp.size() + 1) / 2, 0);
      for (size_t i = 0; i < zp.size(); ++i) put_nibble(z, i, zp[i]);
      m.inits.push_back({m.zp, TensorData::from_bytes(qt, pd, std::move(z))});
    } else {
      m.inits.push_back({m.zp, TensorData::from_bytes(qt, pd, std::move(zp))});
    }
  }
  return m;
}

bool power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// An embedding table E [V, H] quantized per row in blocks along H (qz from
// `quantize` of E read as B = E^T: column v is row v): the nodes for
// Gather(E, ids) -> `out`, appended to `nodes`, their initializers to `made`.
// The integers are stored unsigned (symmetric: zero point 2^(bits-1)), 4-bit
// ones two a byte, low first, each table row on whole bytes.
//   onnxruntime: com.microsoft GatherBlockQuantized(data [V, H * bits / 8]
//     uint8, ids, scales [V, blocks], zero points [V, ceil(blocks * bits /
//     8)] when asymmetric; else its default 2^(bits-1)).
//   standard: Gather of the rows read (ONNX Gather takes no 4-bit type: the
//     bytes are gathered and their nibbles split by BitwiseAnd / BitShift),
//     of their scales and zero points (uint8 [V, blocks]; symmetric: a
//     constant expanded), then DequantizeLinear(axis -1, block_size): only
//     the rows read are dequantized.
void embedding_nodes(const BlockQuantized& qz, const BlockPlan& pl, DType ft, bool ort,
                     const std::string& table, const std::string& ids, const Node& gather, Graph& g,
                     FreshNames& names, std::vector<Initializer>& made, std::vector<Node>& nodes) {
  const int64_t V = qz.N, H = qz.K, blocks = pl.blocks;
  const bool four = pl.bits == 4;
  const size_t count = static_cast<size_t>(V * H);
  std::vector<uint8_t> q(four ? count / 2 : count, 0);
  for (size_t i = 0; i < count; ++i) {
    if (four)
      put_nibble(q, i, qz.q[i]);
    else
      q[i] = qz.q[i];
  }
  const int64_t row_bytes = four ? H / 2 : H;
  std::string qn = names(table + (four ? "_q4" : "_q8"));
  made.push_back({qn, TensorData::from_bytes(DType::UInt8, {V, row_bytes}, std::move(q))});
  g.types[qn] = static_type(DType::UInt8, {V, row_bytes});
  std::string sn = names(table + "_scales");
  made.push_back({sn, floats_as(ft, {V, blocks}, qz.scale)});
  std::string zn;
  if (!pl.symmetric) {
    // One row of zero points per table row (4-bit, onnxruntime: packed).
    const int64_t zrow = four && ort ? (blocks + 1) / 2 : blocks;
    std::vector<uint8_t> z(static_cast<size_t>(V * zrow), 0);
    for (int64_t v = 0; v < V; ++v)
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t x = qz.zp[static_cast<size_t>(v * blocks + b)];
        if (four && ort)
          put_nibble(z, static_cast<size_t>(v * zrow * 2 + b), x);
        else
          z[static_cast<size_t>(v * zrow + b)] = x;
      }
    zn = names(table + "_zero_points");
    made.push_back({zn, TensorData::from_bytes(DType::UInt8, {V, zrow}, std::move(z))});
  }
  const std::string& y = gather.outputs[0];
  if (ort) {
    std::vector<std::string> in{qn, ids, sn};
    if (!zn.empty()) in.push_back(zn);
    nodes.push_back(make_node("GatherBlockQuantized", in, {y},
                              {Attr::Int("gather_axis", 0), Attr::Int("quantize_axis", 1),
                               Attr::Int("block_size", pl.block), Attr::Int("bits", pl.bits)},
                              gather, "com.microsoft"));
    return;
  }
  const ValueType* yt = g.type_of(y);
  if (!yt || !yt->shape) throw Error("quantize embeddings: the gathered rows' rank is unknown");
  const Shape rows_shape = *yt->shape;  // [ids..., H]
  auto add_node = [&](const std::string& op, std::vector<std::string> in, DType dt, Shape sh,
                      std::vector<Attr> attrs = {}) {
    std::string out = names(y + "_" + op);
    g.types[out] = ValueType{dt, std::move(sh)};
    nodes.push_back(make_node(op, std::move(in), {out}, std::move(attrs), gather));
    nodes.back().name += "_" + std::to_string(nodes.size());  // one name per node
    return out;
  };
  auto with_last = [&](int64_t last) {
    Shape sh = rows_shape;
    sh.back() = Dim::of(last);
    return sh;
  };
  auto ints = [&](std::vector<int64_t> v) {
    std::string c = names(y + "_const");
    const std::vector<int64_t> dims{static_cast<int64_t>(v.size())};
    made.push_back({c, TensorData::from_vector(DType::Int64, dims, v)});
    g.types[c] = static_type(DType::Int64, dims);
    return c;
  };
  auto byte = [&](uint8_t v) {
    std::string c = names(y + "_const");
    made.push_back({c, TensorData::from_vector(DType::UInt8, {}, std::vector<uint8_t>{v})});
    g.types[c] = static_type(DType::UInt8, {});
    return c;
  };
  const Attr axis0 = Attr::Int("axis", 0);
  std::string vals = add_node("Gather", {qn, ids}, DType::UInt8, with_last(row_bytes), {axis0});
  if (four) {
    // [.., H / 2] bytes -> [.., H / 2, 2] nibbles (low first) -> [.., H].
    Shape half = with_last(H / 2);
    Shape pair = half;
    pair.push_back(Dim::of(1));
    std::string lo = add_node("BitwiseAnd", {vals, byte(15)}, DType::UInt8, half);
    std::string hi = add_node("BitShift", {vals, byte(4)}, DType::UInt8, half,
                              {Attr::Str("direction", "RIGHT")});
    const std::string last = ints({-1});
    lo = add_node("Unsqueeze", {lo, last}, DType::UInt8, pair);
    hi = add_node("Unsqueeze", {hi, last}, DType::UInt8, pair);
    pair.back() = Dim::of(2);
    std::string both = add_node("Concat", {lo, hi}, DType::UInt8, pair, {Attr::Int("axis", -1)});
    std::vector<int64_t> to(rows_shape.size() - 1, 0);  // 0: keep that dim
    to.push_back(H);
    vals = add_node("Reshape", {both, ints(to)}, DType::UInt8, rows_shape);
  }
  std::string sc = add_node("Gather", {sn, ids}, ft, with_last(blocks), {axis0});
  std::string zp =
      zn.empty() ? add_node("Expand",
                            {byte(uint8_t{1} << (pl.bits - 1)),
                             add_node("Shape", {sc}, DType::Int64,
                                      Shape{Dim::of(static_cast<int64_t>(rows_shape.size()))})},
                            DType::UInt8, with_last(blocks))
                 : add_node("Gather", {zn, ids}, DType::UInt8, with_last(blocks), {axis0});
  nodes.push_back(make_node("DequantizeLinear", {vals, sc, zp}, {y},
                            {Attr::Int("axis", -1), Attr::Int("block_size", pl.block)}, gather));
}

}  // namespace

size_t quantize_weights(Graph& g, const WeightQuantization& q, const PassOptions& o) {
  if (q.bits == 0) return 0;
  if (q.bits != 4 && q.bits != 8)
    throw Error("quantize: " + std::to_string(q.bits) +
                " bits; 4 (int4) or 8 (int8) are supported");
  const bool ort = o.onnxruntime();
  if (!ort && q.bits == 4 && o.opset < 21)
    throw Error(
        "quantize='int4' with target='standard' writes 4-bit DequantizeLinear, which needs "
        "opset 21 or later (this export: " +
        std::to_string(o.opset) + "); use opset=21 or target='onnxruntime' (MatMulNBits)");
  if (q.block_size < 0 || (q.block_size > 0 && q.block_size < 16 && ort) ||
      (ort && q.block_size > 0 && !power_of_two(q.block_size)))
    throw Error("quantize block_size " + std::to_string(q.block_size) +
                (ort ? ": onnxruntime's MatMulNBits needs a power of 2, 16 or more"
                     : ": must be positive (0: the default)"));
  if (!ort && q.embeddings && o.opset < 21)
    throw Error(
        "quantize with embeddings and target='standard' writes blocked DequantizeLinear, "
        "which needs opset 21 or later; use opset=21 or target='onnxruntime' "
        "(GatherBlockQuantized)");
  if (!ort && q.block_size > 0 && o.opset < 21)
    throw Error(
        "quantize with a block_size and target='standard' writes blocked "
        "DequantizeLinear, which needs opset 21 or later; use opset=21, "
        "block_size=0 (per channel, 8 bits) or target='onnxruntime'");

  GraphIndex ix(g);
  FreshNames names(g);
  // DequantizeLinear's scales (and so its output) are float32 before opset
  // 19: a float16 model's weights are dequantized to float32 and cast.
  auto dq_type = [&o](DType t) { return o.opset < 19 ? DType::Float : t; };
  std::map<std::pair<std::string, bool>, BlockInitializers>
      done;  // (weight, transposed) -> its quantized form
  std::vector<Initializer> added;
  Rewriter rw(g);
  size_t changed = 0;

  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    const bool matmul = is_op(&n, "MatMul");
    const bool gemm = is_op(&n, "Gemm");
    if ((!matmul && !gemm) || n.outputs.size() != 1 || n.inputs.size() < 2) continue;
    bool transposed = false;
    if (gemm) {
      auto tb = plain_gemm(n);
      if (!tb) continue;
      transposed = *tb;
    }
    // B: a weight, or (without optimize) the Transpose of one.
    std::string w = n.inputs[1];
    if (const Node* t = ix.producer(w, "Transpose"); t && matmul) {
      const Attr* perm = t->attr("perm");
      if (!perm || perm->ints != std::vector<int64_t>{1, 0} || !ix.constant(t->inputs[0])) continue;
      w = t->inputs[0];
      transposed = true;
    }
    const TensorData* d = ix.constant(w);
    const ValueType* at = ix.type(n.inputs[0]);
    if (!d || !at || (at->dtype != DType::Float && at->dtype != DType::Float16)) continue;
    if (d->dtype != at->dtype) continue;
    auto src = source_of(*d, transposed);
    if (!src || src->K < 16 || src->N < 1) continue;

    BlockPlan pl;
    pl.bits = q.bits;
    pl.symmetric = q.symmetric;
    if (q.block_size > 0)
      pl.block = q.block_size;
    else if (q.bits == 4)
      pl.block = 32;
    else  // per channel: one block the length of K (onnxruntime: a power of 2, padded)
      pl.block = ort ? std::max<int64_t>(16, int64_t{1} << static_cast<int>(
                                                 std::ceil(std::log2(static_cast<double>(src->K)))))
                     : src->K;
    pl.blocks = (src->K + pl.block - 1) / pl.block;

    const auto key = std::make_pair(w, transposed);
    auto it = done.find(key);
    if (it == done.end()) {
      BlockQuantized qz = quantize(*src, pl);
      // MatMulNBits holds W in its own [N, K] layout: named after W, not
      // after fold_weight_transpose's `W.T` view.
      std::string base = w;
      if (ort && base.size() > 2 && base.compare(base.size() - 2, 2, ".T") == 0)
        base.resize(base.size() - 2);
      BlockInitializers m = ort ? matmul_nbits_inputs(qz, pl, at->dtype, base, names)
                                : dq_inputs(qz, *src, pl, dq_type(at->dtype), base, names);
      for (auto& i : m.inits) added.push_back(i);
      it = done.emplace(key, std::move(m)).first;
    }
    const BlockInitializers& m = it->second;
    const Source& s = *src;  // the same K, N for every reader of this key
    std::vector<Node> out;
    std::string y = n.outputs[0];
    const bool bias = gemm && n.inputs.size() > 2 && !n.inputs[2].empty();
    std::string mm_out = bias ? names(y + "_no_bias") : y;
    if (ort) {
      std::vector<std::string> in{n.inputs[0], m.b, m.scale};
      if (!m.zp.empty()) in.push_back(m.zp);
      out.push_back(make_node(
          "MatMulNBits", in, {mm_out},
          {Attr::Int("K", s.K), Attr::Int("N", s.N), Attr::Int("bits", pl.bits),
           Attr::Int("block_size", pl.block), Attr::Int("accuracy_level", q.accuracy_level)},
          n, "com.microsoft"));
    } else {
      std::string deq = names(m.b + "_dequantized");
      std::vector<std::string> in{m.b, m.scale};
      if (!m.zp.empty()) in.push_back(m.zp);
      std::vector<Attr> attrs;
      if (pl.blocks == 1) {
        attrs.push_back(Attr::Int("axis", 1));
      } else {
        attrs.push_back(Attr::Int("axis", 0));
        attrs.push_back(Attr::Int("block_size", pl.block));
      }
      out.push_back(make_node("DequantizeLinear", in, {deq}, attrs, n));
      g.types[deq] = static_type(dq_type(at->dtype), {s.K, s.N});
      if (dq_type(at->dtype) != at->dtype) {
        std::string cast = names(deq + "_cast");
        out.push_back(make_node("Cast", {deq}, {cast},
                                {Attr::Int("to", static_cast<int64_t>(at->dtype))}, n));
        g.types[cast] = static_type(at->dtype, {s.K, s.N});
        deq = cast;
      }
      out.push_back(make_node("MatMul", {n.inputs[0], deq}, {mm_out}, {}, n));
    }
    if (bias) {
      if (const ValueType* yt = ix.type(y)) g.types[mm_out] = *yt;
      out.push_back(make_node("Add", {mm_out, n.inputs[2]}, {y}, {}, n));
    }
    rw.replace(k, std::move(out));
    ++changed;
  }
  // Embedding tables (q.embeddings): Gather(E [V, H] float weight, ids, axis 0).
  for (size_t k = 0; q.embeddings && k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (!is_op(&n, "Gather") || n.inputs.size() != 2 || n.outputs.size() != 1 || rw.touched(k))
      continue;
    if (const Attr* ax = n.attr("axis"); ax && ax->i != 0) continue;
    const TensorData* d = ix.constant(n.inputs[0]);
    const ValueType* it = ix.type(n.inputs[1]);
    const ValueType* yt = ix.type(n.outputs[0]);
    if (!d || !it || !yt || (it->dtype != DType::Int64 && it->dtype != DType::Int32) ||
        (yt->dtype != DType::Float && yt->dtype != DType::Float16))
      continue;
    auto src = source_of(*d, true);  // column v of E^T is row v of E
    if (!src || src->N < 1) continue;
    BlockPlan pl;
    pl.bits = q.bits;
    pl.symmetric = q.symmetric;
    pl.block = q.block_size > 0 ? q.block_size : 32;
    if (src->K % pl.block != 0) continue;  // rows of whole blocks only
    pl.blocks = src->K / pl.block;
    BlockQuantized qz = quantize(*src, pl);
    std::vector<Node> out;
    embedding_nodes(qz, pl, yt->dtype, ort, n.inputs[0], n.inputs[1], n, g, names, added, out);
    rw.replace(k, std::move(out));
    ++changed;
  }
  if (!changed) return 0;
  rw.apply();
  add_block_initializers(g, added, ort);
  remove_unused(g);
  return changed;
}

}  // namespace pt2onnx
