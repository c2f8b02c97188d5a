// convert_float16: float32 values, weights and attributes to float16 /
// bfloat16, with float32 islands around the precision-sensitive ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ir/builder.h"
#include "opt/passes.h"

using namespace pt2onnx;

namespace {
ValueType f32(std::initializer_list<Dim> dims) { return ValueType{DType::Float, Shape(dims)}; }

const Node* producer(const Graph& g, const std::string& v) {
  for (auto& n : g.nodes)
    for (auto& o : n.outputs)
      if (o == v) return &n;
  return nullptr;
}

const Node* find_op(const Graph& g, const std::string& op) {
  for (auto& n : g.nodes)
    if (n.op_type == op) return &n;
  return nullptr;
}

size_t count_op(const Graph& g, const std::string& op) {
  size_t k = 0;
  for (auto& n : g.nodes) k += n.op_type == op;
  return k;
}

const Initializer* find_init(const Graph& g, const std::string& name) {
  for (auto& i : g.initializers)
    if (i.name == name) return &i;
  return nullptr;
}

DType type_of(const Graph& g, const std::string& v) {
  const ValueType* t = g.type_of(v);
  return t ? t->dtype : DType::Undefined;
}

int64_t cast_to(const Node& n) { return n.attr("to")->i; }
}  // namespace

// y = x @ W + b: the weights' bytes and the graph's inputs / outputs become
// float16 (values rounded to nearest; beyond float16's range clamped).
TEST(ConvertFloat16, InitializerAndGraphIO) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::symbol("n"), Dim::of(2)}));
  std::string w = b.initializer(
      "w",
      TensorData::from_vector(DType::Float, {2, 2}, std::vector<float>{1.0f, -2.5f, 1e6f, 0.1f}));
  std::string y = b.op("MatMul", {"x", w});
  b.add_output(y, b.type(y));
  Graph g = b.take();
  run_default_passes(g, PassOptions{18, Target::Standard, DType::Float16});

  const Initializer* init = find_init(g, "w");
  ASSERT_NE(init, nullptr);
  EXPECT_EQ(init->data.dtype, DType::Float16);
  ASSERT_EQ(init->data.nbytes(), 8u);
  const uint16_t* h = init->data.as<uint16_t>();
  EXPECT_EQ(half_to_float(h[0]), 1.0f);
  EXPECT_EQ(half_to_float(h[1]), -2.5f);
  EXPECT_EQ(half_to_float(h[2]), 65504.0f);  // clamped, not inf
  EXPECT_EQ(h[3], float_to_half(0.1f));
  EXPECT_EQ(g.inputs[0].type.dtype, DType::Float16);
  EXPECT_EQ(g.outputs[0].type.dtype, DType::Float16);
  EXPECT_EQ(type_of(g, y), DType::Float16);
  EXPECT_EQ(count_op(g, "Cast"), 0u);  // nothing here needs float32
}

// Without the option the pass does not run: the float32 graph is untouched.
TEST(ConvertFloat16, Float32LeavesGraphAlone) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(2)}));
  std::string w =
      b.initializer("w", TensorData::from_vector(DType::Float, {2}, std::vector<float>{1, 2}));
  std::string y = b.op("Mul", {"x", w});
  b.add_output(y, b.type(y));
  Graph g = b.take();
  run_default_passes(g);
  EXPECT_EQ(find_init(g, "w")->data.dtype, DType::Float);
  EXPECT_EQ(g.inputs[0].type.dtype, DType::Float);
}

// A hand-written RMS norm: Mul(x, x) -> ReduceMean -> Add(eps) -> Sqrt ->
// Reciprocal computes in float32 (x cast once); the normalization Mul(x, r)
// and the weight Mul stay float16, r cast back.
TEST(ConvertFloat16, NormStatisticsStayFloat32) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::symbol("n"), Dim::of(4)}));
  std::string sq = b.op("Mul", {"x", "x"});
  std::string mean = b.op("ReduceMean", {sq, b.const_i64({-1})}, {Attr::Int("keepdims", 1)});
  std::string var = b.op("Add", {mean, b.scalar(DType::Float, 1e-6)});
  std::string r = b.op("Reciprocal", {b.op("Sqrt", {var})});
  std::string normed = b.op("Mul", {"x", r});
  std::string w = b.initializer(
      "w", TensorData::from_vector(DType::Float, {4}, std::vector<float>{1, 2, 3, 4}));
  std::string y = b.op("Mul", {w, normed});
  b.add_output(y, b.type(y));
  Graph g = b.take();
  run_default_passes(g, PassOptions{18, Target::Standard, DType::Float16});

  for (const std::string& v : {sq, mean, var, r}) EXPECT_EQ(type_of(g, v), DType::Float) << v;
  EXPECT_EQ(type_of(g, normed), DType::Float16);
  EXPECT_EQ(type_of(g, y), DType::Float16);
  // x -> float32 once, for the Mul(x, x); r -> float16 once, for Mul(x, r).
  ASSERT_EQ(count_op(g, "Cast"), 2u);
  const Node* square = producer(g, sq);
  ASSERT_NE(square, nullptr);
  const Node* up = producer(g, square->inputs[0]);
  ASSERT_TRUE(up && up->op_type == "Cast");
  EXPECT_EQ(up->inputs[0], "x");
  EXPECT_EQ(cast_to(*up), static_cast<int64_t>(DType::Float));
  EXPECT_EQ(square->inputs[1], square->inputs[0]);
  const Node* mul = producer(g, normed);
  EXPECT_EQ(mul->inputs[0], "x");
  const Node* down = producer(g, mul->inputs[1]);
  ASSERT_TRUE(down && down->op_type == "Cast");
  EXPECT_EQ(down->inputs[0], r);
  EXPECT_EQ(cast_to(*down), static_cast<int64_t>(DType::Float16));
  // eps is read only inside the island: it stays a float32 constant.
  const Node* add = producer(g, var);
  const Initializer* eps = find_init(g, add->inputs[1]);
  ASSERT_NE(eps, nullptr);
  EXPECT_EQ(eps->data.dtype, DType::Float);
  // The weight is float16.
  EXPECT_EQ(find_init(g, "w")->data.dtype, DType::Float16);
}

// A graph output computed in float32 (Softmax) keeps its name, as float16,
// through a Cast; the fused LayerNormalization gets stash_type = 1.
TEST(ConvertFloat16, SoftmaxOutputAndLayerNorm) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::symbol("n"), Dim::of(4)}));
  std::string scale = b.initializer(
      "scale", TensorData::from_vector(DType::Float, {4}, std::vector<float>{1, 1, 1, 1}));
  std::string ln =
      b.op("LayerNormalization", {"x", scale}, {Attr::Int("axis", -1), Attr::Int("stash_type", 0)});
  std::string sm = b.op("Softmax", {ln}, {Attr::Int("axis", -1)});
  b.add_output(sm, b.type(sm));
  Graph g = b.take();
  run_default_passes(g, PassOptions{18, Target::Standard, DType::Float16});

  const Node* norm = find_op(g, "LayerNormalization");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->attr("stash_type")->i, 1);
  EXPECT_EQ(type_of(g, ln), DType::Float16);
  ASSERT_EQ(g.outputs[0].name, sm);
  EXPECT_EQ(g.outputs[0].type.dtype, DType::Float16);
  const Node* out = producer(g, sm);
  ASSERT_TRUE(out && out->op_type == "Cast");
  EXPECT_EQ(cast_to(*out), static_cast<int64_t>(DType::Float16));
  const Node* softmax = producer(g, out->inputs[0]);
  ASSERT_TRUE(softmax && softmax->op_type == "Softmax");
  EXPECT_EQ(type_of(g, out->inputs[0]), DType::Float);
  const Node* in = producer(g, softmax->inputs[0]);
  ASSERT_TRUE(in && in->op_type == "Cast");
  EXPECT_EQ(in->inputs[0], ln);
}

// Cast(to=float) of a float16-bound value is rewritten to the target type;
// a Cast of integers to float stays float32 (positions) with its consumers
// that only compute from it; ConstantOfShape's float value becomes bfloat16
// (opset 21: ConstantOfShape has bfloat16 from 20).
TEST(ConvertFloat16, CastTargetsAndConstants) {
  GraphBuilder b(21);
  b.add_input("x", f32({Dim::of(3)}));
  b.add_input("i", ValueType{DType::Int64, Shape{Dim::of(3)}});
  b.add_input("h", ValueType{DType::Float16, Shape{Dim::of(3)}});
  std::string hx = b.op("Cast", {"h"}, {Attr::Int("to", 1)}, f32({Dim::of(3)}));
  std::string pos = b.op("Cast", {"i"}, {Attr::Int("to", 1)}, f32({Dim::of(3)}));
  std::string angle = b.op("Cos", {b.op("Mul", {pos, b.scalar(DType::Float, 0.5)})});
  std::string zeros = b.op(
      "ConstantOfShape", {b.const_i64({3})},
      {Attr::Tensor("value", TensorData::from_vector(DType::Float, {1}, std::vector<float>{2.f}))},
      f32({Dim::of(3)}));
  std::string y = b.op("Add", {b.op("Mul", {b.op("Add", {"x", hx}), angle}), zeros});
  b.add_output(y, b.type(y));
  Graph g = b.take();
  run_default_passes(g, PassOptions{21, Target::Standard, DType::BFloat16});

  const Node* c = producer(g, hx);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(cast_to(*c), static_cast<int64_t>(DType::BFloat16));
  EXPECT_EQ(type_of(g, hx), DType::BFloat16);
  const Node* p = producer(g, pos);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(cast_to(*p), static_cast<int64_t>(DType::Float));
  EXPECT_EQ(type_of(g, pos), DType::Float);
  EXPECT_EQ(type_of(g, angle), DType::Float);
  const Node* k = producer(g, zeros);
  ASSERT_TRUE(k && k->op_type == "ConstantOfShape");
  const Attr* v = k->attr("value");
  ASSERT_TRUE(v && v->t);
  EXPECT_EQ(v->t->dtype, DType::BFloat16);
  EXPECT_EQ(bfloat16_to_float(v->t->as<uint16_t>()[0]), 2.f);
  EXPECT_EQ(g.outputs[0].type.dtype, DType::BFloat16);
}

// Range has no float16 form before opset 27: it computes in float32.
TEST(ConvertFloat16, OpWithoutFloat16StaysFloat32) {
  GraphBuilder b(18);
  b.add_input("x", f32({}));
  std::string r = b.op("Range", {b.scalar(DType::Float, 0), "x", b.scalar(DType::Float, 1)}, {},
                       ValueType{DType::Float, Shape{Dim::symbol("k")}});
  std::string y = b.op("Neg", {r});
  b.add_output(y, b.type(y));
  Graph g = b.take();
  run_default_passes(g, PassOptions{18, Target::Standard, DType::Float16});
  EXPECT_EQ(type_of(g, r), DType::Float);
  const Node* range = find_op(g, "Range");
  ASSERT_NE(range, nullptr);
  EXPECT_EQ(type_of(g, range->inputs[1]), DType::Float);  // x cast to float32
  EXPECT_NE(range->inputs[1], "x");
  // The graph output keeps its name, float16, cast from the Neg grown
  // forwards into the island.
  ASSERT_EQ(g.outputs[0].name, y);
  EXPECT_EQ(g.outputs[0].type.dtype, DType::Float16);
  EXPECT_EQ(type_of(g, y), DType::Float16);
  const Node* out = producer(g, y);
  ASSERT_TRUE(out && out->op_type == "Cast");
  const Node* neg = producer(g, out->inputs[0]);
  ASSERT_TRUE(neg && neg->op_type == "Neg");
  EXPECT_EQ(type_of(g, out->inputs[0]), DType::Float);
}

// Model-local functions: each body converted as a graph typed from the values
// it stood for (run_on_function_bodies), then the main graph, whose call is a
// node of another domain; every float crossing the call is float16 on both
// sides, the body's constant included.
TEST(ConvertFloat16, ModelLocalFunctionsConvertedBodyAndCaller) {
  Graph g;
  const ValueType t = f32({Dim::of(2), Dim::of(3)});
  g.inputs.push_back(GraphIO{"x", t});
  g.types["x"] = t;
  g.types["h"] = t;
  g.types["y"] = t;
  g.types["k"] = f32({});
  g.types["m"] = t;
  Node call;
  call.op_type = "F";
  call.domain = "pkg";
  call.name = "call";
  call.inputs = {"x"};
  call.outputs = {"y"};
  g.nodes.push_back(call);
  g.outputs.push_back(GraphIO{"y", t});
  g.domain_versions["pkg"] = 1;
  Function f;
  f.domain = "pkg";
  f.name = "F";
  f.inputs = {"x"};
  f.outputs = {"y"};
  f.opset_imports[""] = 18;
  Node k;
  k.op_type = "Constant";
  k.name = "k";
  k.outputs = {"k"};
  k.attrs.push_back(Attr::Tensor("value", *TensorData::scalar(DType::Float, 2.0)));
  Node mul;
  mul.op_type = "Mul";
  mul.name = "mul";
  mul.inputs = {"x", "k"};
  mul.outputs = {"m"};
  Node relu;
  relu.op_type = "Relu";
  relu.name = "relu";
  relu.inputs = {"m"};
  relu.outputs = {"y"};
  f.nodes = {k, mul, relu};
  g.functions.push_back(f);

  run_on_function_bodies(g, [](Graph& body) { return convert_float16(body, DType::Float16, 18); });
  convert_float16(g, DType::Float16, 18);
  EXPECT_EQ(g.inputs[0].type.dtype, DType::Float16);
  EXPECT_EQ(g.outputs[0].type.dtype, DType::Float16);
  const Function& body = g.functions[0];
  auto constant = std::find_if(body.nodes.begin(), body.nodes.end(),
                               [](const Node& n) { return n.op_type == "Constant"; });
  ASSERT_NE(constant, body.nodes.end());
  EXPECT_EQ(constant->attr("value")->t->dtype, DType::Float16);
  // Nothing to cast: the body computes in float16 from its float16 input.
  EXPECT_EQ(std::count_if(body.nodes.begin(), body.nodes.end(),
                          [](const Node& n) { return n.op_type == "Cast"; }),
            0);
  EXPECT_EQ(body.outputs, std::vector<std::string>{"y"});
}

// Resize's scales are tensor(float) whatever X's type: a scales initializer
// stays float32, a scales value computed in float16 is cast back.
TEST(ConvertFloat16, ResizeScalesStayFloat32) {
  GraphBuilder b(18);
  b.add_input("x", f32({Dim::of(1), Dim::of(1), Dim::of(2), Dim::of(2)}));
  b.add_input("s", f32({Dim::of(4)}));
  std::string scales = b.initializer(
      "scales", TensorData::from_vector(DType::Float, {4}, std::vector<float>{1, 1, 2, 2}));
  ValueType out = f32({Dim::of(1), Dim::of(1), Dim::of(4), Dim::of(4)});
  std::string y = b.op("Resize", {"x", "", scales}, {}, out);
  std::string z = b.op("Resize", {"x", "", "s"}, {}, out);
  b.add_output(y, out);
  b.add_output(z, out);
  Graph g = b.take();
  run_default_passes(g, PassOptions{18, Target::Standard, DType::Float16});
  EXPECT_EQ(find_init(g, "scales")->data.dtype, DType::Float);
  const Node* ry = producer(g, y);
  ASSERT_TRUE(ry && ry->op_type == "Resize");
  EXPECT_EQ(ry->inputs[0], "x");
  EXPECT_EQ(ry->inputs[2], "scales");
  EXPECT_EQ(type_of(g, y), DType::Float16);
  const Node* rz = producer(g, z);
  ASSERT_TRUE(rz && rz->op_type == "Resize");
  const Node* c = producer(g, rz->inputs[2]);
  ASSERT_TRUE(c && c->op_type == "Cast");
  EXPECT_EQ(c->inputs[0], "s");
  EXPECT_EQ(cast_to(*c), static_cast<int64_t>(DType::Float));
  EXPECT_EQ(g.inputs[1].type.dtype, DType::Float16);
}

// Lazily converted weights (TensorData::stored): what the writer streams
// (rows as stored, converted) equals what bytes() materializes, which
// equals converting each element, for a contiguous and a transposed view.
TEST(LazyWeights, StreamedRowsEqualMaterializedAndElementwise) {
  std::vector<uint16_t> bf(6 * 4);
  for (size_t i = 0; i < bf.size(); ++i)
    bf[i] = pt2onnx::float_to_bfloat16(static_cast<float>(i) * 0.37f - 3.0f +
                                       (i == 5 ? 1e6f : 0.0f));  // one beyond float16's range
  for (bool transposed : {false, true}) {
    pt2onnx::TensorData t;
    t.dtype = pt2onnx::DType::Float16;
    t.stored = pt2onnx::DType::BFloat16;
    t.data = reinterpret_cast<const uint8_t*>(bf.data());
    t.dims = transposed ? std::vector<int64_t>{4, 6} : std::vector<int64_t>{6, 4};
    if (transposed) t.strides = {1, 4};
    ASSERT_TRUE(t.lazy());
    // Streamed: stored rows, then converted (the writer's path).
    std::vector<uint16_t> rows(24), streamed(24);
    t.copy_stored_rows(0, t.dims[0], reinterpret_cast<uint8_t*>(rows.data()));
    pt2onnx::convert_floats(reinterpret_cast<const uint8_t*>(rows.data()), pt2onnx::DType::BFloat16,
                            reinterpret_cast<uint8_t*>(streamed.data()), pt2onnx::DType::Float16,
                            24);
    EXPECT_TRUE(t.lazy());  // streaming did not materialize it
    std::vector<uint8_t> whole = t.contiguous_copy();
    EXPECT_FALSE(t.lazy());
    ASSERT_EQ(whole.size(), 48u);
    EXPECT_EQ(std::memcmp(whole.data(), streamed.data(), 48), 0);
    for (int64_t r = 0; r < t.dims[0]; ++r)
      for (int64_t c = 0; c < t.dims[1]; ++c) {
        const size_t src =
            transposed ? static_cast<size_t>(c * 4 + r) : static_cast<size_t>(r * 4 + c);
        float f = pt2onnx::bfloat16_to_float(bf[src]);
        uint16_t want = pt2onnx::float_to_half(std::clamp(f, -65504.0f, 65504.0f));
        EXPECT_EQ(streamed[static_cast<size_t>(r * t.dims[1] + c)], want) << r << "," << c;
      }
  }
}

// convert_floats' vector path (F16C where the CPU has it) gives float_to_half's
// results after the +-65504 clamp for every bfloat16 value (NaNs, infinities,
// subnormals, the range edges) and for float32 values around float16's edges.
TEST(ConvertFloats, EveryBFloat16AndFloatEdgesMatchScalar) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<uint16_t> got(all.size());
  pt2onnx::convert_floats(reinterpret_cast<const uint8_t*>(all.data()), pt2onnx::DType::BFloat16,
                          reinterpret_cast<uint8_t*>(got.data()), pt2onnx::DType::Float16,
                          all.size());
  auto reference = [](float f) {
    if (std::isfinite(f)) f = std::clamp(f, -65504.0f, 65504.0f);
    return pt2onnx::float_to_half(f);
  };
  for (size_t i = 0; i < all.size(); ++i)
    ASSERT_EQ(got[i], reference(pt2onnx::bfloat16_to_float(all[i]))) << "bf16 bits " << i;

  std::vector<float> f;
  for (float base : {65504.0f, 65519.0f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f, 6.1e-5f, 1.0f})
    for (int k = -40; k <= 40; ++k) {
      f.push_back(std::nextafter(base, 0.0f) + static_cast<float>(k) * base * 1e-7f);
      f.push_back(-f.back());
    }
  f.push_back(std::numeric_limits<float>::infinity());
  f.push_back(-std::numeric_limits<float>::infinity());
  f.push_back(std::numeric_limits<float>::quiet_NaN());
  f.push_back(1e30f);
  std::vector<uint16_t> h(f.size());
  pt2onnx::convert_floats(reinterpret_cast<const uint8_t*>(f.data()), pt2onnx::DType::Float,
                          reinterpret_cast<uint8_t*>(h.data()), pt2onnx::DType::Float16, f.size());
  for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(h[i], reference(f[i])) << f[i];
}

// Transposed views (what fold_weight_transpose makes) copied out through the
// vector blocks and their remainders equal an element-by-element copy, for
// 2- and 4-byte elements and sizes that are not multiples of the blocks.
TEST(StridedCopy, TransposedViewsMatchElementwise) {
  for (size_t es : {2u, 4u})
    for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 1}, {7, 9}, {8, 8}, {64, 64}, {65, 130}, {200, 3}, {3, 200}}) {
      std::vector<uint8_t> src(static_cast<size_t>(rows * cols) * es);
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + i / 7);
      pt2onnx::TensorData t;
      t.dtype = es == 2 ? pt2onnx::DType::Float16 : pt2onnx::DType::Float;
      t.data = src.data();
      t.dims = {rows, cols};
      t.strides = {1, rows};  // the transpose of a [cols, rows] tensor
      std::vector<uint8_t> got = t.contiguous_copy();
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          ASSERT_EQ(std::memcmp(got.data() + static_cast<size_t>(i * cols + j) * es,
                                src.data() + static_cast<size_t>(j * rows + i) * es, es),
                    0)
              << es << " " << rows << "x" << cols << " at " << i << "," << j;
    }
}

// bfloat16 -> float32 (a bfloat16 checkpoint read by a float32 model): every
// value exact, NaN payloads included.
TEST(ConvertFloats, EveryBFloat16ToFloatIsExact) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<uint32_t> got(all.size());
  pt2onnx::convert_floats(reinterpret_cast<const uint8_t*>(all.data()), pt2onnx::DType::BFloat16,
                          reinterpret_cast<uint8_t*>(got.data()), pt2onnx::DType::Float,
                          all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    float f = pt2onnx::bfloat16_to_float(all[i]);
    uint32_t want;
    std::memcpy(&want, &f, 4);
    ASSERT_EQ(got[i], want) << i;
  }
}
