// onnxruntime target: com.microsoft MatMulNBits of one activation by
// constant quantized weights (a gated MLP's gate and up projections, a
// cross-attention's key and value) become one MatMulNBits by the weights
// side by side along N, and a Split back into the projections' outputs. A
// decoder step is a GEMV per projection, bound by reading the weights; one
// wider GEMV keeps the threads busier and is one kernel instead of two. The
// quantized rows are only concatenated: their blocks run along K, per output
// column, so the values are the same and the results identical. Float
// weights are left alone: packing them would copy them whole in memory.
//
// Measured (onnxruntime 1.32 CPU, 2 intra-op threads, spinning off, files
// interleaved in one process; transformers LLaMA hidden 512 / 4 layers,
// int4 block 32, the gate and up projections packed by hand beside the file
// as exported; decode batch 1 past 128, three runs): packed / unpacked
// 0.960-0.975, outputs identical.
//
// Matched: two or more MatMulNBits(A, B, scales[, zero_points]) with the
// same A and the same K, N-independent attributes (bits, block_size,
// accuracy_level), all with zero points or none, no other inputs, B / scales
// / zero points constants laid out per output row (B [N, blocks, blob],
// scales [N * blocks] or [N, blocks], zero points [N * z] or [N, z]) read
// by their node alone, outputs no graph outputs. Emits, at the first node's
// place: MatMulNBits(A, B', scales'[, zp']) with N = sum N_i and Split(axis
// -1, [N_0, N_1, ...]) into the original outputs; the packed initializers
// are named after the ones they hold, joined by "+".
#include <cstring>
#include <map>

#include "opt/blockwise.h"
#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

namespace {

struct NBits {
  size_t node = 0;
  int64_t n = 0;
  const TensorData* b = nullptr;
  const TensorData* scale = nullptr;
  const TensorData* zp = nullptr;
};

// The tensors' rows (dim 0) one after the other, as one tensor of dim 0 the
// sum of theirs.
TensorData stack_rows(const std::vector<const TensorData*>& ts) {
  std::vector<uint8_t> out;
  std::vector<int64_t> dims = ts[0]->dims;
  dims[0] = 0;
  for (const TensorData* t : ts) {
    auto b = t->contiguous_copy();
    out.insert(out.end(), b.begin(), b.end());
    dims[0] += t->dims[0];
  }
  return TensorData::from_bytes(ts[0]->dtype, std::move(dims), std::move(out));
}

std::optional<NBits> nbits_node(const GraphIndex& ix, const Node& n, size_t k) {
  if (n.op_type != "MatMulNBits" || n.domain != "com.microsoft" || n.outputs.size() != 1 ||
      n.inputs.size() < 3 || n.inputs.size() > 4)
    return std::nullopt;
  const Attr* na = n.attr("N");
  if (!na || na->i <= 0 || ix.is_graph_output(n.outputs[0])) return std::nullopt;
  NBits r{k, na->i, ix.constant(n.inputs[1]), ix.constant(n.inputs[2]), nullptr};
  if (n.inputs.size() == 4 && !n.inputs[3].empty()) {
    r.zp = ix.constant(n.inputs[3]);
    if (!r.zp || ix.readers(n.inputs[3]) != 1) return std::nullopt;
  }
  if (!r.b || !r.scale || ix.readers(n.inputs[1]) != 1 || ix.readers(n.inputs[2]) != 1)
    return std::nullopt;
  // Per output row: dim 0 is N, or N times something (flat).
  auto per_row = [&](const TensorData* t) {
    return t && !t->dims.empty() && t->dims[0] > 0 && t->dims[0] % r.n == 0 &&
           (t->dims.size() == 1 || t->dims[0] == r.n);
  };
  if (!per_row(r.b) || r.b->dims[0] != r.n || !per_row(r.scale) || (r.zp && !per_row(r.zp)))
    return std::nullopt;
  const ValueType* yt = ix.type(n.outputs[0]);
  if (!yt || !yt->shape || yt->shape->empty()) return std::nullopt;
  return r;
}

// The attributes that must agree (all but N), as one comparable string.
std::string shared_attrs(const Node& n) {
  std::string s;
  for (const Attr& a : n.attrs)
    if (a.name != "N") s += a.name + "=" + std::to_string(a.i) + ";";
  return s;
}

}  // namespace

size_t fuse_sibling_matmuls(Graph& g, const PassOptions& o) {
  if (!o.onnxruntime() || o.opset < 13) return 0;  // Split's sizes as an input
  GraphIndex ix(g);
  // Candidates by (activation, attributes, zero points or not), graph order.
  std::map<std::tuple<std::string, std::string, bool>, std::vector<NBits>> groups;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    auto r = nbits_node(ix, n, k);
    if (!r) continue;
    groups[{n.inputs[0], shared_attrs(n), r->zp != nullptr}].push_back(*r);
  }
  FreshNames fresh(g);
  Rewriter rw(g);
  std::vector<Initializer> added;
  size_t fused = 0;
  for (auto& group : groups) {
    // Not a structured binding: the lambda below captures it (clang refuses).
    const std::vector<NBits>& members = group.second;
    if (members.size() < 2) continue;
    const Node& m0 = g.nodes[members[0].node];
    // Every member's tensors of one layout (rank, trailing dims, types).
    bool same = true;
    auto alike = [](const TensorData* a, const TensorData* b) {
      return a->dtype == b->dtype && a->dims.size() == b->dims.size() &&
             std::equal(a->dims.begin() + 1, a->dims.end(), b->dims.begin() + 1);
    };
    for (const NBits& m : members)
      same = same && alike(m.b, members[0].b) && alike(m.scale, members[0].scale) &&
             (!m.zp || alike(m.zp, members[0].zp));
    if (!same) continue;
    int64_t total = 0;
    std::vector<int64_t> ns;
    std::vector<const TensorData*> bs, ss, zs;
    std::vector<std::string> outs;
    for (const NBits& m : members) {
      ns.push_back(m.n);
      total += m.n;
      bs.push_back(m.b);
      ss.push_back(m.scale);
      if (m.zp) zs.push_back(m.zp);
      outs.push_back(g.nodes[m.node].outputs[0]);
    }
    // Named after the weights it holds, in order: "a_q4+b_q4".
    std::vector<std::string> in{m0.inputs[0]};
    auto add = [&](size_t input, TensorData t) {
      std::string base;
      for (const NBits& m : members)
        base += (base.empty() ? "" : "+") + g.nodes[m.node].inputs[input];
      std::string name = fresh(base);
      g.types[name] = static_type(t.dtype, t.dims);
      added.push_back(Initializer{name, std::move(t)});
      in.push_back(name);
    };
    add(1, stack_rows(bs));
    add(2, stack_rows(ss));
    if (!zs.empty()) add(3, stack_rows(zs));
    ValueType yt = *ix.type(m0.outputs[0]);
    yt.shape->back() = Dim::of(total);
    std::string y = fresh(m0.outputs[0] + ".packed");
    g.types[y] = yt;
    std::string sizes = fresh(m0.outputs[0] + ".split");
    const std::vector<int64_t> sd{static_cast<int64_t>(ns.size())};
    added.push_back(Initializer{sizes, TensorData::from_vector(DType::Int64, sd, ns)});
    g.types[sizes] = static_type(DType::Int64, sd);
    std::vector<Attr> attrs = m0.attrs;
    for (Attr& a : attrs)
      if (a.name == "N") a.i = total;
    std::vector<Node> nodes;
    nodes.push_back(make_node("MatMulNBits", in, {y}, attrs, m0, "com.microsoft"));
    nodes.push_back(make_node("Split", {y, sizes}, outs, {Attr::Int("axis", -1)}, m0));
    // At the first node: A is computed before it, every reader after it.
    rw.replace(members[0].node, std::move(nodes));
    for (size_t i = 1; i < members.size(); ++i) rw.remove(members[i].node);
    ++fused;
  }
  rw.apply();
  for (auto& i : added) g.initializers.push_back(std::move(i));
  return fused;
}

}  // namespace pt2onnx
