// Graph passes: folding, identity removal, CSE, dead-code removal.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ir/builder.h"
#include "onnx/model_writer.h"
#include "opt/passes.h"
#include "opt/pattern.h"

using namespace pt2onnx;

namespace {
ValueType f32(std::initializer_list<Dim> dims) { return ValueType{DType::Float, Shape(dims)}; }

const Node* find_op(const Graph& g, const std::string& op) {
  for (auto& n : g.nodes)
    if (n.op_type == op) return &n;
  return nullptr;
}
}  // namespace

TEST(Passes, FoldsShapeArithmetic) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(2), Dim::of(3)}));
  // Shape(x) of a static shape, Gather, Mul: all folded to one constant.
  std::string s = b.op("Shape", {"x"});
  std::string g = b.op("Gather", {s, b.const_i64({1})}, {Attr::Int("axis", 0)});
  std::string m = b.op("Mul", {g, b.const_i64({4})});
  std::string c = b.op("Concat", {b.const_i64({-1}), m}, {Attr::Int("axis", 0)});
  std::string r = b.op("Reshape", {"x", c});
  b.add_output(r, b.type(r));
  Graph graph = b.take();
  run_default_passes(graph);
  ASSERT_EQ(graph.nodes.size(), 1u);
  EXPECT_EQ(graph.nodes[0].op_type, "Reshape");
  const std::string& shape_name = graph.nodes[0].inputs[1];
  const Initializer* init = nullptr;
  for (auto& i : graph.initializers)
    if (i.name == shape_name) init = &i;
  ASSERT_NE(init, nullptr);
  ASSERT_EQ(init->data.numel(), 2);
  EXPECT_EQ(init->data.as<int64_t>()[0], -1);
  EXPECT_EQ(init->data.as<int64_t>()[1], 12);
}

TEST(Passes, KeepsSymbolicShape) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::symbol("batch"), Dim::of(3)}));
  std::string s = b.op("Shape", {"x"}, {Attr::Int("start", 0), Attr::Int("end", 1)});
  std::string r =
      b.op("Reshape", {"x", b.op("Concat", {s, b.const_i64({3})}, {Attr::Int("axis", 0)})});
  b.add_output(r, b.type(r));
  Graph graph = b.take();
  run_default_passes(graph);
  EXPECT_NE(find_op(graph, "Shape"), nullptr);
}

TEST(Passes, CseMergesIdenticalNodes) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(4)}));
  std::string a = b.op("Relu", {"x"});
  std::string c = b.op("Relu", {"x"});
  std::string s = b.op("Add", {a, c});
  b.add_output(s, b.type(s));
  Graph graph = b.take();
  EXPECT_EQ(eliminate_common_subexpressions(graph), 1u);
  ASSERT_EQ(graph.nodes.size(), 2u);
  EXPECT_EQ(graph.nodes[1].inputs[0], graph.nodes[1].inputs[1]);
}

TEST(Passes, CseRespectsAttributes) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(4), Dim::of(4)}));
  std::string a = b.op("Softmax", {"x"}, {Attr::Int("axis", 0)});
  std::string c = b.op("Softmax", {"x"}, {Attr::Int("axis", 1)});
  std::string s = b.op("Add", {a, c});
  b.add_output(s, b.type(s));
  Graph graph = b.take();
  EXPECT_EQ(eliminate_common_subexpressions(graph), 0u);
  EXPECT_EQ(graph.nodes.size(), 3u);
}

// Float attributes compare bit for bit: -0.0 is not 0.0 (a LeakyRelu of
// alpha -0.0 differs in the sign of its zeros), one NaN equals the same NaN.
TEST(Passes, CseComparesFloatAttributesBitForBit) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(4)}));
  std::string a = b.op("LeakyRelu", {"x"}, {Attr::Float("alpha", 0.0f)});
  std::string c = b.op("LeakyRelu", {"x"}, {Attr::Float("alpha", -0.0f)});
  std::string d = b.op("LeakyRelu", {"x"}, {Attr::Float("alpha", std::nanf(""))});
  std::string e = b.op("LeakyRelu", {"x"}, {Attr::Float("alpha", std::nanf(""))});
  std::string s = b.op("Sum", {a, c, d, e});
  b.add_output(s, b.type(s));
  Graph graph = b.take();
  EXPECT_EQ(eliminate_common_subexpressions(graph), 1u);
  ASSERT_EQ(graph.nodes.size(), 4u);
  const Node& sum = graph.nodes.back();
  EXPECT_NE(sum.inputs[0], sum.inputs[1]);
  EXPECT_EQ(sum.inputs[2], sum.inputs[3]);
}

// Merges follow through chains in one run (a merged node's readers see the
// kept value), and a graph output is never merged away.
TEST(Passes, CseMergesChainsAndKeepsGraphOutputs) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(4)}));
  std::string a1 = b.op("Relu", {"x"});
  std::string a2 = b.op("Relu", {"x"});
  std::string n1 = b.op("Neg", {a1}, {Attr::Ints("unused", {1, 2})});
  std::string n2 = b.op("Neg", {a2}, {Attr::Ints("unused", {1, 2})});
  std::string n3 = b.op("Neg", {a2}, {Attr::Ints("unused", {1, 3})});
  std::string o1 = b.op("Sigmoid", {n1});
  std::string o2 = b.op("Sigmoid", {n2});
  b.add_output(b.op("Sum", {n1, n2, n3}), f32({Dim::of(4)}));
  b.add_output(o1, b.type(o1));
  b.add_output(o2, b.type(o2));
  Graph graph = b.take();
  // a2 -> a1, n2 -> n1; n3 differs in an attribute; o2 equals o1 but is an output.
  EXPECT_EQ(eliminate_common_subexpressions(graph), 2u);
  ASSERT_EQ(graph.nodes.size(), 6u);
  EXPECT_EQ(graph.nodes[2].inputs[0], a1);  // n3 reads the kept Relu
  EXPECT_EQ(graph.nodes[4].outputs[0], o2);
  EXPECT_EQ(graph.nodes[4].inputs[0], n1);
}

// The index over many values (its table grows past its first size): producer,
// readers (each occurrence) and consumers (each node once, in order).
TEST(Passes, GraphIndexCountsReadsAndConsumers) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(4)}));
  std::vector<std::string> v{"x"};
  for (int k = 0; k < 3000; ++k) v.push_back(b.op("Add", {v.back(), k % 7 ? v.back() : "x"}));
  b.add_output(v.back(), b.type(v.back()));
  Graph graph = b.take();
  GraphIndex ix(graph);
  for (size_t k = 1; k < v.size(); ++k) {
    ASSERT_EQ(ix.producer_index(v[k]), k - 1);
    const bool twice = k < v.size() - 1 && (k % 7) != 0;  // node k reads v[k] twice
    if (k == v.size() - 1) continue;
    EXPECT_EQ(ix.readers(v[k]), twice ? 2u : 1u) << v[k];
    auto cs = ix.consumers(v[k]);
    ASSERT_EQ(cs.size(), 1u);
    EXPECT_EQ(cs[0], k);
  }
  // x: read twice by node 0, once by every seventh node after it.
  auto cx = ix.consumers("x");
  ASSERT_EQ(cx.size(), 1u + 2999u / 7);
  EXPECT_EQ(cx[0], 0u);
  EXPECT_EQ(cx[1], 7u);
  EXPECT_EQ(ix.readers("x"), 2u + 2999u / 7);
  EXPECT_TRUE(ix.is_graph_output(v.back()));
  EXPECT_EQ(ix.readers(v.back()), 1u);
  EXPECT_EQ(ix.producer("nothing"), nullptr);
  EXPECT_TRUE(ix.consumers("nothing").empty());
}

TEST(Passes, RemovesIdentityAndDeadCode) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(4)}));
  std::string i = b.op("Identity", {"x"});
  std::string r = b.op("Relu", {i});
  b.op("Sigmoid", {"x"});  // dead
  std::string out = b.op("Identity", {r});
  b.graph().nodes.back().outputs[0] = "y";
  b.set_type("y", b.type(out));
  b.add_output("y", b.type(out));
  b.const_i64({7, 7});  // unused initializer
  Graph graph = b.take();
  run_default_passes(graph);
  ASSERT_EQ(graph.nodes.size(), 1u);
  EXPECT_EQ(graph.nodes[0].op_type, "Relu");
  EXPECT_EQ(graph.nodes[0].inputs[0], "x");
  EXPECT_EQ(graph.nodes[0].outputs[0], "y");
  EXPECT_TRUE(graph.initializers.empty());
}

namespace {
TensorData iota_f32(std::vector<int64_t> dims) {
  int64_t n = 1;
  for (auto d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(k);
  return TensorData::from_vector(DType::Float, std::move(dims), v);
}

const Initializer* find_init(const Graph& g, const std::string& name) {
  for (auto& i : g.initializers)
    if (i.name == name) return &i;
  return nullptr;
}
}  // namespace

// x * 1 and x / 1 are x; 1 / x, and a 1 that widens x by broadcasting, stay.
// Chains of Identity nodes, one of them read inside a nested graph and one
// naming a graph output: every reader ends up on the first real value, in one
// run.
TEST(Passes, RemovesIdentityChains) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(4)}));
  b.add_input("c", ValueType{DType::Bool, Shape{}});
  std::string r = b.op("Relu", {"x"});
  std::string i1 = b.op("Identity", {r});
  std::string i2 = b.op("Identity", {i1});
  std::string s = b.op("Sigmoid", {i2});
  std::string i3 = b.op("Identity", {s});
  // An If whose branch reads i2 from the enclosing scope.
  b.begin_subgraph("then");
  std::string t = b.op("Neg", {i2});
  b.add_output(t, b.type(t));
  Graph then_g = b.end_subgraph();
  b.begin_subgraph("else");
  std::string e = b.op("Abs", {i2});
  b.add_output(e, b.type(e));
  Graph else_g = b.end_subgraph();
  std::string f = b.add_node("If", {"c"}, 1,
                             {Attr::Subgraph("then_branch", std::move(then_g)),
                              Attr::Subgraph("else_branch", std::move(else_g))},
                             {f32({Dim::of(4)})})[0];
  std::string sum = b.op("Add", {i2, f});
  b.add_output(sum, b.type(sum));
  b.add_output(i3, b.type(i3));
  Graph graph = b.take();
  EXPECT_EQ(remove_identity(graph), 3u);
  EXPECT_EQ(find_op(graph, "Identity"), nullptr);
  const Node* sig = find_op(graph, "Sigmoid");
  ASSERT_NE(sig, nullptr);
  EXPECT_EQ(sig->inputs[0], r);
  EXPECT_EQ(sig->outputs[0], i3);  // the graph output's name moved to its producer
  EXPECT_EQ(find_op(graph, "Add")->inputs[0], r);
  const Node* iff = find_op(graph, "If");
  ASSERT_NE(iff, nullptr);
  for (const Graph* branch : subgraphs(*iff)) EXPECT_EQ(branch->nodes[0].inputs[0], r);
}

TEST(Passes, MultiplyByOneIsIdentity) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::symbol("s"), Dim::of(4)}));
  b.add_input("v", f32({Dim::of(4)}));
  std::string m = b.op("Mul", {b.scalar(DType::Float, 1.0), "x"});
  std::string d = b.op("Div", {m, b.scalar(DType::Float, 1.0)});
  std::string r = b.op("Relu", {d});
  std::string inv = b.op("Div", {b.scalar(DType::Float, 1.0), r});  // 1 / x: kept
  std::string wide = b.op(
      "Mul",
      {"v", b.constant(TensorData::from_vector(DType::Float, {2, 1}, std::vector<float>{1, 1}))});
  std::string two = b.op("Mul", {inv, b.scalar(DType::Float, 2.0)});  // not one: kept
  b.add_output(two, b.type(two));
  b.add_output(wide, b.type(wide));
  Graph graph = b.take();
  run_default_passes(graph);
  ASSERT_EQ(graph.nodes.size(), 4u);
  EXPECT_EQ(graph.nodes[0].op_type, "Relu");
  EXPECT_EQ(graph.nodes[0].inputs[0], "x");
  EXPECT_EQ(graph.nodes[1].op_type, "Div");
  EXPECT_EQ(graph.nodes[3].op_type, "Mul");  // [4] * [2, 1] -> [2, 4]
}

namespace {
// MatMulNBits(A, B, scales) of N outputs, K = 32, one block of 4 bits, B's
// bytes and scales filled with `seed`.
std::string nbits(GraphBuilder& b, const std::string& a, int64_t n, uint8_t seed,
                  const std::string& name) {
  std::vector<uint8_t> q(static_cast<size_t>(n * 16));
  for (size_t k = 0; k < q.size(); ++k) q[k] = static_cast<uint8_t>(seed + k);
  std::vector<float> sc(static_cast<size_t>(n), 0.5f * seed);
  std::string bq =
      b.initializer(name + "_q4", TensorData::from_bytes(DType::UInt8, {n, 1, 16}, std::move(q)));
  std::string bs = b.initializer(name + "_scales", TensorData::from_vector(DType::Float, {n}, sc));
  return b.add_node("MatMulNBits", {a, bq, bs}, 1,
                    {Attr::Int("K", 32), Attr::Int("N", n), Attr::Int("bits", 4),
                     Attr::Int("block_size", 32), Attr::Int("accuracy_level", 4)},
                    {f32({Dim::symbol("s"), Dim::of(n)})}, "com.microsoft")[0];
}
}  // namespace

// Gate and up of one activation: one MatMulNBits of both weights' rows and a
// Split; a MatMulNBits of another activation stays alone.
TEST(Passes, PacksSiblingMatMulNBits) {
  auto build = [] {
    GraphBuilder b(18);
    b.add_input("a", f32({Dim::symbol("s"), Dim::of(32)}));
    b.add_input("c", f32({Dim::symbol("s"), Dim::of(32)}));
    std::string gate = nbits(b, "a", 3, 1, "gate");
    std::string act = b.op("Sigmoid", {gate});
    std::string up = nbits(b, "a", 5, 7, "up");
    std::string other = nbits(b, "c", 2, 9, "other");
    std::string y = b.op("Mul", {act, up});
    b.add_output(y, b.type(y));
    b.add_output(other, b.type(other));
    return std::make_tuple(b.take(), gate, up);
  };
  auto [g, gate, up] = build();
  EXPECT_EQ(fuse_sibling_matmuls(g, PassOptions{18, Target::OnnxRuntime}), 1u);
  remove_unused(g);
  size_t mm = 0;
  const Node* packed = nullptr;
  for (auto& n : g.nodes)
    if (n.op_type == "MatMulNBits") {
      ++mm;
      if (n.inputs[0] == "a") packed = &n;
    }
  ASSERT_EQ(mm, 2u);
  ASSERT_NE(packed, nullptr);
  EXPECT_EQ(packed->attr("N")->i, 8);
  EXPECT_EQ(packed->inputs[1], "gate_q4+up_q4");
  const Initializer* q = find_init(g, packed->inputs[1]);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->data.dims, (std::vector<int64_t>{8, 1, 16}));
  EXPECT_EQ(q->data.bytes()[0], 1);       // gate's row 0
  EXPECT_EQ(q->data.bytes()[3 * 16], 7);  // up's row 0 after gate's 3 rows
  const Initializer* sc = find_init(g, packed->inputs[2]);
  ASSERT_NE(sc, nullptr);
  EXPECT_EQ(sc->data.as<float>()[2], 0.5f);  // gate's
  EXPECT_EQ(sc->data.as<float>()[3], 3.5f);  // up's
  const Node* split = find_op(g, "Split");
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(split->outputs, (std::vector<std::string>{gate, up}));
  // Topological: the Split comes before the Sigmoid reading gate.
  size_t at_split = 0, at_sigmoid = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (&g.nodes[k] == split) at_split = k;
    if (g.nodes[k].op_type == "Sigmoid") at_sigmoid = k;
  }
  EXPECT_LT(at_split, at_sigmoid);
  // Not on the standard target (no MatMulNBits there to begin with).
  auto [standard, g2, u2] = build();
  EXPECT_EQ(fuse_sibling_matmuls(standard, PassOptions{18, Target::Standard}), 0u);
}

// MatMul(x, Transpose(W)) becomes MatMul(x, W.T): a strided view of W's bytes
// (nothing copied) whose contiguous form is the transpose.
TEST(Passes, FoldsWeightTransposeIntoView) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::symbol("n"), Dim::of(3)}));
  std::string w = b.initializer("fc.weight", iota_f32({37, 3}));  // [out, in]
  std::string y = b.op("MatMul", {"x", b.op("Transpose", {w}, {Attr::Ints("perm", {1, 0})})});
  b.add_output(y, b.type(y));
  Graph graph = b.take();
  run_default_passes(graph);
  EXPECT_EQ(find_op(graph, "Transpose"), nullptr);
  ASSERT_EQ(graph.nodes.size(), 1u);
  EXPECT_EQ(graph.nodes[0].inputs[1], "fc.weight.T");
  EXPECT_EQ(find_init(graph, "fc.weight"), nullptr);  // no reader left: not written
  const Initializer* t = find_init(graph, "fc.weight.T");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->data.dims, (std::vector<int64_t>{3, 37}));
  EXPECT_FALSE(t->data.is_contiguous());
  auto c = t->data.contiguous_copy();
  const float* f = reinterpret_cast<const float*>(c.data());
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t o = 0; o < 37; ++o) EXPECT_EQ(f[i * 37 + o], static_cast<float>(o * 3 + i));
  EXPECT_EQ(graph.types.at("fc.weight.T").static_dims(), (std::vector<int64_t>{3, 37}));
}

// A weight read by something else too (a tied embedding) keeps its
// Transpose: folding would write the weight twice.
TEST(Passes, KeepsTransposeOfSharedWeight) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(2), Dim::of(3)}));
  b.add_input("idx", ValueType{DType::Int64, Shape{Dim::of(2)}});
  std::string w = b.initializer("emb.weight", iota_f32({5, 3}));
  std::string e = b.op("Gather", {w, "idx"}, {Attr::Int("axis", 0)});
  std::string y = b.op("MatMul", {"x", b.op("Transpose", {w}, {Attr::Ints("perm", {1, 0})})});
  b.add_output(e, b.type(e));
  b.add_output(y, b.type(y));
  Graph graph = b.take();
  run_default_passes(graph);
  EXPECT_NE(find_op(graph, "Transpose"), nullptr);
  EXPECT_NE(find_init(graph, "emb.weight"), nullptr);
  EXPECT_EQ(graph.initializers.size(), 1u);
}

// Rank 3, a perm other than a swap, row ranges, 2- and 8-byte elements, and a
// folded view that CSE must not take for its contiguous twin.
TEST(Passes, StridedViewCopiesRows) {
  std::vector<int64_t> dims{4, 5, 6};
  for (DType dt : {DType::Float16, DType::Int64}) {
    size_t es = dtype_size(dt);
    std::vector<uint8_t> bytes(4 * 5 * 6 * es);
    for (size_t k = 0; k < 120; ++k)  // element k holds k in its first byte
      bytes[k * es] = static_cast<uint8_t>(k);
    TensorData src = TensorData::from_bytes(dt, dims, bytes);
    // perm (2, 0, 1): view dims [6, 4, 5], strides [1, 30, 6].
    TensorData v = src;
    v.dims = {6, 4, 5};
    v.strides = {1, 30, 6};
    std::vector<uint8_t> rows(2 * 4 * 5 * es);
    v.copy_rows(3, 5, rows.data());
    for (int64_t a = 3; a < 5; ++a)
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 5; ++j)
          EXPECT_EQ(rows[static_cast<size_t>(((a - 3) * 20 + i * 5 + j)) * es],
                    static_cast<uint8_t>(i * 30 + j * 6 + a));
  }
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(3), Dim::of(3)}));
  std::string w = b.initializer("w", iota_f32({3, 3}));
  std::string w2 = b.initializer("w2", iota_f32({3, 3}));
  std::string y = b.op("Add", {b.op("MatMul", {"x", b.op("Transpose", {w})}), w2});
  b.add_output(y, b.type(y));
  Graph graph = b.take();
  run_default_passes(graph);
  EXPECT_EQ(find_op(graph, "Transpose"), nullptr);
  ASSERT_EQ(graph.initializers.size(), 2u);  // w.T and w2: equal bytes, not equal tensors
  auto c = find_init(graph, "w.T")->data.contiguous_copy();
  EXPECT_EQ(reinterpret_cast<const float*>(c.data())[1], 3.0f);
}

// ---- fold_conv_batchnorm
namespace {
// Deterministic values in [lo, hi).
std::vector<double> vals(size_t n, double lo, double hi, uint32_t seed) {
  std::vector<double> v(n);
  uint32_t s = seed;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = lo + (hi - lo) * static_cast<double>(s >> 8) / static_cast<double>(1u << 24);
  }
  return v;
}

TensorData f32_of(std::vector<int64_t> dims, const std::vector<double>& v) {
  std::vector<float> f(v.begin(), v.end());
  return TensorData::from_vector(DType::Float, std::move(dims), f);
}

std::vector<double> floats_of(const TensorData& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = t.as<float>()[i];
  return v;
}

// Naive 2-D convolution (stride 1, no padding), NCHW, with groups; W is
// [Cout, Cin/g, kh, kw] (Conv) or [Cin, Cout/g, kh, kw] (ConvTranspose).
std::vector<double> conv2d(const std::vector<double>& x, int64_t cin, int64_t h, int64_t wd,
                           const std::vector<double>& w, std::vector<int64_t> wdims,
                           const std::vector<double>& b, int64_t groups, bool transpose,
                           int64_t& cout, int64_t& oh, int64_t& ow) {
  int64_t kh = wdims[2], kw = wdims[3];
  if (!transpose) {
    cout = wdims[0];
    oh = h - kh + 1, ow = wd - kw + 1;
    int64_t cin_g = wdims[1], cout_g = cout / groups;
    std::vector<double> y(static_cast<size_t>(cout * oh * ow), 0.0);
    for (int64_t o = 0; o < cout; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
          for (int64_t c = 0; c < cin_g; ++c)
            for (int64_t u = 0; u < kh; ++u)
              for (int64_t v = 0; v < kw; ++v) {
                int64_t ci = (o / cout_g) * cin_g + c;
                acc += x[static_cast<size_t>((ci * h + i + u) * wd + j + v)] *
                       w[static_cast<size_t>(((o * cin_g + c) * kh + u) * kw + v)];
              }
          y[static_cast<size_t>((o * oh + i) * ow + j)] = acc;
        }
    return y;
  }
  int64_t cout_g = wdims[1], cin_g = cin / groups;
  cout = cout_g * groups;
  oh = h + kh - 1, ow = wd + kw - 1;
  std::vector<double> y(static_cast<size_t>(cout * oh * ow), 0.0);
  for (int64_t o = 0; o < cout; ++o)
    for (int64_t p = 0; p < oh * ow; ++p)
      y[static_cast<size_t>(o * oh * ow + p)] = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
  for (int64_t ci = 0; ci < cin; ++ci)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < wd; ++j)
        for (int64_t oc = 0; oc < cout_g; ++oc)
          for (int64_t u = 0; u < kh; ++u)
            for (int64_t v = 0; v < kw; ++v) {
              int64_t o = (ci / cin_g) * cout_g + oc;
              y[static_cast<size_t>((o * oh + i + u) * ow + j + v)] +=
                  x[static_cast<size_t>((ci * h + i) * wd + j)] *
                  w[static_cast<size_t>(((ci * cout_g + oc) * kh + u) * kw + v)];
            }
  return y;
}

struct ConvBnCase {
  bool transpose = false;
  int64_t groups = 1;
  bool bias = true;
};

// Conv(+bias) -> BatchNormalization on a 4-channel 5x5 input: the folded
// graph's single Conv gives what conv-then-normalize gives.
void check_conv_bn_fold(const ConvBnCase& k) {
  const int64_t cin = 4, h = 5, wd = 5, eps_cout = 6;
  std::vector<int64_t> wdims = k.transpose ? std::vector<int64_t>{cin, eps_cout / k.groups, 2, 3}
                                           : std::vector<int64_t>{eps_cout, cin / k.groups, 2, 3};
  size_t wn = static_cast<size_t>(wdims[0] * wdims[1] * 6);
  auto w = vals(wn, -1, 1, 1), b = k.bias ? vals(6, -1, 1, 2) : std::vector<double>{};
  auto scale = vals(6, 0.5, 2, 3), beta = vals(6, -1, 1, 4), mean = vals(6, -0.5, 0.5, 5),
       var = vals(6, 0.2, 2, 6);
  const float eps = 1e-3f;
  GraphBuilder gb(18);
  gb.add_input("x", f32({Dim::of(1), Dim::of(cin), Dim::of(h), Dim::of(wd)}));
  std::vector<std::string> in = {"x", gb.initializer("conv.weight", f32_of(wdims, w))};
  if (k.bias) in.push_back(gb.initializer("conv.bias", f32_of({6}, b)));
  std::string c = gb.op(k.transpose ? "ConvTranspose" : "Conv", in, {Attr::Int("group", k.groups)});
  std::string y = gb.op("BatchNormalization",
                        {c, gb.initializer("bn.weight", f32_of({6}, scale)),
                         gb.initializer("bn.bias", f32_of({6}, beta)),
                         gb.initializer("bn.running_mean", f32_of({6}, mean)),
                         gb.initializer("bn.running_var", f32_of({6}, var))},
                        {Attr::Float("epsilon", eps)});
  gb.add_output(y, gb.type(y));
  Graph graph = gb.take();
  run_default_passes(graph);
  EXPECT_EQ(find_op(graph, "BatchNormalization"), nullptr);
  ASSERT_EQ(graph.nodes.size(), 1u);
  const Node& conv = graph.nodes[0];
  EXPECT_EQ(conv.outputs[0], y);
  ASSERT_EQ(conv.inputs.size(), 3u);
  EXPECT_EQ(conv.inputs[1], "conv.weight.bn_folded");
  EXPECT_EQ(conv.inputs[2], k.bias ? "conv.bias.bn_folded" : "bn.bias.bn_folded");
  // Only the folded tensors are left (in the weight's place).
  ASSERT_EQ(graph.initializers.size(), 2u);
  EXPECT_EQ(graph.initializers[0].name, "conv.weight.bn_folded");
  const Initializer* fw = find_init(graph, conv.inputs[1]);
  const Initializer* fb = find_init(graph, conv.inputs[2]);
  ASSERT_TRUE(fw && fb);
  EXPECT_EQ(fw->data.dims, wdims);

  auto x = vals(static_cast<size_t>(cin * h * wd), -2, 2, 7);
  int64_t cout, oh, ow;
  auto ref = conv2d(x, cin, h, wd, w, wdims, b, k.groups, k.transpose, cout, oh, ow);
  ASSERT_EQ(cout, 6);
  for (int64_t o = 0; o < cout; ++o)
    for (int64_t p = 0; p < oh * ow; ++p) {
      double& r = ref[static_cast<size_t>(o * oh * ow + p)];
      size_t q = static_cast<size_t>(o);
      r = (r - mean[q]) / std::sqrt(var[q] + eps) * scale[q] + beta[q];
    }
  auto got = conv2d(x, cin, h, wd, floats_of(fw->data), wdims, floats_of(fb->data), k.groups,
                    k.transpose, cout, oh, ow);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_NEAR(got[i], ref[i], 1e-5 * (1 + std::abs(ref[i])));
}
}  // namespace

TEST(Passes, FoldsConvBatchNorm) { check_conv_bn_fold({}); }
TEST(Passes, FoldsConvBatchNormNoBias) { check_conv_bn_fold({false, 1, false}); }
TEST(Passes, FoldsGroupConvBatchNorm) { check_conv_bn_fold({false, 2, true}); }
TEST(Passes, FoldsConvTransposeBatchNorm) { check_conv_bn_fold({true, 1, false}); }
TEST(Passes, FoldsGroupConvTransposeBatchNorm) { check_conv_bn_fold({true, 2, true}); }

namespace {
// A weight over 64 KiB that is a view on memory the caller owns is folded
// lazily (TensorData::scale): the same bytes as folding it into new owned
// bytes, from bytes() and from the writer (which scales it in 4 MiB pieces:
// as float32 or double this weight takes two, the second starting mid-group
// for ConvTranspose).
struct LazyFoldCase {
  bool transpose = false;
  int64_t groups = 1;
  DType type = DType::Float;
  bool bf16_stored = false;  // the view holds bfloat16, exported as float32
};

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void check_lazy_fold(const LazyFoldCase& k) {
  const std::vector<int64_t> wdims = k.transpose ? std::vector<int64_t>{1024, 32, 3, 3}
                                                 : std::vector<int64_t>{1024, 64 / k.groups, 3, 3};
  const int64_t channels = k.transpose ? wdims[1] * k.groups : wdims[0];
  const size_t n = static_cast<size_t>(wdims[0] * wdims[1] * 9);
  auto w = vals(n, -1, 1, 11);
  const size_t es = k.bf16_stored ? 2 : dtype_size(k.type);
  std::vector<uint8_t> memory(n * es);  // the caller's weight memory
  for (size_t i = 0; i < n; ++i) {
    float f = static_cast<float>(w[i]);
    if (k.bf16_stored || k.type == DType::BFloat16) {
      uint32_t x;
      std::memcpy(&x, &f, 4);
      uint16_t h = static_cast<uint16_t>(x >> 16);
      std::memcpy(memory.data() + 2 * i, &h, 2);
    } else if (k.type == DType::Float16) {
      uint16_t h = float_to_half(f);
      std::memcpy(memory.data() + 2 * i, &h, 2);
    } else if (k.type == DType::Double) {
      std::memcpy(memory.data() + 8 * i, &w[i], 8);
    } else {
      std::memcpy(memory.data() + 4 * i, &f, 4);
    }
  }
  auto graph_with = [&](bool view) {
    TensorData wt;
    wt.dtype = k.type;
    wt.dims = wdims;
    if (k.bf16_stored) wt.stored = DType::BFloat16;
    wt.data = memory.data();
    if (!view) wt = TensorData::from_bytes(k.type, wdims, wt.contiguous_copy());  // owned
    auto vec = [&](uint32_t seed, double lo, double hi) {
      auto v = vals(static_cast<size_t>(channels), lo, hi, seed);
      if (k.type == DType::Double) return TensorData::from_vector(k.type, {channels}, v);
      if (k.type == DType::Float16) {
        std::vector<uint16_t> h;
        for (double x : v) h.push_back(float_to_half(static_cast<float>(x)));
        return TensorData::from_vector(k.type, {channels}, h);
      }
      return f32_of({channels}, v);
    };
    GraphBuilder gb(18);
    gb.add_input("x", ValueType{k.type, Shape{Dim::of(1), Dim::of(k.transpose ? 1024 : 64),
                                              Dim::of(8), Dim::of(8)}});
    std::string c = gb.op(k.transpose ? "ConvTranspose" : "Conv",
                          {"x", gb.initializer("conv.weight", wt)}, {Attr::Int("group", k.groups)});
    std::string y = gb.op(
        "BatchNormalization",
        {c, gb.initializer("bn.weight", vec(3, 0.5, 2)), gb.initializer("bn.bias", vec(4, -1, 1)),
         gb.initializer("bn.running_mean", vec(5, -0.5, 0.5)),
         gb.initializer("bn.running_var", vec(6, 0.2, 2))},
        {Attr::Float("epsilon", 1e-3f)});
    gb.add_output(y, gb.type(y));
    Graph g = gb.take();
    EXPECT_EQ(fold_conv_batchnorm(g), 1u);
    return g;
  };
  Graph lazy = graph_with(true), eager = graph_with(false);
  const TensorData& lw = find_init(lazy, "conv.weight.bn_folded")->data;
  const TensorData& ew = find_init(eager, "conv.weight.bn_folded")->data;
  EXPECT_TRUE(lw.scale && lw.lazy() && lw.data == memory.data());  // no copy made
  EXPECT_FALSE(ew.scale);
  // One directory per test: ctest runs the tests in parallel.
  const auto dir = std::filesystem::temp_directory_path() /
                   (std::string("pt2onnx_lazy_fold_") +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::create_directories(dir);
  std::string files[2];
  for (int i = 0; i < 2; ++i) {
    const auto sub = dir / (i ? "eager" : "lazy");
    std::filesystem::create_directories(sub);
    WriteOptions o;
    o.external_data = ExternalData::Always;
    write_model(i ? eager : lazy, (sub / "m.onnx").string(), o);
    files[i] = file_bytes((sub / "m.onnx").string()) + file_bytes((sub / "m.onnx.data").string());
  }
  std::filesystem::remove_all(dir);
  EXPECT_GT(files[0].size(), 1u << 20);
  EXPECT_TRUE(files[0] == files[1]) << "the writer's lazy fold differs from the eager one";
  // bytes() scales the whole tensor: the same bytes again.
  ASSERT_EQ(lw.nbytes(), ew.nbytes());
  EXPECT_EQ(std::memcmp(lw.bytes(), ew.bytes(), lw.nbytes()), 0);
  EXPECT_NE(lw.bytes(), memory.data());
}
}  // namespace

TEST(Passes, FoldsLargeConvBatchNormLazily) { check_lazy_fold({}); }
TEST(Passes, FoldsLargeGroupConvBatchNormLazily) { check_lazy_fold({false, 2}); }
TEST(Passes, FoldsLargeGroupConvTransposeBatchNormLazily) { check_lazy_fold({true, 2}); }
TEST(Passes, FoldsLargeConvBatchNormLazilyFloat16) { check_lazy_fold({false, 1, DType::Float16}); }
TEST(Passes, FoldsLargeConvBatchNormLazilyDouble) { check_lazy_fold({true, 1, DType::Double}); }
TEST(Passes, FoldsLargeConvBatchNormLazilyAfterConversion) {
  check_lazy_fold({false, 1, DType::Float, true});
}

namespace {
// Conv -> BatchNormalization with one thing changed that forbids folding.
enum class Block { TrainingMode, TrainingOutputs, SharedWeight, ConvOutputRead, IntWeight };
Graph conv_bn_blocked(Block why) {
  GraphBuilder gb(18);
  gb.add_input("x", f32({Dim::of(1), Dim::of(2), Dim::of(4), Dim::of(4)}));
  TensorData wt = f32_of({3, 2, 1, 1}, vals(6, -1, 1, 1));
  if (why == Block::IntWeight)
    wt = TensorData::from_vector(DType::Int32, {3, 2, 1, 1}, std::vector<int32_t>(6, 1));
  std::string w = gb.initializer("conv.weight", wt);
  std::string c = gb.op("Conv", {"x", w});
  std::vector<std::string> bn_in = {c, gb.initializer("bn.weight", f32_of({3}, vals(3, 1, 2, 2))),
                                    gb.initializer("bn.bias", f32_of({3}, vals(3, 1, 2, 3))),
                                    gb.initializer("bn.mean", f32_of({3}, vals(3, 1, 2, 4))),
                                    gb.initializer("bn.var", f32_of({3}, vals(3, 1, 2, 5)))};
  std::vector<Attr> attrs;
  size_t n_out = 1;
  if (why == Block::TrainingMode) attrs.push_back(Attr::Int("training_mode", 1));
  if (why == Block::TrainingOutputs) attrs.push_back(Attr::Int("training_mode", 1)), n_out = 3;
  auto outs = gb.add_node("BatchNormalization", bn_in, n_out, attrs,
                          std::vector<ValueType>(n_out, f32({})));
  for (auto& o : outs) gb.add_output(o, gb.type(o));
  if (why == Block::SharedWeight) {
    std::string r = gb.op("ReduceSum", {w});
    gb.add_output(r, gb.type(r));
  }
  if (why == Block::ConvOutputRead) {
    std::string r = gb.op("Relu", {c});
    gb.add_output(r, gb.type(r));
  }
  return gb.take();
}
}  // namespace

TEST(Passes, KeepsBatchNormThatCannotFold) {
  for (Block why : {Block::TrainingMode, Block::TrainingOutputs, Block::SharedWeight,
                    Block::ConvOutputRead, Block::IntWeight}) {
    Graph graph = conv_bn_blocked(why);
    EXPECT_EQ(fold_conv_batchnorm(graph), 0u) << static_cast<int>(why);
    EXPECT_NE(find_op(graph, "BatchNormalization"), nullptr);
    EXPECT_NE(find_init(graph, "conv.weight"), nullptr);
  }
}

// float16 weights: folded in double, stored as float16 (rounded once).
TEST(Passes, FoldsConvBatchNormFloat16) {
  auto half = [](float f) {  // exact for these values (k / 8)
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if (f == 0) return uint16_t{0};
    uint16_t s = static_cast<uint16_t>((x >> 16) & 0x8000u);
    int e = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
    return static_cast<uint16_t>(s | (e << 10) | ((x >> 13) & 0x3ffu));
  };
  auto h16 = [&](std::vector<int64_t> dims, std::vector<float> v) {
    std::vector<uint16_t> h;
    for (float f : v) h.push_back(half(f));
    return TensorData::from_vector(DType::Float16, std::move(dims), h);
  };
  GraphBuilder gb(18);
  gb.add_input("x",
               ValueType{DType::Float16, Shape{Dim::of(1), Dim::of(1), Dim::of(2), Dim::of(2)}});
  std::string c = gb.op("Conv", {"x", gb.initializer("w", h16({2, 1, 1, 1}, {0.5f, -1.5f}))});
  // s = 2 / sqrt(3 + 1) = 1 and 4 / sqrt(15 + 1) = 1: W' = W, B' = beta - mean.
  std::string y = gb.op(
      "BatchNormalization",
      {c, gb.initializer("s", h16({2}, {2.0f, 4.0f})),
       gb.initializer("b", h16({2}, {0.25f, -0.5f})), gb.initializer("m", h16({2}, {1.0f, 0.125f})),
       gb.initializer("v", h16({2}, {3.0f, 15.0f}))},
      {Attr::Float("epsilon", 1.0f)});
  gb.add_output(y, gb.type(y));
  Graph graph = gb.take();
  EXPECT_EQ(fold_conv_batchnorm(graph), 1u);
  const Initializer* fw = find_init(graph, "w.bn_folded");
  const Initializer* fb = find_init(graph, "b.bn_folded");
  ASSERT_TRUE(fw && fb);
  EXPECT_EQ(fw->data.dtype, DType::Float16);
  EXPECT_EQ(fw->data.as<uint16_t>()[0], half(0.5f));
  EXPECT_EQ(fw->data.as<uint16_t>()[1], half(-1.5f));
  EXPECT_EQ(fb->data.as<uint16_t>()[0], half(-0.75f));
  EXPECT_EQ(fb->data.as<uint16_t>()[1], half(-0.625f));
}
