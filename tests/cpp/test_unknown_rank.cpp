// Values whose shape inference cannot fully type, and the converters that go on
// with them. timm's VOLO (issue 56) killed the process: col2im over a dynamic
// batch reshaped to a computed shape, inference left that value's rank unknown,
// and layout::pad read the empty optional shape. Here: the rank a computed
// shape still gives, an unknown rank read as an error, inference that refuses
// an axis past the shape, and col2im over a symbolic batch converted whole.
#include <gtest/gtest.h>

#include <string>

#include "ir/builder.h"
#include "opt/passes.h"
#include "pt2onnx/error.h"
#include "pt2onnx/pt2onnx.h"

using namespace pt2onnx;

namespace {

ValueType f32(std::initializer_list<Dim> dims) { return ValueType{DType::Float, Shape(dims)}; }

// [batch] ++ rest: a shape computed at run time, as layout::shape_of makes one.
std::string computed_shape(GraphBuilder& b, const std::string& x, std::vector<int64_t> rest) {
  std::string batch = b.op("Shape", {x}, {Attr::Int("start", 0), Attr::Int("end", 1)});
  return b.op("Concat", {batch, b.const_i64(rest)}, {Attr::Int("axis", 0)});
}

// Expects `f` to throw pt2onnx::Error whose message contains `part`.
template <class F>
void expect_error(F f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(UnknownRank, ReshapeToAComputedShapeKeepsItsRank) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::symbol("batch"), Dim::of(36), Dim::of(9)}));
  std::string r = b.op("Reshape", {"x", computed_shape(b, "x", {4, 9, 3, 3})});
  EXPECT_EQ(b.rank(r), 5u);
  for (const Dim& d : b.shape(r)) EXPECT_TRUE(d.is_unknown());
}

TEST(UnknownRank, ExpandToAComputedShapeKeepsItsRankAndStaticDims) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(1), Dim::of(5)}));
  b.add_input("y", f32({Dim::symbol("batch"), Dim::of(2)}));
  std::string e = b.op("Expand", {"x", computed_shape(b, "y", {1, 1})});
  // A static dim above 1 stays: the target's must be 1 or 5 there.
  EXPECT_EQ(b.shape(e), (Shape{Dim::unknown(), Dim::unknown(), Dim::of(5)}));
}

TEST(UnknownRank, ReadingAnUnknownRankIsAnError) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(2)}));
  std::string s = b.op("Shape", {"x"});
  // A shape input whose own length is unknown: no rank to give.
  std::string r = b.op("Reshape", {"x", b.op("NonZero", {s})});
  EXPECT_FALSE(b.type(r).shape);
  expect_error([&] { (void)b.shape(r); }, "rank of value '" + r + "' is unknown");
  expect_error([&] { (void)b.rank(r); }, "is unknown");
}

// An axis past the shape (a converter's bug, or a crafted program's sizes) is an
// error naming the op; it was an index past the vector (UBSan: "applying
// non-zero offset to null pointer" in infer_slice on VOLO's program).
TEST(UnknownRank, InferenceRefusesAxesPastTheShape) {
  GraphBuilder b(18);
  b.add_input("s", f32({}));
  b.add_input("x", f32({Dim::of(3)}));
  auto i64 = [&](std::vector<int64_t> v) { return b.const_i64(v); };
  expect_error(
      [&] {
        b.op("Slice", {"s", i64({0}), i64({1}), i64({2})});
      },
      "Slice axis 2 is out of range for rank 0");
  expect_error(
      [&] {
        b.op("Slice", {"x", i64({0, 0}), i64({1, 1})});
      },
      "Slice of 2 axes of a value of rank 1");
  expect_error([&] { b.op("Slice", {"x", i64({0}), i64({1, 2})}); }, "different lengths");
  expect_error([&] { b.op("Unsqueeze", {"x", i64({3})}); }, "Unsqueeze axis 3");
  expect_error([&] { b.op("Transpose", {"x"}, {Attr::Ints("perm", {1})}); }, "Transpose axis 1");
  expect_error(
      [&] {
        b.op("Transpose", {"x"}, {Attr::Ints("perm", {0, 1})});
      },
      "perm of 2 axes for rank 1");
  expect_error([&] { b.op("Gather", {"x", i64({0})}, {Attr::Int("axis", -2)}); }, "Gather axis -2");
  expect_error([&] { b.op("Concat", {"x", "x"}, {Attr::Int("axis", 1)}); }, "Concat axis 1");
  expect_error([&] { b.op("Gemm", {"x", "x"}); }, "Gemm of operands of rank 1 and 1");
  // In range, negative axes included, inference still types the values.
  EXPECT_EQ(b.shape(b.op("Unsqueeze", {"x", i64({-1})})), (Shape{Dim::of(3), Dim::of(1)}));
  EXPECT_EQ(b.shape(b.op("Slice", {"x", i64({1}), i64({3}), i64({-1})})), (Shape{Dim::of(2)}));
}

namespace {

// aten.col2im (F.fold) of x: [batch, 36, blocks] to [batch, 4, 6, 6], kernel 3,
// padding 1, the batch symbolic as torch.export writes it: the smallest program
// that crashed the core (VOLO's outlook attention folds so, at stride 2).
std::string col2im_program(int64_t stride, int64_t blocks) {
  std::string p = R"({"schema_version": {"major": 8, "minor": 20}, "graph_module": {"graph": {
    "inputs": [{"as_tensor": {"name": "x"}}], "outputs": [{"as_tensor": {"name": "y"}}],
    "nodes": [{"target": "torch.ops.aten.col2im.default", "name": "y", "inputs": [
      {"name": "self", "arg": {"as_tensor": {"name": "x"}}, "kind": 1},
      {"name": "output_size", "arg": {"as_ints": [6, 6]}, "kind": 1},
      {"name": "kernel_size", "arg": {"as_ints": [3, 3]}, "kind": 1},
      {"name": "dilation", "arg": {"as_ints": [1, 1]}, "kind": 1},
      {"name": "padding", "arg": {"as_ints": [1, 1]}, "kind": 1},
      {"name": "stride", "arg": {"as_ints": [@S@, @S@]}, "kind": 1}],
      "outputs": [{"as_tensor": {"name": "y"}}], "metadata": {}}],
    "tensor_values": {
      "x": {"dtype": 7, "sizes": [@B@, {"as_int": 36}, {"as_int": @L@}]},
      "y": {"dtype": 7, "sizes": [@B@, {"as_int": 4}, {"as_int": 6}, {"as_int": 6}]}}},
    "signature": {"input_specs": [{"user_input": {"arg": {"as_tensor": {"name": "x"}}}}],
                  "output_specs": [{"user_output": {"arg": {"as_tensor": {"name": "y"}}}}]},
    "module_call_graph": []},
    "range_constraints": {"s77": {"min_val": 2, "max_val": null}}})";
  const std::string batch =
      R"j({"as_expr": {"expr_str": "Symbol('s77', positive=True, integer=True)", )j"
      R"j("hint": {"as_int": 2}}})j";
  for (auto [key, value] : {std::pair<std::string, std::string>{"@S@", std::to_string(stride)},
                            {"@L@", std::to_string(blocks)},
                            {"@B@", batch}})
    for (size_t at; (at = p.find(key)) != std::string::npos;) p.replace(at, key.size(), value);
  return p;
}

}  // namespace

TEST(UnknownRank, Col2imOverASymbolicBatchConverts) {
  Options o;
  o.in_memory = true;
  // kernel 3, padding 1 over 6 x 6: 9 blocks at stride 2 (VOLO's), 36 at stride 1.
  for (auto [stride, blocks] : {std::pair<int64_t, int64_t>{2, 9}, {1, 36}}) {
    SCOPED_TRACE("stride " + std::to_string(stride));
    Result r = convert_program(col2im_program(stride, blocks), Weights{}, "unused.onnx", o);
    EXPECT_GT(r.nodes, 0u);
    EXPECT_NE(r.model_bytes.find("Pad"), std::string::npos);
  }
}

// An Unsqueeze repeating an axis, or a Cast without its type: errors naming the
// op, where inference read past the shape or a missing attribute.
TEST(UnknownRank, InferenceRefusesRepeatedAxesAndMissingAttributes) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(3)}));
  expect_error([&] { b.op("Unsqueeze", {"x", b.const_i64({0, 0})}); }, "Unsqueeze axis 0 repeated");
  expect_error([&] { b.op("Cast", {"x"}); }, "Cast without its 'to'");
}

// Constant folding leaves an invalid node as it is (the checker names it):
// it wrote past its axis table (Unsqueeze of an axis out of range), read past
// the input's dims (Reshape's 0 past them) and stored dims that do not hold
// the elements (a Reshape to another count: the writer read past the bytes).
TEST(UnknownRank, FoldingLeavesInvalidShapeOpsAlone) {
  auto folded = [](const std::string& op, std::vector<int64_t> arg) {
    GraphBuilder b(18);
    std::string c = b.const_i64({1, 2, 3, 4, 5, 6});
    std::string y = b.op(op, {c, b.const_i64(arg)}, {}, ValueType{DType::Int64, std::nullopt});
    // Read by a node that does not fold (a graph output stays computed).
    std::string z = b.op("Neg", {y}, {}, ValueType{DType::Int64, std::nullopt});
    b.add_output(z, b.type(z));
    Graph g = b.take();
    fold_constants(g);
    return g.nodes.size() == 1;
  };
  EXPECT_TRUE(folded("Reshape", {2, -1}));
  EXPECT_TRUE(folded("Unsqueeze", {0}));
  EXPECT_FALSE(folded("Reshape", {7}));
  EXPECT_FALSE(folded("Reshape", {0, 0, 2}));
  EXPECT_FALSE(folded("Reshape", {-1, -1}));
  EXPECT_FALSE(folded("Unsqueeze", {5}));
  EXPECT_FALSE(folded("Unsqueeze", {0, 0}));
}
