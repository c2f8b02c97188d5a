// collapse_layout_chains and fold_shape_arithmetic: each rule on the pattern
// it matches and on its near misses (left alone).
#include <gtest/gtest.h>

#include <limits>

#include "ir/builder.h"
#include "opt/passes.h"

using namespace pt2onnx;

namespace {

ValueType f32(std::initializer_list<Dim> dims) { return ValueType{DType::Float, Shape(dims)}; }
ValueType typed(DType t, std::initializer_list<Dim> dims) { return ValueType{t, Shape(dims)}; }
Dim S(const char* s) { return Dim::symbol(s); }
Dim N(int64_t v) { return Dim::of(v); }

size_t count(const Graph& g, const std::string& op) {
  size_t n = 0;
  for (auto& node : g.nodes) n += node.op_type == op;
  return n;
}

const Node* find_op(const Graph& g, const std::string& op) {
  for (auto& n : g.nodes)
    if (n.op_type == op) return &n;
  return nullptr;
}

std::vector<int64_t> ints_of(const Graph& g, const std::string& v) {
  for (auto& i : g.initializers)
    if (i.name == v) {
      const auto* p = i.data.as<int64_t>();
      return std::vector<int64_t>(p, p + i.data.numel());
    }
  return {};
}

// The whole default pipeline at `opset` (the two passes run first among the
// fusions), with an output reading `v` through Relu / Not so that forwarding
// shows as a missing node, not an Identity.
Graph finish(GraphBuilder& b, const std::string& v, int opset = 18) {
  const ValueType& t = b.type(v);
  std::string out =
      b.op(t.dtype == DType::Bool ? "Not" : (is_integral(t.dtype) ? "Neg" : "Relu"), {v});
  b.add_output(out, b.type(out));
  Graph g = b.take();
  PassOptions o;
  o.opset = opset;
  run_default_passes(g, o);
  return g;
}

// The value the last node reads (what the pattern was reduced to).
const std::string& last_input(const Graph& g) { return g.nodes.back().inputs[0]; }

}  // namespace

// ---------------------------------------------------------------- Transpose

TEST(FuseLayout, TransposeTransposeComposes) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), N(2), S("s"), N(4)}));
  std::string t1 = b.op("Transpose", {"x"}, {Attr::Ints("perm", {0, 2, 1, 3})});
  std::string t2 = b.op("Transpose", {t1}, {Attr::Ints("perm", {0, 1, 3, 2})});
  Graph g = finish(b, t2);
  ASSERT_EQ(count(g, "Transpose"), 1u);
  const Node* t = find_op(g, "Transpose");
  EXPECT_EQ(t->inputs[0], "x");
  // out[i] = x[p1[p2[i]]]
  EXPECT_EQ(t->attr("perm")->ints, (std::vector<int64_t>{0, 2, 3, 1}));
}

TEST(FuseLayout, TransposePairToIdentityGoes) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), N(2), N(3)}));
  std::string t1 = b.op("Transpose", {"x"}, {Attr::Ints("perm", {0, 2, 1})});
  std::string t2 = b.op("Transpose", {t1}, {Attr::Ints("perm", {0, 2, 1})});
  Graph g = finish(b, t2);
  EXPECT_EQ(count(g, "Transpose"), 0u);
  EXPECT_EQ(last_input(g), "x");
}

TEST(FuseLayout, IdentityTransposeGoes) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), N(3)}));
  std::string t = b.op("Transpose", {"x"}, {Attr::Ints("perm", {0, 1})});
  Graph g = finish(b, t);
  EXPECT_EQ(count(g, "Transpose"), 0u);
}

TEST(FuseLayout, TransposeChainKeptWhenInnerReadTwice) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), N(2), N(3)}));
  std::string t1 = b.op("Transpose", {"x"}, {Attr::Ints("perm", {0, 2, 1})});
  std::string t2 = b.op("Transpose", {t1}, {Attr::Ints("perm", {1, 0, 2})});
  b.add_output(b.op("Relu", {t1}), f32({S("b"), N(3), N(2)}));
  Graph g = finish(b, t2);
  EXPECT_EQ(count(g, "Transpose"), 2u);
}

// A pair that cancels (Transpose pair, Squeeze of Unsqueeze) goes whole: its
// inner node too, in the same sweep. Left as a dead reader, it counted as a
// second reader of the value below it, so the next sweep kept the Reshape
// chain through that value (GroupQueryAttention's Reshape(Transpose(.)) of
// the model's Transpose(Reshape(v_proj)) kept a Reshape pair). The pass
// alone, without remove_unused after it.
namespace {

Graph collapsed_alone(GraphBuilder& b, const std::string& v) {
  b.add_output(b.op("Relu", {v}), b.type(v));
  Graph g = b.take();
  PassOptions o;
  o.opset = 18;
  collapse_layout_chains(g, o);
  return g;
}

}  // namespace

TEST(FuseLayout, CancelledTransposePairLeavesNoReaderOfItsSource) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s"), N(64)}));
  std::string view =
      b.op("Reshape", {"x", b.const_i64({0, 0, 2, 32})}, {}, f32({S("b"), S("s"), N(2), N(32)}));
  std::string t1 = b.op("Transpose", {view}, {Attr::Ints("perm", {0, 2, 1, 3})},
                        f32({S("b"), N(2), S("s"), N(32)}));
  std::string t2 = b.op("Transpose", {t1}, {Attr::Ints("perm", {0, 2, 1, 3})},
                        f32({S("b"), S("s"), N(2), N(32)}));
  std::string r = b.op("Reshape", {t2, b.const_i64({0, 0, 64})}, {}, f32({S("b"), S("s"), N(64)}));
  Graph g = collapsed_alone(b, r);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "Relu");
  EXPECT_EQ(g.nodes[0].inputs[0], "x");
}

TEST(FuseLayout, CancelledSqueezeOfUnsqueezeLeavesNoReaderOfItsSource) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s"), N(64)}));
  std::string view =
      b.op("Reshape", {"x", b.const_i64({0, 0, 2, 32})}, {}, f32({S("b"), S("s"), N(2), N(32)}));
  std::string u =
      b.op("Unsqueeze", {view, b.const_i64({1})}, {}, f32({S("b"), N(1), S("s"), N(2), N(32)}));
  std::string sq = b.op("Squeeze", {u, b.const_i64({1})}, {}, f32({S("b"), S("s"), N(2), N(32)}));
  std::string r = b.op("Reshape", {sq, b.const_i64({0, 0, 64})}, {}, f32({S("b"), S("s"), N(64)}));
  Graph g = collapsed_alone(b, r);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "Relu");
  EXPECT_EQ(g.nodes[0].inputs[0], "x");
}

// ------------------------------------------------------------------ Reshape

TEST(FuseLayout, ReshapeOfReshapeReadsTheSource) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), N(6), N(4)}));
  std::string r1 = b.op("Reshape", {"x", b.const_i64({-1, 3, 8})});
  std::string r2 = b.op("Reshape", {r1, b.const_i64({-1, 12})});
  Graph g = finish(b, r2);
  ASSERT_EQ(count(g, "Reshape"), 1u);
  EXPECT_EQ(find_op(g, "Reshape")->inputs[0], "x");
  EXPECT_EQ(ints_of(g, find_op(g, "Reshape")->inputs[1]), (std::vector<int64_t>{-1, 12}));
}

TEST(FuseLayout, ReshapeOfUnsqueezeReadsTheSource) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), N(6)}));
  std::string u = b.op("Unsqueeze", {"x", b.const_i64({1})});
  std::string r = b.op("Reshape", {u, b.const_i64({-1, 2, 3})});
  Graph g = finish(b, r);
  EXPECT_EQ(count(g, "Unsqueeze"), 0u);
  ASSERT_EQ(count(g, "Reshape"), 1u);
  EXPECT_EQ(find_op(g, "Reshape")->inputs[0], "x");
}

TEST(FuseLayout, ReshapeZeroCopyingInnerDimBecomesMinusOne) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s"), N(8), N(4)}));
  std::string r1 = b.op("Reshape", {"x", b.const_i64({-1, 8, 4})});  // [b*s, 8, 4]
  std::string r2 = b.op("Reshape", {r1, b.const_i64({0, 32})});      // 0: r1's b*s
  Graph g = finish(b, r2);
  ASSERT_EQ(count(g, "Reshape"), 1u);
  EXPECT_EQ(find_op(g, "Reshape")->inputs[0], "x");
  EXPECT_EQ(ints_of(g, find_op(g, "Reshape")->inputs[1]), (std::vector<int64_t>{-1, 32}));
}

TEST(FuseLayout, ReshapeZeroOfSameSymbolKeptAsZero) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), N(6), N(4)}));
  std::string r1 = b.op("Reshape", {"x", b.const_i64({0, 3, 8})});  // [b, 3, 8]
  std::string r2 = b.op("Reshape", {r1, b.const_i64({0, 0, 2, 4})});
  Graph g = finish(b, r2);
  ASSERT_EQ(count(g, "Reshape"), 1u);
  EXPECT_EQ(find_op(g, "Reshape")->inputs[0], "x");
  EXPECT_EQ(ints_of(g, find_op(g, "Reshape")->inputs[1]), (std::vector<int64_t>{0, 3, 2, 4}));
}

TEST(FuseLayout, ReshapeWithTwoSymbolicZeroCopiesKept) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s"), N(4)}));
  std::string u = b.op("Unsqueeze", {"x", b.const_i64({0})});          // [1, b, s, 4]
  std::string r = b.op("Reshape", {u, b.const_i64({0, 0, 0, 2, 2})});  // copies b and s
  Graph g = finish(b, r);
  EXPECT_EQ(count(g, "Unsqueeze"), 1u);
  EXPECT_EQ(count(g, "Reshape"), 1u);
}

TEST(FuseLayout, ReshapeWithComputedShapeKept) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), N(6), N(4)}));
  b.add_input("shape", typed(DType::Int64, {N(2)}));
  std::string r1 = b.op("Reshape", {"x", b.const_i64({-1, 3, 8})});
  std::string r2 = b.op("Reshape", {r1, "shape"}, {}, f32({Dim::unknown(), Dim::unknown()}));
  Graph g = finish(b, r2);
  EXPECT_EQ(count(g, "Reshape"), 2u);
}

TEST(FuseLayout, ReshapeToOwnSymbolicShapeGoes) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s"), N(128)}));
  std::string r = b.op("Reshape", {"x", b.const_i64({0, 0, 128})});
  Graph g = finish(b, r);
  EXPECT_EQ(count(g, "Reshape"), 0u);
  EXPECT_EQ(last_input(g), "x");
}

TEST(FuseLayout, ReshapeToOtherShapeKept) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s"), N(128)}));
  std::string r = b.op("Reshape", {"x", b.const_i64({0, -1, 64})});
  Graph g = finish(b, r);
  EXPECT_EQ(count(g, "Reshape"), 1u);
}

// ------------------------------------------------------ Unsqueeze / Squeeze

TEST(FuseLayout, UnsqueezeChainBecomesOne) {
  GraphBuilder b(18);
  b.add_input("x", typed(DType::Int64, {S("n")}));
  // [n] -> [1, n] -> [1, n, 1] -> [1, 1, n, 1]: axes 0, 1, 3 of the result.
  std::string u1 = b.op("Unsqueeze", {"x", b.const_i64({0})});
  std::string u2 = b.op("Unsqueeze", {u1, b.const_i64({-1})});
  std::string u3 = b.op("Unsqueeze", {u2, b.const_i64({1})});
  Graph g = finish(b, u3);
  ASSERT_EQ(count(g, "Unsqueeze"), 1u);
  const Node* u = find_op(g, "Unsqueeze");
  EXPECT_EQ(u->inputs[0], "x");
  EXPECT_EQ(ints_of(g, u->inputs[1]), (std::vector<int64_t>{0, 1, 3}));
}

TEST(FuseLayout, UnsqueezeAttributeFormAtOpset11) {
  GraphBuilder b(11);
  b.add_input("x", f32({S("n"), N(3)}));
  std::string u1 = b.op("Unsqueeze", {"x"}, {Attr::Ints("axes", {1})}, f32({S("n"), N(1), N(3)}));
  std::string u2 =
      b.op("Unsqueeze", {u1}, {Attr::Ints("axes", {0})}, f32({N(1), S("n"), N(1), N(3)}));
  Graph g = finish(b, u2, 11);
  ASSERT_EQ(count(g, "Unsqueeze"), 1u);
  EXPECT_EQ(find_op(g, "Unsqueeze")->attr("axes")->ints, (std::vector<int64_t>{0, 2}));
}

TEST(FuseLayout, UnsqueezeChainKeptWhenInnerReadTwice) {
  GraphBuilder b(18);
  b.add_input("x", typed(DType::Int64, {S("n")}));
  std::string u1 = b.op("Unsqueeze", {"x", b.const_i64({0})});
  std::string u2 = b.op("Unsqueeze", {u1, b.const_i64({0})});
  b.add_output(b.op("Neg", {u1}), typed(DType::Int64, {N(1), S("n")}));
  Graph g = finish(b, u2);
  EXPECT_EQ(count(g, "Unsqueeze"), 2u);
}

TEST(FuseLayout, UnsqueezeOfUnknownRankKept) {
  GraphBuilder b(18);
  b.add_input("x", ValueType{DType::Float, std::nullopt});
  std::string u1 =
      b.op("Unsqueeze", {"x", b.const_i64({-1})}, {}, ValueType{DType::Float, std::nullopt});
  std::string u2 =
      b.op("Unsqueeze", {u1, b.const_i64({0})}, {}, ValueType{DType::Float, std::nullopt});
  Graph g = finish(b, u2);
  EXPECT_EQ(count(g, "Unsqueeze"), 2u);
}

TEST(FuseLayout, SqueezeChainBecomesOne) {
  GraphBuilder b(18);
  b.add_input("x", f32({N(1), S("n"), N(1), N(1), N(3)}));
  // Squeeze axis 2 -> [1, n, 1, 3]; then axes 0 and -2 -> x's axes 0 and 3.
  std::string s1 = b.op("Squeeze", {"x", b.const_i64({2})});
  std::string s2 = b.op("Squeeze", {s1, b.const_i64({0, -2})});
  Graph g = finish(b, s2);
  ASSERT_EQ(count(g, "Squeeze"), 1u);
  const Node* s = find_op(g, "Squeeze");
  EXPECT_EQ(s->inputs[0], "x");
  EXPECT_EQ(ints_of(g, s->inputs[1]), (std::vector<int64_t>{0, 2, 3}));
}

TEST(FuseLayout, SqueezeWithoutAxesKept) {
  GraphBuilder b(18);
  b.add_input("x", f32({N(1), S("n"), N(1)}));
  std::string s1 = b.op("Squeeze", {"x", b.const_i64({2})});
  std::string s2 = b.op("Squeeze", {s1}, {}, f32({S("n")}));
  Graph g = finish(b, s2);
  EXPECT_EQ(count(g, "Squeeze"), 2u);
}

TEST(FuseLayout, SqueezeOfUnsqueezeSameAxesGoes) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("n"), N(3)}));
  std::string u = b.op("Unsqueeze", {"x", b.const_i64({1})});
  std::string s = b.op("Squeeze", {u, b.const_i64({-2})});
  Graph g = finish(b, s);
  EXPECT_EQ(count(g, "Unsqueeze") + count(g, "Squeeze"), 0u);
  EXPECT_EQ(last_input(g), "x");
}

TEST(FuseLayout, SqueezeOfUnsqueezeOtherAxesKept) {
  GraphBuilder b(18);
  b.add_input("x", f32({N(1), N(3)}));
  std::string u = b.op("Unsqueeze", {"x", b.const_i64({2})});
  std::string s = b.op("Squeeze", {u, b.const_i64({0})});
  Graph g = finish(b, s);
  EXPECT_EQ(count(g, "Unsqueeze") + count(g, "Squeeze"), 2u);
}

TEST(FuseLayout, UnsqueezeOfReshapeBecomesReshape) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), N(6)}));
  std::string r = b.op("Reshape", {"x", b.const_i64({-1, 3})});
  std::string u = b.op("Unsqueeze", {r, b.const_i64({0, -1})});
  Graph g = finish(b, u);
  EXPECT_EQ(count(g, "Unsqueeze"), 0u);
  ASSERT_EQ(count(g, "Reshape"), 1u);
  EXPECT_EQ(ints_of(g, find_op(g, "Reshape")->inputs[1]), (std::vector<int64_t>{1, -1, 3, 1}));
}

TEST(FuseLayout, SqueezeOfReshapeBecomesReshape) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), N(6)}));
  std::string r = b.op("Reshape", {"x", b.const_i64({-1, 1, 3})});
  std::string q = b.op("Squeeze", {r, b.const_i64({1})});
  Graph g = finish(b, q);
  EXPECT_EQ(count(g, "Squeeze"), 0u);
  ASSERT_EQ(count(g, "Reshape"), 1u);
  EXPECT_EQ(ints_of(g, find_op(g, "Reshape")->inputs[1]), (std::vector<int64_t>{-1, 3}));
}

TEST(FuseLayout, AxesOfReshapeNearMissesKept) {
  {  // the 0 would shift to another dim
    GraphBuilder b(18);
    b.add_input("x", f32({S("b"), N(6)}));
    std::string r = b.op("Reshape", {"x", b.const_i64({0, 2, 3})});
    Graph g = finish(b, b.op("Unsqueeze", {r, b.const_i64({0})}));
    EXPECT_EQ(count(g, "Unsqueeze"), 1u);
  }
  {  // the squeezed entry is the -1, not a 1
    GraphBuilder b(18);
    b.add_input("x", f32({S("b"), N(6)}));
    std::string r = b.op("Reshape", {"x", b.const_i64({-1, 6})}, {}, f32({N(1), N(6)}));
    Graph g = finish(b, b.op("Squeeze", {r, b.const_i64({0})}));
    EXPECT_EQ(count(g, "Squeeze"), 1u);
  }
}

// --------------------------------------------------------------------- Cast

Attr to(DType t) { return Attr::Int("to", static_cast<int64_t>(t)); }

TEST(FuseLayout, WideningCastChainBecomesOne) {
  GraphBuilder b(18);
  b.add_input("x", typed(DType::Int32, {S("n")}));
  std::string c1 = b.op("Cast", {"x"}, {to(DType::Int64)});
  std::string c2 = b.op("Cast", {c1}, {to(DType::Float)});
  Graph g = finish(b, c2);
  ASSERT_EQ(count(g, "Cast"), 1u);
  EXPECT_EQ(find_op(g, "Cast")->inputs[0], "x");
  EXPECT_EQ(find_op(g, "Cast")->attr("to")->i, static_cast<int64_t>(DType::Float));
}

TEST(FuseLayout, WideningRoundTripGoes) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("n")}));
  std::string c1 = b.op("Cast", {"x"}, {to(DType::Double)});
  std::string c2 = b.op("Cast", {c1}, {to(DType::Float)});
  Graph g = finish(b, c2);
  EXPECT_EQ(count(g, "Cast"), 0u);
  EXPECT_EQ(last_input(g), "x");
}

TEST(FuseLayout, LossyCastChainsKept) {
  for (DType mid : {DType::Int32, DType::Float16, DType::Bool}) {
    GraphBuilder b(18);
    b.add_input("x", f32({S("n")}));
    std::string c1 = b.op("Cast", {"x"}, {to(mid)});
    std::string c2 = b.op("Cast", {c1}, {to(DType::Float)});
    Graph g = finish(b, c2);
    EXPECT_EQ(count(g, "Cast"), 2u) << static_cast<int>(mid);
  }
  GraphBuilder b(18);  // int64 -> int32 narrows
  b.add_input("x", typed(DType::Int64, {S("n")}));
  std::string c1 = b.op("Cast", {"x"}, {to(DType::Int32)});
  std::string c2 = b.op("Cast", {c1}, {to(DType::Int64)});
  Graph g = finish(b, c2);
  EXPECT_EQ(count(g, "Cast"), 2u);
}

TEST(FuseLayout, CastToOwnTypeGoes) {
  GraphBuilder b(18);
  b.add_input("x", typed(DType::Int64, {S("n")}));
  std::string c = b.op("Cast", {"x"}, {to(DType::Int64)});
  Graph g = finish(b, c);
  EXPECT_EQ(count(g, "Cast"), 0u);
}

// ------------------------------------------------- index / mask arithmetic

namespace {
// arange(x.shape[axis]) as converters emit it: Range(0, Squeeze(Shape[a:a+1](x)), 1).
std::string arange_of(GraphBuilder& b, const std::string& x, int64_t axis, Dim n) {
  std::string s = b.op("Shape", {x}, {Attr::Int("start", axis), Attr::Int("end", axis + 1)});
  std::string q = b.op("Squeeze", {s, b.const_i64({0})});
  return b.op("Range", {b.scalar_i64(0), q, b.scalar_i64(1)}, {},
              typed(DType::Int64, {std::move(n)}));
}

// Where(Less(i, 0), Add(i, n), i): a possibly negative index wrapped.
std::string wrap(GraphBuilder& b, const std::string& i, const std::string& n, int64_t zero = 0) {
  std::string neg = b.op("Less", {i, b.scalar_i64(zero)});
  return b.op("Where", {neg, b.op("Add", {i, n}), i});
}
}  // namespace

TEST(FuseLayout, IndexWrapOfRangeGoes) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s")}));
  std::string i = b.op("Unsqueeze", {arange_of(b, "x", 1, S("s")), b.const_i64({0})});
  std::string n =
      b.op("Squeeze",
           {b.op("Shape", {"x"}, {Attr::Int("start", 0), Attr::Int("end", 1)}), b.const_i64({0})});
  Graph g = finish(b, wrap(b, i, n));
  EXPECT_EQ(count(g, "Where"), 0u);
  EXPECT_EQ(count(g, "Less"), 0u);
  EXPECT_EQ(count(g, "Add"), 0u);
}

TEST(FuseLayout, IndexWrapOfShapeSumGoes) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s")}));
  // Shape values are >= 0, and so is their sum.
  std::string s0 = b.op("Shape", {"x"}, {Attr::Int("start", 0), Attr::Int("end", 1)});
  std::string s1 = b.op("Shape", {"x"}, {Attr::Int("start", 1), Attr::Int("end", 2)});
  std::string i = b.op("Add", {s0, s1});
  Graph g = finish(b, wrap(b, i, b.const_i64({5})));
  EXPECT_EQ(count(g, "Where"), 0u);
}

TEST(FuseLayout, IndexWrapOfUnknownSignKept) {
  GraphBuilder b(18);
  b.add_input("i", typed(DType::Int64, {S("s")}));
  Graph g = finish(b, wrap(b, "i", b.scalar_i64(7)));
  EXPECT_EQ(count(g, "Where"), 1u);
}

TEST(FuseLayout, IndexWrapOfRangeFromSymbolicStartKept) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s")}));
  b.add_input("start", typed(DType::Int64, {}));
  std::string q =
      b.op("Squeeze",
           {b.op("Shape", {"x"}, {Attr::Int("start", 1), Attr::Int("end", 2)}), b.const_i64({0})});
  std::string i =
      b.op("Range", {"start", q, b.scalar_i64(1)}, {}, typed(DType::Int64, {Dim::unknown()}));
  Graph g = finish(b, wrap(b, i, b.scalar_i64(7)));
  EXPECT_EQ(count(g, "Where"), 1u);
}

TEST(FuseLayout, IndexCompareWithPositiveBoundKept) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s")}));
  std::string i = arange_of(b, "x", 1, S("s"));
  Graph g = finish(b, wrap(b, i, b.scalar_i64(7), /*zero=*/1));  // i < 1 holds for i = 0
  EXPECT_EQ(count(g, "Where"), 1u);
}

TEST(FuseLayout, IndexWrapWideningShapeKept) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s")}));
  b.add_input("n", typed(DType::Int64, {S("t"), N(1)}));
  std::string i = arange_of(b, "x", 1, S("s"));
  // Add(i, n) is [t, s]: the Where's result is wider than i.
  Graph g = finish(b, wrap(b, i, "n"));
  EXPECT_EQ(count(g, "Where"), 1u);
}

TEST(FuseLayout, SumThatCouldOverflowKept) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s")}));
  std::string s0 = b.op("Shape", {"x"}, {Attr::Int("start", 0), Attr::Int("end", 1)});
  std::string big = b.const_i64({std::numeric_limits<int64_t>::max()});
  std::string i = b.op("Add", {s0, big});  // may wrap to negative
  Graph g = finish(b, wrap(b, i, b.const_i64({5})));
  EXPECT_EQ(count(g, "Where"), 1u);
}

TEST(FuseLayout, AndWithAllTrueGoes) {
  GraphBuilder b(18);
  b.add_input("m", typed(DType::Bool, {S("b"), S("s")}));
  std::string ones = b.op("ConstantOfShape", {b.const_i64({})},
                          {Attr::Tensor("value", *TensorData::scalar(DType::Bool, 1, {1}))},
                          typed(DType::Bool, {}));
  Graph g = finish(b, b.op("And", {ones, "m"}));
  EXPECT_EQ(count(g, "And"), 0u);
  EXPECT_EQ(last_input(g), "m");
}

TEST(FuseLayout, AndWithAllFalseOrWideningTrueKept) {
  {
    GraphBuilder b(18);
    b.add_input("m", typed(DType::Bool, {S("b"), S("s")}));
    std::string zeros = b.op("ConstantOfShape", {b.const_i64({})},
                             {Attr::Tensor("value", *TensorData::scalar(DType::Bool, 0, {1}))},
                             typed(DType::Bool, {}));
    Graph g = finish(b, b.op("And", {zeros, "m"}));
    EXPECT_EQ(count(g, "And"), 1u);
  }
  {
    GraphBuilder b(18);
    b.add_input("m", typed(DType::Bool, {S("s")}));
    b.add_input("x", f32({S("b"), N(1)}));
    // All true but [b, 1]: And widens m to [b, s].
    std::string t = b.op("GreaterOrEqual", {arange_of(b, "x", 0, S("b")), b.scalar_i64(0)});
    std::string col = b.op("Unsqueeze", {t, b.const_i64({1})});
    Graph g = finish(b, b.op("And", {col, "m"}));
    EXPECT_EQ(count(g, "And"), 1u);
  }
}

TEST(FuseLayout, WhereOnAllTrueMaskGoes) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), N(2), N(5), N(5)}));
  // A constant position column compared with 0, expanded to [b, 1, 5, 5].
  std::vector<int64_t> pos{0, 1, 2, 3, 4};
  std::string p = b.constant(TensorData::from_vector(DType::Int64, {1, 1, 5, 1}, pos));
  std::string ge = b.op("GreaterOrEqual", {p, b.scalar_i64(0)});
  std::string shape = b.op(
      "Concat",
      {b.op("Shape", {"x"}, {Attr::Int("start", 0), Attr::Int("end", 1)}), b.const_i64({1, 5, 5})},
      {Attr::Int("axis", 0)});
  std::string m = b.op("Expand", {ge, shape}, {}, typed(DType::Bool, {S("b"), N(1), N(5), N(5)}));
  std::string w = b.op("Where", {m, "x", b.scalar(DType::Float, -1e9)});
  Graph g = finish(b, w);
  EXPECT_EQ(count(g, "Where"), 0u);
  EXPECT_EQ(count(g, "Expand"), 0u);
  EXPECT_EQ(last_input(g), "x");
}

TEST(FuseLayout, WhereOnMixedMaskKept) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), N(5)}));
  std::vector<int64_t> pos{-1, 1, 2, 3, 4};  // one negative: not all true
  std::string p = b.constant(TensorData::from_vector(DType::Int64, {5}, pos));
  std::string ge = b.op("GreaterOrEqual", {p, b.scalar_i64(0)});
  Graph g = finish(b, b.op("Where", {ge, "x", b.scalar(DType::Float, 0)}));
  EXPECT_EQ(count(g, "Where"), 1u);
}

TEST(FuseLayout, WhereDropsAllTrueAndFactorAbsorbedByScores) {
  GraphBuilder b(18);
  b.add_input("scores", f32({S("b"), N(2), S("s"), S("s")}));
  b.add_input("m", typed(DType::Bool, {S("b"), N(1), N(1), S("s")}));
  b.add_input("x", f32({S("b"), S("s")}));
  // [1, 1, s, 1] all true (a query-side arange >= 0) And [b, 1, 1, s].
  std::string q = b.op("Unsqueeze", {arange_of(b, "x", 1, S("s")), b.const_i64({0, 1, 3})});
  std::string t = b.op("GreaterOrEqual", {q, b.scalar_i64(0)});
  std::string a = b.op("And", {t, "m"});
  std::string w = b.op("Where", {a, "scores", b.scalar(DType::Float, -1e9)});
  Graph g = finish(b, w);
  EXPECT_EQ(count(g, "And"), 0u);
  ASSERT_EQ(count(g, "Where"), 1u);
  EXPECT_EQ(find_op(g, "Where")->inputs[0], "m");
}

TEST(FuseLayout, WhereKeepsAndFactorThatWidens) {
  GraphBuilder b(18);
  b.add_input("scores", f32({S("b"), N(2), N(1), S("s")}));
  b.add_input("m", typed(DType::Bool, {S("b"), N(1), N(1), S("s")}));
  b.add_input("x", f32({S("b"), S("s")}));
  std::string q = b.op("Unsqueeze", {arange_of(b, "x", 1, S("s")), b.const_i64({0, 1, 3})});
  std::string t = b.op("GreaterOrEqual", {q, b.scalar_i64(0)});  // [1, 1, s, 1]
  std::string a = b.op("And", {t, "m"});
  std::string w = b.op("Where", {a, "scores", b.scalar(DType::Float, -1e9)});
  Graph g = finish(b, w);
  EXPECT_EQ(count(g, "And"), 1u);
}

TEST(FuseLayout, IntegerNeutralArithmeticGoes) {
  GraphBuilder b(18);
  b.add_input("i", typed(DType::Int64, {S("s")}));
  std::string a = b.op("Add", {"i", b.scalar_i64(0)});
  std::string m = b.op("Mul", {b.scalar_i64(1), a});
  std::string s = b.op("Sub", {m, b.const_i64({0})});
  Graph g = finish(b, s);
  EXPECT_EQ(count(g, "Add") + count(g, "Mul") + count(g, "Sub"), 0u);
  EXPECT_EQ(last_input(g), "i");
}

TEST(FuseLayout, NeutralArithmeticNearMissesKept) {
  GraphBuilder b(18);
  b.add_input("i", typed(DType::Int64, {S("s")}));
  b.add_input("f", f32({S("s")}));
  std::string fa = b.op("Add", {"f", b.scalar(DType::Float, 0)});  // -0 + 0 = +0
  std::string sub = b.op("Sub", {b.scalar_i64(0), "i"});           // -i
  std::string wide = b.op(
      "Add",
      {"i", b.constant(TensorData::from_vector(DType::Int64, {2, 1}, std::vector<int64_t>{0, 0}))});
  b.add_output(b.op("Relu", {fa}), f32({S("s")}));
  b.add_output(b.op("Neg", {sub}), typed(DType::Int64, {S("s")}));
  Graph g = finish(b, wide);
  EXPECT_EQ(count(g, "Add"), 2u);
  EXPECT_EQ(count(g, "Sub"), 1u);
}

// ------------------------------------------------------------ Shape pieces

TEST(FuseLayout, GatherOfShapeBecomesShapeSlice) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s"), S("t"), N(4)}));
  std::string s = b.op("Shape", {"x"}, {Attr::Int("start", 1)});
  std::string g1 = b.op("Gather", {s, b.const_i64({-2, -1})}, {Attr::Int("axis", 0)});
  Graph g = finish(b, g1);
  EXPECT_EQ(count(g, "Gather"), 0u);
  ASSERT_EQ(count(g, "Shape"), 1u);
  const Node* n = find_op(g, "Shape");
  EXPECT_EQ(n->attr("start")->i, 2);
  EXPECT_EQ(n->attr("end")->i, 4);
}

TEST(FuseLayout, GatherOfShapeNearMissesKept) {
  for (int opset : {14, 18}) {
    GraphBuilder b(opset);
    b.add_input("x", f32({S("b"), S("s"), S("t")}));
    std::string s = b.op("Shape", {"x"});
    // Opset 14: no Shape start / end; opset 18: indices 0, 2 are not contiguous.
    std::vector<int64_t> i = opset == 14 ? std::vector<int64_t>{1} : std::vector<int64_t>{0, 2};
    std::string g1 = b.op("Gather", {s, b.const_i64(i)}, {Attr::Int("axis", 0)});
    Graph g = finish(b, g1, opset);
    EXPECT_EQ(count(g, "Gather"), 1u) << opset;
  }
  GraphBuilder b(18);  // a scalar index makes a scalar, not Shape's 1-D
  b.add_input("x", f32({S("b"), S("s")}));
  std::string g1 = b.op("Gather", {b.op("Shape", {"x"}), b.scalar_i64(1)}, {Attr::Int("axis", 0)});
  Graph g = finish(b, g1);
  EXPECT_EQ(count(g, "Gather"), 1u);
}

TEST(FuseLayout, SliceOfShapeBecomesShapeSlice) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s"), S("t"), N(4)}));
  std::string s = b.op("Shape", {"x"}, {Attr::Int("start", 1), Attr::Int("end", -1)});  // [s, t]
  std::string sl = b.op(
      "Slice",
      {s, b.const_i64({1}), b.const_i64({std::numeric_limits<int64_t>::max()}), b.const_i64({0})});
  Graph g = finish(b, sl);
  EXPECT_EQ(count(g, "Slice"), 0u);
  ASSERT_EQ(count(g, "Shape"), 1u);
  EXPECT_EQ(find_op(g, "Shape")->attr("start")->i, 2);
  EXPECT_EQ(find_op(g, "Shape")->attr("end")->i, 3);
}

TEST(FuseLayout, SliceOfShapeWithStepKept) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s"), S("t")}));
  std::string sl = b.op("Slice", {b.op("Shape", {"x"}), b.const_i64({0}), b.const_i64({3}),
                                  b.const_i64({0}), b.const_i64({2})});
  Graph g = finish(b, sl);
  EXPECT_EQ(count(g, "Slice"), 1u);
}

TEST(FuseLayout, ConcatOfAdjacentShapePiecesBecomesOneShape) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s"), S("t")}));
  std::string a = b.op("Shape", {"x"}, {Attr::Int("start", 0), Attr::Int("end", 1)});
  std::string c = b.op("Shape", {"x"}, {Attr::Int("start", 1), Attr::Int("end", 3)});
  std::string cat = b.op("Concat", {a, c}, {Attr::Int("axis", 0)});
  Graph g = finish(b, cat);
  EXPECT_EQ(count(g, "Concat"), 0u);
  ASSERT_EQ(count(g, "Shape"), 1u);
  const Node* n = find_op(g, "Shape");
  EXPECT_EQ(n->attr("start")->i, 0);
  EXPECT_EQ(n->attr("end")->i, 3);
}

TEST(FuseLayout, ConcatOfShapePiecesNearMissesKept) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s"), S("t")}));
  b.add_input("y", f32({S("b"), S("s"), S("t")}));
  auto piece = [&](const char* v, int64_t s, int64_t e) {
    return b.op("Shape", {v}, {Attr::Int("start", s), Attr::Int("end", e)});
  };
  // Out of order, and pieces of two values.
  std::string c1 = b.op("Concat", {piece("x", 1, 2), piece("x", 0, 1)}, {Attr::Int("axis", 0)});
  std::string c2 = b.op("Concat", {piece("x", 0, 1), piece("y", 1, 2)}, {Attr::Int("axis", 0)});
  b.add_output(b.op("Neg", {c1}), typed(DType::Int64, {N(2)}));
  Graph g = finish(b, c2);
  EXPECT_EQ(count(g, "Concat"), 2u);
}

TEST(FuseLayout, TransposesBackToSourceThenReshapes) {
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), S("s"), N(8), N(4)}));
  std::string t1 = b.op("Transpose", {"x"}, {Attr::Ints("perm", {0, 2, 1, 3})});
  std::string t2 = b.op("Transpose", {t1}, {Attr::Ints("perm", {0, 1, 3, 2})});
  std::string t3 = b.op("Transpose", {t2}, {Attr::Ints("perm", {0, 1, 3, 2})});
  std::string t4 = b.op("Transpose", {t3}, {Attr::Ints("perm", {0, 2, 1, 3})});
  std::string r1 = b.op("Reshape", {t4, b.const_i64({-1, 8, 4})});
  std::string r2 = b.op("Reshape", {r1, b.const_i64({-1, 32})});
  Graph g = finish(b, r2);
  EXPECT_EQ(count(g, "Transpose"), 0u);
  ASSERT_EQ(count(g, "Reshape"), 1u);
  EXPECT_EQ(find_op(g, "Reshape")->inputs[0], "x");
}

// ------------------------------------------- advanced indexing by aranges

namespace {
// data[i_0, i_1] as the converter lowers it: the indices broadcast against
// each other by adding Mul(i, 0)-s, stacked on a new last axis, GatherND.
std::string index2(GraphBuilder& b, const std::string& data, const std::string& i0,
                   const std::string& i1, ValueType out) {
  std::string z =
      b.op("Add", {b.op("Mul", {i0, b.scalar_i64(0)}), b.op("Mul", {i1, b.scalar_i64(0)})});
  std::string w0 = b.op("Add", {i0, z}), w1 = b.op("Add", {i1, z});
  auto last = static_cast<int64_t>(b.rank(w0));
  std::string idx = b.op(
      "Concat",
      {b.op("Unsqueeze", {w0, b.const_i64({last})}), b.op("Unsqueeze", {w1, b.const_i64({last})})},
      {Attr::Int("axis", -1)});
  return b.op("GatherND", {data, idx}, {}, std::move(out));
}
}  // namespace

TEST(FuseLayout, GatherNDOfOwnArangesIsTheData) {
  GraphBuilder b(18);
  b.add_input("m", typed(DType::Bool, {S("b"), S("s")}));
  std::string rows = b.op("Unsqueeze", {arange_of(b, "m", 0, S("b")), b.const_i64({1})});
  std::string cols = b.op("Unsqueeze", {arange_of(b, "m", 1, S("s")), b.const_i64({0})});
  Graph g = finish(b, index2(b, "m", rows, cols, typed(DType::Bool, {S("b"), S("s")})));
  EXPECT_EQ(count(g, "GatherND"), 0u);
  EXPECT_EQ(count(g, "Range"), 0u);
  EXPECT_EQ(last_input(g), "m");
}

TEST(FuseLayout, GatherNDOfSpreadArangesIsAnUnsqueeze) {
  GraphBuilder b(18);
  b.add_input("m", typed(DType::Bool, {S("b"), S("s")}));
  // [b, 1, 1, 1] and [1, 1, 1, s] (through a chain of unsqueezes): out [b, 1, 1, s].
  std::string r = arange_of(b, "m", 0, S("b"));
  std::string rows =
      b.op("Unsqueeze", {b.op("Unsqueeze", {r, b.const_i64({1})}), b.const_i64({2, 3})});
  std::string cols = b.op("Unsqueeze", {arange_of(b, "m", 1, S("s")), b.const_i64({0, 1, 2})});
  Graph g = finish(b, index2(b, "m", rows, cols, typed(DType::Bool, {S("b"), N(1), N(1), S("s")})));
  EXPECT_EQ(count(g, "GatherND"), 0u);
  ASSERT_EQ(count(g, "Unsqueeze"), 1u);
  const Node* u = find_op(g, "Unsqueeze");
  EXPECT_EQ(u->inputs[0], "m");
  EXPECT_EQ(ints_of(g, u->inputs[1]), (std::vector<int64_t>{1, 2}));
}

TEST(FuseLayout, GatherNDNearMissesKept) {
  auto build = [](int variant) {
    GraphBuilder b(18);
    b.add_input("m", typed(DType::Bool, {S("b"), S("s")}));
    b.add_input("x", f32({S("b"), S("t")}));
    std::string ar = arange_of(b, "m", 0, S("b"));
    if (variant == 2) {  // arange(1, b + 1): shifted
      std::string n = b.op(
          "Squeeze",
          {b.op("Shape", {"m"}, {Attr::Int("start", 0), Attr::Int("end", 1)}), b.const_i64({0})});
      ar = b.op("Range", {b.scalar_i64(1), n, b.scalar_i64(1)}, {}, typed(DType::Int64, {S("b")}));
    }
    // variant 1: the column arange runs over x's t, not m's s.
    std::string ac = arange_of(b, variant == 1 ? "x" : "m", 1, variant == 1 ? S("t") : S("s"));
    std::string rows = b.op("Unsqueeze", {ar, b.const_i64({1})});
    std::string cols = b.op("Unsqueeze", {ac, b.const_i64({0})});
    if (variant == 3) {  // rows along axis 1, columns along axis 0: a transpose
      rows = b.op("Unsqueeze", {ar, b.const_i64({0})});
      cols = b.op("Unsqueeze", {ac, b.const_i64({1})});
    }
    Dim d0 = variant == 3 ? S("s") : S("b"),
        d1 = variant == 3 ? S("b") : (variant == 1 ? S("t") : S("s"));
    return finish(b, index2(b, "m", rows, cols, typed(DType::Bool, {d0, d1})));
  };
  for (int variant : {2, 3}) {
    Graph g = build(variant);
    EXPECT_EQ(count(g, "GatherND"), 1u) << variant;
  }
  // Variant 1 (a column arange over another length) reads m[:, arange(t)]
  // as torch does: a Gather on axis 1 by that Range (an index past s fails
  // there as in torch); the index shape [b, t] needs no Unsqueeze after it.
  Graph g = build(1);
  EXPECT_EQ(count(g, "GatherND"), 0u);
  ASSERT_EQ(count(g, "Gather"), 1u);
  const Node* ga = find_op(g, "Gather");
  EXPECT_EQ(ga->inputs[0], "m");
  EXPECT_EQ(ga->attr("axis")->i, 1);
  EXPECT_EQ(g.type_of(ga->outputs[0])->shape, (Shape{S("b"), S("t")}));
  EXPECT_EQ(count(g, "Unsqueeze"), 0u);
}

TEST(FuseLayout, ConcatWithEmptyInputsGoes) {
  // Phi-3's rotary over the whole head: cat(rotated, q[..., 8:]) with q[..., 8:]
  // of size 0.
  GraphBuilder b(18);
  b.add_input("x", f32({S("b"), N(8)}));
  b.add_input("e", f32({S("b"), N(0)}));
  std::string r = b.op("Sin", {"x"});
  Graph g = finish(b, b.op("Concat", {r, "e"}, {Attr::Int("axis", -1)}, f32({S("b"), N(8)})));
  EXPECT_EQ(count(g, "Concat"), 0u);
  EXPECT_EQ(last_input(g), r);
}

TEST(FuseLayout, ConcatNearMissesKept) {
  {  // both inputs non-empty
    GraphBuilder b(18);
    b.add_input("x", f32({S("b"), N(8)}));
    b.add_input("y", f32({S("b"), N(1)}));
    Graph g = finish(b, b.op("Concat", {"x", "y"}, {Attr::Int("axis", -1)}, f32({S("b"), N(9)})));
    EXPECT_EQ(count(g, "Concat"), 1u);
  }
  {  // empty along another axis than the Concat's
    GraphBuilder b(18);
    b.add_input("x", f32({N(0), N(8)}));
    b.add_input("y", f32({N(0), N(1)}));
    Graph g = finish(b, b.op("Concat", {"x", "y"}, {Attr::Int("axis", 1)}, f32({N(0), N(9)})));
    EXPECT_EQ(count(g, "Concat"), 1u);
  }
}
