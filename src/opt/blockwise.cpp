// Blockwise-quantized weights: the layouts MatMulNBits reads (see blockwise.h).
#include "opt/blockwise.h"

namespace pt2onnx {

TensorData floats_as(DType t, std::vector<int64_t> dims, const std::vector<float>& v) {
  if (t == DType::Float) return TensorData::from_vector(t, std::move(dims), v);
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    h[i] = t == DType::Float16 ? float_to_half(v[i]) : float_to_bfloat16(v[i]);
  return TensorData::from_vector(t, std::move(dims), h);
}

void put_nibble(std::vector<uint8_t>& b, size_t i, uint8_t v) {
  b[i / 2] = static_cast<uint8_t>(b[i / 2] | ((v & 0xF) << (4 * (i % 2))));
}

BlockInitializers matmul_nbits_inputs(const BlockQuantized& qz, const BlockPlan& pl, DType ft,
                                      const std::string& base, FreshNames& names) {
  const BlockQuantized& s = qz;  // K, N
  const int64_t blob = pl.block * pl.bits / 8;
  std::vector<uint8_t> b(static_cast<size_t>(s.N * pl.blocks * blob), 0);
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t blk = 0; blk < pl.blocks; ++blk) {
      const uint8_t pad = qz.zp[static_cast<size_t>(n * pl.blocks + blk)];
      const size_t at = static_cast<size_t>((n * pl.blocks + blk) * blob);
      for (int64_t j = 0; j < pl.block; ++j) {
        const int64_t k = blk * pl.block + j;
        // Past K the last block is padded with its zero point (value 0).
        const uint8_t v = k < s.K ? qz.q[static_cast<size_t>(n * s.K + k)] : pad;
        if (pl.bits == 8)
          b[at + static_cast<size_t>(j)] = v;
        else
          b[at + static_cast<size_t>(j / 2)] |= static_cast<uint8_t>(v << (4 * (j % 2)));
      }
    }
  BlockInitializers m;
  m.b = names(base + (pl.bits == 4 ? "_q4" : "_q8"));
  m.inits.push_back(
      {m.b, TensorData::from_bytes(DType::UInt8, {s.N, pl.blocks, blob}, std::move(b))});
  m.scale = names(base + "_scales");
  m.inits.push_back({m.scale, floats_as(ft, {s.N * pl.blocks}, qz.scale)});
  if (!pl.symmetric) {
    m.zp = names(base + "_zero_points");
    if (pl.bits == 8) {
      m.inits.push_back({m.zp, TensorData::from_bytes(DType::UInt8, {s.N * pl.blocks}, qz.zp)});
    } else {
      const int64_t per_col = (pl.blocks + 1) / 2;
      std::vector<uint8_t> z(static_cast<size_t>(s.N * per_col), 0);
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t blk = 0; blk < pl.blocks; ++blk)
          put_nibble(z, static_cast<size_t>(n * per_col * 2 + blk),
                     qz.zp[static_cast<size_t>(n * pl.blocks + blk)]);
      m.inits.push_back(
          {m.zp, TensorData::from_bytes(DType::UInt8, {s.N * per_col}, std::move(z))});
    }
  }
  return m;
}

void add_block_initializers(Graph& g, std::vector<Initializer>& made, bool nbits) {
  for (auto& i : made) {
    g.types[i.name] = static_type(i.data.dtype, i.data.dims);
    g.initializers.push_back(std::move(i));
  }
  made.clear();
  if (nbits) g.domain_versions.emplace("com.microsoft", 1);
}

}  // namespace pt2onnx
