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
