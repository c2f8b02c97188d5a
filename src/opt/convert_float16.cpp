// The graph's float32 computation made float16 (or bfloat16): what
// export(dtype=torch.float16) asks for. Runs once, last, after the fusions
// and clean-up (see run_default_passes), on the main graph and every nested
// graph (If / Loop / Scan bodies).
//
// What changes: every float32 value becomes the target type (graph inputs
// and outputs included: a KV cache is fed and returned in float16, as users
// of a float16 model hold it), float32 initializers are converted (new,
// owned bytes: one copy of the weights at export time; finite values beyond
// float16's range become +-65504, so a mask constant of float32's lowest
// value stays finite), and the attributes that decide a float32 output are
// rewritten to match: Cast's `to`, Constant's value / value_float(s),
// ConstantOfShape's value, the Random* / EyeLike / Bernoulli `dtype`.
// float64 and every non-float type are left alone.
//
// What stays float32 (float32 "islands", with a Cast to float32 at each
// input and a Cast back at each output read outside the island):
//   - the precision-sensitive ops: Softmax / LogSoftmax, the summing
//     reductions (ReduceSum / ReduceMean / ReduceSumSquare / ReduceL1 /
//     ReduceL2 / ReduceLogSum / ReduceLogSumExp / ReduceProd) and CumSum:
//     a sum of thousands of float16 terms loses the small ones, x*x
//     overflows float16 above 256, a softmax over float16 scores loses the
//     small probabilities;
//   - grown backwards: an elementwise node (Add, Sub, Mul, Div, Pow, Neg,
//     Abs, Sqrt, Reciprocal, Exp, Log, Where, Max, Min) all of whose outputs
//     are read only inside the island (the x*x or (x - mean)^2 under a norm's
//     mean; the scale and mask Add under a Softmax);
//   - grown forwards: an elementwise node whose float inputs are island
//     values or constants (a norm's Div(N) -> Add(eps) -> Sqrt ->
//     Reciprocal). So a hand-written RMS norm or LayerNorm computes its
//     statistics in float32 and normalizes the float16 input by a float16
//     factor;
//   - Casts of integers to float32 (positions, an arange: float16 holds
//     integers exactly only up to 2048), grown forwards through elementwise
//     functions and data movement: a rotary table's position * inv_freq ->
//     Concat -> Cos / Sin is computed in float32, its [-1, 1] result used in
//     float16;
//   - ops onnxruntime's CPU provider has no float16 kernel for (LSTM, GRU,
//     RNN: its session creation crashes on them);
//   - ops the opset does not define for the target type (Range before 27,
//     CumSum before 14, QuantizeLinear / DequantizeLinear before 19, and for
//     bfloat16 Conv / pooling / ... before 22), and the inputs ONNX types
//     tensor(float) whatever T is (Resize's and Upsample's scales).
// The fused norms compute their statistics in float32 themselves
// (LayerNormalization / RMSNormalization / SimplifiedLayerNormalization:
// stash_type = 1 is set; their mean / inverse-std outputs stay float32).
//
// Model-local functions: a call is a node of another domain (below); the
// bodies are converted on their own, as graphs typed from the values they
// stood for (run_on_function_bodies, before the main graph's conversion
// changes those types), so every float value crossing a call is of the
// target type on both sides. Nodes of other domains get the
// target-typed inputs and outputs their types say. bfloat16 with If / Loop /
// Scan needs opset 16 (their bodies cannot be islands).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "opt/passes.h"
#include "pt2onnx/error.h"

namespace pt2onnx {

namespace {

struct OpSince {
  std::string_view op;
  int opset;  // the first opset whose schema admits the type (1000: none)
};

// Default-domain ops whose float-accepting type constraints lack float16
// before `opset` (ONNX's operator schemas); every other op with a float32
// input admits float16 at every opset pt2onnx writes (13..26).
constexpr OpSince kFloat16Since[] = {
    {"Celu", 28},
    {"CumSum", 14},
    {"DequantizeLinear", 19},
    {"DynamicQuantizeLinear", 1000},
    {"IsInf", 20},
    {"NonMaxSuppression", 1000},
    {"QLinearConv", 1000},
    {"QLinearMatMul", 21},
    {"QuantizeLinear", 19},
    {"Range", 27},
    {"TfIdfVectorizer", 1000},
};

// The same for bfloat16, for opsets >= 13 (every op not listed admits it).
constexpr OpSince kBFloat16Since[] = {
    {"Acos", 22},
    {"Acosh", 22},
    {"Asin", 22},
    {"Asinh", 22},
    {"Atan", 22},
    {"Atanh", 22},
    {"AveragePool", 22},
    {"BatchNormalization", 14},
    {"Bernoulli", 22},
    {"Celu", 28},
    {"Compress", 28},
    {"ConcatFromSequence", 1000},
    {"ConstantOfShape", 20},
    {"Conv", 22},
    {"ConvTranspose", 22},
    {"Cos", 22},
    {"Cosh", 22},
    {"CumSum", 14},
    {"DeformConv", 22},
    {"DequantizeLinear", 19},
    {"Det", 22},
    {"Dropout", 22},
    {"DynamicQuantizeLinear", 1000},
    {"Einsum", 28},
    {"Elu", 22},
    {"EyeLike", 22},
    {"GRU", 22},
    {"GlobalAveragePool", 22},
    {"GlobalLpPool", 22},
    {"GlobalMaxPool", 22},
    {"GreaterOrEqual", 16},
    {"GridSample", 22},
    {"HardSigmoid", 22},
    {"HardSwish", 22},
    {"If", 16},
    {"InstanceNormalization", 22},
    {"IsInf", 20},
    {"LSTM", 22},
    {"LeakyRelu", 16},
    {"LessOrEqual", 16},
    {"Loop", 16},
    {"LpNormalization", 22},
    {"LpPool", 22},
    {"MaxPool", 22},
    {"MaxRoiPool", 22},
    {"MaxUnpool", 22},
    {"Mish", 22},
    {"Multinomial", 22},
    {"NegativeLogLikelihoodLoss", 22},
    {"NonMaxSuppression", 1000},
    {"OneHot", 1000},
    {"Optional", 28},
    {"OptionalGetElement", 28},
    {"OptionalHasElement", 28},
    {"PRelu", 16},
    {"Pow", 15},
    {"QLinearConv", 1000},
    {"QLinearMatMul", 21},
    {"QuantizeLinear", 19},
    {"RNN", 22},
    {"RandomNormal", 22},
    {"RandomNormalLike", 22},
    {"RandomUniform", 22},
    {"RandomUniformLike", 22},
    {"Range", 27},
    {"Resize", 1000},
    {"ReverseSequence", 28},
    {"RoiAlign", 22},
    {"Round", 22},
    {"Scan", 16},
    {"Scatter", 1000},
    {"Selu", 22},
    {"SequenceAt", 1000},
    {"SequenceConstruct", 1000},
    {"SequenceInsert", 1000},
    {"SequenceMap", 1000},
    {"Shrink", 1000},
    {"Sin", 22},
    {"Sinh", 22},
    {"Softplus", 22},
    {"Softsign", 22},
    {"SplitToSequence", 24},
    {"Tan", 22},
    {"TfIdfVectorizer", 1000},
    {"ThresholdedRelu", 22},
    {"TopK", 24},
    {"Unique", 28},
    {"Upsample", 1000},
    {"Where", 16},
};

// Ops ONNX types for float16 that onnxruntime's CPU provider has no float16
// kernel for: a float16 LSTM makes its session creation crash the process
// (found by tests/python/test_option_matrix.py). Kept in float32 like the ops
// the opset does not define for the target type.
constexpr std::string_view kNoCpuFloat16Kernel[] = {"LSTM", "GRU", "RNN"};

bool op_admits(const Node& n, DType to, int opset) {
  if (!n.domain.empty()) return true;
  for (std::string_view op : kNoCpuFloat16Kernel)
    if (n.op_type == op) return false;
  auto check = [&](const auto& table) {
    for (const OpSince& e : table)
      if (e.op == n.op_type) return opset >= e.opset;
    return true;
  };
  return to == DType::Float16 ? check(kFloat16Since) : check(kBFloat16Since);
}

// Ops computed in float32 whatever the target: see the header comment.
bool precision_sensitive(const Node& n) {
  static const std::unordered_set<std::string_view> kOps = {
      "Softmax",  "LogSoftmax",   "ReduceSum",       "ReduceMean", "ReduceSumSquare", "ReduceL1",
      "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceProd", "CumSum"};
  return n.domain.empty() && kOps.count(n.op_type);
}

// Elementwise ops an island may grow through.
bool elementwise(const Node& n) {
  static const std::unordered_set<std::string_view> kOps = {
      "Add",  "Sub",        "Mul", "Div", "Pow",   "Neg", "Abs",
      "Sqrt", "Reciprocal", "Exp", "Log", "Where", "Max", "Min"};
  return n.domain.empty() && !n.has_subgraphs() && kOps.count(n.op_type);
}

// Ops an island grows forwards through besides those: more elementwise
// functions and the data movement between them (a rotary table's Concat /
// Unsqueeze between the angle and its Cos).
bool forward_growable(const Node& n) {
  static const std::unordered_set<std::string_view> kOps = {
      "Cos",       "Sin",     "Tanh",   "Sigmoid", "Erf",     "Transpose", "Concat", "Reshape",
      "Unsqueeze", "Squeeze", "Expand", "Slice",   "Flatten", "Identity",  "Tile",   "Gather"};
  return elementwise(n) || (n.domain.empty() && !n.has_subgraphs() && kOps.count(n.op_type));
}

// Inputs ONNX types tensor(float) whatever the node's T.
bool float32_input(const Node& n, size_t k, int opset) {
  if (!n.domain.empty()) return false;
  if (n.op_type == "Resize") return k == (opset >= 11 ? 2u : 1u);
  if (n.op_type == "Upsample") return k == 1;
  return false;
}

// Outputs that stay float32 on a node computing in the target type: the
// statistics (mean, inverse std) of the fused norms (type U: float / bfloat16).
bool float32_output(const Node& n, size_t j) {
  const std::string& op = n.op_type;
  if (op == "LayerNormalization" || op == "SimplifiedLayerNormalization") return j >= 1;
  if (op == "SkipLayerNormalization" || op == "SkipSimplifiedLayerNormalization")
    return j == 1 || j == 2;
  return false;
}

bool is_op_named(const Node& n, std::string_view op) { return n.domain.empty() && n.op_type == op; }

bool computes_norm_statistics(const Node& n) {
  const std::string& op = n.op_type;
  return op == "LayerNormalization" || op == "RMSNormalization" ||
         op == "SimplifiedLayerNormalization";
}

// A float32 tensor's values in the target type (new owned bytes).
TensorData convert_tensor(const TensorData& t, DType to) {
  std::vector<uint8_t> copy;
  const uint8_t* p = t.bytes();
  if (!t.is_contiguous()) {
    copy = t.contiguous_copy();
    p = copy.data();
  }
  size_t n = static_cast<size_t>(t.numel());
  std::vector<uint16_t> h(n);
  convert_floats(p, DType::Float, reinterpret_cast<uint8_t*>(h.data()), to, n);
  return TensorData::from_vector(to, t.dims, h);
}

// A float32 initializer in the target type. Weights read from the caller's
// memory or a file are converted lazily, by the writer as it streams them
// (TensorData::stored), so no converted copy of the weights is held; one
// already stored as the target type (a bfloat16 checkpoint exported as
// bfloat16) is written as stored, file-to-file. Constants made during
// conversion are converted now.
TensorData convert_weight(const TensorData& t, DType to) {
  // A folded batch norm's weight (TensorData::scale) is scaled in float32
  // first, as when it was folded into new bytes: converted now.
  if (t.owned || t.scale) return convert_tensor(t, to);
  TensorData lazy = t;
  if (!t.lazy()) lazy.stored = DType::Float;
  lazy.dtype = to;
  if (lazy.stored == to) lazy.stored = DType::Undefined;
  return lazy;
}

// The enclosing scopes of the graph being converted, for the types (before
// conversion) and initializers of the values it reads from them.
struct Scopes {
  std::vector<const Graph*> chain;  // innermost last
  std::vector<std::unordered_set<std::string>> inits;

  const ValueType* type(const std::string& v) const {
    for (size_t i = chain.size(); i-- > 0;)
      if (const ValueType* t = chain[i]->type_of(v)) return t;
    return nullptr;
  }
  bool is_float(const std::string& v) const {
    const ValueType* t = v.empty() ? nullptr : type(v);
    return t && t->dtype == DType::Float;
  }
  bool is_constant(const std::string& v) const {
    for (auto& s : inits)
      if (s.count(v)) return true;
    return false;
  }
};

// A Cast of integers (positions, counts, an arange) to float32: float16 holds
// integers exactly only up to 2048, and a rotary angle position * inv_freq
// needs float32 (at position 4000 float16's step is 2 radians).
bool int_to_float(const Node& n, const Scopes& scopes) {
  if (!is_op_named(n, "Cast") || n.inputs.empty() || !scopes.is_float(n.outputs[0])) return false;
  const ValueType* t = scopes.type(n.inputs[0]);
  return t && (is_integral(t->dtype) || t->dtype == DType::Bool);
}

class Converter {
 public:
  Converter(DType to, int opset, FreshNames& fresh) : to_(to), opset_(opset), fresh_(fresh) {}

  size_t run(Graph& g, Scopes& scopes) {
    scopes.chain.push_back(&g);
    scopes.inits.emplace_back();
    for (auto& i : g.initializers) scopes.inits.back().insert(i.name);
    // Nested graphs first, while this graph's types are still the float32 ones.
    size_t changed = 0;
    for (auto& n : g.nodes)
      for (Graph* s : subgraphs(n)) changed += run(*s, scopes);
    changed += convert(g, scopes);
    scopes.chain.pop_back();
    scopes.inits.pop_back();
    return changed;
  }

 private:
  size_t convert(Graph& g, const Scopes& scopes) {
    const size_t count = g.nodes.size();
    // Who reads what.
    std::unordered_map<std::string, std::vector<size_t>> consumers;
    std::unordered_map<std::string, size_t> producer;
    std::unordered_set<std::string> outside;  // graph outputs and nested reads
    for (size_t i = 0; i < count; ++i) {
      const Node& n = g.nodes[i];
      for (auto& v : n.inputs)
        if (!v.empty()) consumers[v].push_back(i);
      for (auto& v : n.outputs)
        if (!v.empty()) producer[v] = i;
      for (const Graph* s : subgraphs(n))
        for (auto& v : outer_reads(*s)) outside.insert(v);
    }
    for (auto& o : g.outputs) outside.insert(o.name);
    auto is_float = [&](const std::string& v) { return scopes.is_float(v); };
    auto has_float_io = [&](const Node& n) {
      return std::any_of(n.inputs.begin(), n.inputs.end(), is_float) ||
             std::any_of(n.outputs.begin(), n.outputs.end(), is_float);
    };

    // The float32 islands: seeds, then grown backwards, then forwards.
    std::vector<char> island(count, 0);
    std::vector<size_t> work;
    for (size_t i = 0; i < count; ++i) {
      const Node& n = g.nodes[i];
      if (n.has_subgraphs() || !has_float_io(n)) continue;
      if ((precision_sensitive(n) && is_float(n.inputs[0])) || int_to_float(n, scopes) ||
          !op_admits(n, to_, opset_)) {
        island[i] = 1;
        work.push_back(i);
      }
    }
    auto read_only_in_islands = [&](const Node& p) {
      for (auto& v : p.outputs) {
        if (v.empty()) continue;
        if (!is_float(v) || outside.count(v)) return false;
        for (size_t c : consumers[v])
          if (!island[c]) return false;
      }
      return true;
    };
    while (!work.empty()) {
      size_t i = work.back();
      work.pop_back();
      for (auto& v : g.nodes[i].inputs) {
        if (!is_float(v)) continue;
        auto it = producer.find(v);
        if (it == producer.end() || island[it->second]) continue;
        const Node& p = g.nodes[it->second];
        if (!elementwise(p) || !read_only_in_islands(p)) continue;
        island[it->second] = 1;
        work.push_back(it->second);
      }
    }
    for (size_t i = 0; i < count; ++i) {
      const Node& n = g.nodes[i];
      if (island[i] || !forward_growable(n)) continue;
      bool from_island = false, all = true;
      for (auto& v : n.inputs) {
        if (!is_float(v)) continue;
        auto it = producer.find(v);
        if (it != producer.end() && island[it->second])
          from_island = true;
        else if (!scopes.is_constant(v))
          all = false;
      }
      if (from_island && all) island[i] = 1;
    }

    // Which float32 values stay float32: island outputs, the norm
    // statistics, and initializers read only where float32 is wanted.
    auto wants32 = [&](size_t i, const Node& n, size_t k) {
      return island[i] || float32_input(n, k, opset_);
    };
    std::unordered_set<std::string> keep32;
    for (size_t i = 0; i < count; ++i) {
      const Node& n = g.nodes[i];
      for (size_t j = 0; j < n.outputs.size(); ++j)
        if (is_float(n.outputs[j]) && (island[i] || float32_output(n, j)))
          keep32.insert(n.outputs[j]);
    }
    std::unordered_set<std::string> init32;  // converted, but also read as float32
    for (auto& init : g.initializers) {
      if (init.data.dtype != DType::Float || outside.count(init.name)) continue;
      bool only32 = true, any32 = false;
      for (size_t c : consumers[init.name]) {
        const Node& n = g.nodes[c];
        for (size_t k = 0; k < n.inputs.size(); ++k) {
          if (n.inputs[k] != init.name) continue;
          if (wants32(c, n, k))
            any32 = true;
          else
            only32 = false;
        }
      }
      if (only32 && any32)
        keep32.insert(init.name);
      else if (any32)
        init32.insert(init.name);
    }

    size_t changed = 0;
    // Casts made so far: (value, float32?) -> the cast's output.
    std::unordered_map<std::string, std::string> as32, as16;
    std::vector<Node> nodes;
    nodes.reserve(count);
    auto shape_of = [&](const std::string& v) {
      const ValueType* t = scopes.type(v);
      return t ? t->shape : std::nullopt;
    };
    // Values this pass made that stay float32 (casts to float32, renamed
    // island outputs, float32 copies of initializers).
    std::unordered_set<std::string> made32;
    auto make_cast = [&](const std::string& in, const std::string& out, DType dt,
                         const Node& like) {
      Node c;
      c.op_type = "Cast";
      c.name = out;
      c.inputs = {in};
      c.outputs = {out};
      c.attrs = {Attr::Int("to", static_cast<int64_t>(dt))};
      c.origin = like.origin;
      ++changed;
      return c;
    };
    // Initializers also read as float32: the original bytes under a new name.
    std::vector<Initializer> extra;
    for (auto& init : g.initializers) {
      if (!init32.count(init.name)) continue;
      std::string name = fresh_(init.name + "_f32");
      extra.push_back(Initializer{name, init.data});
      g.types[name] = static_type(DType::Float, init.data.dims);
      made32.insert(name);
      as32[init.name] = name;
    }

    for (size_t i = 0; i < count; ++i) {
      Node n = std::move(g.nodes[i]);
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const std::string v = n.inputs[k];
        if (!is_float(v)) continue;
        const bool want32 = wants32(i, n, k), have32 = keep32.count(v) > 0;
        if (want32 == have32) continue;
        auto& cache = want32 ? as32 : as16;
        auto it = cache.find(v);
        if (it == cache.end()) {
          const DType dt = want32 ? DType::Float : to_;
          std::string out = fresh_(v + (want32 ? "_f32" : "_f16"));
          g.types[out] = ValueType{dt, shape_of(v)};
          if (want32) made32.insert(out);
          nodes.push_back(make_cast(v, out, dt, n));
          it = cache.emplace(v, out).first;
        }
        n.inputs[k] = it->second;
      }
      // Island values read outside this graph's nodes (graph outputs, nested
      // graphs) keep their name in the target type: the node writes a
      // float32 value and a Cast gives the name.
      std::vector<Node> after;
      for (auto& v : n.outputs) {
        if (!keep32.count(v) || !outside.count(v)) continue;
        std::string v32 = fresh_(v + "_f32");
        g.types[v32] = ValueType{DType::Float, shape_of(v)};
        made32.insert(v32);
        after.push_back(make_cast(v32, v, to_, n));
        as32[v] = v32;
        keep32.erase(v);
        v = v32;
      }
      retype_attributes(n, island[i], scopes);
      nodes.push_back(std::move(n));
      for (auto& c : after) nodes.push_back(std::move(c));
    }
    g.nodes = std::move(nodes);

    // Types: every float32 value not kept becomes the target type.
    for (auto& [name, t] : g.types)
      if (t.dtype == DType::Float && !keep32.count(std::string(name)) &&
          !made32.count(std::string(name))) {
        t.dtype = to_;
        ++changed;
      }
    for (auto* io : {&g.inputs, &g.outputs})
      for (auto& x : *io)
        if (x.type.dtype == DType::Float) x.type.dtype = to_;
    for (auto& init : g.initializers)
      if (init.data.dtype == DType::Float && !keep32.count(init.name)) {
        init.data = convert_weight(init.data, to_);
        ++changed;
      }
    for (auto& e : extra) g.initializers.push_back(std::move(e));
    return changed;
  }

  // The attributes that decide a float32 output's type, for the outputs
  // that become the target type.
  void retype_attributes(Node& n, bool in_island, const Scopes& scopes) {
    if (computes_norm_statistics(n)) {
      bool set = false;
      for (auto& a : n.attrs)
        if (a.name == "stash_type") a.i = 1, set = true;
      if (!set && n.domain.empty()) n.attrs.push_back(Attr::Int("stash_type", 1));
    }
    if (in_island || !n.domain.empty() || n.outputs.empty() || !scopes.is_float(n.outputs[0]))
      return;
    const std::string& op = n.op_type;
    const int64_t to = static_cast<int64_t>(to_);
    if (op == "Cast") {
      for (auto& a : n.attrs)
        if (a.name == "to") a.i = to;
    } else if (op == "Constant" || op == "ConstantOfShape") {
      for (auto& a : n.attrs) {
        if (a.name == "value" && a.kind == Attr::Kind::Tensor && a.t &&
            a.t->dtype == DType::Float) {
          a.t = std::make_shared<TensorData>(convert_tensor(*a.t, to_));
        } else if (a.name == "value_float" || a.name == "value_floats") {
          std::vector<float> v = a.name == "value_float" ? std::vector<float>{a.f} : a.floats;
          std::vector<int64_t> dims;
          if (a.name == "value_floats") dims = {static_cast<int64_t>(v.size())};
          a = Attr::Tensor("value",
                           convert_tensor(TensorData::from_vector(DType::Float, dims, v), to_));
        }
      }
    } else if (op == "RandomUniform" || op == "RandomNormal") {
      bool set = false;
      for (auto& a : n.attrs)
        if (a.name == "dtype") a.i = to, set = true;
      if (!set) n.attrs.push_back(Attr::Int("dtype", to));
    } else if (op == "RandomUniformLike" || op == "RandomNormalLike" || op == "EyeLike" ||
               op == "Bernoulli") {
      for (auto& a : n.attrs)
        if (a.name == "dtype" && a.i == static_cast<int64_t>(DType::Float)) a.i = to;
    }
  }

  DType to_;
  int opset_;
  FreshNames& fresh_;
};

}  // namespace

size_t convert_float16(Graph& g, DType to, int opset) {
  if (to == DType::Float) return 0;
  if (to != DType::Float16 && to != DType::BFloat16)
    throw Error(std::string("cannot write the model's float32 computation as ") +
                std::string(dtype_name(to)) + ": float16 or bfloat16 only");
  FreshNames fresh(g);
  Converter c(to, opset, fresh);
  Scopes scopes;
  return c.run(g, scopes);
}

}  // namespace pt2onnx
