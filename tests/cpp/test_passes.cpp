// Graph passes: folding, identity removal, CSE, dead-code removal.
#include <gtest/gtest.h>

#include "ir/builder.h"
#include "opt/passes.h"

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
