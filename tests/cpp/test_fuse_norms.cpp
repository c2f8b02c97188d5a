// Norm fusions: RMS norm and LayerNorm written by hand -> one operator, and
// a residual Add + norm -> onnxruntime's Skip*LayerNormalization; each near
// miss left alone.
#include <gtest/gtest.h>

#include "ir/builder.h"
#include "opt/passes.h"

using namespace pt2onnx;

namespace {

constexpr int64_t kD = 8;
const PassOptions kStd23{23, Target::Standard};
const PassOptions kStd18{18, Target::Standard};
const PassOptions kOrt18{18, Target::OnnxRuntime};

ValueType tensor(DType t, std::vector<int64_t> dims) {
  Shape s;
  for (auto d : dims) s.push_back(Dim::of(d));
  return ValueType{t, s};
}

std::vector<const Node*> find_ops(const Graph& g, const std::string& op) {
  std::vector<const Node*> out;
  for (auto& n : g.nodes)
    if (n.op_type == op) out.push_back(&n);
  return out;
}

float attr_f(const Node& n, const char* name) {
  const Attr* a = n.attr(name);
  return a ? a->f : -1.0f;
}
int64_t attr_i(const Node& n, const char* name) {
  const Attr* a = n.attr(name);
  return a ? a->i : -100;
}

const Initializer* find_init(const Graph& g, const std::string& name) {
  for (auto& i : g.initializers)
    if (i.name == name) return &i;
  return nullptr;
}

// ---- RMS norm

struct Rms {
  bool pow_square = false;
  int mean = 0;  // 0: ReduceSum + Div, 1: ReduceMean (axes input), 2: ReduceMean (axes attribute)
  int inv = 0;   // 0: Reciprocal(Sqrt), 1: Div(1, Sqrt), 2: Div(x, Sqrt), 3: Pow(., -0.5)
  int64_t axis = -1;
  double divisor = kD;
  int weight = 1;  // 0: none, 1: Mul(w, y), 2: Mul(y, w), 3: a [3, D] weight
  bool casts = false;
  bool weight_before_cast = false;
  bool eps_in_mean = false;      // mean(x^2 + eps)
  bool eps_after_sqrt = false;   // 1 / (sqrt(ms) + eps)
  bool other_x = false;          // the scaling reads another x
  bool read_mean = false;        // the mean is also a graph output
  bool read_normalized = false;  // x * r is also a graph output
};

Graph build_rms(const Rms& s) {
  GraphBuilder b(18);
  DType t = s.casts ? DType::Float16 : DType::Float;
  b.add_input("x", tensor(t, {2, 3, kD}));
  std::string x = "x";
  if (s.casts) x = b.op("Cast", {"x"}, {Attr::Int("to", static_cast<int64_t>(DType::Float))});
  std::string sq =
      s.pow_square ? b.op("Pow", {x, b.scalar(DType::Float, 2.0)}) : b.op("Mul", {x, x});
  std::string eps = b.scalar(DType::Float, 1e-6);
  if (s.eps_in_mean) sq = b.op("Add", {sq, eps});
  std::string ms;
  Attr keep = Attr::Int("keepdims", 1);
  if (s.mean == 0) {
    ms = b.op("Div", {b.op("ReduceSum", {sq, b.const_i64({s.axis})}, {keep}),
                      b.scalar(DType::Float, s.divisor)});
  } else if (s.mean == 1) {
    ms = b.op("ReduceMean", {sq, b.const_i64({s.axis})}, {keep});
  } else {
    ms = b.op("ReduceMean", {sq}, {Attr::Ints("axes", {s.axis}), keep});
  }
  std::string v = s.eps_in_mean || s.eps_after_sqrt ? ms : b.op("Add", {ms, eps});
  std::string xs = x;
  if (s.other_x) {
    b.add_input("x2", tensor(DType::Float, {2, 3, kD}));
    xs = "x2";
  }
  std::string y;
  if (s.eps_after_sqrt) {
    y = b.op("Mul", {xs, b.op("Reciprocal", {b.op("Add", {b.op("Sqrt", {v}), eps})})});
  } else if (s.inv == 0) {
    y = b.op("Mul", {xs, b.op("Reciprocal", {b.op("Sqrt", {v})})});
  } else if (s.inv == 1) {
    y = b.op("Mul", {b.op("Div", {b.scalar(DType::Float, 1.0), b.op("Sqrt", {v})}), xs});
  } else if (s.inv == 2) {
    y = b.op("Div", {xs, b.op("Sqrt", {v})});
  } else {
    y = b.op("Mul", {xs, b.op("Pow", {v, b.scalar(DType::Float, -0.5)})});
  }
  if (s.read_mean) b.add_output(ms, b.type(ms));
  if (s.read_normalized) b.add_output(y, b.type(y));
  auto apply_weight = [&](const std::string& in, DType wt) {
    if (s.weight == 0) return in;
    std::vector<int64_t> wd =
        s.weight == 3 ? std::vector<int64_t>{3, kD} : std::vector<int64_t>{kD};
    b.add_input("w", tensor(wt, wd));
    return s.weight == 2 ? b.op("Mul", {in, "w"}) : b.op("Mul", {"w", in});
  };
  if (s.casts) {
    if (s.weight_before_cast) y = apply_weight(y, DType::Float);
    y = b.op("Cast", {y}, {Attr::Int("to", static_cast<int64_t>(DType::Float16))});
    if (!s.weight_before_cast) y = apply_weight(y, DType::Float16);
  } else {
    y = apply_weight(y, DType::Float);
  }
  b.add_output(y, b.type(y));
  return b.take();
}

// The graph after the default passes, expected to be one fused node reading x.
const Node& expect_one_rms(Graph& g, const PassOptions& o, const char* op = "RMSNormalization",
                           bool gives_output = true) {
  run_default_passes(g, o);
  auto f = find_ops(g, op);
  EXPECT_EQ(f.size(), 1u);
  EXPECT_TRUE(find_ops(g, "Sqrt").empty());
  EXPECT_TRUE(find_ops(g, "ReduceSum").empty() && find_ops(g, "ReduceMean").empty());
  static Node none;
  if (f.size() != 1) return none;
  const Node& n = *f[0];
  EXPECT_EQ(n.domain, "");
  EXPECT_EQ(attr_i(n, "axis"), -1);
  EXPECT_EQ(attr_i(n, "stash_type"), 1);
  EXPECT_FLOAT_EQ(attr_f(n, "epsilon"), 1e-6f);
  if (gives_output) {
    EXPECT_EQ(n.outputs[0], g.outputs.back().name);
  }
  return n;
}

size_t fuse_rms(const Rms& s, const PassOptions& o = kStd23) {
  Graph g = build_rms(s);
  return fuse_rms_norm(g, o);
}

}  // namespace

TEST(FuseRmsNorm, LlamaForm) {
  Graph g = build_rms({});
  EXPECT_EQ(g.nodes.size(), 8u);
  const Node& n = expect_one_rms(g, kStd23);
  EXPECT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(n.inputs, (std::vector<std::string>{"x", "w"}));
}

TEST(FuseRmsNorm, OnnxRuntimeTargetAnyOpset) {
  Graph g = build_rms({});
  const Node& n = expect_one_rms(g, kOrt18, "SimplifiedLayerNormalization");
  EXPECT_EQ(n.inputs, (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(g.nodes.size(), 1u);
  EXPECT_TRUE(g.domain_versions.empty());  // default domain
}

TEST(FuseRmsNorm, NothingBelowOpset23OnStandardTarget) { EXPECT_EQ(fuse_rms({}, kStd18), 0u); }

TEST(FuseRmsNorm, Spellings) {
  for (int mean = 0; mean < 3; ++mean)
    for (int inv = 0; inv < 4; ++inv)
      for (bool pw : {false, true})
        for (int weight : {1, 2}) {
          Rms s;
          s.mean = mean;
          s.inv = inv;
          s.pow_square = pw;
          s.weight = weight;
          Graph g = build_rms(s);
          SCOPED_TRACE(std::to_string(mean) + std::to_string(inv) + std::to_string(pw) +
                       std::to_string(weight));
          const Node& n = expect_one_rms(g, kStd23);
          EXPECT_EQ(g.nodes.size(), 1u);
          EXPECT_EQ(n.inputs, (std::vector<std::string>{"x", "w"}));
        }
}

TEST(FuseRmsNorm, PositiveLastAxis) {
  Rms s;
  s.axis = 2;
  EXPECT_EQ(fuse_rms(s), 1u);
}

TEST(FuseRmsNorm, NoWeightGetsOnes) {
  Rms s;
  s.weight = 0;
  Graph g = build_rms(s);
  const Node& n = expect_one_rms(g, kStd23);
  ASSERT_EQ(n.inputs.size(), 2u);
  EXPECT_EQ(n.inputs[0], "x");
  const Initializer* ones = find_init(g, n.inputs[1]);
  ASSERT_NE(ones, nullptr);
  ASSERT_EQ(ones->data.dims, (std::vector<int64_t>{kD}));
  ASSERT_EQ(ones->data.dtype, DType::Float);
  for (int64_t i = 0; i < kD; ++i) EXPECT_EQ(ones->data.as<float>()[i], 1.0f);
}

TEST(FuseRmsNorm, HalfModelCastsAbsorbed) {
  Rms s;
  s.casts = true;
  Graph g = build_rms(s);
  const Node& n = expect_one_rms(g, kStd23);
  EXPECT_EQ(g.nodes.size(), 1u);  // both Casts inside the fused node
  EXPECT_EQ(n.inputs, (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(g.type_of(n.outputs[0])->dtype, DType::Float16);
}

TEST(FuseRmsNorm, HalfModelWithoutWeight) {
  Rms s;
  s.casts = true;
  s.weight = 0;
  Graph g = build_rms(s);
  const Node& n = expect_one_rms(g, kOrt18, "SimplifiedLayerNormalization");
  EXPECT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(n.inputs[0], "x");
  const Initializer* ones = find_init(g, n.inputs[1]);
  ASSERT_NE(ones, nullptr);
  EXPECT_EQ(ones->data.dtype, DType::Float16);
}

TEST(FuseRmsNorm, FloatWeightBeforeCastBackKeepsCasts) {
  // Cast(x) -> norm * w (float) -> Cast: the fused node runs in float32
  // between the two Casts (its scale type is its output type).
  Rms s;
  s.casts = true;
  s.weight_before_cast = true;
  Graph g = build_rms(s);
  const Node& n = expect_one_rms(g, kStd23, "RMSNormalization", false);
  EXPECT_EQ(find_ops(g, "Cast").size(), 2u);
  EXPECT_EQ(n.inputs[1], "w");
  EXPECT_EQ(g.type_of(n.outputs[0])->dtype, DType::Float);
}

TEST(FuseRmsNorm, WeightOfOtherShapeStaysAMul) {
  Rms s;
  s.weight = 3;  // [3, D]
  Graph g = build_rms(s);
  run_default_passes(g, kStd23);
  auto f = find_ops(g, "RMSNormalization");
  ASSERT_EQ(f.size(), 1u);
  ASSERT_NE(find_init(g, f[0]->inputs[1]), nullptr);  // ones
  auto m = find_ops(g, "Mul");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0]->inputs, (std::vector<std::string>{"w", f[0]->outputs[0]}));
}

TEST(FuseRmsNorm, NormalizedValueReadElsewhereKeepsWeightMul) {
  Rms s;
  s.read_normalized = true;
  Graph g = build_rms(s);
  run_default_passes(g, kStd23);
  auto f = find_ops(g, "RMSNormalization");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(find_ops(g, "Mul").size(), 1u);
  EXPECT_EQ(g.outputs[0].name, f[0]->outputs[0]);
}

TEST(FuseRmsNorm, NearMisses) {
  {
    Rms s;
    s.axis = 1;  // not the last axis
    EXPECT_EQ(fuse_rms(s), 0u);
    s.mean = 1;
    EXPECT_EQ(fuse_rms(s), 0u);
    s.mean = 2;
    EXPECT_EQ(fuse_rms(s), 0u);
  }
  {
    Rms s;
    s.eps_in_mean = true;
    EXPECT_EQ(fuse_rms(s), 0u);
  }
  {
    Rms s;
    s.eps_after_sqrt = true;
    EXPECT_EQ(fuse_rms(s), 0u);
  }
  {
    Rms s;
    s.divisor = kD - 1;  // not the reduced dim
    EXPECT_EQ(fuse_rms(s), 0u);
  }
  {
    Rms s;
    s.other_x = true;
    EXPECT_EQ(fuse_rms(s), 0u);
  }
  {
    Rms s;
    s.read_mean = true;  // interior value read elsewhere
    EXPECT_EQ(fuse_rms(s), 0u);
  }
}

TEST(FuseRmsNorm, KeepDimsZeroLeftAlone) {
  Graph g = build_rms({});
  for (auto& n : g.nodes)
    if (n.op_type == "ReduceSum") n.attrs = {Attr::Int("keepdims", 0)};
  EXPECT_EQ(fuse_rms_norm(g, kStd23), 0u);
}

// ---- LayerNorm

namespace {

struct Ln {
  int mean = 1;  // as Rms::mean
  bool pow_square = false;
  int inv = 2;  // as Rms::inv
  int64_t axis = -1;
  int64_t var_axis = -1;
  double var_divisor = kD;  // with mean = 0
  bool gamma = true, beta = true;
  bool eps_after_sqrt = false;
  bool other_sub = false;  // the scaling reads another x - mean
  bool mean_of_other = false;
  bool read_d = false;
};

Graph build_ln(const Ln& s) {
  GraphBuilder b(18);
  b.add_input("x", tensor(DType::Float, {2, 3, kD}));
  Attr keep = Attr::Int("keepdims", 1);
  auto mean = [&](const std::string& v, int64_t axis, double divisor) {
    if (s.mean == 0)
      return b.op("Div", {b.op("ReduceSum", {v, b.const_i64({axis})}, {keep}),
                          b.scalar(DType::Float, divisor)});
    if (s.mean == 1) return b.op("ReduceMean", {v, b.const_i64({axis})}, {keep});
    return b.op("ReduceMean", {v}, {Attr::Ints("axes", {axis}), keep});
  };
  std::string mx = "x";
  if (s.mean_of_other) {
    b.add_input("x2", tensor(DType::Float, {2, 3, kD}));
    mx = "x2";
  }
  std::string mu = mean(mx, s.axis, kD);
  std::string d = b.op("Sub", {"x", mu});
  std::string sq =
      s.pow_square ? b.op("Pow", {d, b.scalar(DType::Float, 2.0)}) : b.op("Mul", {d, d});
  std::string var = mean(sq, s.var_axis, s.var_divisor);
  std::string eps = b.scalar(DType::Float, 1e-12);
  std::string ds = d;
  if (s.other_sub) {
    b.add_input("x2", tensor(DType::Float, {2, 3, kD}));
    ds = b.op("Sub", {"x2", mu});
  }
  std::string y;
  if (s.eps_after_sqrt) {
    y = b.op("Div", {ds, b.op("Add", {b.op("Sqrt", {var}), eps})});
  } else {
    std::string v = b.op("Add", {eps, var});
    if (s.inv == 0)
      y = b.op("Mul", {ds, b.op("Reciprocal", {b.op("Sqrt", {v})})});
    else if (s.inv == 1)
      y = b.op("Mul", {ds, b.op("Div", {b.scalar(DType::Float, 1.0), b.op("Sqrt", {v})})});
    else if (s.inv == 2)
      y = b.op("Div", {ds, b.op("Sqrt", {v})});
    else
      y = b.op("Mul", {b.op("Pow", {v, b.scalar(DType::Float, -0.5)}), ds});
  }
  if (s.read_d) b.add_output(d, b.type(d));
  if (s.gamma) {
    b.add_input("gamma", tensor(DType::Float, {kD}));
    y = b.op("Mul", {"gamma", y});
  }
  if (s.beta) {
    b.add_input("beta", tensor(DType::Float, {kD}));
    y = b.op("Add", {y, "beta"});
  }
  b.add_output(y, b.type(y));
  return b.take();
}

size_t fuse_ln(const Ln& s, const PassOptions& o = kStd18) {
  Graph g = build_ln(s);
  return fuse_layer_norm(g, o);
}

}  // namespace

TEST(FuseLayerNorm, HandWritten) {
  for (int mean = 0; mean < 3; ++mean)
    for (int inv = 0; inv < 4; ++inv)
      for (bool pw : {false, true}) {
        Ln s;
        s.mean = mean;
        s.inv = inv;
        s.pow_square = pw;
        SCOPED_TRACE(std::to_string(mean) + std::to_string(inv) + std::to_string(pw));
        Graph g = build_ln(s);
        run_default_passes(g, kStd18);
        ASSERT_EQ(g.nodes.size(), 1u);
        const Node& n = g.nodes[0];
        EXPECT_EQ(n.op_type, "LayerNormalization");
        EXPECT_EQ(n.inputs, (std::vector<std::string>{"x", "gamma", "beta"}));
        EXPECT_EQ(attr_i(n, "axis"), -1);
        EXPECT_FLOAT_EQ(attr_f(n, "epsilon"), 1e-12f);
        EXPECT_EQ(n.outputs[0], g.outputs[0].name);
        EXPECT_EQ(n.outputs.size(), 1u);
      }
}

TEST(FuseLayerNorm, BothTargetsFromOpset17Only) {
  EXPECT_EQ(fuse_ln({}, PassOptions{17, Target::Standard}), 1u);
  EXPECT_EQ(fuse_ln({}, PassOptions{17, Target::OnnxRuntime}), 1u);
  EXPECT_EQ(fuse_ln({}, PassOptions{16, Target::Standard}), 0u);
  EXPECT_EQ(fuse_ln({}, PassOptions{16, Target::OnnxRuntime}), 0u);
}

TEST(FuseLayerNorm, WithoutGammaOrBeta) {
  {
    Ln s;
    s.beta = false;
    Graph g = build_ln(s);
    run_default_passes(g, kStd18);
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_EQ(g.nodes[0].inputs, (std::vector<std::string>{"x", "gamma"}));
  }
  {
    Ln s;
    s.gamma = false;
    Graph g = build_ln(s);
    run_default_passes(g, kStd18);
    ASSERT_EQ(g.nodes.size(), 1u);
    const Node& n = g.nodes[0];
    ASSERT_EQ(n.inputs.size(), 3u);
    EXPECT_EQ(n.inputs[2], "beta");
    const Initializer* ones = find_init(g, n.inputs[1]);
    ASSERT_NE(ones, nullptr);
    EXPECT_EQ(ones->data.dims, (std::vector<int64_t>{kD}));
    EXPECT_EQ(ones->data.as<float>()[kD - 1], 1.0f);
  }
}

TEST(FuseLayerNorm, NearMisses) {
  {
    Ln s;
    s.axis = s.var_axis = 1;
    EXPECT_EQ(fuse_ln(s), 0u);
  }
  {
    Ln s;
    s.var_axis = 1;  // the mean is right, the variance is not
    EXPECT_EQ(fuse_ln(s), 0u);
  }
  {
    Ln s;
    s.mean = 0;
    s.var_divisor = kD - 1;  // unbiased variance
    EXPECT_EQ(fuse_ln(s), 0u);
  }
  {
    Ln s;
    s.eps_after_sqrt = true;
    EXPECT_EQ(fuse_ln(s), 0u);
  }
  {
    Ln s;
    s.other_sub = true;
    EXPECT_EQ(fuse_ln(s), 0u);
  }
  {
    Ln s;
    s.mean_of_other = true;
    EXPECT_EQ(fuse_ln(s), 0u);
  }
  {
    Ln s;
    s.read_d = true;
    EXPECT_EQ(fuse_ln(s), 0u);
  }
}

// ---- residual Add + norm

namespace {

struct Skip {
  std::string norm = "SimplifiedLayerNormalization";
  std::vector<int64_t> a{2, 3, kD}, b{2, 3, kD};
  std::vector<int64_t> gamma{kD};
  DType t = DType::Float;
  bool beta = false;
  bool sum_read_later = false;
  int64_t axis = -1;
  int64_t stash = 1;
};

Graph build_skip(const Skip& s) {
  GraphBuilder b(18);
  b.add_input("a", tensor(s.t, s.a));
  b.add_input("b", tensor(s.t, s.b));
  b.add_input("gamma", tensor(s.t, s.gamma));
  std::string sum = b.op("Add", {"a", "b"});
  std::vector<std::string> in{sum, "gamma"};
  if (s.beta) {
    b.add_input("beta", tensor(s.t, {kD}));
    in.push_back("beta");
  }
  std::vector<Attr> attrs{Attr::Int("axis", s.axis), Attr::Float("epsilon", 1e-5f)};
  if (s.stash != 1) attrs.push_back(Attr::Int("stash_type", s.stash));
  std::string y = b.add_node(s.norm, in, 1, attrs, {b.type(sum)})[0];
  if (s.sum_read_later) y = b.op("Add", {sum, b.op("Relu", {y})});
  b.add_output(y, b.type(y));
  return b.take();
}

size_t fuse_skip(const Skip& s, const PassOptions& o = kOrt18) {
  Graph g = build_skip(s);
  return fuse_skip_norm(g, o);
}

}  // namespace

TEST(FuseSkipNorm, SimplifiedLayerNorm) {
  Graph g = build_skip({});
  run_default_passes(g, kOrt18);
  ASSERT_EQ(g.nodes.size(), 1u);
  const Node& n = g.nodes[0];
  EXPECT_EQ(n.op_type, "SkipSimplifiedLayerNormalization");
  EXPECT_EQ(n.domain, "com.microsoft");
  EXPECT_EQ(n.inputs, (std::vector<std::string>{"a", "b", "gamma"}));
  EXPECT_EQ(n.outputs, (std::vector<std::string>{g.outputs[0].name}));
  EXPECT_FLOAT_EQ(attr_f(n, "epsilon"), 1e-5f);
  EXPECT_EQ(g.domain_versions.count("com.microsoft"), 1u);
}

TEST(FuseSkipNorm, RMSNormalizationToo) {
  Skip s;
  s.norm = "RMSNormalization";
  Graph g = build_skip(s);
  run_default_passes(g, PassOptions{23, Target::OnnxRuntime});
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "SkipSimplifiedLayerNormalization");
}

TEST(FuseSkipNorm, LayerNormWithBetaAndSumReadLater) {
  Skip s;
  s.norm = "LayerNormalization";
  s.beta = true;
  s.sum_read_later = true;
  Graph g = build_skip(s);
  std::string sum = g.nodes[0].outputs[0];
  run_default_passes(g, kOrt18);
  ASSERT_EQ(g.nodes.size(), 3u);
  const Node& n = g.nodes[0];
  EXPECT_EQ(n.op_type, "SkipLayerNormalization");
  EXPECT_EQ(n.domain, "com.microsoft");
  EXPECT_EQ(n.inputs, (std::vector<std::string>{"a", "b", "gamma", "beta"}));
  ASSERT_EQ(n.outputs.size(), 4u);
  EXPECT_EQ(n.outputs[1], "");
  EXPECT_EQ(n.outputs[2], "");
  EXPECT_EQ(n.outputs[3], sum);
  EXPECT_EQ(g.nodes[1].op_type, "Relu");
  EXPECT_EQ(g.nodes[1].inputs[0], n.outputs[0]);
  EXPECT_EQ(g.nodes[2].inputs[0], sum);
}

TEST(FuseSkipNorm, TwoDimensionalInput) {
  Skip s;
  s.a = s.b = {5, kD};
  EXPECT_EQ(fuse_skip(s), 1u);
}

TEST(FuseSkipNorm, NearMisses) {
  EXPECT_EQ(fuse_skip({}, kStd23), 0u);  // standard target
  {
    Skip s;
    s.b = {1, 3, kD};  // broadcasting Add
    EXPECT_EQ(fuse_skip(s), 0u);
  }
  {
    Skip s;
    s.b = {kD};
    EXPECT_EQ(fuse_skip(s), 0u);
  }
  {
    Skip s;
    s.a = s.b = {2, 2, 3, kD};  // rank 4
    EXPECT_EQ(fuse_skip(s), 0u);
  }
  {
    Skip s;
    s.gamma = {1, kD};
    EXPECT_EQ(fuse_skip(s), 0u);
  }
  {
    Skip s;
    s.t = DType::Double;
    EXPECT_EQ(fuse_skip(s), 0u);
  }
  {
    Skip s;
    s.norm = "LayerNormalization";
    s.axis = 1;  // normalizes [3, D]
    EXPECT_EQ(fuse_skip(s), 0u);
  }
  {
    Skip s;
    s.stash = 0;
    EXPECT_EQ(fuse_skip(s), 0u);
  }
}

// The RMS norm fusion leaves its replaced nodes behind; they must not count
// as readers of the residual sum when the skip fusion runs after it.
TEST(FuseSkipNorm, AfterRmsFusionSumReadOnlyByNorm) {
  GraphBuilder b(18);
  b.add_input("a", tensor(DType::Float, {2, 3, kD}));
  b.add_input("b", tensor(DType::Float, {2, 3, kD}));
  b.add_input("w", tensor(DType::Float, {kD}));
  std::string x = b.op("Add", {"a", "b"});
  std::string ms = b.op("ReduceMean", {b.op("Mul", {x, x}), b.const_i64({-1})});
  std::string r =
      b.op("Reciprocal", {b.op("Sqrt", {b.op("Add", {ms, b.scalar(DType::Float, 1e-6)})})});
  std::string y = b.op("Mul", {"w", b.op("Mul", {x, r})});
  b.add_output(y, b.type(y));
  Graph g = b.take();
  run_default_passes(g, kOrt18);
  ASSERT_EQ(g.nodes.size(), 1u);
  const Node& n = g.nodes[0];
  EXPECT_EQ(n.op_type, "SkipSimplifiedLayerNormalization");
  EXPECT_EQ(n.inputs, (std::vector<std::string>{"a", "b", "w"}));
  EXPECT_EQ(n.outputs, (std::vector<std::string>{y}));
}
