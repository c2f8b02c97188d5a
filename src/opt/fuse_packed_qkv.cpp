// onnxruntime target: the Q / K / V projections of a GroupQueryAttention
// become one packed MatMul, read as GQA's packed `query` input (key and value
// left empty). One GEMM over the activation instead of three, and nothing
// between it and the attention: GQA splits the heads itself.
//
// Matched: com.microsoft GroupQueryAttention (fuse_group_query_attention's,
// after collapse_layout_chains has removed the head reshapes) whose query,
// key and value are each MatMul(A, W_i) or Add(MatMul(A, W_i), b_i), with
//   - the same activation A;
//   - W_i 2-D float / float16 constants [K, N_i] of one dtype and K, with
//     N_q = num_heads * D and N_k = N_v = kv_num_heads * D (D = N_q /
//     num_heads), each read by its MatMul alone;
//   - b_i (all three or none) 1-D constants [N_i] of W's dtype, read once;
//   - every MatMul / Add output read by this GQA alone.
// Emits MatMul(A, W) [+ Add(., b)] with W = [W_q | W_k | W_v] along N (and b
// likewise): new bytes made at export time, the W_i dropped. A projection the
// model packed itself (q, k, v the consecutive thirds of one value, sliced on
// the last axis: Phi-3's qkv_proj) goes to GQA as it is, the Slices dropped.
//
// Measured (onnxruntime 1.32 CPU, 2 intra-op threads, spinning off, files
// interleaved in one process; Qwen2 hidden 512 / 4 layers exported with
// rotary inside GQA, then its three projections packed by hand into one file
// beside it; packed / unpacked medians): prefill 128 tokens 0.998, decode
// past 128 0.955, decode batch 4 past 512 0.907; outputs identical.
//
// Left alone: GQAs already packed, or with a rotary outside (q / k not read
// from the MatMuls), projections of different activations, types or K,
// weights read elsewhere (tied: packing would write their bytes twice),
// biases on some projections only.
#include <algorithm>
#include <cstring>

#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

namespace {

struct Projection {
  size_t matmul = 0;
  std::optional<size_t> add;
  const TensorData* w = nullptr;
  const TensorData* b = nullptr;
};

// v = MatMul(A, W) or Add(MatMul(A, W), b) / Add(b, MatMul(A, W)), every
// piece read once.
std::optional<Projection> projection(const GraphIndex& ix, const std::string& v) {
  if (ix.readers(v) != 1 || ix.is_graph_output(v)) return std::nullopt;
  Projection p;
  std::string mm = v;
  if (const Node* add = ix.producer(v, "Add")) {
    for (int o = 0; o < 2 && !p.b; ++o) {
      const TensorData* b = ix.constant(add->inputs[static_cast<size_t>(o)]);
      if (b && b->dims.size() == 1 && ix.readers(add->inputs[static_cast<size_t>(o)]) == 1) {
        p.b = b;
        mm = add->inputs[static_cast<size_t>(1 - o)];
      }
    }
    if (!p.b || ix.readers(mm) != 1 || ix.is_graph_output(mm)) return std::nullopt;
    p.add = ix.producer_index(v);
  }
  const Node* m = ix.producer(mm, "MatMul");
  if (!m || m->inputs.size() != 2) return std::nullopt;
  p.w = ix.constant(m->inputs[1]);
  if (!p.w || p.w->dims.size() != 2 || ix.readers(m->inputs[1]) != 1 || ix.constant(m->inputs[0]))
    return std::nullopt;
  if (p.w->dtype != DType::Float && p.w->dtype != DType::Float16) return std::nullopt;
  if (p.b && (p.b->dtype != p.w->dtype || p.b->dims[0] != p.w->dims[1])) return std::nullopt;
  p.matmul = *ix.producer_index(mm);
  return p;
}

// v = Slice(P, [start], [end], [last axis], [1]) of a P whose last dim is
// static: {P, start, end}.
struct LastSlice {
  std::string p;
  int64_t start = 0, end = 0;
};
std::optional<LastSlice> last_axis_slice(const GraphIndex& ix, const std::string& v) {
  const Node* s = ix.producer(v, "Slice");
  if (!s || s->inputs.size() < 4 || ix.readers(v) != 1 || ix.is_graph_output(v))
    return std::nullopt;
  const ValueType* pt = ix.type(s->inputs[0]);
  if (!pt || !pt->shape || pt->shape->empty() || !pt->shape->back().is_static())
    return std::nullopt;
  const int64_t r = static_cast<int64_t>(pt->shape->size());
  const int64_t n = pt->shape->back().value;
  auto st = ix.ints(s->inputs[1]);
  auto en = ix.ints(s->inputs[2]);
  auto ax = ix.ints(s->inputs[3]);
  std::optional<std::vector<int64_t>> step;
  if (s->inputs.size() > 4 && !s->inputs[4].empty()) step = ix.ints(s->inputs[4]);
  if (!st || !en || !ax || st->size() != 1 || en->size() != 1 || ax->size() != 1)
    return std::nullopt;
  if (step && (step->size() != 1 || (*step)[0] != 1)) return std::nullopt;
  if ((*ax)[0] != -1 && (*ax)[0] != r - 1) return std::nullopt;
  auto clamp = [&](int64_t x) { return std::clamp(x < 0 ? x + n : x, int64_t{0}, n); };
  return LastSlice{s->inputs[0], clamp((*st)[0]), clamp((*en)[0])};
}

}  // namespace

size_t fuse_packed_qkv(Graph& g, const PassOptions& o) {
  if (!o.onnxruntime()) return 0;
  GraphIndex ix(g);
  FreshNames fresh(g);
  Rewriter rw(g);
  std::vector<Initializer> added;
  size_t fused = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& gqa = g.nodes[k];
    if (gqa.op_type != "GroupQueryAttention" || gqa.domain != "com.microsoft" ||
        gqa.inputs.size() < 3 || gqa.inputs[1].empty() || gqa.inputs[2].empty())
      continue;
    const Attr* hq = gqa.attr("num_heads");
    const Attr* hkv = gqa.attr("kv_num_heads");
    if (!hq || !hkv || hq->i <= 0 || hkv->i <= 0) continue;
    // A projection the model packed itself (Phi-3's qkv_proj; not Falcon's
    // query_key_value, which interleaves the heads): q, k, v are the
    // consecutive thirds of one value, in that order, sliced on the last
    // axis: GQA reads it as it is.
    {
      std::optional<LastSlice> sl[3];
      for (size_t i = 0; i < 3; ++i) sl[i] = last_axis_slice(ix, gqa.inputs[i]);
      if (sl[0] && sl[1] && sl[2] && sl[0]->p == sl[1]->p && sl[1]->p == sl[2]->p &&
          sl[0]->start == 0 && sl[1]->start == sl[0]->end && sl[2]->start == sl[1]->end &&
          ix.type(sl[0]->p)->shape->back().value == sl[2]->end && sl[0]->end % hq->i == 0 &&
          sl[1]->end - sl[1]->start == hkv->i * (sl[0]->end / hq->i) &&
          sl[2]->end - sl[2]->start == hkv->i * (sl[0]->end / hq->i)) {
        Node fused_gqa = gqa;
        fused_gqa.inputs[0] = sl[0]->p;
        fused_gqa.inputs[1].clear();
        fused_gqa.inputs[2].clear();
        rw.replace(k, {std::move(fused_gqa)});
        ++fused;
        continue;
      }
    }
    std::vector<Projection> p;
    for (size_t i = 0; i < 3; ++i)
      if (auto x = projection(ix, gqa.inputs[i])) p.push_back(*x);
    if (p.size() != 3) continue;
    const Node& m0 = g.nodes[p[0].matmul];
    const int64_t kdim = p[0].w->dims[0];
    const int64_t nq = p[0].w->dims[1];
    if (nq % hq->i != 0) continue;
    const int64_t d = nq / hq->i;
    bool ok =
        (p[0].b != nullptr) == (p[1].b != nullptr) && (p[0].b != nullptr) == (p[2].b != nullptr);
    for (size_t i = 0; i < 3 && ok; ++i) {
      const Node& m = g.nodes[p[i].matmul];
      ok = m.inputs[0] == m0.inputs[0] && p[i].w->dtype == p[0].w->dtype &&
           p[i].w->dims[0] == kdim && p[i].w->dims[1] == (i == 0 ? nq : hkv->i * d);
      ok = ok && !rw.touched(p[i].matmul) && !(p[i].add && rw.touched(*p[i].add));
    }
    const ValueType* qt = ix.type(gqa.inputs[0]);
    if (!ok || !qt || !qt->shape || qt->shape->empty()) continue;
    const int64_t total = nq + 2 * hkv->i * d;
    const DType dt = p[0].w->dtype;
    const size_t es = dtype_size(dt);
    // Row r of W: row r of W_q, W_k, W_v side by side.
    std::vector<std::vector<uint8_t>> parts;
    for (auto& x : p) parts.push_back(x.w->contiguous_copy());
    std::vector<uint8_t> packed(static_cast<size_t>(kdim * total) * es);
    size_t off = 0;
    for (int64_t r = 0; r < kdim; ++r)
      for (size_t i = 0; i < 3; ++i) {
        size_t row = static_cast<size_t>(p[i].w->dims[1]) * es;
        std::memcpy(packed.data() + off, parts[i].data() + static_cast<size_t>(r) * row, row);
        off += row;
      }
    std::string wname = fresh(m0.inputs[1] + ".qkv_packed");
    added.push_back(
        Initializer{wname, TensorData::from_bytes(dt, {kdim, total}, std::move(packed))});
    g.types[wname] = static_type(dt, {kdim, total});
    ValueType yt = *qt;
    yt.shape->back() = Dim::of(total);
    std::string y = fresh(gqa.inputs[0] + ".qkv_packed");
    g.types[y] = yt;
    std::vector<Node> nodes;
    nodes.push_back(make_node("MatMul", {m0.inputs[0], wname}, {y}, {}, m0));
    if (p[0].b) {
      std::vector<uint8_t> b;
      for (auto& x : p) {
        auto v = x.b->contiguous_copy();
        b.insert(b.end(), v.begin(), v.end());
      }
      std::string bname = fresh(m0.inputs[1] + ".qkv_packed_bias");
      added.push_back(Initializer{bname, TensorData::from_bytes(dt, {total}, std::move(b))});
      g.types[bname] = static_type(dt, {total});
      std::string yb = fresh(gqa.inputs[0] + ".qkv_packed_biased");
      g.types[yb] = yt;
      nodes.push_back(make_node("Add", {y, bname}, {yb}, {}, m0));
      y = yb;
    }
    Node fused_gqa = gqa;
    fused_gqa.inputs[0] = y;
    fused_gqa.inputs[1].clear();
    fused_gqa.inputs[2].clear();
    nodes.push_back(std::move(fused_gqa));
    // The packed MatMul goes where the GQA was: A and everything it reads are
    // computed before it.
    rw.replace(k, std::move(nodes));
    for (auto& x : p) {
      rw.remove(x.matmul);
      if (x.add) rw.remove(*x.add);
    }
    ++fused;
  }
  rw.apply();
  for (auto& i : added) g.initializers.push_back(std::move(i));
  return fused;
}

}  // namespace pt2onnx
