#include "opt/passes.h"

namespace pt2onnx {

void replace_uses(Graph& g, const std::string& from, const std::string& to) {
  replace_uses_deep(g, from, to);
}

namespace {

// Runs `fn` on the graphs nested in g's nodes (innermost first), then on g.
// Each pass keeps what nested graphs read from g alive and renames those reads
// with it (replace_uses and remove_unused look into nested graphs).
size_t run_nested_first(Graph& g, size_t (*fn)(Graph&)) {
  size_t n = 0;
  for (auto& node : g.nodes)
    for (Graph* s : subgraphs(node)) n += run_nested_first(*s, fn);
  return n + fn(g);
}

}  // namespace

std::vector<std::pair<std::string, size_t>> run_default_passes(Graph& g) {
  // Folding exposes identical constants and nodes to CSE; CSE and folding
  // leave dead nodes for remove_unused. Two rounds reach the fixed point on
  // the graphs converters emit; more rounds only cost time.
  using Pass = size_t (*)(Graph&);
  static const std::pair<const char*, Pass> kPasses[] = {
      {"fold_constants", fold_constants},
      {"fold_weight_transpose", fold_weight_transpose},
      {"remove_identity", remove_identity},
      {"eliminate_common_subexpressions", eliminate_common_subexpressions},
      {"remove_unused", remove_unused},
  };
  std::vector<std::pair<std::string, size_t>> log;
  for (int round = 0; round < 2; ++round) {
    size_t changed = 0;
    for (auto& [name, fn] : kPasses) {
      size_t n = run_nested_first(g, fn);
      changed += n;
      log.emplace_back(name, n);
    }
    if (!changed) break;
  }
  return log;
}

}  // namespace pt2onnx
