// Mixture of experts: grouped matrix products over rows sorted by expert.
//   transformers.grouped_mm_fallback(input [S, K], weight [E, K, N], offs [E])
//   aten._grouped_mm(self [S, K], mat2 [E, K, N], offs [E]) (the 2-D x 3-D form)
// offs holds the cumulative row counts per expert (int32 or int64): rows
// [offs[e-1], offs[e]) (offs[-1] = 0) are multiplied by weight[e]; rows past
// offs[E-1] are zero (transformers' fallback zero-fills them).
//
// transformers' MoE layers (Mixtral, Qwen2/3-MoE, OLMoE, ...) sort the
// S = tokens * top_k (token, expert) pairs by expert and call this op twice
// per layer (gate_up and down projections). The form emitted here is unrolled
// over the E experts (E is static: the weight's first dim): per expert one
// Slice of its rows (bounds read from offs at run time) and one MatMul by its
// [K, N] matrix, then one Concat. Each row is multiplied by its own expert
// only, so a layer does the work of top_k experts per token, never of all E.
// (An ONNX Loop over experts would need a sequence to collect the
// variable-sized blocks and runs a subgraph per expert; the unrolled form
// gives onnxruntime plain MatMuls on constant weights it prepacks.)
//
// The per-expert matrices: when the weight is an initializer [E, K, N], or the
// Transpose (perm 0, 2, 1) of one [E, N, K] (how nn.Linear-layout expert
// weights reach the op), expert e's matrix is a view of its bytes (nothing
// copied); in the Linear layout under a Transpose node, which the weight
// passes then treat as a Linear weight's (fold_weight_transpose). Any other
// weight (computed, scaled or already copied into memory) is read per expert
// with Gather at run time.
#include <optional>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

// Expert e's block of a rank-3 initializer as a view of the same bytes, or
// nullopt when the tensor's bytes cannot be offset (copied into memory,
// scaled per channel).
std::optional<TensorData> expert_view(const TensorData& t, int64_t e) {
  if (t.dims.size() != 3 || t.scale || !t.data) return std::nullopt;
  // Bytes already in `owned` are what bytes() reads; a lazily converted
  // tensor keeps its stored bytes at `data` and the view converts again.
  if (t.owned && t.stored == DType::Undefined) return std::nullopt;
  TensorData v = t;
  v.owned.reset();
  v.dims = {t.dims[1], t.dims[2]};
  int64_t offset = e * t.dims[1] * t.dims[2];  // elements
  if (!t.strides.empty()) {
    offset = e * t.strides[0];
    v.strides = {t.strides[1], t.strides[2]};
    if (v.is_contiguous()) v.strides.clear();
  }
  const auto bytes = static_cast<size_t>(offset) * dtype_size(t.stored_type());
  v.data = t.data + bytes;
  if (v.src_fd >= 0) v.src_offset += bytes;
  return v;
}

// The node of the current graph that writes `v` (nullptr for inputs and
// initializers).
const Node* producer(Ctx& c, const std::string& v) {
  const auto& nodes = c.b.graph().nodes;
  for (size_t k = nodes.size(); k-- > 0;)
    for (auto& o : nodes[k].outputs)
      if (o == v) return &nodes[k];
  return nullptr;
}

// Per expert, its [K, N] matrix: constant views where the weight is an
// initializer (or the Transpose of one), else Gather at run time.
std::vector<std::string> expert_matrices(Ctx& c, const std::string& w, int64_t E) {
  std::string name = w;
  bool transposed = false;
  const TensorData* t = c.b.constant_value(w);
  if (!t) {
    const Node* n = producer(c, w);
    if (n && n->op_type == "Transpose" && n->domain.empty() && n->inputs.size() == 1) {
      const Attr* perm = n->attr("perm");
      if (perm && perm->ints == std::vector<int64_t>{0, 2, 1}) {
        t = c.b.constant_value(n->inputs[0]);
        name = n->inputs[0];
        transposed = true;
      }
    }
  }
  std::vector<std::string> out;
  if (t && t->dims.size() == 3 && t->dims[0] == E) {
    // A weight read by several grouped products is split once (its bytes
    // are then written once); initializers are visible in every scope.
    const std::string key = "moe_experts:" + name + ":";
    const TensorData src = *t;  // adding initializers may move *t
    for (int64_t e = 0; e < E; ++e) {
      auto it = c.env.cache.find(key + std::to_string(e));
      if (it != c.env.cache.end()) {
        out.push_back(it->second);
        continue;
      }
      std::optional<TensorData> v = expert_view(src, e);
      if (!v) break;
      out.push_back(c.b.initializer(name + "." + std::to_string(e), std::move(*v)));
      c.env.cache[key + std::to_string(e)] = out.back();
    }
    if (static_cast<int64_t>(out.size()) == E) {
      if (transposed)
        for (auto& m : out) m = c.transpose(m, {1, 0});
      return out;
    }
    out.clear();
  }
  for (int64_t e = 0; e < E; ++e)
    out.push_back(c.b.op("Gather", {w, c.b.scalar_i64(e)}, {Attr::Int("axis", 0)}));
  return out;
}

void grouped_mm(Ctx& c, const char* input_arg, const char* weight_arg) {
  std::string x = c.tensor(input_arg), w = c.tensor(weight_arg);
  if (!c.has("offs"))
    c.fail("grouped_mm without offs (one matrix per group of rows) is not supported");
  std::string offs = c.tensor("offs");
  if (c.rank(x) != 2 || c.rank(w) != 3 || c.rank(offs) != 1)
    c.fail("only the 2-D input x 3-D weight form (rows grouped by offs) is supported; got ranks " +
           std::to_string(c.rank(x)) + ", " + std::to_string(c.rank(w)) + ", offs " +
           std::to_string(c.rank(offs)));
  const Shape& ws = c.shape(w);
  if (!ws[0].is_static()) c.fail("the number of experts (the weight's first dim) must be static");
  const int64_t E = ws[0].value;
  if (E < 1) c.fail("the weight has no experts");
  const DType t = c.out_dtype();
  x = c.cast(x, t);
  std::vector<std::string> mats = expert_matrices(c, w, E);
  for (auto& m : mats) m = c.cast(m, t);

  // Row bounds: offs as E one-element int64 tensors.
  std::string offs64 = c.cast(offs, DType::Int64);
  std::vector<std::string> ends =
      E == 1 ? std::vector<std::string>{offs64}
             : c.b.add_node("Split", {offs64, c.b.const_i64(std::vector<int64_t>(E, 1))},
                            static_cast<size_t>(E), {Attr::Int("axis", 0)},
                            std::vector<ValueType>(E, static_type(DType::Int64, {1})));
  const std::string zero = c.b.const_i64({0}), axis0 = c.b.const_i64({0});
  const Dim n_cols = c.out_type().shape ? c.out_type().shape->back() : Dim::unknown();
  const ValueType block{t, Shape{Dim::unknown(), n_cols}};
  std::vector<std::string> blocks;
  for (int64_t e = 0; e < E; ++e) {
    auto k = static_cast<size_t>(e);
    std::string rows = c.b.op("Slice", {x, e ? ends[k - 1] : zero, ends[k], axis0}, {},
                              ValueType{t, Shape{Dim::unknown(), c.shape(x).back()}});
    blocks.push_back(c.b.op("MatMul", {rows, mats[k]}, {}, block));
  }
  std::string y = E == 1 ? blocks[0] : c.b.op("Concat", blocks, {Attr::Int("axis", 0)}, block);
  // Rows past offs[E-1]: zeros (none when every row belongs to an expert).
  std::string rest = c.b.op("Sub", {c.dim_value(x, 0), ends.back()});
  std::string pads = c.b.op("Concat", {zero, zero, rest, zero}, {Attr::Int("axis", 0)});
  c.set_output(0, c.b.op("Pad", {y, pads}, {}, c.out_type()));
}

void grouped_mm_fallback(Ctx& c) { grouped_mm(c, "input", "weight"); }

void aten_grouped_mm(Ctx& c) {
  if (c.has("bias")) c.fail("_grouped_mm with a bias is not supported");
  grouped_mm(c, "self", "mat2");
}

}  // namespace

void register_moe(Registry& r) {
  r.add("torch.ops.transformers.grouped_mm_fallback.default", grouped_mm_fallback);
  r.add("torch.ops.aten._grouped_mm.default", aten_grouped_mm);
}

}  // namespace pt2onnx
