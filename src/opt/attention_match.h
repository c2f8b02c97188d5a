// The matcher the attention fusions share (fuse_attention.cpp,
// fuse_group_query_attention.cpp): the decomposition convert/attention.cpp
// emits for aten.scaled_dot_product_attention, read back into its pieces.
//
// The group is found by origin (every node of one SDPA shares fx_node and the
// fx_target below) and each piece is then proved from the graph:
//   [k = Reshape(Expand(Unsqueeze(k0, 2)))]   head repeat, by its types:
//                                              [B,Hkv,T,D] -> [B,Hkv,r,T,D] -> [B,Hkv*r,T,D]
//   s = Mul(MatMul(q, Transpose(k, [0,1,3,2])), scale)      scale: a constant scalar
//   s = Where(mask, s, -inf) | Add(s, mask)                  boolean / additive mask
//   s = Where(LessOrEqual(cols, rows), s, -inf)              is_causal (top-left)
//   p = Softmax(s, axis -1)
//   p = Where(mask, p, 0) | Where(IsNaN(p), 0, p)            fully masked rows -> 0
//   y = MatMul(p, v)
// Rank-4 q / k / v only, head counts and head size static. The repeat may
// also come from upstream (transformers' repeat_kv): any Unsqueeze / Expand /
// Reshape chain whose types prove the same repeat. When k0 (v0) is
// Concat(past, new, axis 2) with `past` a graph input and the Concat a graph
// output read nowhere else (a KV cache), the cache pieces are recorded.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "opt/pattern.h"

namespace pt2onnx {

struct SdpaMatch {
  size_t last = 0;            // the final MatMul
  std::vector<size_t> nodes;  // pattern nodes to remove (interior, repeat, cache Concats)
  std::string q, k, v;        // q [B,Hq,L,D]; k, v [B,Hkv,T,D] (after undoing the repeat)
  DType dtype = DType::Undefined;
  int64_t q_heads = 0, kv_heads = 0, head_size = 0;
  double scale = 1.0;
  enum class Mask { None, Bool, Additive } mask_kind = Mask::None;
  std::string mask;         // the mask as the SDPA read it
  bool causal = false;      // the converter's is_causal (top-left) mask
  std::string causal_mask;  // its boolean [L, S] tensor
  // KV cache: k = Concat(past_key, key_new), likewise v; present_* are the Concats' outputs.
  bool cache = false;
  std::string past_key, past_value, key_new, value_new, present_key, present_value;
};

std::optional<SdpaMatch> match_sdpa(const GraphIndex& idx, size_t last);

// Adds the values a fusion emits: nodes (typed), constants (initializers).
class Emitter {
 public:
  Emitter(Graph& g, FreshNames& names, const Node& like) : g_(g), names_(names), like_(like) {}
  std::string op(const std::string& op_type, std::vector<std::string> inputs, ValueType type,
                 std::vector<Attr> attrs = {}, const std::string& domain = "");
  // A node with several named outputs (already typed by the caller).
  void node(const std::string& op_type, std::vector<std::string> inputs,
            std::vector<std::string> outputs, std::vector<Attr> attrs,
            const std::string& domain = "");
  std::string ints(const std::vector<int64_t>& v);
  std::string scalar(DType t, double v);
  std::vector<Node>& nodes() { return nodes_; }
  const Graph& graph() const { return g_; }

 private:
  Graph& g_;
  FreshNames& names_;
  const Node& like_;
  std::vector<Node> nodes_;
};

// Shape(x)[start:end] (Shape's start / end at opset >= 15, Shape + Slice below).
std::string shape_slice(Emitter& e, const std::string& x, int64_t start, int64_t end, int opset);

// `mask` (rank >= 2, query axis -2) with a query axis of 1 expanded to the
// query length of q ([B, H, L, D]); other masks are returned as they are.
// onnxruntime's Attention, MultiHeadAttention and GroupQueryAttention take no
// mask broadcast over the query rows (a padding mask [B, 1, 1, T]).
std::string expand_query_rows(Emitter& e, const std::string& mask, const std::string& q, int opset);

// Zeroes the query rows the mask hides entirely, as torch's CPU kernels (and
// the decomposition) do: Where(row has a key, y, 0). y is [B,H,L,D]; `mask`
// boolean (True = attend; ReduceMax of bool needs opset 20) or additive
// (-inf = hidden), of dtype t.
std::string zero_masked_rows(Emitter& e, const std::string& mask, bool additive, DType t,
                             const std::string& y, const ValueType& yt, int opset);

}  // namespace pt2onnx
