#include "schema/treespec.h"

#include <simdjson.h>

#include <set>

#include "pt2onnx/error.h"

namespace pt2onnx::schema {

namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

// Deeper trees than this are refused: a hostile spec must not recurse the
// reader off the stack.
constexpr int kMaxDepth = 256;

struct SpecReader {
  std::string source;

  [[noreturn]] void fail(const std::string& path, const std::string& why) const {
    throw Error(source + ": " + path + ": " + why);
  }

  // A context's keys when it lists one per child: a JSON array of strings /
  // integers (dicts, OrderedDict, ModelOutput), [[names], [none names]]
  // (dataclasses), or {"dict_context": [...]} (defaultdict).
  static std::vector<std::string> keys_of(std::string_view context, size_t n_children) {
    if (n_children == 0) return {};
    simdjson::dom::parser parser;
    element root;
    if (parser.parse(context.data(), context.size()).get(root)) return {};
    auto key_list = [&](element e) -> std::vector<std::string> {
      array a;
      if (e.get_array().get(a) || a.size() != n_children) return {};
      std::vector<std::string> keys;
      for (element k : a) {
        std::string_view s;
        int64_t i;
        if (!k.get_string().get(s))
          keys.emplace_back(s);
        else if (!k.get_int64().get(i))
          keys.push_back(std::to_string(i));
        else
          return {};
      }
      return keys;
    };
    if (auto keys = key_list(root); !keys.empty()) return keys;
    array a;
    if (!root.get_array().get(a) && a.size() == 2) return key_list(a.at(0).value_unsafe());
    object o;
    element dc;
    if (!root.get_object().get(o) && !o.at_key("dict_context").get(dc)) return key_list(dc);
    return {};
  }

  TreeSpec node(element e, const std::string& path, int depth) const {
    if (depth > kMaxDepth) fail(path, "tree nested deeper than " + std::to_string(kMaxDepth));
    object o;
    if (e.get_object().get(o)) fail(path, "expected a JSON object");
    TreeSpec t;
    element type;
    if (!o.at_key("type").get(type) && !type.is_null()) {
      std::string_view s;
      if (type.get_string().get(s) || s.empty()) fail(path + ".type", "expected a type name");
      t.type = std::string(s);
    }
    element children;
    array ch;
    if (o.at_key("children_spec").get(children) || children.get_array().get(ch))
      fail(path, "missing array 'children_spec'");
    if (t.is_leaf()) {
      if (ch.size() != 0) fail(path, "a leaf (type null) has children");
      return t;
    }
    size_t i = 0;
    for (element c : ch)
      t.children.push_back(
          node(c, path + ".children_spec[" + std::to_string(i++) + "]", depth + 1));
    element context;
    std::string_view ctx;
    if (!o.at_key("context").get(context) && !context.get_string().get(ctx))
      t.keys = keys_of(ctx, t.children.size());
    return t;
  }
};

// transformers' DynamicCache, as its own export registration flattens it:
// {key_cache: [k0, k1, ...], value_cache: [v0, v1, ...]}.
bool is_dynamic_cache(const TreeSpec& t) {
  const std::string_view suffix = ".DynamicCache";
  return t.type.size() > suffix.size() &&
         t.type.compare(t.type.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         t.keys == std::vector<std::string>{"key_cache", "value_cache"} && t.children.size() == 2;
}

// transformers' DynamicCache holding state-space / linear-attention layers, as
// pt2onnx.hf registers it (python/pt2onnx/_hf_cache.py): one dict per layer, keyed
// by the layer's index ({0: {conv_state, recurrent_state}, 1: {key, value}, ...}),
// named by their paths (past_key_values.0.conv_state).
bool is_layered_dynamic_cache(const TreeSpec& t) {
  const std::string_view suffix = ".DynamicCache";
  if (t.type.size() <= suffix.size() ||
      t.type.compare(t.type.size() - suffix.size(), suffix.size(), suffix) != 0 ||
      t.keys.size() != t.children.size() || t.children.empty())
    return false;
  for (size_t i = 0; i < t.keys.size(); ++i)
    if (t.keys[i] != std::to_string(i) || t.children[i].is_leaf()) return false;
  return true;
}

// transformers' EncoderDecoderCache as pt2onnx.hf registers it: {self_attention_cache:
// DynamicCache, cross_attention_cache: DynamicCache}.
bool is_encoder_decoder_cache(const TreeSpec& t) {
  const std::string_view suffix = ".EncoderDecoderCache";
  return t.type.size() > suffix.size() &&
         t.type.compare(t.type.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         t.keys == std::vector<std::string>{"self_attention_cache", "cross_attention_cache"} &&
         t.children.size() == 2 && is_dynamic_cache(t.children[0]) &&
         is_dynamic_cache(t.children[1]);
}

void collect(const TreeSpec& t, std::vector<std::string>& path,
             std::vector<std::vector<std::string>>& out) {
  if (t.is_leaf()) {
    out.push_back(path);
    return;
  }
  // A cache is named as Hugging Face's ONNX tooling (optimum) names it:
  // <layer>.key and <layer>.value (past_key_values.0.key), in the
  // registration's order; an encoder-decoder's self-attention cache
  // <layer>.decoder.key, its cross-attention cache <layer>.encoder.key.
  auto cache = [&](const TreeSpec& dc, const char* part) {
    for (size_t c = 0; c < 2; ++c)
      for (size_t i = 0; i < dc.children[c].children.size(); ++i) {
        const size_t depth = path.size();
        path.push_back(std::to_string(i));
        if (part) path.push_back(part);
        path.push_back(c == 0 ? "key" : "value");
        collect(dc.children[c].children[i], path, out);
        path.resize(depth);
      }
  };
  if (is_dynamic_cache(t)) {
    cache(t, nullptr);
    return;
  }
  if (is_encoder_decoder_cache(t)) {
    cache(t.children[0], "decoder");
    cache(t.children[1], "encoder");
    return;
  }
  for (size_t i = 0; i < t.children.size(); ++i) {
    // An empty key ("" in a dict) would give an empty or dangling name: its position.
    path.push_back(t.keys.empty() || t.keys[i].empty() ? std::to_string(i) : t.keys[i]);
    collect(t.children[i], path, out);
    path.pop_back();
  }
}

std::string join(const std::vector<std::string>& parts, size_t from, std::string head) {
  for (size_t i = from; i < parts.size(); ++i) head += "." + parts[i];
  return head;
}

}  // namespace

TreeSpec parse_treespec(std::string_view json, const std::string& source) {
  SpecReader r{source};
  simdjson::dom::parser parser;
  element root;
  if (auto err = parser.parse(json.data(), json.size()).get(root))
    throw Error(source + ": malformed treespec JSON: " + simdjson::error_message(err));
  array a;
  if (root.get_array().get(a) || a.size() != 2)
    r.fail("$", "expected [protocol, tree] (torch.utils._pytree.treespec_dumps)");
  int64_t protocol;
  if (a.at(0).get_int64().get(protocol) || protocol != 1)
    r.fail("$[0]", "unsupported treespec protocol (this pt2onnx reads protocol 1)");
  return r.node(a.at(1).value_unsafe(), "$[1]", 0);
}

std::vector<std::vector<std::string>> leaf_paths(const TreeSpec& spec) {
  std::vector<std::vector<std::string>> out;
  std::vector<std::string> path;
  collect(spec, path, out);
  return out;
}

std::vector<std::string> input_leaf_names(const TreeSpec& in_spec,
                                          const std::vector<std::string>& arg_names) {
  std::vector<std::string> names;
  // The root is the pair (args, kwargs); anything else is named by its path.
  bool args_kwargs = !in_spec.is_leaf() && in_spec.children.size() == 2 && in_spec.keys.empty();
  for (auto& p : leaf_paths(in_spec)) {
    if (args_kwargs && p.size() >= 2) {
      std::string root = p[1];
      if (p[0] == "0") {
        size_t i = arg_names.size();
        if (!p[1].empty() && p[1].size() < 10 &&
            p[1].find_first_not_of("0123456789") == std::string::npos)
          i = std::stoul(p[1]);
        root = i < arg_names.size() && !arg_names[i].empty() ? arg_names[i] : "input_" + p[1];
      }
      names.push_back(join(p, 2, root));
    } else {
      names.push_back(p.empty() ? "input" : join(p, 1, p[0]));
    }
  }
  make_unique(names);
  return names;
}

namespace {
// A returned ModelOutput / dict whose `past_key_values` is a DynamicCache or an
// EncoderDecoderCache.
bool dynamic_cache_output(const TreeSpec& out_spec) {
  for (size_t i = 0; i < out_spec.keys.size() && i < out_spec.children.size(); ++i)
    if (out_spec.keys[i] == "past_key_values")
      return is_dynamic_cache(out_spec.children[i]) ||
             is_layered_dynamic_cache(out_spec.children[i]) ||
             is_encoder_decoder_cache(out_spec.children[i]);
  return false;
}
}  // namespace

std::vector<std::string> output_leaf_names(const TreeSpec& out_spec,
                                           const std::vector<std::string>& fx_names) {
  std::vector<std::string> names;
  auto paths = leaf_paths(out_spec);
  for (size_t k = 0; k < paths.size(); ++k) {
    const auto& p = paths[k];
    const std::string fx = k < fx_names.size() ? fx_names[k] : std::string();
    if (p.empty() || (out_spec.keys.empty() && p.size() == 1 && !fx.empty()))
      names.push_back(fx.empty() ? "output_" + std::to_string(k) : fx);
    else if (out_spec.keys.empty())
      names.push_back(join(p, 1, "output_" + p[0]));
    else if (p[0] == "past_key_values" && !out_spec.keys.empty() && dynamic_cache_output(out_spec))
      names.push_back(join(p, 1, "present"));  // the updated cache, as Hugging Face names it
    else
      names.push_back(join(p, 1, p[0]));
  }
  make_unique(names);
  return names;
}

void make_unique(std::vector<std::string>& names) {
  std::set<std::string> seen(names.begin(), names.end());
  std::set<std::string> used;
  for (auto& n : names) {
    if (used.insert(n).second) continue;
    for (int i = 1;; ++i) {
      std::string c = n + "_" + std::to_string(i);
      if (!seen.count(c) && used.insert(c).second) {
        n = c;
        break;
      }
    }
  }
}

}  // namespace pt2onnx::schema
