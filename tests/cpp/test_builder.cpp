// GraphBuilder: names, constant dedup, type inference.
#include <gtest/gtest.h>

#include "ir/builder.h"
#include "pt2onnx/error.h"

using namespace pt2onnx;

namespace {
ValueType f32(std::initializer_list<Dim> dims) { return ValueType{DType::Float, Shape(dims)}; }
}  // namespace

TEST(GraphBuilder, UniqueNamesAvoidReserved) {
  GraphBuilder b(18);
  b.reserve_name("linear");
  EXPECT_NE(b.fresh_name("linear"), "linear");
  EXPECT_EQ(b.fresh_name("other"), "other");
  EXPECT_NE(b.fresh_name("other"), "other");
}

TEST(GraphBuilder, SmallConstantsAreShared) {
  GraphBuilder b(18);
  std::string a = b.const_i64({1, 2, 3});
  std::string c = b.const_i64({1, 2, 3});
  std::string d = b.const_i64({1, 2});
  EXPECT_EQ(a, c);
  EXPECT_NE(a, d);
  EXPECT_EQ(b.graph().initializers.size(), 2u);
  EXPECT_EQ(b.const_ints(a), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(b.scalar(DType::Float, 0.5), b.scalar(DType::Float, 0.5));
}

TEST(GraphBuilder, InfersSymbolicShapes) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::symbol("batch"), Dim::of(1), Dim::of(8)}));
  b.add_input("y", f32({Dim::of(5), Dim::of(8)}));
  std::string s = b.op("Add", {"x", "y"});
  EXPECT_EQ(*b.type(s).shape, (Shape{Dim::symbol("batch"), Dim::of(5), Dim::of(8)}));
  std::string t = b.op("Transpose", {s}, {Attr::Ints("perm", {2, 0, 1})});
  EXPECT_EQ(*b.type(t).shape, (Shape{Dim::of(8), Dim::symbol("batch"), Dim::of(5)}));
  std::string r = b.op("Reshape", {s, b.const_i64({0, -1})});
  EXPECT_EQ(b.type(r).shape->at(0), Dim::symbol("batch"));
  EXPECT_TRUE(b.type(r).shape->at(1).is_unknown());
  std::string m = b.op("MatMul", {s, b.op("Transpose", {"y"}, {Attr::Ints("perm", {1, 0})})});
  EXPECT_EQ(*b.type(m).shape, (Shape{Dim::symbol("batch"), Dim::of(5), Dim::of(5)}));
  std::string sh = b.op("Shape", {"x"}, {Attr::Int("start", 1)});
  EXPECT_EQ(*b.type(sh).shape, (Shape{Dim::of(2)}));
  std::string c = b.op("Cast", {sh}, {Attr::Int("to", static_cast<int64_t>(DType::Float))});
  EXPECT_EQ(b.type(c).dtype, DType::Float);
  std::string eq = b.op("Equal", {"x", "y"});
  EXPECT_EQ(b.type(eq).dtype, DType::Bool);
}

TEST(GraphBuilder, RejectsUndefinedInputs) {
  GraphBuilder b(18);
  EXPECT_THROW(b.op("Relu", {"nope"}), Error);
}

TEST(GraphBuilder, StampsOrigin) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(2)}));
  b.set_origin("relu_3", "torch.ops.aten.relu.default", "encoder.layers.0");
  b.op("Relu", {"x"});
  const Node& n = b.graph().nodes.back();
  EXPECT_EQ(n.module_path(), "encoder.layers.0");
  EXPECT_EQ(n.fx_node(), "relu_3");
  EXPECT_EQ(n.fx_target(), "torch.ops.aten.relu.default");
  EXPECT_EQ(n.name, "relu_3/Relu");
  // The nodes of one FX node share one origin.
  b.op("Neg", {"x"});
  EXPECT_EQ(b.graph().nodes.back().origin, b.graph().nodes.front().origin);
}

TEST(DTypes, TorchPromotion) {
  // tensor(int64) + 2.5 -> float32 (default dtype); tensor(f16) + 2.5 -> f16
  EXPECT_EQ(promote_types(DType::Int64, 2, DType::Double, 0), DType::Float);
  EXPECT_EQ(promote_types(DType::Float16, 2, DType::Double, 0), DType::Float16);
  // zero-dim tensors do not raise a dimensioned tensor's type in the same category
  EXPECT_EQ(promote_types(DType::Float, 2, DType::Double, 1), DType::Float);
  EXPECT_EQ(promote_types(DType::Int32, 2, DType::Float, 1), DType::Float);
  EXPECT_EQ(promote_types(DType::UInt8, 2, DType::Int8, 2), DType::Int16);
  EXPECT_EQ(promote_types(DType::Bool, 2, DType::Int64, 0), DType::Int64);
  EXPECT_EQ(promote_types(DType::Float16, 2, DType::BFloat16, 2), DType::Float);
  EXPECT_EQ(dtype_from_schema(7), DType::Float);
  EXPECT_EQ(dtype_from_schema(13), DType::BFloat16);
  EXPECT_EQ(dtype_from_schema(99), DType::Undefined);
}
