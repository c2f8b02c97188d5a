// Blockwise-quantized weights as the passes write them (quantize_weights:
// from float weights; fuse_dequantize_matmul: from a program's own integers):
// the integers, scales and zero points of a B [K, N] weight, and the
// initializers of com.microsoft MatMulNBits that hold them.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace pt2onnx {

struct BlockPlan {
  int bits = 4;
  int64_t block = 32;  // values per block along K
  int64_t blocks = 0;  // ceil(K / block)
  // Symmetric: every zero point is 2^(bits-1), MatMulNBits' default, so the
  // zero points are not written.
  bool symmetric = true;
};

// Integers (unsigned, 0 .. 2^bits - 1), scales and zero points of every
// column of B [K, N], column-major: q[n * K + k], scale / zp[n * blocks + b].
struct BlockQuantized {
  int64_t K = 0, N = 0;
  std::vector<uint8_t> q, zp;
  std::vector<float> scale;
};

// Initializers made for one weight, and the names of its quantized values,
// scales and (when written) zero points.
struct BlockInitializers {
  std::vector<Initializer> inits;
  std::string b, scale, zp;
};

// `v` as a tensor of float type t (float, float16 or bfloat16).
TensorData floats_as(DType t, std::vector<int64_t> dims, const std::vector<float>& v);
// Sets nibble i of packed 4-bit storage (element i in byte i / 2, the low
// nibble first, as ONNX and MatMulNBits pack them).
void put_nibble(std::vector<uint8_t>& b, size_t i, uint8_t v);

// MatMulNBits' inputs: B [N, blocks, block * bits / 8] uint8 (the last block
// padded with its zero point), scales [N * blocks] of type `ft`, zero points
// (asymmetric) [N * ceil(blocks * bits / 8)]. Named after `base`.
BlockInitializers matmul_nbits_inputs(const BlockQuantized& qz, const BlockPlan& pl, DType ft,
                                      const std::string& base, FreshNames& names);

// Adds `made` to g's initializers (with their types), and the com.microsoft
// domain the MatMulNBits nodes need when `nbits`.
void add_block_initializers(Graph& g, std::vector<Initializer>& made, bool nbits);

}  // namespace pt2onnx
