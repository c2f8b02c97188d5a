// The converter registry: aten target string -> plain C++ function, with an
// opset range per entry so one target can have several per-opset forms.
#pragma once
#include <climits>
#include <string>
#include <unordered_map>
#include <vector>

#include "pt2onnx/pt2onnx.h"  // ConvertFn, Ctx

namespace pt2onnx {

struct Converter {
  ConvertFn fn = nullptr;
  int min_opset = 1;
  int max_opset = INT_MAX;
};

class Registry {
 public:
  void add(const std::string& target, ConvertFn fn, int min_opset = 1, int max_opset = INT_MAX);
  // The converter for `target` at `opset`, or nullptr.
  ConvertFn find(const std::string& target, int opset) const;
  // True when some opset has a converter (to tell "needs another opset" apart).
  bool knows(const std::string& target) const { return table_.count(target) > 0; }
  std::vector<std::string> targets() const;
  // Lowest opset for which `target` converts (0 if unknown).
  int min_opset(const std::string& target) const;
  // Targets registered twice for overlapping opsets (the first would win
  // silently): must be empty; a test checks it.
  std::vector<std::string> overlapping() const;

 private:
  std::unordered_map<std::string, std::vector<Converter>> table_;
};

// The registry with every op family registered (built once).
const Registry& registry();

// One function per op family file.
void register_activation(Registry& r);
void register_attention(Registry& r);
void register_backward(Registry& r);
void register_chebyshev(Registry& r);
void register_chunk_cat(Registry& r);
void register_complex(Registry& r);
void register_control_flow(Registry& r);
void register_conv(Registry& r);
void register_creation(Registry& r);
void register_eigen(Registry& r);
void register_elementwise(Registry& r);
void register_gradient(Registry& r);
void register_histogram(Registry& r);
void register_householder(Registry& r);
void register_indexing(Registry& r);
void register_item(Registry& r);
void register_layout(Registry& r);
void register_linalg(Registry& r);
void register_linear_cross_entropy(Registry& r);
void register_loss(Registry& r);
void register_math(Registry& r);
void register_scatter_gather(Registry& r);
void register_segment(Registry& r);
void register_matmul(Registry& r);
void register_misc(Registry& r);
void register_moe(Registry& r);
void register_mutation(Registry& r);
void register_norm(Registry& r);
void register_pad(Registry& r);
void register_pool(Registry& r);
void register_quantize(Registry& r);
void register_random(Registry& r);
void register_prims(Registry& r);
void register_subclass(Registry& r);
void register_reduce(Registry& r);
void register_resize(Registry& r);
void register_rnn(Registry& r);
void register_shape(Registry& r);
void register_signal(Registry& r);
void register_sort(Registry& r);
void register_storage(Registry& r);
void register_symint(Registry& r);
void register_torchvision_ops(Registry& r);

}  // namespace pt2onnx
