// Pytree specs (treespec_dumps JSON) and the names of flattened inputs / outputs.
#include <gtest/gtest.h>

#include "pt2onnx/error.h"
#include "schema/treespec.h"

using namespace pt2onnx;
using namespace pt2onnx::schema;

namespace {

std::string leaf() { return R"({"type": null, "context": null, "children_spec": []})"; }
std::string node(const std::string& type, const std::string& context,
                 const std::vector<std::string>& kids) {
  std::string s =
      R"({"type": ")" + type + R"(", "context": )" + context + R"(, "children_spec": [)";
  for (size_t i = 0; i < kids.size(); ++i) s += (i ? ", " : "") + kids[i];
  return s + "]}";
}
std::string tuple(const std::vector<std::string>& kids) {
  return node("builtins.tuple", R"("null")", kids);
}
std::string spec(const std::string& root) { return "[1, " + root + "]"; }

using Names = std::vector<std::string>;

}  // namespace

TEST(TreeSpec, InputNamesFollowArgumentsAndPaths) {
  // forward(x, past, cache, n) called as (x, ((k0, v0), (k1, v1)), {"key": t}, None)
  // with kwargs {"extra": [t]}.
  std::string args = tuple({leaf(), tuple({tuple({leaf(), leaf()}), tuple({leaf(), leaf()})}),
                            node("builtins.dict", R"("[\"key\"]")", {leaf()}), leaf()});
  std::string kwargs =
      node("builtins.dict", R"("[\"extra\"]")", {node("builtins.list", R"("null")", {leaf()})});
  TreeSpec t = parse_treespec(spec(tuple({args, kwargs})), "in_spec");
  EXPECT_EQ(
      input_leaf_names(t, {"x", "past", "cache", "n", "extra"}),
      (Names{"x", "past.0.0", "past.0.1", "past.1.0", "past.1.1", "cache.key", "n", "extra.0"}));
  // More positional leaves than names (*args): input_<position>.
  EXPECT_EQ(input_leaf_names(t, {"x"})[1], "input_1.0.0");
}

TEST(TreeSpec, OutputNames) {
  std::string l = leaf();
  // A single tensor and the direct elements of a tuple keep their FX names.
  EXPECT_EQ(output_leaf_names(parse_treespec(spec(l), "o"), {"add"}), (Names{"add"}));
  TreeSpec t = parse_treespec(spec(tuple({l, tuple({l, l}), l})), "o");
  EXPECT_EQ(output_leaf_names(t, {"add", "mul", "mul_1", "cat"}),
            (Names{"add", "output_1.0", "output_1.1", "cat"}));
  // Dicts, OrderedDict subclasses (ModelOutput), dataclasses: by key.
  std::string past = tuple({node("builtins.dict", R"("[\"key\", \"value\"]")", {l, l})});
  TreeSpec d = parse_treespec(spec(node("transformers.modeling_outputs.CausalLMOutputWithPast",
                                        R"("[\"logits\", \"past_key_values\"]")", {l, past})),
                              "o");
  EXPECT_EQ(output_leaf_names(d, {"a", "b", "c"}),
            (Names{"logits", "past_key_values.0.key", "past_key_values.0.value"}));
  TreeSpec dc = parse_treespec(spec(node("m.Out", R"("[[\"a\", \"b\"], [\"c\"]]")",
                                         {l, node("builtins.list", "\"null\"", {l, l})})),
                               "o");
  EXPECT_EQ(output_leaf_names(dc, {"x", "y", "z"}), (Names{"a", "b.0", "b.1"}));
  TreeSpec dd = parse_treespec(
      spec(node(
          "collections.defaultdict",
          R"("{\"default_factory_module\": \"builtins\", \"default_factory_name\": \"list\", \"dict_context\": [\"p\", 3]}")",
          {l, l})),
      "o");
  EXPECT_EQ(output_leaf_names(dd, {"x", "y"}), (Names{"p", "3"}));
  // An empty key is named by its position.
  TreeSpec ek = parse_treespec(spec(node("builtins.dict", R"("[\"\", \"b\"]")", {l, l})), "o");
  EXPECT_EQ(output_leaf_names(ek, {"x", "y"}), (Names{"0", "b"}));
  // A registered namedtuple's context is its type name: positional.
  TreeSpec nt =
      parse_treespec(spec(node("collections.namedtuple", R"("\"m.NT\"")", {l, tuple({l})})), "o");
  EXPECT_EQ(output_leaf_names(nt, {"x", "y"}), (Names{"x", "output_1.0"}));
}

TEST(TreeSpec, DynamicCacheNamesAsHuggingFace) {
  // transformers' export registration: {key_cache: [k0, k1], value_cache: [v0, v1]} with the
  // context [dict keys, sliding-window layout].
  std::string l = leaf();
  auto list2 = [&] { return node("builtins.list", R"("null")", {l, l}); };
  std::string cache =
      node("transformers.cache_utils.DynamicCache",
           R"("[[\"key_cache\", \"value_cache\"], [null, null]]")", {list2(), list2()});
  std::string args = tuple({});
  std::string kwargs =
      node("builtins.dict", R"("[\"input_ids\", \"past_key_values\"]")", {l, cache});
  TreeSpec in = parse_treespec(spec(tuple({args, kwargs})), "in_spec");
  EXPECT_EQ(input_leaf_names(in, {}),
            (Names{"input_ids", "past_key_values.0.key", "past_key_values.1.key",
                   "past_key_values.0.value", "past_key_values.1.value"}));
  // Returned as a ModelOutput's past_key_values: the updated cache is `present`.
  TreeSpec out = parse_treespec(spec(node("transformers.modeling_outputs.CausalLMOutputWithPast",
                                          R"("[\"logits\", \"past_key_values\"]")", {l, cache})),
                                "out_spec");
  EXPECT_EQ(
      output_leaf_names(out, {"a", "b", "c", "d", "e"}),
      (Names{"logits", "present.0.key", "present.1.key", "present.0.value", "present.1.value"}));
  // Another class with the same keys is not a cache: named by its keys.
  std::string other =
      node("m.NotACache", R"("[\"key_cache\", \"value_cache\"]")", {list2(), list2()});
  TreeSpec o = parse_treespec(spec(node("builtins.dict", R"("[\"past_key_values\"]")", {other})),
                              "out_spec");
  EXPECT_EQ(output_leaf_names(o, {"a", "b", "c", "d"}),
            (Names{"past_key_values.key_cache.0", "past_key_values.key_cache.1",
                   "past_key_values.value_cache.0", "past_key_values.value_cache.1"}));
}

TEST(TreeSpec, EncoderDecoderCacheNamesAsOptimum) {
  // pt2onnx.hf's registration: {self_attention_cache: DynamicCache, cross_attention_cache:
  // DynamicCache}; the self-attention cache is <layer>.decoder.*, the cross one <layer>.encoder.*.
  std::string l = leaf();
  auto dyn = [&](size_t n) {
    std::vector<std::string> kids(n, l);
    std::string list = node("builtins.list", R"("null")", kids);
    return node("transformers.cache_utils.DynamicCache",
                R"("[[\"key_cache\", \"value_cache\"], []]")", {list, list});
  };
  auto edc = [&](size_t n_self, size_t n_cross) {
    return node("transformers.cache_utils.EncoderDecoderCache",
                R"("[\"self_attention_cache\", \"cross_attention_cache\"]")",
                {dyn(n_self), dyn(n_cross)});
  };
  std::string kwargs =
      node("builtins.dict", R"("[\"decoder_input_ids\", \"past_key_values\"]")", {l, edc(2, 2)});
  TreeSpec in = parse_treespec(spec(tuple({tuple({}), kwargs})), "in_spec");
  EXPECT_EQ(
      input_leaf_names(in, {}),
      (Names{"decoder_input_ids", "past_key_values.0.decoder.key", "past_key_values.1.decoder.key",
             "past_key_values.0.decoder.value", "past_key_values.1.decoder.value",
             "past_key_values.0.encoder.key", "past_key_values.1.encoder.key",
             "past_key_values.0.encoder.value", "past_key_values.1.encoder.value"}));
  // Returned with an empty cross-attention cache (a decoder step): present.<i>.decoder.*.
  TreeSpec out = parse_treespec(
      spec(node("builtins.dict", R"("[\"logits\", \"past_key_values\"]")", {l, edc(1, 0)})),
      "out_spec");
  EXPECT_EQ(output_leaf_names(out, {"a", "b", "c"}),
            (Names{"logits", "present.0.decoder.key", "present.0.decoder.value"}));
  // Another class with the same keys is not a cache: named by its keys.
  TreeSpec o = parse_treespec(
      spec(node("builtins.dict", R"("[\"past_key_values\"]")",
                {node("m.NotACache", R"("[\"self_attention_cache\", \"cross_attention_cache\"]")",
                      {dyn(1), dyn(0)})})),
      "out_spec");
  EXPECT_EQ(output_leaf_names(o, {"a", "b"}),
            (Names{"past_key_values.self_attention_cache.0.key",
                   "past_key_values.self_attention_cache.0.value"}));
}

TEST(TreeSpec, NamesAreUnique) {
  Names n{"a", "a", "a_1", "b", "a"};
  make_unique(n);
  EXPECT_EQ(n, (Names{"a", "a_2", "a_1", "b", "a_3"}));
  // A dict key "a.0" next to a nested a[0].
  std::string l = leaf();
  TreeSpec t =
      parse_treespec(spec(node("builtins.dict", R"("[\"a\", \"a.0\"]")", {tuple({l}), l})), "o");
  EXPECT_EQ(output_leaf_names(t, {"x", "y"}), (Names{"a.0", "a.0_1"}));
}

TEST(TreeSpec, BadSpecsAreErrors) {
  EXPECT_THROW(parse_treespec("[1, {", "s"), Error);
  EXPECT_THROW(parse_treespec("[2, " + leaf() + "]", "s"), Error);
  EXPECT_THROW(parse_treespec(R"([1, {"type": null, "children_spec": [)" + leaf() + "]}]", "s"),
               Error);
  EXPECT_THROW(parse_treespec(R"([1, {"type": "builtins.tuple"}])", "s"), Error);
  std::string deep = leaf();
  for (int i = 0; i < 300; ++i) deep = tuple({deep});
  EXPECT_THROW(parse_treespec(spec(deep), "s"), Error);
  // A context that lists no keys (or not one per child) leaves the node positional.
  TreeSpec t =
      parse_treespec(spec(node("builtins.dict", R"("[\"only\"]")", {leaf(), leaf()})), "s");
  EXPECT_TRUE(t.keys.empty());
}

TEST(TreeSpec, StateCacheLayersNamedByIndexAndPart) {
  // pt2onnx.hf's DynamicCache of state-space layers (python/pt2onnx/_hf_cache.py): one dict per
  // layer keyed by its index, context [[layer indices], [layer descriptions]].
  std::string l = leaf();
  std::string state = node("builtins.dict", R"("[\"conv_state\", \"recurrent_state\"]")", {l, l});
  std::string attn = node("builtins.dict", R"("[\"key\", \"value\"]")", {l, l});
  std::string cache =
      node("transformers.cache_utils.DynamicCache",
           R"("[[\"0\", \"1\"], [{\"class\": \"a\"}, {\"class\": \"b\"}]]")", {state, attn});
  std::string kwargs =
      node("builtins.dict", R"("[\"input_ids\", \"past_key_values\"]")", {l, cache});
  TreeSpec in = parse_treespec(spec(tuple({tuple({}), kwargs})), "in_spec");
  EXPECT_EQ(input_leaf_names(in, {}),
            (Names{"input_ids", "past_key_values.0.conv_state", "past_key_values.0.recurrent_state",
                   "past_key_values.1.key", "past_key_values.1.value"}));
  TreeSpec out = parse_treespec(
      spec(node("builtins.dict", R"("[\"logits\", \"past_key_values\"]")", {l, cache})),
      "out_spec");
  EXPECT_EQ(output_leaf_names(out, {"a", "b", "c", "d", "e"}),
            (Names{"logits", "present.0.conv_state", "present.0.recurrent_state", "present.1.key",
                   "present.1.value"}));
  // Another class laid out the same is not a cache: named by its keys.
  std::string other = node("m.NotACache", R"("[[\"0\"], [{}]]")", {state});
  TreeSpec o = parse_treespec(spec(node("builtins.dict", R"("[\"past_key_values\"]")", {other})),
                              "out_spec");
  EXPECT_EQ(output_leaf_names(o, {"a", "b"}),
            (Names{"past_key_values.0.conv_state", "past_key_values.0.recurrent_state"}));
}
