// The structural check run on every finished graph (check_structure): one
// test per rule, each on a small hand-built graph that breaks exactly that
// rule, plus graphs that keep every rule; and the pass that makes node names
// unique (name_nodes).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "ir/check_structure.h"
#include "opt/passes.h"
#include "pt2onnx/error.h"

using namespace pt2onnx;

namespace {

constexpr int kOpset = 18;

Node node(std::string op, std::string name, std::vector<std::string> inputs,
          std::vector<std::string> outputs, std::string domain = "") {
  Node n;
  n.op_type = std::move(op);
  n.domain = std::move(domain);
  n.name = std::move(name);
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

GraphIO io(std::string name) { return GraphIO{std::move(name), ValueType{}}; }

Initializer init(std::string name) {
  return Initializer{std::move(name), TensorData::from_vector<float>(DType::Float, {1}, {2.0f})};
}

// A nested graph named `name` with `nodes`, returning `outputs`.
Graph sub(std::string name, std::vector<Node> nodes, std::vector<std::string> outputs,
          std::vector<std::string> inputs = {}) {
  Graph g;
  g.name = std::move(name);
  g.nodes = std::move(nodes);
  for (auto& o : outputs) g.outputs.push_back(io(o));
  for (auto& i : inputs) g.inputs.push_back(io(i));
  return g;
}

// An If node reading condition `p`, with the two branches.
Node if_node(std::string name, std::string out, Graph then_g, Graph else_g) {
  Node n = node("If", std::move(name), {"p"}, {std::move(out)});
  n.attrs.push_back(Attr::Subgraph("then_branch", std::move(then_g)));
  n.attrs.push_back(Attr::Subgraph("else_branch", std::move(else_g)));
  return n;
}

// Main graph: inputs x and p (an If condition), output y.
Graph base() {
  Graph g;
  g.inputs = {io("x"), io("p")};
  g.outputs = {io("y")};
  return g;
}

// A function m.Blk (o = Relu(i)) importing the default domain at kOpset;
// the model imports m.
Function blk() {
  Function f;
  f.domain = "m";
  f.name = "Blk";
  f.inputs = {"i"};
  f.outputs = {"o"};
  f.nodes = {node("Relu", "blk_relu", {"i"}, {"o"})};
  f.opset_imports = {{"", kOpset}};
  return f;
}

// check_structure(g) throws a pt2onnx::Error whose message starts with
// "internal error after <after>:" and contains each of `mentions`.
::testing::AssertionResult rejects(const Graph& g, const std::string& after,
                                   const std::vector<std::string>& mentions, int opset = kOpset) {
  try {
    check_structure(g, opset, after);
  } catch (const Error& e) {
    std::string m = e.what();
    const std::string prefix = "internal error after " + after + ":";
    if (m.rfind(prefix, 0) != 0)
      return ::testing::AssertionFailure()
             << "message does not start with '" << prefix << "': " << m;
    for (auto& s : mentions)
      if (m.find(s) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << s << "\": " << m;
    return ::testing::AssertionSuccess() << m;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure()
           << "threw something other than pt2onnx::Error: " << e.what();
  }
  return ::testing::AssertionFailure() << "check_structure did not throw";
}

// Every node name of g's main graph, its nested graphs and (separately) each
// function body, in walk order.
void collect_names(const std::vector<Node>& nodes, std::vector<std::string>& out) {
  for (auto& n : nodes) {
    out.push_back(n.name);
    for (const Graph* s : subgraphs(n)) collect_names(s->nodes, out);
  }
}
std::vector<std::string> names(const std::vector<Node>& nodes) {
  std::vector<std::string> out;
  collect_names(nodes, out);
  return out;
}
bool unique_nonempty(const std::vector<std::string>& v) {
  std::set<std::string> seen;
  for (auto& s : v)
    if (!s.empty() && !seen.insert(s).second) return false;
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------
// check_structure: graphs that keep every rule.

TEST(CheckStructure, ValidGraphWithSubgraphsOptionalInputsAndFunctionPasses) {
  Graph g = base();
  g.initializers = {init("w"), init("lo")};
  g.domain_versions = {{"m", 1}, {"com.microsoft", 1}};
  g.nodes.push_back(node("Relu", "relu", {"x"}, {"a"}));
  // Omitted optional inputs ("") and an omitted optional output.
  g.nodes.push_back(node("Clip", "clip", {"a", "", ""}, {"c"}));
  g.nodes.push_back(node("Clip", "clip_lo", {"c", "lo", ""}, {"d"}));
  g.nodes.push_back(node("Dropout", "drop", {"d"}, {"e", ""}));
  // Empty node names may repeat (ONNX allows them).
  g.nodes.push_back(node("Identity", "", {"e"}, {"e1"}));
  g.nodes.push_back(node("Identity", "", {"e1"}, {"e2"}));
  g.nodes.push_back(node("Gelu", "ms_gelu", {"e2"}, {"f"}, "com.microsoft"));
  g.nodes.push_back(node("Blk", "call", {"f"}, {"b"}, "m"));
  // Branches read outer values (a node output, an initializer, a graph
  // input), may return an outer value, and may reuse the main graph's node
  // names and each other's value names (sibling scopes).
  g.nodes.push_back(if_node(
      "if", "y",
      sub("then", {node("Add", "relu", {"b", "w"}, {"t"}), node("Mul", "m", {"t", "x"}, {"t2"})},
          {"t2"}),
      sub("else", {node("Neg", "relu", {"a"}, {"t"})}, {"a"})));
  // A Loop body with inputs of its own reading an outer value.
  Node loop = node("Loop", "loop", {"", "p", "b"}, {"lb"});
  loop.attrs.push_back(
      Attr::Subgraph("body", sub("body", {node("Add", "body_add", {"carried", "w"}, {"next"})},
                                 {"cond_in", "next"}, {"iter", "cond_in", "carried"})));
  g.nodes.push_back(loop);
  g.outputs.push_back(io("lb"));
  // A function with an attribute reference; another of the same name in a
  // different domain.
  Function f = blk();
  f.attributes = {"alpha"};
  Node leaky = node("LeakyRelu", "blk_leaky", {"o"}, {"o2"});
  Attr alpha = Attr::Float("alpha", 0.1f);
  alpha.ref = "alpha";
  leaky.attrs.push_back(alpha);
  f.nodes.push_back(leaky);
  f.outputs = {"o2"};
  g.functions.push_back(f);
  Function f2 = blk();
  f2.domain = "com.microsoft";
  f2.opset_imports = {{"ai.onnx", kOpset}, {"com.microsoft", 1}};  // ai.onnx: the default domain
  f2.nodes.push_back(node("Gelu", "relu", {"o"}, {"o3"}, "com.microsoft"));  // "relu": as in main
  g.functions.push_back(f2);
  EXPECT_NO_THROW(check_structure(g, kOpset, "valid"));
}

TEST(CheckStructure, MinimalGraphPasses) {
  Graph g = base();
  g.nodes.push_back(node("Relu", "r", {"x"}, {"y"}));
  EXPECT_NO_THROW(check_structure(g, kOpset, "valid"));
  // A graph output that is a graph input or an initializer.
  g.initializers = {init("w")};
  g.outputs = {io("x"), io("w"), io("y")};
  EXPECT_NO_THROW(check_structure(g, kOpset, "valid"));
}

// ---------------------------------------------------------------------------
// check_structure: one test per rule.

TEST(CheckStructure, DuplicateNodeNameInGraph) {
  {
    SCOPED_TRACE("main graph");
    Graph g = base();
    g.nodes.push_back(node("Relu", "dup", {"x"}, {"a"}));
    g.nodes.push_back(node("Neg", "dup", {"a"}, {"y"}));
    EXPECT_TRUE(rejects(g, "fuse_norms",
                        {"two nodes are named 'dup'", "at node 'dup' (Neg", "graph 'main_graph'"}));
  }
  {
    SCOPED_TRACE("nested graph");
    Graph g = base();
    g.nodes.push_back(if_node(
        "if", "y",
        sub("then", {node("Relu", "twice", {"x"}, {"t"}), node("Neg", "twice", {"t"}, {"t2"})},
            {"t2"}),
        sub("else", {node("Neg", "n", {"x"}, {"e"})}, {"e"})));
    EXPECT_TRUE(rejects(g, "cse", {"two nodes are named 'twice'", "graph 'then'"}));
  }
}

TEST(CheckStructure, DuplicateNodeNameInFunctionBody) {
  Graph g = base();
  g.domain_versions = {{"m", 1}};
  g.nodes.push_back(node("Blk", "call", {"x"}, {"y"}, "m"));
  Function f = blk();
  f.nodes.push_back(node("Neg", "blk_relu", {"o"}, {"o2"}));
  f.outputs = {"o2"};
  g.functions.push_back(f);
  EXPECT_TRUE(
      rejects(g, "optimize_function_bodies",
              {"two nodes are named 'blk_relu'", "function m.Blk", "at node 'blk_relu' (Neg"}));
}

TEST(CheckStructure, ValueDefinedTwice) {
  {
    SCOPED_TRACE("two node outputs");
    Graph g = base();
    g.nodes.push_back(node("Relu", "r1", {"x"}, {"v"}));
    g.nodes.push_back(node("Neg", "r2", {"x"}, {"v"}));
    g.nodes.push_back(node("Identity", "id", {"v"}, {"y"}));
    EXPECT_TRUE(rejects(g, "dce", {"value 'v' is defined twice", "node output", "at node 'r2'"}));
  }
  {
    SCOPED_TRACE("node output equal to an initializer");
    Graph g = base();
    g.initializers = {init("w")};
    g.nodes.push_back(node("Relu", "redef_w", {"x"}, {"w"}));
    g.nodes.push_back(node("Add", "add", {"x", "w"}, {"y"}));
    EXPECT_TRUE(rejects(g, "fold_constants", {"value 'w' is defined twice", "at node 'redef_w'"}));
  }
  {
    SCOPED_TRACE("node output equal to a graph input");
    Graph g = base();
    g.nodes.push_back(node("Relu", "redef_x", {"x"}, {"x"}));
    g.nodes.push_back(node("Identity", "id", {"x"}, {"y"}));
    EXPECT_TRUE(rejects(g, "fold_constants", {"value 'x' is defined twice", "at node 'redef_x'"}));
  }
  {
    SCOPED_TRACE("one node defining a value twice");
    Graph g = base();
    g.nodes.push_back(node("Split", "split", {"x"}, {"y", "y"}));
    EXPECT_TRUE(rejects(g, "split", {"value 'y' is defined twice", "at node 'split'"}));
  }
}

TEST(CheckStructure, NestedGraphRedefinesOuterValue) {
  {
    SCOPED_TRACE("If branch node output");
    Graph g = base();
    g.nodes.push_back(node("Relu", "relu", {"x"}, {"a"}));
    g.nodes.push_back(if_node("if", "y",
                              sub("then", {node("Neg", "then_neg", {"x"}, {"a"})}, {"a"}),
                              sub("else", {node("Neg", "else_neg", {"x"}, {"e"})}, {"e"})));
    EXPECT_TRUE(rejects(g, "inline_functions",
                        {"value 'a' is defined twice", "graph 'then'", "at node 'then_neg'"}));
  }
  {
    SCOPED_TRACE("Loop body input");
    Graph g = base();
    Node loop = node("Loop", "loop", {"", "p", "x"}, {"y"});
    loop.attrs.push_back(Attr::Subgraph(
        "body", sub("body", {node("Neg", "body_neg", {"x"}, {"n"})}, {"cond_in", "n"},
                    {"iter", "cond_in", "x"})));  // "x": the main graph's input
    g.nodes.push_back(loop);
    EXPECT_TRUE(rejects(g, "inline_functions",
                        {"value 'x' is defined twice", "graph input", "graph 'body'"}));
  }
  {
    SCOPED_TRACE("doubly nested graph redefining a value of the middle scope");
    Graph g = base();
    Graph inner = sub("inner", {node("Neg", "inner_neg", {"x"}, {"mid"})}, {"mid"});
    Graph outer_then = sub("outer_then",
                           {node("Relu", "mid_relu", {"x"}, {"mid"}),
                            if_node("inner_if", "r", inner, sub("inner_else", {}, {"mid"}))},
                           {"r"});
    g.nodes.push_back(if_node("if", "y", outer_then, sub("outer_else", {}, {"x"})));
    EXPECT_TRUE(rejects(g, "inline_functions",
                        {"value 'mid' is defined twice", "graph 'inner'", "at node 'inner_neg'"}));
  }
}

TEST(CheckStructure, NodeInputNotProducedBefore) {
  {
    SCOPED_TRACE("use before definition");
    Graph g = base();
    g.nodes.push_back(node("Add", "early", {"x", "later"}, {"y"}));
    g.nodes.push_back(node("Relu", "def", {"x"}, {"later"}));
    EXPECT_TRUE(rejects(g, "topo_sort",
                        {"input 'later' is not produced before the node", "at node 'early' (Add"}));
  }
  {
    SCOPED_TRACE("undefined name");
    Graph g = base();
    g.nodes.push_back(node("Relu", "reads_ghost", {"ghost"}, {"y"}));
    EXPECT_TRUE(rejects(g, "dce", {"input 'ghost'", "at node 'reads_ghost' (Relu"}));
  }
  {
    SCOPED_TRACE("a node reading its own output");
    Graph g = base();
    g.nodes.push_back(node("Add", "self", {"x", "y"}, {"y"}));
    EXPECT_TRUE(rejects(g, "dce", {"input 'y'", "at node 'self'"}));
  }
  {
    SCOPED_TRACE("a function body reading a value of the main graph");
    Graph g = base();
    g.domain_versions = {{"m", 1}};
    g.nodes.push_back(node("Blk", "call", {"x"}, {"y"}, "m"));
    Function f = blk();
    f.nodes[0].inputs = {"x"};  // the caller's value, not a formal input
    g.functions.push_back(f);
    EXPECT_TRUE(rejects(g, "extract_module_functions",
                        {"input 'x'", "function m.Blk", "at node 'blk_relu'"}));
  }
}

TEST(CheckStructure, NestedGraphReadsOuterValueDefinedAfterItsNode) {
  {
    SCOPED_TRACE("a later node's output");
    Graph g = base();
    g.nodes.push_back(if_node("if", "r",
                              sub("then", {node("Neg", "reads_late", {"late"}, {"t"})}, {"t"}),
                              sub("else", {}, {"x"})));
    g.nodes.push_back(node("Relu", "defines_late", {"x"}, {"late"}));
    g.nodes.push_back(node("Add", "add", {"r", "late"}, {"y"}));
    EXPECT_TRUE(rejects(g, "topo_sort",
                        {"input 'late' is not produced before the node", "graph 'then'",
                         "at node 'reads_late' (Neg"}));
  }
  {
    SCOPED_TRACE("the holding node's own output");
    Graph g = base();
    g.nodes.push_back(if_node("if", "y",
                              sub("then", {node("Neg", "reads_own", {"y"}, {"t"})}, {"t"}),
                              sub("else", {}, {"x"})));
    EXPECT_TRUE(rejects(g, "topo_sort", {"input 'y'", "at node 'reads_own'"}));
  }
  {
    SCOPED_TRACE("a nested graph's output that is a later outer value");
    Graph g = base();
    g.nodes.push_back(if_node("if", "r", sub("then", {}, {"late"}), sub("else", {}, {"x"})));
    g.nodes.push_back(node("Relu", "defines_late", {"x"}, {"late"}));
    g.nodes.push_back(node("Add", "add", {"r", "late"}, {"y"}));
    EXPECT_TRUE(rejects(g, "topo_sort", {"graph output 'late' is not produced", "graph 'then'"}));
  }
}

TEST(CheckStructure, GraphOutputNotProduced) {
  {
    SCOPED_TRACE("main graph");
    Graph g = base();
    g.nodes.push_back(node("Relu", "r", {"x"}, {"y"}));
    g.outputs.push_back(io("missing"));
    EXPECT_TRUE(
        rejects(g, "dce", {"graph output 'missing' is not produced", "graph 'main_graph'"}));
  }
  {
    SCOPED_TRACE("nested graph");
    Graph g = base();
    g.nodes.push_back(if_node("if", "y", sub("then", {node("Neg", "n", {"x"}, {"t"})}, {"nowhere"}),
                              sub("else", {}, {"x"})));
    EXPECT_TRUE(rejects(g, "dce", {"graph output 'nowhere' is not produced", "graph 'then'"}));
  }
  {
    SCOPED_TRACE("a nested graph's value is not an output of the main graph");
    Graph g = base();
    g.nodes.push_back(if_node("if", "r", sub("then", {node("Neg", "n", {"x"}, {"t"})}, {"t"}),
                              sub("else", {}, {"x"})));
    g.nodes.push_back(node("Identity", "id", {"r"}, {"y"}));
    g.outputs.push_back(io("t"));
    EXPECT_TRUE(rejects(g, "dce", {"graph output 't' is not produced", "graph 'main_graph'"}));
  }
  {
    SCOPED_TRACE("function output");
    Graph g = base();
    g.domain_versions = {{"m", 1}};
    g.nodes.push_back(node("Blk", "call", {"x"}, {"y"}, "m"));
    Function f = blk();
    f.outputs = {"o", "gone"};
    g.functions.push_back(f);
    EXPECT_TRUE(rejects(g, "dce", {"function output 'gone' is not produced", "function m.Blk"}));
  }
}

TEST(CheckStructure, NodeDomainNotImportedByModel) {
  {
    SCOPED_TRACE("main graph");
    Graph g = base();
    g.domain_versions = {{"m", 1}};  // another domain only
    g.nodes.push_back(node("Relu", "r", {"x"}, {"a"}));
    g.nodes.push_back(node("FusedGelu", "ms_gelu", {"a"}, {"y"}, "com.microsoft"));
    EXPECT_TRUE(rejects(g, "fuse_activations",
                        {"domain 'com.microsoft' is used but the model does not import it",
                         "at node 'ms_gelu' (com.microsoft::FusedGelu"}));
  }
  {
    SCOPED_TRACE("nested graph");
    Graph g = base();
    g.nodes.push_back(
        if_node("if", "y",
                sub("then", {node("Attention", "ms_attn", {"x"}, {"t"}, "com.microsoft")}, {"t"}),
                sub("else", {}, {"x"})));
    EXPECT_TRUE(rejects(
        g, "fuse_attention",
        {"domain 'com.microsoft' is used but the model does not import it", "at node 'ms_attn'"}));
  }
  {
    SCOPED_TRACE("a call of a function whose domain is not imported");
    Graph g = base();
    g.nodes.push_back(node("Blk", "call", {"x"}, {"y"}, "m"));
    g.functions.push_back(blk());
    EXPECT_TRUE(rejects(g, "extract_module_functions",
                        {"domain 'm' is used but the model does not import it", "at node 'call'"}));
  }
}

TEST(CheckStructure, FunctionBodyDomainNotImportedByFunction) {
  {
    SCOPED_TRACE("com.microsoft");
    Graph g = base();
    g.domain_versions = {{"m", 1}, {"com.microsoft", 1}};
    g.nodes.push_back(node("Blk", "call", {"x"}, {"y"}, "m"));
    Function f = blk();  // imports the default domain only
    f.nodes.push_back(node("FastGelu", "blk_gelu", {"o"}, {"o2"}, "com.microsoft"));
    f.outputs = {"o2"};
    g.functions.push_back(f);
    EXPECT_TRUE(rejects(g, "fuse_activations",
                        {"domain 'com.microsoft' is used but the function does not import it",
                         "function m.Blk", "at node 'blk_gelu'"}));
  }
  {
    SCOPED_TRACE("the default domain");
    Graph g = base();
    g.domain_versions = {{"m", 1}};
    g.nodes.push_back(node("Blk", "call", {"x"}, {"y"}, "m"));
    Function f = blk();
    f.opset_imports.clear();
    g.functions.push_back(f);
    EXPECT_TRUE(rejects(g, "extract_module_functions",
                        {"domain 'ai.onnx' is used but the function does not import it",
                         "function m.Blk", "at node 'blk_relu'"}));
  }
}

TEST(CheckStructure, FunctionDomainNotImportedByModel) {
  Graph g = base();
  g.nodes.push_back(node("Relu", "r", {"x"}, {"y"}));
  g.functions.push_back(blk());  // domain m; the model imports no m (and does not call it)
  EXPECT_TRUE(
      rejects(g, "custom_converters",
              {"the function's domain 'm' is not imported by the model", "function m.Blk"}));
}

TEST(CheckStructure, FunctionImportsDomainAtAnotherVersion) {
  {
    SCOPED_TRACE("com.microsoft");
    Graph g = base();
    g.domain_versions = {{"m", 1}, {"com.microsoft", 1}};
    g.nodes.push_back(node("Blk", "call", {"x"}, {"y"}, "m"));
    Function f = blk();
    f.opset_imports["com.microsoft"] = 2;
    f.nodes.push_back(node("FastGelu", "blk_gelu", {"o"}, {"o2"}, "com.microsoft"));
    f.outputs = {"o2"};
    g.functions.push_back(f);
    EXPECT_TRUE(rejects(g, "convert_float16",
                        {"the function imports domain 'com.microsoft' at version 2, the model at 1",
                         "function m.Blk"}));
  }
  {
    SCOPED_TRACE("the default domain");
    Graph g = base();
    g.domain_versions = {{"m", 1}};
    g.nodes.push_back(node("Blk", "call", {"x"}, {"y"}, "m"));
    Function f = blk();
    f.opset_imports = {{"", kOpset - 1}};
    g.functions.push_back(f);
    EXPECT_TRUE(rejects(g, "convert_float16",
                        {"the function imports domain 'ai.onnx' at version 17, the model at 18",
                         "function m.Blk"}));
  }
}

TEST(CheckStructure, AttributeRefNotDeclared) {
  {
    SCOPED_TRACE("in a function body");
    Graph g = base();
    g.domain_versions = {{"m", 1}};
    g.nodes.push_back(node("Blk", "call", {"x"}, {"y"}, "m"));
    Function f = blk();
    f.attributes = {"alpha"};
    Node leaky = node("LeakyRelu", "blk_leaky", {"o"}, {"o2"});
    Attr a = Attr::Float("alpha", 0.1f);
    a.ref = "beta";  // not declared
    leaky.attrs.push_back(a);
    f.nodes.push_back(leaky);
    f.outputs = {"o2"};
    g.functions.push_back(f);
    EXPECT_TRUE(rejects(g, "extract_module_functions",
                        {"attribute 'alpha' refers to 'beta', which the function does not declare",
                         "function m.Blk", "at node 'blk_leaky'"}));
  }
  {
    SCOPED_TRACE("outside any function");
    Graph g = base();
    Node leaky = node("LeakyRelu", "leaky", {"x"}, {"y"});
    Attr a = Attr::Float("alpha", 0.1f);
    a.ref = "alpha";
    leaky.attrs.push_back(a);
    g.nodes.push_back(leaky);
    EXPECT_TRUE(
        rejects(g, "inline_functions",
                {"attribute 'alpha' refers to 'alpha' outside a function", "at node 'leaky'"}));
  }
}

TEST(CheckStructure, TwoFunctionsWithOneDomainAndName) {
  Graph g = base();
  g.domain_versions = {{"m", 1}};
  g.nodes.push_back(node("Blk", "call", {"x"}, {"y"}, "m"));
  g.functions.push_back(blk());
  g.functions.push_back(blk());
  EXPECT_TRUE(rejects(g, "extract_module_functions",
                      {"two model-local functions have this domain and name", "function m.Blk"}));
}

TEST(CheckStructure, EmptyGraphAttributeIsRejected) {
  Graph g = base();
  Node n = node("If", "if", {"p"}, {"y"});
  Attr a;
  a.name = "then_branch";
  a.kind = Attr::Kind::Graph;  // no graph
  n.attrs.push_back(a);
  g.nodes.push_back(n);
  EXPECT_TRUE(rejects(g, "cse", {"graph attribute 'then_branch' is empty", "at node 'if'"}));
}

TEST(CheckStructure, MessageNamesTheFxNode) {
  Graph g = base();
  Node n = node("Relu", "r", {"ghost"}, {"y"});
  n.edit_origin().fx_node = "relu_3";
  n.edit_origin().fx_target = "aten.relu.default";
  g.nodes.push_back(n);
  EXPECT_TRUE(
      rejects(g, "converting",
              {"at node 'r' (Relu, from FX node relu_3 aten.relu.default)", "please report it"}));
}

// ---------------------------------------------------------------------------
// name_nodes.

TEST(NameNodes, DuplicatesInMainAndNestedGraphsGetUniqueNames) {
  Graph g = base();
  g.nodes.push_back(node("Relu", "relu", {"x"}, {"a"}));
  g.nodes.push_back(node("Relu", "relu", {"x"}, {"b"}));
  g.nodes.push_back(if_node("if", "y", sub("then", {node("Relu", "relu", {"a"}, {"t"})}, {"t"}),
                            sub("else", {node("Relu", "relu", {"b"}, {"e"})}, {"e"})));
  EXPECT_TRUE(rejects(g, "before", {"two nodes are named 'relu'", "graph 'main_graph'"}));
  EXPECT_EQ(name_nodes(g), 3u);
  EXPECT_EQ(names(g.nodes), (std::vector<std::string>{"relu", "relu_1", "if", "relu_2", "relu_3"}));
  EXPECT_TRUE(unique_nonempty(names(g.nodes)));
  EXPECT_NO_THROW(check_structure(g, kOpset, "name_nodes"));
}

TEST(NameNodes, GeneratedNameNeverTakesAnExistingName) {
  {
    SCOPED_TRACE("a, a, a_1");
    Graph g = base();
    g.nodes.push_back(node("Relu", "a", {"x"}, {"v1"}));
    g.nodes.push_back(node("Relu", "a", {"v1"}, {"v2"}));
    g.nodes.push_back(node("Relu", "a_1", {"v2"}, {"y"}));
    EXPECT_EQ(name_nodes(g), 1u);
    EXPECT_EQ(names(g.nodes), (std::vector<std::string>{"a", "a_2", "a_1"}));
  }
  {
    SCOPED_TRACE("a later name in a nested graph");
    Graph g = base();
    g.nodes.push_back(node("Relu", "a", {"x"}, {"v1"}));
    g.nodes.push_back(node("Relu", "a", {"v1"}, {"v2"}));
    g.nodes.push_back(node("Relu", "a", {"v2"}, {"v3"}));
    g.nodes.push_back(if_node("if", "y", sub("then", {node("Neg", "a_2", {"v3"}, {"t"})}, {"t"}),
                              sub("else", {node("Neg", "a_1", {"v3"}, {"e"})}, {"e"})));
    EXPECT_EQ(name_nodes(g), 2u);
    EXPECT_EQ(names(g.nodes), (std::vector<std::string>{"a", "a_3", "a_4", "if", "a_2", "a_1"}));
  }
  {
    SCOPED_TRACE("a generated-looking name repeated too");
    Graph g = base();
    g.nodes.push_back(node("Relu", "a_1", {"x"}, {"v1"}));
    g.nodes.push_back(node("Relu", "a", {"v1"}, {"v2"}));
    g.nodes.push_back(node("Relu", "a_1", {"v2"}, {"v3"}));
    g.nodes.push_back(node("Relu", "a", {"v3"}, {"v4"}));
    g.nodes.push_back(node("Relu", "a_1_1", {"v4"}, {"y"}));
    EXPECT_EQ(name_nodes(g), 2u);
    auto n = names(g.nodes);
    EXPECT_TRUE(unique_nonempty(n)) << ::testing::PrintToString(n);
    EXPECT_EQ(n, (std::vector<std::string>{"a_1", "a", "a_1_2", "a_2", "a_1_1"}));
  }
}

TEST(NameNodes, FunctionBodiesAreRenamedIndependently) {
  Graph g = base();
  g.domain_versions = {{"m", 1}};
  g.nodes.push_back(node("Relu", "n", {"x"}, {"a"}));
  g.nodes.push_back(node("Blk", "n", {"a"}, {"y"}, "m"));
  Function f = blk();
  f.nodes = {node("Relu", "n", {"i"}, {"o1"}), node("Neg", "n", {"o1"}, {"o2"}),
             node("Neg", "n", {"o2"}, {"o"})};
  g.functions.push_back(f);
  Function f2 = blk();
  f2.name = "Blk2";
  f2.nodes = {node("Relu", "n", {"i"}, {"o1"}), node("Neg", "n_1", {"o1"}, {"o"})};
  g.functions.push_back(f2);
  EXPECT_EQ(name_nodes(g), 1u + 2u);  // Blk2 already unique
  EXPECT_EQ(names(g.nodes), (std::vector<std::string>{"n", "n_1"}));
  // Each body: its own namespace, the main graph's names do not count.
  EXPECT_EQ(names(g.functions[0].nodes), (std::vector<std::string>{"n", "n_1", "n_2"}));
  EXPECT_EQ(names(g.functions[1].nodes), (std::vector<std::string>{"n", "n_1"}));
  EXPECT_NO_THROW(check_structure(g, kOpset, "name_nodes"));
}

// Many repeated names, in the main graph, nested graphs and a function body.
Graph crowded() {
  Graph g = base();
  g.domain_versions = {{"m", 1}};
  std::string v = "x";
  for (int i = 0; i < 12; ++i) {
    std::string o = "v" + std::to_string(i);
    g.nodes.push_back(node("Relu", i % 3 == 0 ? "k_1" : (i % 2 ? "k" : "k_2"), {v}, {o}));
    v = o;
  }
  g.nodes.push_back(if_node(
      "k", "r",
      sub("then", {node("Neg", "k", {v}, {"t1"}), node("Neg", "k_1", {"t1"}, {"t2"})}, {"t2"}),
      sub("else", {node("Neg", "k", {v}, {"e"})}, {"e"})));
  g.nodes.push_back(node("Blk", "k", {"r"}, {"y"}, "m"));
  Function f = blk();
  f.nodes = {node("Relu", "k", {"i"}, {"o1"}), node("Relu", "k", {"o1"}, {"o2"}),
             node("Relu", "k_1", {"o2"}, {"o"})};
  g.functions.push_back(f);
  return g;
}

TEST(NameNodes, DeterministicAndIdempotent) {
  Graph g1 = crowded(), g2 = crowded();
  size_t r1 = name_nodes(g1), r2 = name_nodes(g2);
  EXPECT_EQ(r1, r2);
  EXPECT_GT(r1, 0u);
  EXPECT_EQ(names(g1.nodes), names(g2.nodes));
  EXPECT_EQ(names(g1.functions[0].nodes), names(g2.functions[0].nodes));
  EXPECT_TRUE(unique_nonempty(names(g1.nodes))) << ::testing::PrintToString(names(g1.nodes));
  EXPECT_TRUE(unique_nonempty(names(g1.functions[0].nodes)));
  // The first node of each name keeps it.
  EXPECT_EQ(g1.nodes[0].name, "k_1");
  EXPECT_EQ(g1.nodes[1].name, "k");
  EXPECT_EQ(g1.nodes[2].name, "k_2");
  EXPECT_EQ(g1.functions[0].nodes[0].name, "k");
  // A second run changes nothing.
  auto before = names(g1.nodes);
  EXPECT_EQ(name_nodes(g1), 0u);
  EXPECT_EQ(names(g1.nodes), before);
}

TEST(NameNodes, CheckStructurePassesAfterwards) {
  Graph g = crowded();
  EXPECT_TRUE(rejects(g, "fuse_layout", {"two nodes are named"}));
  name_nodes(g);
  EXPECT_NO_THROW(check_structure(g, kOpset, "name_nodes"));
}

TEST(NameNodes, EmptyNamesStayEmpty) {
  Graph g = base();
  g.nodes.push_back(node("Relu", "", {"x"}, {"a"}));
  g.nodes.push_back(node("Relu", "", {"a"}, {"b"}));
  g.nodes.push_back(node("Relu", "r", {"b"}, {"c"}));
  g.nodes.push_back(node("Relu", "r", {"c"}, {"d"}));
  g.nodes.push_back(if_node("", "y", sub("then", {node("Neg", "", {"d"}, {"t"})}, {"t"}),
                            sub("else", {node("Neg", "", {"d"}, {"e"})}, {"e"})));
  Function f = blk();
  f.nodes = {node("Relu", "", {"i"}, {"o1"}), node("Relu", "", {"o1"}, {"o"})};
  g.functions.push_back(f);
  g.domain_versions = {{"m", 1}};
  EXPECT_EQ(name_nodes(g), 1u);
  EXPECT_EQ(names(g.nodes), (std::vector<std::string>{"", "", "r", "r_1", "", "", ""}));
  EXPECT_EQ(names(g.functions[0].nodes), (std::vector<std::string>{"", ""}));
  EXPECT_NO_THROW(check_structure(g, kOpset, "name_nodes"));
}

// check_values (run after every pass under PT2ONNX_CHECK_EACH_PASS): the value
// rules, naming the pass; node names (settled at the end) are not its concern.
TEST(CheckValues, NamesThePassAndIgnoresNodeNames) {
  Graph g = base();
  g.nodes.push_back(node("Relu", "dup", {"x"}, {"a"}));
  g.nodes.push_back(node("Neg", "dup", {"a"}, {"y"}));
  EXPECT_NO_THROW(check_values(g, "fuse_gelu"));
  g.nodes[0].inputs = {"missing"};
  try {
    check_values(g, "fuse_gelu");
    FAIL() << "a read of an undefined value passed";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("internal error after fuse_gelu:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("input 'missing'"), std::string::npos) << msg;
  }
}
