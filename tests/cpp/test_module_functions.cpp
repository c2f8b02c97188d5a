// Module calls as local functions (extract_module_functions) and inlining
// them back (inline_functions), on hand-built graphs.
#include <gtest/gtest.h>

#include <set>

#include "ir/builder.h"
#include "opt/passes.h"

using namespace pt2onnx;

namespace {
ValueType f32(std::initializer_list<Dim> dims) { return ValueType{DType::Float, Shape(dims)}; }

const char* kRoot = "L__self__,,m.Net";
std::string in_a(const char* key = "L__self___a") {
  return std::string(kRoot) + ";" + key + ",a,m.Blk";
}

// Every value read is defined earlier (inputs, initializers, node outputs).
bool topologically_sorted(const Graph& g) {
  std::set<std::string> defined;
  for (auto& i : g.inputs) defined.insert(i.name);
  for (auto& i : g.initializers) defined.insert(i.name);
  for (auto& n : g.nodes) {
    for (auto& i : n.inputs)
      if (!i.empty() && !defined.count(i)) return false;
    for (auto& o : n.outputs) defined.insert(o);
  }
  return true;
}
}  // namespace

TEST(ModuleFunctions, OutsideNodeBetweenMembersMovesAfterTheCall) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(4)}));
  b.set_origin("r", "relu", "a", in_a());
  std::string m1 = b.op("Relu", {"x"});
  b.set_origin("o", "neg", "", kRoot);
  std::string o = b.op("Neg", {m1});  // outside, reads the module's value
  b.set_origin("s", "sigmoid", "a", in_a());
  std::string m2 = b.op("Sigmoid", {"x"});
  b.set_origin("add", "add", "", kRoot);
  std::string y = b.op("Add", {o, m2});
  b.add_output(y, b.type(y));
  Graph g = b.take();
  EXPECT_EQ(extract_module_functions(g, {false, {"Blk"}}, 18), 1u);
  ASSERT_EQ(g.functions.size(), 1u);
  EXPECT_EQ(g.functions[0].name, "Blk");
  EXPECT_EQ(g.functions[0].domain, "m");
  EXPECT_EQ(g.functions[0].outputs, (std::vector<std::string>{m1, m2}));
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.nodes[0].op_type, "Blk");
  EXPECT_EQ(g.nodes[1].op_type, "Neg");
  EXPECT_TRUE(topologically_sorted(g));
  EXPECT_EQ(g.domain_versions.at("m"), 1);
}

TEST(ModuleFunctions, CallThatCannotBeOneNodeStaysInline) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(4)}));
  b.set_origin("r", "relu", "a", in_a());
  std::string m1 = b.op("Relu", {"x"});
  b.set_origin("o", "neg", "", kRoot);
  std::string o = b.op("Neg", {m1});
  b.set_origin("s", "sigmoid", "a", in_a());
  std::string m2 = b.op("Sigmoid", {o});  // the module reads the outside node
  b.add_output(m2, b.type(m2));
  Graph g = b.take();
  EXPECT_EQ(extract_module_functions(g, {true, {}}, 18), 0u);
  EXPECT_TRUE(g.functions.empty());
  EXPECT_EQ(g.nodes.size(), 3u);
}

TEST(ModuleFunctions, EqualCallsShareAndInlineGivesFreshNames) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(4)}));
  std::string v = "x";
  // Two calls of one instance (keys a and a@1), each with a constant and a
  // nested graph (an If) defining values of its own.
  for (const char* key : {"L__self___a", "L__self___a@1"}) {
    b.set_origin("c", "gt", "a", in_a(key));
    std::string c = b.op("ReduceMax", {v}, {Attr::Int("keepdims", 0)});
    std::string cond = b.op("Greater", {c, b.scalar(DType::Float, 0.0)});
    b.begin_subgraph("then");
    std::string t = b.op("Relu", {v});
    b.add_output(t, b.type(t));
    Graph then_g = b.end_subgraph();
    b.begin_subgraph("else");
    std::string e = b.op("Neg", {v});
    b.add_output(e, b.type(e));
    Graph else_g = b.end_subgraph();
    v = b.add_node("If", {cond}, 1,
                   {Attr::Subgraph("then_branch", std::move(then_g)),
                    Attr::Subgraph("else_branch", std::move(else_g))},
                   {f32({Dim::of(4)})})[0];
  }
  b.add_output(v, b.type(v));
  Graph g = b.take();
  size_t before = g.nodes.size();
  size_t inits = g.initializers.size();
  ASSERT_EQ(inits, 1u);
  EXPECT_EQ(extract_module_functions(g, {false, {"m.Blk"}}, 18), 2u);
  ASSERT_EQ(g.functions.size(), 1u);
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].name, "a");
  EXPECT_EQ(g.nodes[1].name, "a@1");
  // The constant moved into the body as a Constant node.
  EXPECT_TRUE(g.initializers.empty());
  EXPECT_EQ(g.functions[0].nodes[0].op_type, "Constant");
  EXPECT_EQ(g.functions[0].inputs.size(), 1u);

  EXPECT_EQ(inline_functions(g), 2u);
  EXPECT_TRUE(g.functions.empty());
  EXPECT_FALSE(g.domain_versions.count("m"));
  EXPECT_EQ(g.nodes.size(), before);
  EXPECT_EQ(g.initializers.size(), inits);  // the constant is an initializer again
  EXPECT_TRUE(topologically_sorted(g));
  // Every value is defined once across all scopes.
  std::multiset<std::string> defs;
  std::vector<const Graph*> graphs{&g};
  while (!graphs.empty()) {
    const Graph* x = graphs.back();
    graphs.pop_back();
    for (auto& n : x->nodes) {
      for (auto& o : n.outputs) defs.insert(o);
      for (const Graph* s : subgraphs(n)) graphs.push_back(s);
    }
  }
  for (auto& d : defs) EXPECT_EQ(defs.count(d), 1u) << d;
  EXPECT_EQ(g.outputs[0].name, v);
}
