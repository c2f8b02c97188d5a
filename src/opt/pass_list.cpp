#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iterator>
#include <unordered_set>

#include "ir/check_structure.h"
#include "opt/passes.h"

namespace pt2onnx {

void replace_uses(Graph& g, const std::string& from, const std::string& to) {
  replace_uses_deep(g, from, to);
}

namespace {

using Pass = size_t (*)(Graph&);

// Runs `fn` on the graphs nested in g's nodes (innermost first), then on g.
// Each pass keeps what nested graphs read from g alive and renames those reads
// with it (replace_uses and remove_unused look into nested graphs).
size_t run_nested_first(Graph& g, Pass fn) {
  size_t n = 0;
  for (auto& node : g.nodes)
    for (Graph* s : subgraphs(node)) n += run_nested_first(*s, fn);
  return n + fn(g);
}

size_t run_nested_first(Graph& g, FusionPass fn, const PassOptions& o) {
  size_t n = 0;
  for (auto& node : g.nodes)
    for (Graph* s : subgraphs(node)) n += run_nested_first(*s, fn, o);
  return n + fn(g, o);
}

size_t run_flat(Graph& g, Pass fn) { return fn(g); }
size_t run_flat(Graph& g, FusionPass fn, const PassOptions& o) { return fn(g, o); }

// Whether the graph has nested graphs, kept across passes: finding out walks
// every node's attributes (a cache miss per node), which run_nested_first
// would otherwise repeat before each of the ~30 passes. Walked again after a
// pass that changed the graph.
class Nesting {
 public:
  explicit Nesting(const Graph& g) : g_(g) { update(); }
  bool any() const { return any_; }
  void after_pass(size_t changed) {
    if (changed) update();
  }

 private:
  void update() {
    any_ = std::any_of(g_.nodes.begin(), g_.nodes.end(),
                       [](const Node& n) { return n.has_subgraphs(); });
  }
  const Graph& g_;
  bool any_ = false;
};

// PT2ONNX_CHECK_EACH_PASS=1: the value rules after every pass, so a broken
// graph names the pass that broke it (check_structure.h).
template <typename... Args>
size_t run_checked(const char* name, Graph& g, Nesting& nesting, Args... args) {
  auto t0 = std::chrono::steady_clock::now();
  size_t n = nesting.any() ? run_nested_first(g, args...) : run_flat(g, args...);
  nesting.after_pass(n);
  if (print_pass_times())
    std::fprintf(
        stderr, "pass %-34s %9.2f ms %8zu changed\n", name,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
        n);
  if (check_each_pass()) check_values(g, name);
  return n;
}

// Folding exposes identical constants and nodes to CSE; CSE and folding
// leave dead nodes for remove_unused. Two rounds reach the fixed point on
// the graphs converters emit; more rounds only cost time. A pass is not run
// again on a graph no pass has changed since it last ran and found nothing:
// passes are deterministic, so it would find nothing again (each pass's
// count is what says the graph changed, as for the fixed point itself).
void run_cleanup(Graph& g, Nesting& nesting, std::vector<std::pair<std::string, size_t>>& log) {
  static const std::pair<const char*, Pass> kPasses[] = {
      {"fold_constants", fold_constants},
      {"fold_weight_quantize", fold_weight_quantize},
      {"fold_conv_batchnorm", fold_conv_batchnorm},
      {"fold_weight_transpose", fold_weight_transpose},
      {"remove_identity", remove_identity},
      {"eliminate_common_subexpressions", eliminate_common_subexpressions},
      {"remove_unused", remove_unused},
  };
  constexpr size_t kCount = std::size(kPasses);
  // The passes that found nothing since the graph last changed.
  bool idle[kCount] = {};
  for (int round = 0; round < 2; ++round) {
    size_t changed = 0;
    for (size_t p = 0; p < kCount; ++p) {
      auto& [name, fn] = kPasses[p];
      if (idle[p]) continue;  // the graph is as it left it
      size_t n = run_checked(name, g, nesting, fn);
      changed += n;
      log.emplace_back(name, n);
      if (n)
        std::fill(std::begin(idle), std::end(idle), false);
      else
        idle[p] = true;
    }
    if (!changed || std::all_of(std::begin(idle), std::end(idle), [](bool b) { return b; })) break;
  }
}

// The fusions, in the order they run: each sees the graph the ones before it
// left (a norm fused before the residual Add + norm fusion looks for it).
// Each decides from the opset and target whether it has anything to emit.
const std::vector<std::pair<const char*, FusionPass>>& fusions() {
  // First the shape / index arithmetic: it only removes nodes, and leaves
  // the fusions after it plainer masks and indices.
  static const std::vector<std::pair<const char*, FusionPass>> kFusions = {
      // The Linear layers torch.compile's graphs flatten, as the fusions
      // expect them (MatMul + Add).
      {"unflatten_gemm", unflatten_gemm},
      {"fold_shape_arithmetic", fold_shape_arithmetic},
      {"fuse_layer_norm", fuse_layer_norm},
      {"fuse_rms_norm", fuse_rms_norm},
      // After the norm fusions, before rotary / attention.
      {"fuse_gelu", fuse_gelu},
      // After the norm and gelu fusions, before attention (which reads the
      // rotated q / k).
      {"fuse_rotary", fuse_rotary},
      // GroupQueryAttention first, then MultiHeadAttention; what they leave,
      // the standard Attention takes.
      {"fuse_group_query_attention", fuse_group_query_attention},
      {"fuse_multi_head_attention", fuse_multi_head_attention},
      {"fuse_attention", fuse_attention},
      // Layout chains after the fusions that match layout ops (rotary's
      // Unsqueeze / Reshape, attention's head transposes, which it would
      // merge into forms they do not take), on what those leave.
      {"collapse_layout_chains", collapse_layout_chains},
      // After the layout chains are gone: GQA's q / k / v are then the
      // projections' outputs themselves.
      {"fuse_packed_qkv", fuse_packed_qkv},
      // skip norm runs after the attention and activation fusions
      {"fuse_skip_norm", fuse_skip_norm},
      // At the end, after attention (which reads the MatMuls it replaces).
      {"fuse_matmul_transpose", fuse_matmul_transpose},
      {"fuse_gemm", fuse_gemm},
      // After fuse_gemm (it reads Gemm's transB and bias).
      {"fuse_dequantize_matmul", fuse_dequantize_matmul},
      // After it: the MatMulNBits it makes of one activation, packed.
      {"fuse_sibling_matmuls", fuse_sibling_matmuls},
  };
  return kFusions;
}

}  // namespace

std::vector<std::pair<std::string, size_t>> run_default_passes(Graph& g, const PassOptions& o) {
  std::vector<std::pair<std::string, size_t>> log;
  Nesting nesting(g);
  run_cleanup(g, nesting, log);
  size_t fused = 0;
  for (auto& [name, fn] : fusions()) {
    size_t n = run_checked(name, g, nesting, fn, o);
    fused += n;
    log.emplace_back(name, n);
    // The replaced nodes go before the next fusion counts readers.
    if (n) nesting.after_pass(run_nested_first(g, remove_unused));
  }
  // Fusions leave the nodes they replaced (and constants) for clean-up.
  if (fused) run_cleanup(g, nesting, log);
  // float16 / bfloat16 last, on the graph every other pass has settled.
  if (o.dtype != DType::Float)
    log.emplace_back("convert_float16", convert_float16(g, o.dtype, o.opset));
  // Last: it undoes fold_weight_transpose's layout, which every pass before
  // it expects (weights read as MatMul's B).
  log.emplace_back("read_weights_transposed", read_weights_transposed(g, o));
  // onnxruntime's contrib operators, wherever a fusion put them, need their
  // domain imported by the model.
  std::vector<const Graph*> graphs{&g};
  while (!graphs.empty()) {
    const Graph* x = graphs.back();
    graphs.pop_back();
    for (auto& n : x->nodes) {
      if (n.domain == "com.microsoft") g.domain_versions.emplace(n.domain, 1);
      for (const Graph* s : subgraphs(n)) graphs.push_back(s);
    }
  }
  return log;
}

std::vector<std::pair<std::string, size_t>> run_passes_before_functions(Graph& g) {
  static const std::pair<const char*, Pass> kPasses[] = {
      {"fold_constants", fold_constants},
      {"remove_identity", remove_identity},
      {"remove_unused", remove_unused},
  };
  std::vector<std::pair<std::string, size_t>> log;
  for (auto& [name, fn] : kPasses) log.emplace_back(name, run_nested_first(g, fn));
  return log;
}

size_t optimize_function_bodies(Graph& g, const PassOptions& options) {
  return run_on_function_bodies(g, [&options](Graph& body) {
    size_t changed = 0;
    for (auto& [name, n] : run_default_passes(body, options)) changed += n;
    return changed;
  });
}

size_t run_on_function_bodies(Graph& g, const std::function<size_t(Graph&)>& fn) {
  size_t changed = 0;
  for (Function& f : g.functions) {
    // The body as a graph: formal inputs / outputs with the types of the
    // values they stood for, Constant nodes as initializers (what folding
    // reads).
    Graph body;
    body.name = f.name;
    auto typed = [&](const std::string& v) {
      const ValueType* t = g.type_of(v);
      return GraphIO{v, t ? *t : ValueType{}};
    };
    for (auto& i : f.inputs) body.inputs.push_back(typed(i));
    for (auto& o : f.outputs) body.outputs.push_back(typed(o));
    for (auto& n : f.nodes) {
      const Attr* v = n.attr("value");
      if (n.op_type == "Constant" && n.domain.empty() && n.attrs.size() == 1 && v &&
          v->kind == Attr::Kind::Tensor && v->t && n.outputs.size() == 1) {
        body.initializers.push_back(Initializer{n.outputs[0], *v->t});
        continue;
      }
      for (auto& o : n.outputs)
        if (const ValueType* t = g.type_of(o)) body.types[o] = *t;
      body.nodes.push_back(std::move(n));
    }
    for (auto& i : body.inputs) body.types[i.name] = i.type;
    changed += fn(body);
    // Domains the passes brought in (onnxruntime's contrib ops): imported by
    // the body and by the model, at one version.
    for (auto& [domain, version] : body.domain_versions) {
      f.opset_imports.emplace(domain, version);
      g.domain_versions.emplace(domain, version);
    }
    // Back to a body: constants it still reads as Constant nodes, first.
    std::unordered_set<std::string> read;
    for (auto& n : body.nodes)
      for (auto& i : n.inputs) read.insert(i);
    for (auto& n : body.nodes)
      for (const Graph* s : subgraphs(n))
        for (auto& v : outer_reads(*s)) read.insert(v);
    for (auto& o : body.outputs) read.insert(o.name);
    std::vector<Node> nodes;
    for (auto& init : body.initializers) {
      if (!read.count(init.name)) continue;
      Node k;
      k.op_type = "Constant";
      k.name = init.name;
      k.outputs = {init.name};
      k.attrs.push_back(Attr::Tensor("value", init.data));
      nodes.push_back(std::move(k));
    }
    for (auto& n : body.nodes) nodes.push_back(std::move(n));
    f.nodes = std::move(nodes);
  }
  return changed;
}

}  // namespace pt2onnx
