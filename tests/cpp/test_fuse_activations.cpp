// Activation and MatMul fusions: fuse_gelu, fuse_gemm, fuse_matmul_transpose,
// unflatten_gemm, read_weights_transposed.
// Each pattern fused (op, attributes, inputs checked), each
// near miss left alone.
#include <gtest/gtest.h>

#include <cmath>

#include "ir/builder.h"
#include "opt/passes.h"

using namespace pt2onnx;

namespace {

ValueType f32(std::initializer_list<Dim> dims) { return ValueType{DType::Float, Shape(dims)}; }
ValueType f32s(std::initializer_list<int64_t> dims) {
  Shape s;
  for (auto d : dims) s.push_back(Dim::of(d));
  return ValueType{DType::Float, s};
}

const PassOptions kStd18{18, Target::Standard};
const PassOptions kStd20{20, Target::Standard};
const PassOptions kOrt18{18, Target::OnnxRuntime};

const Node* find_op(const Graph& g, const std::string& op) {
  for (auto& n : g.nodes)
    if (n.op_type == op) return &n;
  return nullptr;
}
size_t count_op(const Graph& g, const std::string& op) {
  size_t c = 0;
  for (auto& n : g.nodes) c += n.op_type == op;
  return c;
}

// Runs one fusion, then drops what it left dead.
size_t fuse(Graph& g, FusionPass pass, const PassOptions& o) {
  size_t n = pass(g, o);
  remove_unused(g);
  return n;
}

struct Gelu {
  GraphBuilder b{18};
  std::string x = "x";
  Gelu() { b.add_input("x", f32({Dim::symbol("batch"), Dim::of(8)})); }
  std::string k(double v) { return b.scalar(DType::Float, v); }
  std::string mul(const std::string& a, const std::string& c) { return b.op("Mul", {a, c}); }
  std::string add(const std::string& a, const std::string& c) { return b.op("Add", {a, c}); }
  // 1 + erf(x * 0.7071...), as aten.gelu below opset 20 writes it.
  std::string one_plus_erf(const std::string& v, double c = M_SQRT1_2) {
    return add(b.op("Erf", {mul(v, k(c))}), k(1.0));
  }
  std::string one_plus_tanh(const std::string& v, bool pow) {
    std::string cube = pow ? b.op("Pow", {v, k(3.0)}) : mul(mul(v, v), v);
    std::string inner = add(v, mul(k(0.044715), cube));
    return add(k(1.0), b.op("Tanh", {mul(k(std::sqrt(2.0 / M_PI)), inner)}));
  }
  Graph done(const std::string& y) {
    b.add_output(y, b.type(y));
    return b.take();
  }
};

}  // namespace

// ---- fuse_gelu

TEST(FuseGelu, ConverterErfFormBecomesGeluAt20) {
  Gelu t;
  Graph g = t.done(t.mul(t.mul(t.x, t.k(0.5)), t.one_plus_erf(t.x)));
  Graph g18 = g;
  EXPECT_EQ(fuse(g18, fuse_gelu, kStd18), 0u);  // nothing to emit below 20
  EXPECT_EQ(fuse(g, fuse_gelu, kStd20), 1u);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "Gelu");
  EXPECT_EQ(g.nodes[0].domain, "");
  EXPECT_EQ(g.nodes[0].inputs, std::vector<std::string>{"x"});
  EXPECT_EQ(g.nodes[0].attr("approximate")->s, "none");
  EXPECT_EQ(g.nodes[0].outputs[0], g.outputs[0].name);
}

TEST(FuseGelu, ErfVariants) {
  // 0.5 * x * (1 + erf(x / sqrt 2))
  {
    Gelu t;
    std::string e = t.add(t.k(1.0), t.b.op("Erf", {t.b.op("Div", {t.x, t.k(M_SQRT2)})}));
    Graph g = t.done(t.mul(t.mul(t.k(0.5), t.x), e));
    EXPECT_EQ(fuse(g, fuse_gelu, kStd20), 1u);
    EXPECT_EQ(g.nodes.size(), 1u);
  }
  // 0.5 * (x * (1 + erf))
  {
    Gelu t;
    Graph g = t.done(t.mul(t.k(0.5), t.mul(t.one_plus_erf(t.x), t.x)));
    EXPECT_EQ(fuse(g, fuse_gelu, kStd20), 1u);
    EXPECT_EQ(g.nodes.size(), 1u);
  }
  // x * ((1 + erf) * 0.5)
  {
    Gelu t;
    Graph g = t.done(t.mul(t.x, t.mul(t.one_plus_erf(t.x), t.k(0.5))));
    EXPECT_EQ(fuse(g, fuse_gelu, kStd20), 1u);
    EXPECT_EQ(g.nodes.size(), 1u);
  }
  // (x / 2) * (1 + erf)
  {
    Gelu t;
    Graph g = t.done(t.mul(t.b.op("Div", {t.x, t.k(2.0)}), t.one_plus_erf(t.x)));
    EXPECT_EQ(fuse(g, fuse_gelu, kStd20), 1u);
    EXPECT_EQ(g.nodes.size(), 1u);
  }
}

TEST(FuseGelu, TanhFormsBecomeGeluTanhOrFastGelu) {
  for (bool pow : {true, false}) {
    Gelu t;
    Graph g = t.done(t.mul(t.one_plus_tanh(t.x, pow), t.mul(t.x, t.k(0.5))));
    Graph ort = g;
    EXPECT_EQ(fuse(g, fuse_gelu, kStd20), 1u);
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_EQ(g.nodes[0].op_type, "Gelu");
    EXPECT_EQ(g.nodes[0].attr("approximate")->s, "tanh");
    EXPECT_EQ(fuse(ort, fuse_gelu, kOrt18), 1u);
    ASSERT_EQ(ort.nodes.size(), 1u);
    EXPECT_EQ(ort.nodes[0].op_type, "FastGelu");
    EXPECT_EQ(ort.nodes[0].domain, "com.microsoft");
    EXPECT_EQ(ort.nodes[0].inputs, std::vector<std::string>{"x"});
  }
}

TEST(FuseGelu, OnnxRuntimeTakesTheBias) {
  Gelu t;
  t.b.add_input("y", f32({Dim::symbol("batch"), Dim::of(8)}));
  std::string bias = t.b.initializer(
      "bias", TensorData::from_vector(DType::Float, {8}, std::vector<float>(8, 0.25f)));
  std::string x = t.add("y", bias);
  Graph g = t.done(t.mul(t.mul(x, t.k(0.5)), t.one_plus_erf(x)));
  Graph tanh_g;
  {
    Gelu u;
    u.b.add_input("y", f32({Dim::symbol("batch"), Dim::of(8)}));
    std::string bb = u.b.initializer(
        "bias", TensorData::from_vector(DType::Float, {8}, std::vector<float>(8, 0.25f)));
    std::string xx = u.add(bb, "y");
    tanh_g = u.done(u.mul(u.mul(u.k(0.5), xx), u.one_plus_tanh(xx, true)));
  }
  EXPECT_EQ(fuse(g, fuse_gelu, kOrt18), 1u);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "BiasGelu");
  EXPECT_EQ(g.nodes[0].domain, "com.microsoft");
  EXPECT_EQ(g.nodes[0].inputs, (std::vector<std::string>{"y", "bias"}));
  EXPECT_EQ(fuse(tanh_g, fuse_gelu, kOrt18), 1u);
  ASSERT_EQ(tanh_g.nodes.size(), 1u);
  EXPECT_EQ(tanh_g.nodes[0].op_type, "FastGelu");
  EXPECT_EQ(tanh_g.nodes[0].inputs, (std::vector<std::string>{"y", "bias"}));
}

TEST(FuseGelu, BiasNotTakenWhenAddReadElsewhereOrNotRowBias) {
  // The Add is also a graph output: Gelu(x), the Add stays.
  {
    Gelu t;
    t.b.add_input("y", f32({Dim::symbol("batch"), Dim::of(8)}));
    std::string bias = t.b.initializer(
        "bias", TensorData::from_vector(DType::Float, {8}, std::vector<float>(8, 0.25f)));
    std::string x = t.add("y", bias);
    t.b.add_output(x, t.b.type(x));
    Graph g = t.done(t.mul(t.mul(x, t.k(0.5)), t.one_plus_erf(x)));
    EXPECT_EQ(fuse(g, fuse_gelu, kOrt18), 1u);
    const Node* n = find_op(g, "Gelu");
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->domain, "com.microsoft");
    EXPECT_EQ(n->inputs.size(), 1u);
    EXPECT_NE(find_op(g, "Add"), nullptr);
  }
  // A bias of shape [1] (broadcast, not the last dim): plain Gelu.
  {
    Gelu t;
    t.b.add_input("y", f32({Dim::symbol("batch"), Dim::of(8)}));
    std::string bias =
        t.b.initializer("bias", TensorData::from_vector(DType::Float, {1}, std::vector<float>{1}));
    std::string x = t.add("y", bias);
    Graph g = t.done(t.mul(t.mul(x, t.k(0.5)), t.one_plus_erf(x)));
    EXPECT_EQ(fuse(g, fuse_gelu, kOrt18), 1u);
    EXPECT_EQ(find_op(g, "Gelu")->inputs.size(), 1u);
    EXPECT_EQ(find_op(g, "BiasGelu"), nullptr);
  }
}

TEST(FuseGelu, NearMissesLeftAlone) {
  auto unfused = [](Graph g) {
    size_t n = g.nodes.size();
    EXPECT_EQ(fuse(g, fuse_gelu, kStd20), 0u);
    EXPECT_EQ(fuse(g, fuse_gelu, kOrt18), 0u);
    EXPECT_EQ(g.nodes.size(), n);
  };
  {  // wrong constant: 0.7071 is not sqrt(1/2) to 1e-6
    Gelu t;
    unfused(t.done(t.mul(t.mul(t.x, t.k(0.5)), t.one_plus_erf(t.x, 0.7071))));
  }
  {  // wrong tanh constant
    Gelu t;
    std::string cube = t.b.op("Pow", {t.x, t.k(3.0)});
    std::string inner = t.add(t.x, t.mul(t.k(0.0447), cube));
    std::string th = t.add(t.k(1.0), t.b.op("Tanh", {t.mul(t.k(std::sqrt(2.0 / M_PI)), inner)}));
    unfused(t.done(t.mul(th, t.mul(t.x, t.k(0.5)))));
  }
  {  // 0.5 missing
    Gelu t;
    unfused(t.done(t.mul(t.x, t.one_plus_erf(t.x))));
  }
  {  // 0.5 * y * (1 + erf(x / sqrt 2)): two different values
    Gelu t;
    t.b.add_input("y", f32({Dim::symbol("batch"), Dim::of(8)}));
    unfused(t.done(t.mul(t.mul("y", t.k(0.5)), t.one_plus_erf(t.x))));
  }
  {  // the cube of another value
    Gelu t;
    t.b.add_input("y", f32({Dim::symbol("batch"), Dim::of(8)}));
    std::string inner = t.add(t.x, t.mul(t.k(0.044715), t.b.op("Pow", {"y", t.k(3.0)})));
    std::string th = t.add(t.k(1.0), t.b.op("Tanh", {t.mul(t.k(std::sqrt(2.0 / M_PI)), inner)}));
    unfused(t.done(t.mul(th, t.mul(t.x, t.k(0.5)))));
  }
  {  // interior value (the Erf) read elsewhere
    Gelu t;
    std::string e = t.b.op("Erf", {t.mul(t.x, t.k(M_SQRT1_2))});
    std::string y = t.mul(t.mul(t.x, t.k(0.5)), t.add(e, t.k(1.0)));
    t.b.add_output(e, t.b.type(e));
    unfused(t.done(y));
  }
  {  // a constant that broadcasts x to a higher rank ([1, 1, 1] 0.5)
    Gelu t;
    std::string half = t.b.initializer(
        "half", TensorData::from_vector(DType::Float, {1, 1, 1}, std::vector<float>{0.5f}));
    unfused(t.done(t.mul(t.mul(t.x, half), t.one_plus_erf(t.x))));
  }
}

TEST(FuseGelu, StandardGeluBecomesContribOnOnnxRuntime) {
  GraphBuilder b(20);
  b.add_input("y", f32({Dim::symbol("batch"), Dim::of(8)}));
  std::string bias =
      b.initializer("bias", TensorData::from_vector(DType::Float, {8}, std::vector<float>(8, 1)));
  std::string x = b.op("Add", {"y", bias});
  std::string out = b.op("Gelu", {x}, {Attr::Str("approximate", "none")});
  b.add_output(out, b.type(out));
  Graph g = b.take();
  Graph s = g;
  EXPECT_EQ(fuse(s, fuse_gelu, kStd20), 0u);
  EXPECT_EQ(fuse(g, fuse_gelu, PassOptions{20, Target::OnnxRuntime}), 1u);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "BiasGelu");
  EXPECT_EQ(g.nodes[0].inputs, (std::vector<std::string>{"y", "bias"}));
}

TEST(FuseGelu, QuickGeluAndSiluOnOnnxRuntime) {
  {
    Gelu t;
    Graph g = t.done(t.mul(t.x, t.b.op("Sigmoid", {t.mul(t.k(1.702), t.x)})));
    Graph s = g;
    EXPECT_EQ(fuse(s, fuse_gelu, kStd20), 0u);
    EXPECT_EQ(fuse(g, fuse_gelu, kOrt18), 1u);
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_EQ(g.nodes[0].op_type, "QuickGelu");
    EXPECT_EQ(g.nodes[0].domain, "com.microsoft");
    EXPECT_FLOAT_EQ(g.nodes[0].attr("alpha")->f, 1.702f);
    EXPECT_EQ(g.nodes[0].inputs, std::vector<std::string>{"x"});
  }
  {  // SiLU, sigmoid first
    Gelu t;
    Graph g = t.done(t.mul(t.b.op("Sigmoid", {t.x}), t.x));
    EXPECT_EQ(fuse(g, fuse_gelu, kOrt18), 1u);
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_FLOAT_EQ(g.nodes[0].attr("alpha")->f, 1.0f);
  }
  {  // near miss: sigmoid of another value
    Gelu t;
    t.b.add_input("y", f32({Dim::symbol("batch"), Dim::of(8)}));
    Graph g = t.done(t.mul(t.x, t.b.op("Sigmoid", {"y"})));
    EXPECT_EQ(fuse(g, fuse_gelu, kOrt18), 0u);
  }
  {  // near miss: the Sigmoid read elsewhere
    Gelu t;
    std::string s = t.b.op("Sigmoid", {t.x});
    t.b.add_output(s, t.b.type(s));
    Graph g = t.done(t.mul(t.x, s));
    EXPECT_EQ(fuse(g, fuse_gelu, kOrt18), 0u);
  }
  {  // near miss: sigmoid(a * y) * x
    Gelu t;
    t.b.add_input("y", f32({Dim::symbol("batch"), Dim::of(8)}));
    Graph g = t.done(t.mul(t.x, t.b.op("Sigmoid", {t.mul("y", t.k(1.702))})));
    EXPECT_EQ(fuse(g, fuse_gelu, kOrt18), 0u);
  }
}

// ---- fuse_gemm

namespace {
struct Linear {
  GraphBuilder b{18};
  std::string w, prod;
  explicit Linear(ValueType a) {
    b.add_input("a", a);
    w = b.initializer("w",
                      TensorData::from_vector(DType::Float, {4, 6}, std::vector<float>(24, 1)));
    prod = b.op("MatMul", {"a", w});
  }
  std::string bias(std::vector<int64_t> dims) {
    int64_t n = 1;
    for (auto d : dims) n *= d;
    return b.initializer(
        "bias", TensorData::from_vector(DType::Float, dims, std::vector<float>(size_t(n), 2)));
  }
  Graph done(const std::string& y) {
    b.add_output(y, b.type(y));
    return b.take();
  }
};
}  // namespace

TEST(FuseGemm, MatMulBiasBecomesGemm) {
  for (auto dims : {std::vector<int64_t>{6}, std::vector<int64_t>{1, 6}}) {
    for (bool bias_first : {false, true}) {
      Linear t(f32({Dim::symbol("m"), Dim::of(4)}));
      std::string bias = t.bias(dims);
      Graph g = t.done(bias_first ? t.b.op("Add", {bias, t.prod}) : t.b.op("Add", {t.prod, bias}));
      EXPECT_EQ(fuse(g, fuse_gemm, kStd18), 1u);
      ASSERT_EQ(g.nodes.size(), 1u);
      EXPECT_EQ(g.nodes[0].op_type, "Gemm");
      EXPECT_EQ(g.nodes[0].inputs, (std::vector<std::string>{"a", "w", "bias"}));
      EXPECT_TRUE(g.nodes[0].attrs.empty());
    }
  }
}

TEST(FuseGemm, NearMissesLeftAlone) {
  {  // rank-3 A
    Linear t(f32({Dim::symbol("b"), Dim::of(3), Dim::of(4)}));
    Graph g = t.done(t.b.op("Add", {t.prod, t.bias({6})}));
    EXPECT_EQ(fuse(g, fuse_gemm, kStd18), 0u);
  }
  {  // bias [M, 1]
    Linear t(f32s({5, 4}));
    Graph g = t.done(t.b.op("Add", {t.prod, t.bias({5, 1})}));
    EXPECT_EQ(fuse(g, fuse_gemm, kOrt18), 0u);
  }
  {  // MatMul result read elsewhere
    Linear t(f32({Dim::symbol("m"), Dim::of(4)}));
    std::string y = t.b.op("Add", {t.prod, t.bias({6})});
    t.b.add_output(t.prod, t.b.type(t.prod));
    Graph g = t.done(y);
    EXPECT_EQ(fuse(g, fuse_gemm, kStd18), 0u);
  }
  {  // B not a constant
    GraphBuilder b(18);
    b.add_input("a", f32({Dim::symbol("m"), Dim::of(4)}));
    b.add_input("w", f32s({4, 6}));
    std::string bias =
        b.initializer("bias", TensorData::from_vector(DType::Float, {6}, std::vector<float>(6, 1)));
    std::string y = b.op("Add", {b.op("MatMul", {"a", "w"}), bias});
    b.add_output(y, b.type(y));
    Graph g = b.take();
    EXPECT_EQ(fuse(g, fuse_gemm, kStd18), 0u);
  }
}

// ---- fuse_matmul_transpose

namespace {
struct Scores {
  GraphBuilder b{18};
  Scores() {
    b.add_input("q", f32({Dim::symbol("b"), Dim::of(2), Dim::symbol("s"), Dim::of(8)}));
    b.add_input("k", f32({Dim::symbol("b"), Dim::of(2), Dim::symbol("t"), Dim::of(8)}));
  }
  Graph done(const std::string& y) {
    b.add_output(y, b.type(y));
    return b.take();
  }
};
}  // namespace

TEST(FuseMatMulTranspose, ScoresBecomeFusedMatMulWithAlpha) {
  Scores t;
  std::string kt = t.b.op("Transpose", {"k"}, {Attr::Ints("perm", {0, 1, 3, 2})});
  std::string s = t.b.op("MatMul", {"q", kt});
  Graph g = t.done(t.b.op("Mul", {s, t.b.scalar(DType::Float, 0.125)}));
  Graph std_g = g;
  EXPECT_EQ(fuse(std_g, fuse_matmul_transpose, kStd20), 0u);
  EXPECT_EQ(fuse(g, fuse_matmul_transpose, kOrt18), 1u);
  ASSERT_EQ(g.nodes.size(), 1u);
  const Node& n = g.nodes[0];
  EXPECT_EQ(n.op_type, "FusedMatMul");
  EXPECT_EQ(n.domain, "com.microsoft");
  EXPECT_EQ(n.inputs, (std::vector<std::string>{"q", "k"}));
  EXPECT_EQ(n.attr("transA")->i, 0);
  EXPECT_EQ(n.attr("transB")->i, 1);
  EXPECT_FLOAT_EQ(n.attr("alpha")->f, 0.125f);
  EXPECT_EQ(n.outputs[0], g.outputs[0].name);
}

TEST(FuseMatMulTranspose, TransposedAWithoutScale) {
  Scores t;
  std::string qt = t.b.op("Transpose", {"q"}, {Attr::Ints("perm", {0, 1, 3, 2})});
  Graph g = t.done(t.b.op("MatMul", {qt, "k"}));  // [b,2,8,s] @ [b,2,t,8]: shapes aside
  EXPECT_EQ(fuse(g, fuse_matmul_transpose, kOrt18), 1u);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].attr("transA")->i, 1);
  EXPECT_EQ(g.nodes[0].attr("transB")->i, 0);
  EXPECT_FLOAT_EQ(g.nodes[0].attr("alpha")->f, 1.0f);
}

TEST(FuseMatMulTranspose, NearMissesLeftAlone) {
  {  // a transpose that also moves the batch axes
    Scores t;
    std::string kt = t.b.op("Transpose", {"k"}, {Attr::Ints("perm", {1, 0, 3, 2})});
    Graph g = t.done(t.b.op("MatMul", {"q", kt}));
    EXPECT_EQ(fuse(g, fuse_matmul_transpose, kOrt18), 0u);
  }
  {  // transpose read elsewhere
    Scores t;
    std::string kt = t.b.op("Transpose", {"k"}, {Attr::Ints("perm", {0, 1, 3, 2})});
    t.b.add_output(kt, t.b.type(kt));
    Graph g = t.done(t.b.op("MatMul", {"q", kt}));
    EXPECT_EQ(fuse(g, fuse_matmul_transpose, kOrt18), 0u);
  }
  {  // a transposed constant weight
    GraphBuilder b(18);
    b.add_input("x", f32({Dim::symbol("m"), Dim::of(4)}));
    std::string w =
        b.initializer("w", TensorData::from_vector(DType::Float, {6, 4}, std::vector<float>(24)));
    std::string y = b.op("MatMul", {"x", b.op("Transpose", {w}, {Attr::Ints("perm", {1, 0})})});
    b.add_output(y, b.type(y));
    Graph g = b.take();
    EXPECT_EQ(fuse_matmul_transpose(g, kOrt18), 0u);
  }
  {  // the scale Mul is not absorbed when the product is read elsewhere too
    Scores t;
    std::string kt = t.b.op("Transpose", {"k"}, {Attr::Ints("perm", {0, 1, 3, 2})});
    std::string s = t.b.op("MatMul", {"q", kt});
    t.b.add_output(s, t.b.type(s));
    Graph g = t.done(t.b.op("Mul", {s, t.b.scalar(DType::Float, 0.125)}));
    EXPECT_EQ(fuse(g, fuse_matmul_transpose, kOrt18), 1u);
    EXPECT_EQ(count_op(g, "Mul"), 1u);
    EXPECT_FLOAT_EQ(find_op(g, "FusedMatMul")->attr("alpha")->f, 1.0f);
  }
}

// ---- unflatten_gemm

namespace {
// x [b, 3, 4] -> Reshape [-1, 4] -> Gemm(w [4, 6], bias [6]) -> Reshape to `out`.
struct Flattened {
  GraphBuilder b{18};
  std::string gemm;
  explicit Flattened(std::vector<Attr> gemm_attrs = {}) {
    b.add_input("x", f32({Dim::symbol("b"), Dim::of(3), Dim::of(4)}));
    std::string w = b.initializer(
        "w", TensorData::from_vector(DType::Float, {4, 6}, std::vector<float>(24, 1)));
    std::string bias =
        b.initializer("bias", TensorData::from_vector(DType::Float, {6}, std::vector<float>(6, 2)));
    std::string flat =
        b.op("Reshape", {"x", b.const_i64({-1, 4})}, {}, f32({Dim::symbol("b3"), Dim::of(4)}));
    gemm =
        b.op("Gemm", {flat, w, bias}, std::move(gemm_attrs), f32({Dim::symbol("b3"), Dim::of(6)}));
  }
  Graph done(std::vector<int64_t> shape, ValueType out) {
    std::string y = b.op("Reshape", {gemm, b.const_i64(shape)}, {}, out);
    b.add_output(y, b.type(y));
    return b.take();
  }
};
}  // namespace

TEST(UnflattenGemm, FlattenedLinearBecomesMatMulAdd) {
  Flattened t;
  Graph g = t.done({0, 3, 6}, f32({Dim::symbol("b"), Dim::of(3), Dim::of(6)}));
  EXPECT_EQ(fuse(g, unflatten_gemm, kOrt18), 1u);
  EXPECT_EQ(count_op(g, "Gemm"), 0u);
  EXPECT_EQ(count_op(g, "Reshape"), 0u);
  const Node* mm = find_op(g, "MatMul");
  ASSERT_TRUE(mm);
  EXPECT_EQ(mm->inputs, (std::vector<std::string>{"x", "w"}));
  const Node* add = find_op(g, "Add");
  ASSERT_TRUE(add);
  EXPECT_EQ(add->inputs[0], mm->outputs[0]);
  EXPECT_EQ(add->inputs[1], "bias");
  EXPECT_EQ(add->outputs[0], g.outputs[0].name);
}

TEST(UnflattenGemm, PerHeadViewKeepsItsReshape) {
  Flattened t;  // [b, 3, 6] viewed as [b, 3, 2, 3] at once
  Graph g = t.done({0, 3, 2, 3}, f32({Dim::symbol("b"), Dim::of(3), Dim::of(2), Dim::of(3)}));
  EXPECT_EQ(fuse(g, unflatten_gemm, kStd18), 1u);
  EXPECT_EQ(count_op(g, "Gemm"), 0u);
  ASSERT_EQ(count_op(g, "Reshape"), 1u);
  EXPECT_EQ(find_op(g, "Reshape")->inputs[0], find_op(g, "Add")->outputs[0]);
  const ValueType& flat = g.types.at(find_op(g, "Add")->outputs[0]);
  EXPECT_EQ(*flat.shape, Shape({Dim::symbol("b"), Dim::of(3), Dim::of(6)}));
}

TEST(UnflattenGemm, NearMissesLeftAlone) {
  {  // transB: the weight is not W^T already
    Flattened t({Attr::Int("transB", 1)});
    Graph g = t.done({0, 3, 4}, f32({Dim::symbol("b"), Dim::of(3), Dim::of(4)}));
    EXPECT_EQ(fuse(g, unflatten_gemm, kStd18), 0u);
  }
  {  // alpha != 1
    Flattened t({Attr::Float("alpha", 2.0f)});
    Graph g = t.done({0, 3, 6}, f32({Dim::symbol("b"), Dim::of(3), Dim::of(6)}));
    EXPECT_EQ(fuse(g, unflatten_gemm, kStd18), 0u);
  }
  {  // leading dims not x's ([3, b, 6] from [b, 3, 6])
    Flattened t;
    Graph g = t.done({3, -1, 6}, f32({Dim::of(3), Dim::symbol("b"), Dim::of(6)}));
    EXPECT_EQ(fuse(g, unflatten_gemm, kStd18), 0u);
  }
}

// ---- read_weights_transposed

namespace {
// A weight src [6, 4] seen as its transpose [4, 6] (fold_weight_transpose's
// view), read by `op` as B: MatMul(x [b, 3, 4], W^T) or Gemm(x2 [5, 4], W^T).
struct TransposedWeight {
  GraphBuilder b{18};
  std::vector<float> src = std::vector<float>(24);
  std::string wt;
  TransposedWeight() {
    for (size_t k = 0; k < src.size(); ++k) src[k] = static_cast<float>(k);
    TensorData v;
    v.dtype = DType::Float;
    v.dims = {4, 6};
    v.strides = {1, 4};
    v.data = reinterpret_cast<const uint8_t*>(src.data());
    wt = b.initializer("w.T", v);
  }
  std::string matmul() {
    b.add_input("x", f32({Dim::symbol("b"), Dim::of(3), Dim::of(4)}));
    return b.op("MatMul", {"x", wt});
  }
  std::string gemm(std::vector<Attr> attrs = {}) {
    b.add_input("x2", f32s({5, 4}));
    return b.op("Gemm", {"x2", wt}, std::move(attrs), f32s({5, 6}));
  }
  Graph done(const std::vector<std::string>& outs) {
    for (auto& y : outs) b.add_output(y, b.type(y));
    return b.take();
  }
};
const PassOptions kOrtByRef{18, Target::OnnxRuntime, DType::Float, true};
const PassOptions kStdByRef{18, Target::Standard, DType::Float, true};
}  // namespace

TEST(ReadWeightsTransposed, MatMulAndGemmReadTheWeightAsItIs) {
  TransposedWeight t;
  std::string a = t.matmul();
  std::string c = t.gemm();
  Graph g = t.done({a, c});
  EXPECT_EQ(read_weights_transposed(g, kOrtByRef), 1u);
  ASSERT_EQ(g.initializers.size(), 1u);
  const TensorData& w = g.initializers[0].data;
  EXPECT_EQ(g.initializers[0].name, "w");  // its own layout, its own name
  EXPECT_EQ(w.dims, (std::vector<int64_t>{6, 4}));
  EXPECT_TRUE(w.strides.empty());
  EXPECT_EQ(w.data, reinterpret_cast<const uint8_t*>(t.src.data()));  // not copied
  EXPECT_EQ(*g.types.at("w").shape, Shape({Dim::of(6), Dim::of(4)}));
  EXPECT_FALSE(g.types.count("w.T"));
  const Node* mm = find_op(g, "FusedMatMul");
  ASSERT_TRUE(mm);
  EXPECT_EQ(mm->domain, "com.microsoft");
  EXPECT_EQ(mm->inputs, (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(mm->attr("transB")->i, 1);
  EXPECT_EQ(mm->attr("transA")->i, 0);
  EXPECT_EQ(mm->outputs[0], a);
  const Node* gemm = find_op(g, "Gemm");
  EXPECT_EQ(gemm->inputs[1], "w");
  EXPECT_EQ(gemm->attr("transB")->i, 1);
}

TEST(ReadWeightsTransposed, GemmOnTheStandardTarget) {
  TransposedWeight t;
  std::string c = t.gemm({Attr::Int("transB", 0)});
  Graph g = t.done({c});
  EXPECT_EQ(read_weights_transposed(g, kStdByRef), 1u);
  EXPECT_EQ(find_op(g, "Gemm")->attr("transB")->i, 1);
  EXPECT_EQ(g.initializers[0].data.dims, (std::vector<int64_t>{6, 4}));
}

TEST(ReadWeightsTransposed, NearMissesLeftAlone) {
  {  // weights not by reference: the transposed layout is what a file wants
    TransposedWeight t;
    std::string c = t.gemm();
    Graph g = t.done({c});
    EXPECT_EQ(read_weights_transposed(g, kOrt18), 0u);
  }
  {  // MatMul has no transB on the standard target; the Gemm reader does not decide alone
    TransposedWeight t;
    std::string a = t.matmul();
    std::string c = t.gemm();
    Graph g = t.done({a, c});
    EXPECT_EQ(read_weights_transposed(g, kStdByRef), 0u);
    EXPECT_EQ(g.initializers[0].name, "w.T");
    EXPECT_EQ(find_op(g, "Gemm")->attr("transB"), nullptr);
  }
  {  // read by another op too
    TransposedWeight t;
    std::string c = t.gemm();
    std::string s = t.b.op("Add", {t.wt, t.wt});
    Graph g = t.done({c, s});
    EXPECT_EQ(read_weights_transposed(g, kOrtByRef), 0u);
  }
  {  // a graph output
    TransposedWeight t;
    std::string c = t.gemm();
    Graph g = t.done({c, t.wt});
    EXPECT_EQ(read_weights_transposed(g, kOrtByRef), 0u);
  }
  {  // read as A, not B
    TransposedWeight t;
    t.b.add_input("y", f32s({6, 2}));
    std::string a = t.b.op("MatMul", {t.wt, "y"});
    Graph g = t.done({a});
    EXPECT_EQ(read_weights_transposed(g, kOrtByRef), 0u);
  }
}
