#include "opt/passes.h"

namespace pt2onnx {

void replace_uses(Graph& g, const std::string& from, const std::string& to) {
  for (auto& n : g.nodes)
    for (auto& in : n.inputs)
      if (in == from) in = to;
}

std::vector<std::pair<std::string, size_t>> run_default_passes(Graph& g) {
  // Folding exposes identical constants and nodes to CSE; CSE and folding
  // leave dead nodes for remove_unused. Two rounds reach the fixed point on
  // the graphs converters emit; more rounds only cost time.
  using Pass = size_t (*)(Graph&);
  static const std::pair<const char*, Pass> kPasses[] = {
      {"fold_constants", fold_constants},
      {"remove_identity", remove_identity},
      {"eliminate_common_subexpressions", eliminate_common_subexpressions},
      {"remove_unused", remove_unused},
  };
  std::vector<std::pair<std::string, size_t>> log;
  for (int round = 0; round < 2; ++round) {
    size_t changed = 0;
    for (auto& [name, fn] : kPasses) {
      size_t n = fn(g);
      changed += n;
      log.emplace_back(name, n);
    }
    if (!changed) break;
  }
  return log;
}

}  // namespace pt2onnx
