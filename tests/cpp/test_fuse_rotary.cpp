// fuse_rotary: hand-written rotary embedding -> RotaryEmbedding (ONNX 23 /
// com.microsoft), and the near misses it must leave alone.
#include <gtest/gtest.h>

#include <string>

#include "ir/builder.h"
#include "opt/passes.h"

using namespace pt2onnx;

namespace {

ValueType f32(Shape s) { return ValueType{DType::Float, std::move(s)}; }
const Dim kB = Dim::symbol("batch");
const Dim kS = Dim::symbol("seq");

int count(const Graph& g, const std::string& op) {
  int n = 0;
  for (auto& node : g.nodes) n += node.op_type == op;
  return n;
}
const Node* find(const Graph& g, const std::string& op) {
  for (auto& n : g.nodes)
    if (n.op_type == op) return &n;
  return nullptr;
}
int64_t int_attr(const Node& n, const std::string& name, int64_t dflt = 0) {
  const Attr* a = n.attr(name);
  return a ? a->i : dflt;
}

// LLaMA's rotate_half: x [B, H, S, 8] (or [B, S, H, 8] with head_axis 2),
// angles a [B, S, 4] (an input), cos = Mul(Cos(Concat(a, a)), 2.0) unsqueezed
// at the head axis.
struct HalfKnobs {
  bool pair_equal = true;        // Concat(a, a) vs Concat(a, b)
  int64_t split = 4;             // Slice boundary (h = 4)
  bool neg_first_half = false;   // Neg on Slice(x, :h)
  bool interior_output = false;  // the Neg also a graph output
  int64_t cache_batch = 0;       // a is [cache_batch, S, 4] (0: x's batch B)
  bool vector_scale = false;     // cos * a [8] constant instead of a scalar
  int64_t head_axis = 1;
};

Graph rotate_half(const HalfKnobs& k = {}) {
  GraphBuilder b(18);
  Shape xs = k.head_axis == 1 ? Shape{kB, Dim::of(3), kS, Dim::of(8)}
                              : Shape{kB, kS, Dim::of(3), Dim::of(8)};
  b.add_input("x", f32(xs));
  b.add_input("a", f32({k.cache_batch ? Dim::of(k.cache_batch) : kB, kS, Dim::of(4)}));
  b.add_input("a2", f32({kB, kS, Dim::of(4)}));
  std::string cat = b.op("Concat", {"a", k.pair_equal ? "a" : "a2"}, {Attr::Int("axis", -1)});
  std::string scale =
      k.vector_scale
          ? b.constant(TensorData::from_vector(DType::Float, {8}, std::vector<float>(8, 1.0f)))
          : b.scalar(DType::Float, 2.0);
  std::string cos = b.op("Mul", {b.op("Cos", {cat}), scale});
  std::string sin = b.op("Mul", {b.op("Sin", {cat}), scale});
  std::string axis = b.const_i64({k.head_axis});
  std::string cu = b.op("Unsqueeze", {cos, axis});
  std::string su = b.op("Unsqueeze", {sin, axis});
  std::string ax = b.const_i64({3});
  std::string lo = b.op("Slice", {"x", b.const_i64({0}), b.const_i64({k.split}), ax});
  std::string hi = b.op("Slice", {"x", b.const_i64({k.split}), b.const_i64({INT64_MAX}), ax});
  std::string neg = b.op("Neg", {k.neg_first_half ? lo : hi});
  std::string rot = b.op("Concat", {neg, k.neg_first_half ? hi : lo}, {Attr::Int("axis", 3)});
  std::string y = b.op("Add", {b.op("Mul", {"x", cu}), b.op("Mul", {rot, su})});
  b.add_output(y, b.type(y));
  if (k.interior_output) b.add_output(neg, b.type(neg));
  return b.take();
}

size_t fuse(Graph& g, int opset, Target t) {
  size_t n = 0;
  for (auto& [name, changed] : run_default_passes(g, PassOptions{opset, t}))
    if (name == "fuse_rotary") n += changed;
  return n;
}

}  // namespace

TEST(FuseRotary, RotateHalfStandard23) {
  Graph g = rotate_half();
  EXPECT_EQ(fuse(g, 23, Target::Standard), 1u);
  const Node* r = find(g, "RotaryEmbedding");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->domain, "");
  ASSERT_EQ(r->inputs.size(), 3u);
  EXPECT_EQ(r->inputs[0], "x");
  EXPECT_EQ(int_attr(*r, "interleaved"), 0);
  EXPECT_EQ(r->attr("rotary_embedding_dim"), nullptr);
  // The caches are the cos / sin of `a` itself: [batch, seq, 4].
  for (int i = 1; i <= 2; ++i) {
    const ValueType* t = g.type_of(r->inputs[i]);
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(t->shape);
    EXPECT_EQ(*t->shape, (Shape{kB, kS, Dim::of(4)}));
  }
  EXPECT_EQ(count(g, "Concat"), 0);
  EXPECT_EQ(count(g, "Neg"), 0);
  EXPECT_EQ(count(g, "Slice"), 0);
  EXPECT_EQ(g.outputs[0].name, r->outputs[0]);
}

TEST(FuseRotary, RotateHalfOnnxRuntime) {
  Graph g = rotate_half();
  EXPECT_EQ(fuse(g, 18, Target::OnnxRuntime), 1u);
  const Node* r = find(g, "RotaryEmbedding");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->domain, "com.microsoft");
  ASSERT_EQ(r->inputs.size(), 4u);
  EXPECT_EQ(r->inputs[0], "x");
  // position_ids [batch, seq]; caches flattened to [batch * seq, 4].
  const ValueType* p = g.type_of(r->inputs[1]);
  ASSERT_TRUE(p && p->shape);
  EXPECT_EQ(p->dtype, DType::Int64);
  EXPECT_EQ(*p->shape, (Shape{kB, kS}));
  const ValueType* c = g.type_of(r->inputs[2]);
  ASSERT_TRUE(c && c->shape);
  EXPECT_EQ(c->shape->size(), 2u);
  EXPECT_EQ(c->shape->back(), Dim::of(4));
  EXPECT_EQ(count(g, "Range"), 1);
  EXPECT_EQ(g.domain_versions.count("com.microsoft"), 1u);
}

TEST(FuseRotary, BatchOneCachesExpandedToTheBatch) {
  // transformers without position_ids: cos / sin [1, S, 4] broadcast over x's batch.
  for (Target t : {Target::Standard, Target::OnnxRuntime}) {
    HalfKnobs k;
    k.cache_batch = 1;
    Graph g = rotate_half(k);
    ASSERT_EQ(fuse(g, 23, t), 1u);
    const Node* r = find(g, "RotaryEmbedding");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(count(g, "Expand"), 2);  // cos and sin
    // Input 1: the standard op's cos, expanded to [B, S, 4]; com.microsoft's
    // position ids [B, S] into the expanded cache, flattened.
    const ValueType* c = g.type_of(r->inputs[1]);
    ASSERT_TRUE(c && c->shape);
    EXPECT_EQ((*c->shape)[0], kB);
  }
}

TEST(FuseRotary, NothingToEmitAtOpset18Standard) {
  Graph g = rotate_half();
  EXPECT_EQ(fuse(g, 18, Target::Standard), 0u);
  EXPECT_EQ(count(g, "RotaryEmbedding"), 0);
}

TEST(FuseRotary, HeadAxisTwoGoesThrough3D) {
  HalfKnobs k;
  k.head_axis = 2;
  Graph g = rotate_half(k);
  EXPECT_EQ(fuse(g, 23, Target::Standard), 1u);
  const Node* r = find(g, "RotaryEmbedding");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(int_attr(*r, "num_heads"), 3);
  EXPECT_EQ(int_attr(*r, "rotary_embedding_dim"), 8);
  EXPECT_EQ(g.type_of(r->inputs[0])->shape->size(), 3u);
  EXPECT_EQ(count(g, "Reshape"), 2);
}

TEST(FuseRotary, LeavesNearMisses) {
  auto left_alone = [](HalfKnobs k, const char* what) {
    Graph g = rotate_half(k);
    size_t before = g.nodes.size();
    EXPECT_EQ(fuse(g, 23, Target::Standard), 0u) << what;
    EXPECT_EQ(count(g, "RotaryEmbedding"), 0) << what;
    EXPECT_EQ(g.nodes.size(), before) << what;
  };
  HalfKnobs k;
  k.pair_equal = false;
  left_alone(k, "cos not proven equal on both halves");
  k = {};
  k.split = 2;
  left_alone(k, "Slice boundary not at head_size / 2");
  k = {};
  k.neg_first_half = true;
  left_alone(k, "Neg on the first half");
  k = {};
  k.interior_output = true;
  left_alone(k, "interior value read outside the pattern");
  k = {};
  k.cache_batch = 2;
  left_alone(k, "cos of batch 2 against x's batch B");
  k = {};
  k.vector_scale = true;
  left_alone(k, "cos scaled by a vector, not a scalar");
}

namespace {

// GPT-J: k [B, S, 3, 16], rotary_dim 8 (partial), sin / cos [B, S, 4] each
// repeat_interleave'd (Unsqueeze, Unsqueeze(-1), Expand to (.., 4, 2),
// Reshape), rotate_every_two, the pass-through half concatenated back.
struct InterleavedKnobs {
  bool repeated = true;    // cos / sin repeat_interleave'd, else read as [B, S, 8]
  bool neg_even = false;   // Neg on x[..., ::2] instead of x[..., 1::2]
  int64_t pass_start = 8;  // the pass-through Slice's start
};

Graph interleaved(const InterleavedKnobs& k = {}) {
  GraphBuilder b(18);
  b.add_input("k", f32({kB, kS, Dim::of(3), Dim::of(16)}));
  b.add_input("sin", f32({kB, kS, Dim::of(4)}));
  b.add_input("cos", f32({kB, kS, Dim::of(4)}));
  auto repeat = [&](const std::string& v) {
    std::string u = b.op("Unsqueeze", {v, b.const_i64({2})});
    std::string u2 = b.op("Unsqueeze", {u, b.const_i64({4})});
    std::string lead = b.op("Shape", {u}, {Attr::Int("start", 0), Attr::Int("end", 2)});
    std::string shape = b.op("Concat", {lead, b.const_i64({1, 4, 2})}, {Attr::Int("axis", 0)},
                             ValueType{DType::Int64, Shape{Dim::of(5)}});
    std::string e = b.op("Expand", {u2, shape}, {}, ValueType{DType::Float, std::nullopt});
    std::string rshape = b.op("Concat", {lead, b.const_i64({1, 8})}, {Attr::Int("axis", 0)});
    return b.op("Reshape", {e, rshape}, {}, f32({kB, kS, Dim::of(1), Dim::of(8)}));
  };
  b.add_input("cos8", f32({kB, kS, Dim::of(8)}));
  std::string s = repeat("sin");
  std::string c = k.repeated ? repeat("cos") : b.op("Unsqueeze", {"cos8", b.const_i64({2})});
  std::string ax = b.const_i64({3});
  std::string big = b.const_i64({INT64_MAX});
  std::string x = b.op("Slice", {"k", b.const_i64({0}), b.const_i64({8}), ax});
  std::string pass = b.op("Slice", {"k", b.const_i64({k.pass_start}), big, ax});
  std::string two = b.const_i64({2});
  std::string even = b.op("Slice", {x, b.const_i64({0}), big, ax, two});
  std::string odd = b.op("Slice", {x, b.const_i64({1}), big, ax, two});
  std::string last = b.const_i64({-1});
  std::string first = b.op("Unsqueeze", {b.op("Neg", {k.neg_even ? even : odd}), last});
  std::string second = b.op("Unsqueeze", {k.neg_even ? odd : even, last});
  std::string st = b.op("Concat", {first, second}, {Attr::Int("axis", 4)});
  std::string rot =
      b.op("Reshape", {st, b.const_i64({0, 0, 3, 8})}, {}, f32({kB, kS, Dim::of(3), Dim::of(8)}));
  std::string y = b.op("Add", {b.op("Mul", {x, c}), b.op("Mul", {rot, s})});
  std::string out = b.op("Concat", {y, pass}, {Attr::Int("axis", -1)});
  b.add_output(out, b.type(out));
  return b.take();
}

}  // namespace

TEST(FuseRotary, InterleavedPartialStandard23) {
  Graph g = interleaved();
  EXPECT_EQ(fuse(g, 23, Target::Standard), 1u);
  const Node* r = find(g, "RotaryEmbedding");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(int_attr(*r, "interleaved"), 1);
  EXPECT_EQ(int_attr(*r, "num_heads"), 3);
  EXPECT_EQ(int_attr(*r, "rotary_embedding_dim"), 8);
  ASSERT_EQ(r->inputs.size(), 3u);
  // cos first, sin second: the inputs themselves are the caches.
  EXPECT_EQ(r->inputs[1], "cos");
  EXPECT_EQ(r->inputs[2], "sin");
  EXPECT_EQ(count(g, "Slice"), 0);
  EXPECT_EQ(count(g, "Expand"), 0);
  EXPECT_EQ(count(g, "Reshape"), 2);  // k to [B, S, 48] and back
}

TEST(FuseRotary, InterleavedOnnxRuntime) {
  Graph g = interleaved();
  EXPECT_EQ(fuse(g, 17, Target::OnnxRuntime), 1u);
  const Node* r = find(g, "RotaryEmbedding");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->domain, "com.microsoft");
  EXPECT_EQ(int_attr(*r, "interleaved"), 1);
  EXPECT_EQ(int_attr(*r, "rotary_embedding_dim"), 8);
  EXPECT_EQ(r->inputs.size(), 4u);
}

TEST(FuseRotary, InterleavedNearMisses) {
  InterleavedKnobs k;
  k.neg_even = true;
  Graph g = interleaved(k);
  EXPECT_EQ(fuse(g, 23, Target::Standard), 0u);
  EXPECT_EQ(count(g, "RotaryEmbedding"), 0);
  k = {};
  k.repeated = false;  // cos [B, S, 8]: pairs not proven equal
  g = interleaved(k);
  EXPECT_EQ(fuse(g, 23, Target::Standard), 0u);
  EXPECT_EQ(count(g, "RotaryEmbedding"), 0);

  // The pass-through part starts elsewhere: the rotation of k[..., :8] is
  // still fused, without the partial form.
  k = {};
  k.pass_start = 9;
  g = interleaved(k);
  EXPECT_EQ(fuse(g, 23, Target::Standard), 1u);
  const Node* r = find(g, "RotaryEmbedding");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(int_attr(*r, "rotary_embedding_dim"), 8);
  EXPECT_EQ(count(g, "Concat"), 1);
  EXPECT_NE(g.type_of(r->inputs[0]), nullptr);
}
