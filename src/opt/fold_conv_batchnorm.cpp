// Conv (or ConvTranspose) followed by an inference BatchNormalization becomes
// one Conv with the normalization folded into its weight and bias:
//   s = scale / sqrt(var + epsilon)        (per output channel)
//   W' = W * s (along the output-channel axis), B' = (B - mean) * s + beta.
// torch.onnx folds at export; left as two nodes, onnxruntime fuses them at
// every load, copying each conv weight (ResNet-50: +40% session creation
// time, +50% peak memory).
//
// Folded only when nothing else could see the difference: the Conv's weight
// (and bias, if any) are initializers read by that Conv alone, the Conv's
// output is read by the BatchNormalization alone (and is no graph output),
// and the BatchNormalization is an inference one (one output, no
// training_mode = 1) whose scale / B / mean / var are 1-D initializers of the
// channel count. float / float16 / double weights (computed in double, stored
// in the weight's type); other types are left alone. ConvTranspose weights
// are [C_in, C_out / group, k...]: output channel g * C_out / group + j is
// row block g, column j.
//
// A folded weight over 64 KiB stays a view on the original bytes with its
// channel factors attached (TensorData::scale): the writer scales it as it
// streams it, so no folded copy is held; smaller ones and the biases are new,
// owned bytes. They are named `<weight>.bn_folded` and `<bias>.bn_folded`
// (`<BN B>.bn_folded` when the Conv had no bias), not the weights' own
// names: under `<weight>` values that differ from the state_dict's would
// mislead tools that map initializers back to it by name.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

namespace {

bool foldable_type(DType t) {
  return t == DType::Float || t == DType::Float16 || t == DType::Double;
}

// Weights bigger than this are scaled lazily, by the writer as it streams
// them (TensorData::scale): folding them here made a new copy of each
// (ResNet-50: 94 MB of float32, 14% of the time after capture, most of it
// first-touch page faults). Smaller ones are folded now, into owned bytes,
// as they always were: the passes that treat small owned initializers as
// constants (CSE up to 4 KiB, fold_constants, module functions embedding
// them up to 64 KiB) see them as before, so the output does not change.
constexpr size_t kEagerFoldMaxBytes = size_t{1} << 16;

bool lazy_fold(const TensorData& w) {
  return !w.owned && !w.scale && w.is_contiguous() && w.nbytes() > kEagerFoldMaxBytes;
}

TensorData from_doubles(DType t, std::vector<int64_t> dims, const std::vector<double>& v) {
  if (t == DType::Double) return TensorData::from_vector(t, std::move(dims), v);
  if (t == DType::Float) {
    std::vector<float> f(v.begin(), v.end());
    return TensorData::from_vector(t, std::move(dims), f);
  }
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = float_to_half(static_cast<float>(v[i]));
  return TensorData::from_vector(t, std::move(dims), h);
}

}  // namespace

size_t fold_conv_batchnorm(Graph& g) {
  // Most graphs have no batch norm: skip building the maps below (measured:
  // 8 us per node on a 200k-node transformer graph, bench/node_scaling.md).
  if (std::none_of(g.nodes.begin(), g.nodes.end(),
                   [](const Node& n) { return is_op(&n, "BatchNormalization"); }))
    return 0;
  std::unordered_map<std::string, size_t> init_index;
  for (size_t k = 0; k < g.initializers.size(); ++k) init_index[g.initializers[k].name] = k;
  // Readers of each value (node inputs, nested graphs' reads, graph outputs)
  // and the node producing it.
  std::unordered_map<std::string, size_t> readers;
  std::unordered_map<std::string, size_t> producer;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    for (auto& in : n.inputs)
      if (!in.empty()) ++readers[in];
    for (const Graph* s : subgraphs(n))
      for (auto& v : outer_reads(*s)) ++readers[v];
    for (auto& o : n.outputs) producer[o] = k;
  }
  for (auto& o : g.outputs) ++readers[o.name];

  auto init_of = [&](const std::string& v) -> Initializer* {
    auto it = init_index.find(v);
    return it == init_index.end() ? nullptr : &g.initializers[it->second];
  };

  std::optional<FreshNames> names;  // made on the first fold
  auto fresh_name = [&](const std::string& base) {
    if (!names) names.emplace(g);
    return (*names)(base);
  };
  auto set_type = [&](const std::string& name, const TensorData& t) {
    g.types[name] = static_type(t.dtype, t.dims);
  };

  std::vector<bool> drop(g.nodes.size(), false);
  // New bias initializers for convs that had none: inserted after the weight.
  std::unordered_map<std::string, Initializer> bias_after;  // weight name -> bias
  size_t folded = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& bn = g.nodes[k];
    if (bn.op_type != "BatchNormalization" || !bn.domain.empty() || bn.inputs.size() != 5 ||
        bn.outputs.size() != 1 || bn.has_subgraphs())
      continue;
    if (const Attr* tm = bn.attr("training_mode"); tm && tm->i != 0) continue;
    const std::string& x = bn.inputs[0];
    auto pit = producer.find(x);
    if (pit == producer.end() || readers[x] != 1 || drop[pit->second]) continue;
    Node& conv = g.nodes[pit->second];
    bool transpose = conv.op_type == "ConvTranspose";
    if ((conv.op_type != "Conv" && !transpose) || !conv.domain.empty() ||
        conv.outputs.size() != 1 || conv.inputs.size() < 2)
      continue;
    Initializer* w = init_of(conv.inputs[1]);
    if (!w || readers[w->name] != 1 || !foldable_type(w->data.dtype) || w->data.dims.size() < 3)
      continue;
    Initializer* b = nullptr;
    bool has_bias = conv.inputs.size() > 2 && !conv.inputs[2].empty();
    if (has_bias) {
      b = init_of(conv.inputs[2]);
      if (!b || readers[b->name] != 1 || b->data.dtype != w->data.dtype) continue;
    }
    int64_t group = 1;
    if (const Attr* a = conv.attr("group")) group = a->i;
    const std::vector<int64_t>& wd = w->data.dims;
    if (group < 1 || (transpose && wd[0] % group != 0)) continue;
    int64_t channels = transpose ? wd[1] * group : wd[0];
    auto channel_vector = [&](const std::string& v) -> const Initializer* {
      const Initializer* i = init_of(v);
      if (!i || !foldable_type(i->data.dtype) || i->data.dims != std::vector<int64_t>{channels})
        return nullptr;
      return i;
    };
    const Initializer* scale = channel_vector(bn.inputs[1]);
    const Initializer* beta = channel_vector(bn.inputs[2]);
    const Initializer* mean = channel_vector(bn.inputs[3]);
    const Initializer* var = channel_vector(bn.inputs[4]);
    if (!scale || !beta || !mean || !var || (b && b->data.dims != std::vector<int64_t>{channels}))
      continue;
    double eps = 1e-5;
    if (const Attr* a = bn.attr("epsilon")) eps = a->f;

    std::vector<double> sv = *to_doubles(scale->data), bv = *to_doubles(beta->data),
                        mv = *to_doubles(mean->data), vv = *to_doubles(var->data);
    std::vector<double> s(static_cast<size_t>(channels));
    for (size_t c = 0; c < s.size(); ++c) s[c] = sv[c] / std::sqrt(vv[c] + eps);
    std::vector<double> bias(s.size(), 0.0);
    if (b) bias = *to_doubles(b->data);
    for (size_t c = 0; c < s.size(); ++c) bias[c] = (bias[c] - mv[c]) * s[c] + bv[c];
    Initializer nb{{}, from_doubles(w->data.dtype, {channels}, bias)};

    DType t = w->data.dtype;
    auto factors = std::make_shared<ChannelScale>();
    factors->factor = std::move(s);
    if (transpose) factors->rows_per_group = wd[0] / group;
    TensorData scaled;
    if (lazy_fold(w->data)) {
      // The weight as it is (a view on the caller's or the archive's bytes),
      // scaled by the writer as it streams it.
      scaled = w->data;
      scaled.scale = std::move(factors);
    } else {
      std::vector<uint8_t> bytes = w->data.contiguous_copy();
      const int64_t rows = wd.empty() ? 1 : wd[0];
      factors->apply(t, wd, 0, rows, bytes.data());
      scaled = TensorData::from_bytes(t, wd, std::move(bytes));
    }

    std::string wname = fresh_name(w->name + ".bn_folded");
    std::string bname = fresh_name((b ? b->name : bn.inputs[2]) + ".bn_folded");
    nb.name = bname;
    set_type(bname, nb.data);
    *w = Initializer{wname, std::move(scaled)};
    set_type(wname, w->data);
    if (b)
      *b = std::move(nb);
    else
      bias_after.emplace(wname, std::move(nb));
    conv.inputs.resize(3);
    conv.inputs[1] = wname;
    conv.inputs[2] = bname;
    conv.outputs[0] = bn.outputs[0];
    g.types.erase(x);
    drop[k] = true;
    ++folded;
  }
  if (!folded) return 0;
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t k = 0; k < g.nodes.size(); ++k)
    if (!drop[k]) kept.push_back(std::move(g.nodes[k]));
  g.nodes = std::move(kept);
  if (!bias_after.empty()) {
    std::vector<Initializer> inits;
    inits.reserve(g.initializers.size() + bias_after.size());
    for (auto& i : g.initializers) {
      auto it = bias_after.find(i.name);
      inits.push_back(std::move(i));
      if (it != bias_after.end()) inits.push_back(std::move(it->second));
    }
    g.initializers = std::move(inits);
  }
  return folded;
}

}  // namespace pt2onnx
