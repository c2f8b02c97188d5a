// Attention fusions (fuse_attention.cpp, fuse_group_query_attention.cpp,
// fuse_multi_head_attention.cpp, fuse_packed_qkv.cpp): the SDPA decomposition
// of convert/attention.cpp, built by hand, fused; each near miss left alone.
#include <gtest/gtest.h>

#include <cmath>

#include "ir/builder.h"
#include "opt/passes.h"

using namespace pt2onnx;

namespace {

const char* kSdpa = "torch.ops.aten.scaled_dot_product_attention.default";

ValueType f32(Shape s) { return ValueType{DType::Float, std::move(s)}; }
Dim sym(const char* s) { return Dim::symbol(s); }

struct Spec {
  enum Mask { Bool, Additive, Causal } mask = Bool;
  bool repeat = true;  // 4 query heads over 2 kv heads
  bool cache = true;   // k / v = Concat(past, new, axis 2)
  int64_t concat_axis = 2;
  bool scale_input = false;  // scale read from a graph input
  bool k_read_elsewhere = false;
  bool mask_last_dim_1 = false;
  bool past_not_input = false;
  bool mask_not_causal = false;  // the mask's LessOrEqual reads other operands
};

// q [B,4,L,16]; k, v [B,2,T,16] (T = P + L with a cache); the mask [B,1,L,T].
Graph build(const Spec& s) {
  GraphBuilder b(23);
  const int64_t kv = s.repeat ? 2 : 4;
  Dim B = sym("B"), L = sym("L"), P = sym("P"), T = s.cache ? sym("P + L") : sym("L");
  b.add_input("q", f32({B, Dim::of(4), L, Dim::of(16)}));
  std::string k = "k", v = "v";
  if (s.cache) {
    b.add_input("k_new", f32({B, Dim::of(kv), L, Dim::of(16)}));
    b.add_input("v_new", f32({B, Dim::of(kv), L, Dim::of(16)}));
    std::string pk = "past_k", pv = "past_v";
    if (s.past_not_input) {
      b.add_input("pk_src", f32({B, Dim::of(kv), P, Dim::of(16)}));
      b.add_input("pv_src", f32({B, Dim::of(kv), P, Dim::of(16)}));
      pk = b.op("Neg", {"pk_src"}, {}, f32({B, Dim::of(kv), P, Dim::of(16)}));
      pv = b.op("Neg", {"pv_src"}, {}, f32({B, Dim::of(kv), P, Dim::of(16)}));
    } else {
      b.add_input("past_k", f32({B, Dim::of(kv), P, Dim::of(16)}));
      b.add_input("past_v", f32({B, Dim::of(kv), P, Dim::of(16)}));
    }
    ValueType kt = f32({B, Dim::of(kv), T, Dim::of(16)});
    k = b.op("Concat", {pk, "k_new"}, {Attr::Int("axis", s.concat_axis)}, kt);
    v = b.op("Concat", {pv, "v_new"}, {Attr::Int("axis", s.concat_axis)}, kt);
  } else {
    b.add_input("k", f32({B, Dim::of(kv), T, Dim::of(16)}));
    b.add_input("v", f32({B, Dim::of(kv), T, Dim::of(16)}));
  }
  // The mask, transformers-style: And(LessOrEqual(cols, rows + P), padding).
  std::string mask;
  if (s.mask != Spec::Causal) {
    b.add_input("padding", ValueType{DType::Bool, Shape{B, Dim::of(1), L, T}});
    std::string zero = b.scalar_i64(0), one = b.scalar_i64(1);
    std::string tlen =
        b.op("Squeeze",
             {b.op("Shape", {"padding"}, {Attr::Int("start", 3), Attr::Int("end", 4)},
                   ValueType{DType::Int64, Shape{Dim::of(1)}}),
              b.const_i64({0})},
             {}, ValueType{DType::Int64, Shape{}});
    std::string llen = b.op("Squeeze",
                            {b.op("Shape", {"q"}, {Attr::Int("start", 2), Attr::Int("end", 3)},
                                  ValueType{DType::Int64, Shape{Dim::of(1)}}),
                             b.const_i64({0})},
                            {}, ValueType{DType::Int64, Shape{}});
    std::string cols = b.op("Range", {zero, tlen, one}, {}, ValueType{DType::Int64, Shape{T}});
    std::string rows = b.op("Range", {zero, llen, one}, {}, ValueType{DType::Int64, Shape{L}});
    if (s.cache) {
      std::string plen = b.op("Squeeze",
                              {b.op("Shape", {s.past_not_input ? "pk_src" : "past_k"},
                                    {Attr::Int("start", 2), Attr::Int("end", 3)},
                                    ValueType{DType::Int64, Shape{Dim::of(1)}}),
                               b.const_i64({0})},
                              {}, ValueType{DType::Int64, Shape{}});
      rows = b.op("Add", {rows, plen}, {}, ValueType{DType::Int64, Shape{L}});
    }
    cols = b.op("Unsqueeze", {cols, b.const_i64({0, 1, 2})}, {},
                ValueType{DType::Int64, Shape{Dim::of(1), Dim::of(1), Dim::of(1), T}});
    rows = b.op("Unsqueeze", {rows, b.const_i64({0, 1, 3})}, {},
                ValueType{DType::Int64, Shape{Dim::of(1), Dim::of(1), L, Dim::of(1)}});
    Shape ms{B, Dim::of(1), L, s.mask_last_dim_1 ? Dim::of(1) : T};
    std::string le = s.mask_not_causal
                         ? b.op("LessOrEqual", {rows, cols}, {},
                                ValueType{DType::Bool, Shape{Dim::of(1), Dim::of(1), L, T}})
                         : b.op("LessOrEqual", {cols, rows}, {},
                                ValueType{DType::Bool, Shape{Dim::of(1), Dim::of(1), L, T}});
    std::string pad = "padding";
    if (s.mask_last_dim_1) {
      b.add_input("pad1", ValueType{DType::Bool, ms});
      pad = "pad1";
      le = b.op("Identity", {"pad1"}, {}, ValueType{DType::Bool, ms});
    }
    mask = b.op("And", {le, pad}, {}, ValueType{DType::Bool, ms});
    if (s.mask == Spec::Additive)
      mask = b.op("Where", {mask, b.scalar(DType::Float, 0.0), b.scalar(DType::Float, -INFINITY)},
                  {}, f32(ms));
  }
  if (s.scale_input) b.add_input("scale", f32({}));

  b.set_origin("sdpa", kSdpa, "attn");
  auto repeat = [&](const std::string& x) {
    std::string u = b.op("Unsqueeze", {x, b.const_i64({2})}, {},
                         f32({B, Dim::of(2), Dim::of(1), T, Dim::of(16)}));
    std::string e = b.op("Expand", {u, b.const_i64({1, 1, 2, 1, 1})}, {},
                         f32({B, Dim::of(2), Dim::of(2), T, Dim::of(16)}));
    return b.op("Reshape", {e, b.const_i64({0, 4, -1, 16})}, {},
                f32({B, Dim::of(4), T, Dim::of(16)}));
  };
  std::string kr = s.repeat ? repeat(k) : k, vr = s.repeat ? repeat(v) : v;
  ValueType st = f32({B, Dim::of(4), L, T});
  std::string kt = b.op("Transpose", {kr}, {Attr::Ints("perm", {0, 1, 3, 2})},
                        f32({B, Dim::of(4), Dim::of(16), T}));
  std::string sc = b.op("MatMul", {"q", kt}, {}, st);
  sc = b.op("Mul", {sc, s.scale_input ? "scale" : b.scalar(DType::Float, 0.25)}, {}, st);
  if (s.mask == Spec::Bool) {
    sc = b.op("Where", {mask, sc, b.scalar(DType::Float, -INFINITY)}, {}, st);
  } else if (s.mask == Spec::Additive) {
    sc = b.op("Add", {sc, mask}, {}, st);
  } else {
    std::string zero = b.scalar_i64(0), one = b.scalar_i64(1);
    std::string ll = b.op("Squeeze",
                          {b.op("Shape", {"q"}, {Attr::Int("start", 2), Attr::Int("end", 3)},
                                ValueType{DType::Int64, Shape{Dim::of(1)}}),
                           b.const_i64({0})},
                          {}, ValueType{DType::Int64, Shape{}});
    std::string tl = b.op("Squeeze",
                          {b.op("Shape", {k}, {Attr::Int("start", 2), Attr::Int("end", 3)},
                                ValueType{DType::Int64, Shape{Dim::of(1)}}),
                           b.const_i64({0})},
                          {}, ValueType{DType::Int64, Shape{}});
    std::string rows = b.op(
        "Unsqueeze",
        {b.op("Range", {zero, ll, one}, {}, ValueType{DType::Int64, Shape{L}}), b.const_i64({1})},
        {}, ValueType{DType::Int64, Shape{L, Dim::of(1)}});
    std::string cols = b.op(
        "Unsqueeze",
        {b.op("Range", {zero, tl, one}, {}, ValueType{DType::Int64, Shape{T}}), b.const_i64({0})},
        {}, ValueType{DType::Int64, Shape{Dim::of(1), T}});
    std::string c = b.op("LessOrEqual", {cols, rows}, {}, ValueType{DType::Bool, Shape{L, T}});
    sc = b.op("Where", {c, sc, b.scalar(DType::Float, -INFINITY)}, {}, st);
  }
  std::string p = b.op("Softmax", {sc}, {Attr::Int("axis", -1)}, st);
  if (s.mask == Spec::Bool)
    p = b.op("Where", {mask, p, b.scalar(DType::Float, 0.0)}, {}, st);
  else if (s.mask == Spec::Additive)
    p = b.op(
        "Where",
        {b.op("IsNaN", {p}, {}, ValueType{DType::Bool, st.shape}), b.scalar(DType::Float, 0.0), p},
        {}, st);
  std::string y = b.op("MatMul", {p, vr}, {}, f32({B, Dim::of(4), L, Dim::of(16)}));
  b.set_origin("", "", "");
  b.add_output(y, b.type(y));
  if (s.cache) {
    b.add_output(k, b.type(k));
    b.add_output(v, b.type(v));
  }
  if (s.k_read_elsewhere) {
    std::string n = b.op("Neg", {kt}, {}, b.type(kt));
    b.add_output(n, b.type(n));
  }
  return b.take();
}

size_t count(const Graph& g, const std::string& op) {
  size_t n = 0;
  for (auto& x : g.nodes) n += x.op_type == op;
  return n;
}

const Node* find(const Graph& g, const std::string& op) {
  for (auto& x : g.nodes)
    if (x.op_type == op) return &x;
  return nullptr;
}

PassOptions standard23{23, Target::Standard};
PassOptions ort18{18, Target::OnnxRuntime};

}  // namespace

TEST(FuseAttention, BoolMaskCacheGqa) {
  Graph g = build({});
  ASSERT_EQ(fuse_attention(g, standard23), 1u);
  run_default_passes(g, standard23);
  const Node* a = find(g, "Attention");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->inputs[0], "q");
  EXPECT_EQ(a->inputs[1], "k_new");  // no repeat: the op groups heads itself
  EXPECT_EQ(a->inputs[2], "v_new");
  EXPECT_EQ(a->inputs[4], "past_k");
  EXPECT_EQ(a->inputs[5], "past_v");
  ASSERT_EQ(a->outputs.size(), 3u);
  EXPECT_EQ(a->outputs[1], g.outputs[1].name);  // present key: the graph output
  EXPECT_FLOAT_EQ(a->attr("scale")->f, 0.25f);
  EXPECT_EQ(a->attr("is_causal"), nullptr);
  EXPECT_EQ(count(g, "Softmax"), 0u);
  EXPECT_EQ(count(g, "Concat"), 0u);
  EXPECT_EQ(count(g, "Expand"), 0u);
  EXPECT_EQ(count(g, "ReduceMax"), 1u);  // fully masked rows -> 0
}

TEST(FuseAttention, AdditiveMask) {
  Spec s;
  s.mask = Spec::Additive;
  Graph g = build(s);
  ASSERT_EQ(fuse_attention(g, standard23), 1u);
  EXPECT_NE(find(g, "Greater"), nullptr);
}

TEST(FuseAttention, CausalWithoutCacheIsCausal) {
  Spec s;
  s.mask = Spec::Causal;
  s.cache = false;
  Graph g = build(s);
  ASSERT_EQ(fuse_attention(g, standard23), 1u);
  const Node* a = find(g, "Attention");
  ASSERT_NE(a->attr("is_causal"), nullptr);
  EXPECT_EQ(a->attr("is_causal")->i, 1);
  EXPECT_EQ(a->inputs.size(), 3u);
}

TEST(FuseAttention, CausalOtherLengthsPassesTheMask) {
  // Attention aligns is_causal bottom-right, torch top-left: with L != T the
  // decomposition's own mask is passed. (Its Shape(k) reads the Concat, so
  // the Concat stays: no cache.)
  Spec s;
  s.mask = Spec::Causal;
  Graph g = build(s);
  ASSERT_EQ(fuse_attention(g, standard23), 1u);
  const Node* a = find(g, "Attention");
  EXPECT_EQ(a->attr("is_causal"), nullptr);
  ASSERT_EQ(a->inputs.size(), 4u);
  EXPECT_EQ(count(g, "Concat"), 2u);
}

TEST(FuseAttention, NotBeforeOpset23) {
  Graph g = build({});
  EXPECT_EQ(fuse_attention(g, PassOptions{22, Target::Standard}), 0u);
}

TEST(FuseAttention, NearMissesLeftAlone) {
  auto none = [](Spec s) {
    Graph g = build(s);
    return fuse_attention(g, standard23) == 0 && fuse_group_query_attention(g, ort18) == 0;
  };
  Spec s;
  s.scale_input = true;
  EXPECT_TRUE(none(s)) << "scale not a constant";
  s = {};
  s.k_read_elsewhere = true;
  EXPECT_TRUE(none(s)) << "transposed k read elsewhere";
  s = {};
  s.mask_last_dim_1 = true;
  EXPECT_TRUE(none(s)) << "mask not of [., ., L, T]";
}

TEST(FuseAttention, CacheOnAnotherAxisIsNoCache) {
  // Concat on axis 1 (heads) is no KV cache: fused without past inputs; no GQA.
  Spec s;
  s.concat_axis = 1;
  Graph g = build(s);
  EXPECT_EQ(fuse_group_query_attention(g, ort18), 0u);
  ASSERT_EQ(fuse_attention(g, standard23), 1u);
  EXPECT_EQ(find(g, "Attention")->inputs.size(), 4u);
  EXPECT_EQ(count(g, "Concat"), 2u);
}

TEST(FuseGroupQueryAttention, DecoderWithCache) {
  Graph g = build({});
  ASSERT_EQ(fuse_group_query_attention(g, ort18), 1u);
  run_default_passes(g, ort18);
  const Node* a = find(g, "GroupQueryAttention");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->domain, "com.microsoft");
  EXPECT_EQ(a->attr("num_heads")->i, 4);
  EXPECT_EQ(a->attr("kv_num_heads")->i, 2);
  EXPECT_FLOAT_EQ(a->attr("scale")->f, 0.25f);
  ASSERT_EQ(a->inputs.size(), 17u);
  EXPECT_EQ(a->inputs[3], "past_k");
  EXPECT_EQ(a->inputs[4], "past_v");
  EXPECT_FALSE(a->inputs[10].empty());  // attention_bias: the model's mask
  EXPECT_FALSE(a->inputs[16].empty());  // query_seqlens
  EXPECT_EQ(a->outputs[1], g.outputs[1].name);
  EXPECT_EQ(g.types.at(a->inputs[0]).shape->back(), Dim::of(64));
  EXPECT_EQ(g.types.at(a->inputs[5]).dtype, DType::Int32);
  EXPECT_EQ(count(g, "Softmax"), 0u);
  EXPECT_EQ(g.domain_versions.count("com.microsoft"), 1u);
}

TEST(FuseGroupQueryAttention, NearMisses) {
  auto gqa = [](Spec s, PassOptions o = ort18) {
    Graph g = build(s);
    return fuse_group_query_attention(g, o);
  };
  EXPECT_EQ(gqa({}, PassOptions{23, Target::Standard}), 0u) << "standard target";
  Spec s;
  s.cache = false;
  EXPECT_EQ(gqa(s), 0u) << "no cache";
  s = {};
  s.mask = Spec::Additive;
  EXPECT_EQ(gqa(s), 0u) << "additive mask";
  s = {};
  s.mask_not_causal = true;
  EXPECT_EQ(gqa(s), 0u) << "mask not proved causal (LessOrEqual(rows, cols))";
  s = {};
  s.past_not_input = true;
  EXPECT_EQ(gqa(s), 0u) << "past not a graph input";
}

// q and k_new as com.microsoft RotaryEmbedding outputs (fuse_rotary's form)
// of q_raw / k_raw, with position ids and [N, 8] caches. `k_cos` reads other
// caches for k; `k_attrs` gives k's rotary these attributes.
Graph with_rotary(Graph g, bool k_other_caches = false, std::vector<Attr> k_attrs = {},
                  bool interleaved = false) {
  Dim B = sym("B"), L = sym("L");
  auto rename_input = [&](const std::string& from, const std::string& to) {
    for (auto& i : g.inputs)
      if (i.name == from) i.name = to;
    g.types[to] = g.types.at(from);
  };
  rename_input("q", "q_raw");
  rename_input("k_new", "k_raw");
  // The mask's Shape reads go to the raw values (same shapes), as in a model,
  // where the rotated q / k are read by the attention alone.
  for (auto& n : g.nodes)
    if (n.op_type == "Shape")
      for (auto& i : n.inputs) i = i == "q" ? "q_raw" : i == "k_new" ? "k_raw" : i;
  g.inputs.push_back({"pos", ValueType{DType::Int64, Shape{B, L}}});
  for (const char* c : {"cos", "sin", "cos2"}) {
    g.inputs.push_back({c, f32({sym("N"), Dim::of(8)})});
    g.types[c] = f32({sym("N"), Dim::of(8)});
  }
  g.types["pos"] = ValueType{DType::Int64, Shape{B, L}};
  std::vector<Attr> qa;
  if (interleaved) {
    qa.push_back(Attr::Int("interleaved", 1));
    k_attrs.push_back(Attr::Int("interleaved", 1));
  }
  Node rq{"RotaryEmbedding", "com.microsoft", "rot_q", {"q_raw", "pos", "cos", "sin"}, {"q"}, qa};
  Node rk{"RotaryEmbedding", "com.microsoft",
          "rot_k",           {"k_raw", "pos", k_other_caches ? "cos2" : "cos", "sin"},
          {"k_new"},         k_attrs};
  g.nodes.insert(g.nodes.begin(), {rq, rk});
  g.domain_versions["com.microsoft"] = 1;
  return g;
}

TEST(FuseGroupQueryAttention, RotaryInside) {
  for (bool interleaved : {false, true}) {
    Graph g = with_rotary(build({}), false, {}, interleaved);
    ASSERT_EQ(fuse_group_query_attention(g, ort18), 1u);
    run_default_passes(g, ort18);
    EXPECT_EQ(count(g, "RotaryEmbedding"), 0u);
    const Node* a = find(g, "GroupQueryAttention");
    ASSERT_NE(a, nullptr);
    ASSERT_NE(a->attr("do_rotary"), nullptr);
    EXPECT_EQ(a->attr("do_rotary")->i, 1);
    EXPECT_EQ(a->attr("rotary_interleaved") != nullptr, interleaved);
    EXPECT_EQ(a->inputs[9], "pos");
    // The caches padded by total_sequence_length rows (a Pad of each).
    for (size_t i : {7u, 8u}) {
      const Node* pad = nullptr;
      for (auto& n : g.nodes)
        if (!n.outputs.empty() && n.outputs[0] == a->inputs[i]) pad = &n;
      ASSERT_NE(pad, nullptr);
      EXPECT_EQ(pad->op_type, "Pad");
      EXPECT_EQ(pad->inputs[0], i == 7 ? "cos" : "sin");
    }
    // q / k reach GQA unrotated: the raw inputs, through layout ops only.
    std::string q = a->inputs[0];
    for (int hop = 0; hop < 4 && q != "q_raw"; ++hop)
      for (auto& n : g.nodes)
        if (!n.outputs.empty() && n.outputs[0] == q) q = n.inputs[0];
    EXPECT_EQ(q, "q_raw");
  }
}

TEST(FuseGroupQueryAttention, RotaryLeftOutsideOnNearMisses) {
  auto rotaries_left = [](Graph g) {
    EXPECT_EQ(fuse_group_query_attention(g, ort18), 1u);
    const Node* a = find(g, "GroupQueryAttention");
    EXPECT_EQ(a->attr("do_rotary"), nullptr);
    EXPECT_TRUE(a->inputs[9].empty());
    run_default_passes(g, ort18);
    return count(g, "RotaryEmbedding");
  };
  EXPECT_EQ(rotaries_left(with_rotary(build({}), true)), 2u) << "q and k with other caches";
  EXPECT_EQ(rotaries_left(with_rotary(build({}), false, {Attr::Int("rotary_embedding_dim", 8)})),
            2u)
      << "k rotated in part";
  {  // k's rotary output read elsewhere too
    Graph g = with_rotary(build({}));
    g.outputs.push_back({"k_new", g.types.at("k_new")});
    EXPECT_EQ(rotaries_left(g), 2u) << "rotated k read elsewhere";
  }
}

// ---- fuse_packed_qkv: a GQA node over projections of one activation.

struct PackSpec {
  bool bias = true;
  bool other_activation = false;  // v projects another input
  bool tied = false;              // W_k read elsewhere too
  bool bias_on_q_only = false;
  int64_t nk = 32;  // W_k's N (kv_num_heads * 16 = 32 when right)
};

Graph build_gqa_over_projections(const PackSpec& s) {
  GraphBuilder b(18);
  Dim B = sym("B"), L = sym("L"), P = sym("P");
  b.add_input("x", f32({B, L, Dim::of(8)}));
  b.add_input("x2", f32({B, L, Dim::of(8)}));
  b.add_input("past_k", f32({B, Dim::of(2), P, Dim::of(16)}));
  b.add_input("past_v", f32({B, Dim::of(2), P, Dim::of(16)}));
  b.add_input("seqlens", ValueType{DType::Int32, Shape{B}});
  b.add_input("total", ValueType{DType::Int32, Shape{}});
  std::vector<std::string> qkv;
  const int64_t ns[3] = {64, s.nk, 32};
  for (int i = 0; i < 3; ++i) {
    std::vector<float> w;
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < ns[i]; ++c) w.push_back(float(1000 * i + 100 * r + c));
    std::string wn = b.initializer("w" + std::to_string(i),
                                   TensorData::from_vector(DType::Float, {8, ns[i]}, w));
    std::string a = (i == 2 && s.other_activation) ? "x2" : "x";
    std::string y = b.op("MatMul", {a, wn}, {}, f32({B, L, Dim::of(ns[i])}));
    if (s.bias || (s.bias_on_q_only && i == 0)) {
      std::vector<float> bv(static_cast<size_t>(ns[i]), float(i + 1));
      std::string bn = b.initializer("b" + std::to_string(i),
                                     TensorData::from_vector(DType::Float, {ns[i]}, bv));
      y = b.op("Add", {bn, y}, {}, f32({B, L, Dim::of(ns[i])}));
    }
    qkv.push_back(y);
  }
  if (s.tied) {
    std::string t = b.op("Transpose", {"w1"}, {}, f32({Dim::of(s.nk), Dim::of(8)}));
    b.add_output(t, f32({Dim::of(s.nk), Dim::of(8)}));
  }
  auto outs = b.add_node("GroupQueryAttention",
                         {qkv[0], qkv[1], qkv[2], "past_k", "past_v", "seqlens", "total"}, 3,
                         {Attr::Int("num_heads", 4), Attr::Int("kv_num_heads", 2)},
                         {f32({B, L, Dim::of(64)}), f32({B, Dim::of(2), sym("T"), Dim::of(16)}),
                          f32({B, Dim::of(2), sym("T"), Dim::of(16)})},
                         "com.microsoft");
  for (auto& o : outs) b.add_output(o, b.type(o));
  return b.take();
}

const TensorData* init(const Graph& g, const std::string& name) {
  for (auto& i : g.initializers)
    if (i.name == name) return &i.data;
  return nullptr;
}

TEST(FusePackedQkv, ProjectionsBecomeThePackedQuery) {
  for (bool bias : {true, false}) {
    PackSpec s;
    s.bias = bias;
    Graph g = build_gqa_over_projections(s);
    Graph std_g = g;
    EXPECT_EQ(fuse_packed_qkv(std_g, standard23), 0u);
    ASSERT_EQ(fuse_packed_qkv(g, ort18), 1u);
    run_default_passes(g, ort18);
    EXPECT_EQ(count(g, "MatMul"), 1u);
    const Node* a = find(g, "GroupQueryAttention");
    ASSERT_NE(a, nullptr);
    EXPECT_TRUE(a->inputs[1].empty());
    EXPECT_TRUE(a->inputs[2].empty());
    EXPECT_EQ(g.types.at(a->inputs[0]).shape->back(), Dim::of(128));
    const Node* mm = find(g, "MatMul");
    const TensorData* w = init(g, mm->inputs[1]);
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->dims, (std::vector<int64_t>{8, 128}));
    // Row 3: W_q's row 3, then W_k's, then W_v's.
    const float* row = w->as<float>() + 3 * 128;
    EXPECT_EQ(row[0], 300.0f);
    EXPECT_EQ(row[63], 363.0f);
    EXPECT_EQ(row[64], 1300.0f);
    EXPECT_EQ(row[96], 2300.0f);
    EXPECT_EQ(row[127], 2331.0f);
    if (bias) {
      const Node* add = find(g, "Add");
      ASSERT_NE(add, nullptr);
      EXPECT_EQ(add->outputs[0], a->inputs[0]);
      const TensorData* bv = init(g, add->inputs[1]);
      ASSERT_NE(bv, nullptr);
      EXPECT_EQ(bv->as<float>()[0], 1.0f);
      EXPECT_EQ(bv->as<float>()[64], 2.0f);
      EXPECT_EQ(bv->as<float>()[127], 3.0f);
    } else {
      EXPECT_EQ(mm->outputs[0], a->inputs[0]);
    }
  }
}

// q, k, v as the consecutive thirds of one value (Phi-3's qkv_proj), sliced
// on the last axis; `gap` shifts k's slice by one.
Graph build_gqa_over_slices(int64_t gap = 0) {
  GraphBuilder b(18);
  Dim B = sym("B"), L = sym("L"), P = sym("P");
  b.add_input("qkv", f32({B, L, Dim::of(128)}));
  b.add_input("past_k", f32({B, Dim::of(2), P, Dim::of(16)}));
  b.add_input("past_v", f32({B, Dim::of(2), P, Dim::of(16)}));
  b.add_input("seqlens", ValueType{DType::Int32, Shape{B}});
  b.add_input("total", ValueType{DType::Int32, Shape{}});
  auto slice = [&](int64_t s, int64_t e) {
    return b.op("Slice", {"qkv", b.const_i64({s}), b.const_i64({e}), b.const_i64({-1})}, {},
                f32({B, L, Dim::of(e - s)}));
  };
  std::string q = slice(0, 64), k = slice(64 + gap, 96 + gap), v = slice(96, 128);
  auto outs = b.add_node("GroupQueryAttention", {q, k, v, "past_k", "past_v", "seqlens", "total"},
                         3, {Attr::Int("num_heads", 4), Attr::Int("kv_num_heads", 2)},
                         {f32({B, L, Dim::of(64)}), f32({B, Dim::of(2), sym("T"), Dim::of(16)}),
                          f32({B, Dim::of(2), sym("T"), Dim::of(16)})},
                         "com.microsoft");
  for (auto& o : outs) b.add_output(o, b.type(o));
  return b.take();
}

TEST(FusePackedQkv, ModelPackedProjectionReadAsItIs) {
  Graph g = build_gqa_over_slices();
  ASSERT_EQ(fuse_packed_qkv(g, ort18), 1u);
  run_default_passes(g, ort18);
  const Node* a = find(g, "GroupQueryAttention");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->inputs[0], "qkv");
  EXPECT_TRUE(a->inputs[1].empty() && a->inputs[2].empty());
  EXPECT_EQ(count(g, "Slice"), 0u);
  Graph gap = build_gqa_over_slices(-1);
  EXPECT_EQ(fuse_packed_qkv(gap, ort18), 0u) << "k not right after q";
}

TEST(FusePackedQkv, NearMissesLeftAlone) {
  auto packed = [](PackSpec s) {
    Graph g = build_gqa_over_projections(s);
    return fuse_packed_qkv(g, ort18);
  };
  PackSpec s;
  s.other_activation = true;
  EXPECT_EQ(packed(s), 0u) << "v projects another activation";
  s = {};
  s.tied = true;
  EXPECT_EQ(packed(s), 0u) << "W_k read elsewhere";
  s = {};
  s.bias = false;
  s.bias_on_q_only = true;
  EXPECT_EQ(packed(s), 0u) << "bias on q only";
  s = {};
  s.nk = 48;
  EXPECT_EQ(packed(s), 0u) << "W_k's N is not kv_num_heads * head size";
}

TEST(FuseMultiHeadAttention, EncoderWithoutCache) {
  Spec s;
  s.cache = false;
  s.repeat = false;
  Graph g = build(s);
  ASSERT_EQ(fuse_multi_head_attention(g, ort18), 1u);
  run_default_passes(g, ort18);
  const Node* a = find(g, "MultiHeadAttention");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->domain, "com.microsoft");
  EXPECT_EQ(a->attr("num_heads")->i, 4);
  ASSERT_EQ(a->inputs.size(), 6u);
  EXPECT_FALSE(a->inputs[5].empty());    // attention_bias
  EXPECT_EQ(count(g, "ReduceMax"), 1u);  // fully masked rows -> 0 (MHA gives NaN)
  EXPECT_EQ(count(g, "Softmax"), 0u);
}

TEST(FuseMultiHeadAttention, NearMisses) {
  auto mha = [](Spec s, PassOptions o = ort18) {
    Graph g = build(s);
    return fuse_multi_head_attention(g, o);
  };
  Spec s;
  s.cache = false;
  EXPECT_EQ(mha(s), 0u) << "fewer kv heads (repeat)";
  s.repeat = false;
  EXPECT_EQ(mha(s, standard23), 0u) << "standard target";
  s.cache = true;
  EXPECT_EQ(mha(s), 0u) << "KV cache";
}

namespace {

// The output of the first node of type `op` (a value build() names itself).
std::string output_of(const Graph& g, const std::string& op) { return find(g, op)->outputs[0]; }

// Each attention fusion over build(s) with value `v` made of unknown rank
// (`erase`: of no type at all): how many fused; none may throw or crash.
std::vector<size_t> fused_with_unknown(Spec s, const std::string& v, bool erase = false) {
  std::vector<size_t> n;
  for (int pass = 0; pass < 3; ++pass) {
    Graph g = build(s);
    std::string name = v == "Softmax" || v == "And" ? output_of(g, v)
                       : v == "y"                   ? g.outputs[0].name
                                                    : v;
    if (erase)
      g.types.erase(name);
    else
      g.types[name] = ValueType{DType::Float, std::nullopt};
    n.push_back(pass == 0   ? fuse_attention(g, standard23)
                : pass == 1 ? fuse_group_query_attention(g, ort18)
                            : fuse_multi_head_attention(g, ort18));
  }
  return n;
}

}  // namespace

// A value of unknown rank anywhere in the pattern is no match (the matcher
// proves every shape it reads); the output's rank is not needed. An output of
// no type at all was a null read in each fusion (`*g.type_of(y)`).
TEST(FuseAttention, UnknownRankIsNoMatch) {
  const std::vector<size_t> none{0, 0, 0};
  Spec mha;
  mha.cache = false;
  mha.repeat = false;
  for (const Spec& s : {Spec{}, mha}) {
    SCOPED_TRACE(s.cache ? "cache" : "no cache");
    for (const char* v : {"q", "Softmax", "And"}) EXPECT_EQ(fused_with_unknown(s, v), none) << v;
    EXPECT_EQ(fused_with_unknown(s, "y", true), none) << "untyped output";
  }
  EXPECT_EQ(fused_with_unknown({}, "past_k"), (std::vector<size_t>{1, 0, 0}))
      << "GroupQueryAttention reads the cache's dims; Attention takes it as it is";
  EXPECT_EQ(fused_with_unknown({}, "k_new"), (std::vector<size_t>{1, 0, 0}));
  EXPECT_EQ(fused_with_unknown({}, "y"), (std::vector<size_t>{1, 1, 0}));
  EXPECT_EQ(fused_with_unknown(mha, "y"), (std::vector<size_t>{1, 0, 1}));
}
