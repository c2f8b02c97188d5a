// Nested graphs (If / Loop / Scan bodies) through the builder, every pass and
// the writer: values a nested graph reads from an enclosing scope are never
// dropped or left behind a rename.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "ir/builder.h"
#include "onnx/model_writer.h"
#include "onnx/wire.h"
#include "opt/passes.h"

using namespace pt2onnx;
namespace fs = std::filesystem;

namespace {

ValueType f32(std::initializer_list<Dim> dims) { return ValueType{DType::Float, Shape(dims)}; }

// main: x -> a = Relu(x); b = Relu(x) (CSE twin of a); i = Identity(a);
//       If(cond) { then: Add(i, c) ; else: Neg(b) } ; `dead` unused.
Graph if_graph() {
  GraphBuilder bld(18);
  bld.add_input("x", f32({Dim::of(4)}));
  bld.add_input("p", ValueType{DType::Bool, Shape{}});
  std::string a = bld.op("Relu", {"x"});
  std::string b = bld.op("Relu", {"x"});
  std::string i = bld.op("Identity", {a});
  std::string c = bld.scalar(DType::Float, 2.0);
  bld.op("Sigmoid", {"x"});  // dead
  bld.begin_subgraph("then");
  std::string t = bld.op("Add", {i, c});  // reads i and an initializer from outside
  bld.add_output(t, bld.type(t));
  Graph then_g = bld.end_subgraph();
  bld.begin_subgraph("else");
  std::string e = bld.op("Neg", {b});
  bld.add_output(e, bld.type(e));
  Graph else_g = bld.end_subgraph();
  auto out = bld.add_node("If", {"p"}, 1,
                          {Attr::Subgraph("then_branch", std::move(then_g)),
                           Attr::Subgraph("else_branch", std::move(else_g))},
                          {f32({Dim::of(4)})});
  bld.add_output(out[0], bld.type(out[0]));
  return bld.take();
}

const Node* find_op(const Graph& g, const std::string& op) {
  for (auto& n : g.nodes)
    if (n.op_type == op) return &n;
  return nullptr;
}

bool defined_in(const Graph& g, const std::string& v) {
  for (auto& i : g.inputs)
    if (i.name == v) return true;
  for (auto& i : g.initializers)
    if (i.name == v) return true;
  for (auto& n : g.nodes)
    if (std::find(n.outputs.begin(), n.outputs.end(), v) != n.outputs.end()) return true;
  return false;
}

}  // namespace

TEST(Subgraph, BuilderScopes) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(3)}));
  b.begin_subgraph("body");
  EXPECT_EQ(b.scope_depth(), 1u);
  EXPECT_TRUE(b.has_type("x"));  // enclosing values are visible
  std::string k = b.scalar(DType::Float, 3.0);
  std::string y = b.op("Mul", {"x", k});
  EXPECT_EQ(b.type(y).shape->at(0).value, 3);
  b.add_output(y, b.type(y));
  Graph body = b.end_subgraph();
  EXPECT_EQ(b.scope_depth(), 0u);
  EXPECT_TRUE(body.initializers.empty());        // constants go to the outermost graph
  EXPECT_EQ(b.graph().initializers.size(), 1u);  // ... where every scope reads them
  EXPECT_FALSE(b.graph().type_of(y));            // the body's values stay in the body
  EXPECT_EQ(outer_reads(body), (std::vector<std::string>{"x", k}));
  EXPECT_THROW(b.end_subgraph(), Error);
}

TEST(Subgraph, PassesKeepWhatNestedGraphsRead) {
  Graph g = if_graph();
  run_default_passes(g);
  const Node* iff = find_op(g, "If");
  ASSERT_NE(iff, nullptr);
  EXPECT_EQ(find_op(g, "Sigmoid"), nullptr);  // dead code still goes
  EXPECT_EQ(find_op(g, "Identity"), nullptr);
  // CSE merged the two Relus; both branches now read the one left.
  int relus = 0;
  for (auto& n : g.nodes) relus += n.op_type == "Relu";
  EXPECT_EQ(relus, 1);
  for (const Graph* s : subgraphs(*iff))
    for (auto& v : outer_reads(*s)) EXPECT_TRUE(defined_in(g, v)) << v << " read by " << s->name;
  EXPECT_EQ(g.initializers.size(), 1u);  // the constant the then-branch reads stays
}

TEST(Subgraph, RenamesReachNestedGraphs) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(2)}));
  std::string v = b.op("Relu", {"x"});
  b.begin_subgraph("body");
  std::string w = b.op("Neg", {v});
  b.add_output(w, b.type(w));
  b.add_output(v, b.type(v));  // an enclosing value as a nested output
  Graph body = b.end_subgraph();
  b.add_node("If", {"x"}, 2,
             {Attr::Subgraph("then_branch", body), Attr::Subgraph("else_branch", body)},
             {f32({Dim::of(2)}), f32({Dim::of(2)})});
  b.rename_everywhere(v, "renamed");
  const Graph& g = b.graph();
  for (const Graph* s : subgraphs(g.nodes.back())) {
    EXPECT_EQ(s->nodes[0].inputs[0], "renamed");
    EXPECT_EQ(s->outputs[1].name, "renamed");
  }
}

TEST(Subgraph, WriterEmitsGraphAttributes) {
  Graph g = if_graph();
  auto dir = fs::temp_directory_path() / ("pt2onnx_subgraph_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string path = (dir / "m.onnx").string();
  WriteOptions o;
  o.opset = 18;
  o.ir_version = 8;
  write_model(g, path, o);
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  fs::remove_all(dir);
  // Both branch names and the GRAPH attribute type (5) are in the file.
  EXPECT_NE(bytes.find("then_branch"), std::string::npos);
  EXPECT_NE(bytes.find("else_branch"), std::string::npos);
  const std::string graph_type_tag("\xa0\x01\x05", 3);  // field 20 (type), varint 5
  EXPECT_NE(bytes.find(graph_type_tag), std::string::npos);
}
