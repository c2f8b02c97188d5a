#include "convert/registry.h"

#include <algorithm>

namespace pt2onnx {

void Registry::add(const std::string& target, ConvertFn fn, int min_opset, int max_opset) {
  table_[target].push_back(Converter{fn, min_opset, max_opset});
}

ConvertFn Registry::find(const std::string& target, int opset) const {
  auto it = table_.find(target);
  if (it == table_.end()) return nullptr;
  for (auto& c : it->second)
    if (opset >= c.min_opset && opset <= c.max_opset) return c.fn;
  return nullptr;
}

int Registry::min_opset(const std::string& target) const {
  auto it = table_.find(target);
  if (it == table_.end()) return 0;
  int m = INT_MAX;
  for (auto& c : it->second) m = std::min(m, c.min_opset);
  return m;
}

std::vector<std::string> Registry::overlapping() const {
  std::vector<std::string> r;
  for (auto& [target, convs] : table_)
    for (size_t i = 0; i < convs.size(); ++i)
      for (size_t j = i + 1; j < convs.size(); ++j)
        if (convs[i].min_opset <= convs[j].max_opset && convs[j].min_opset <= convs[i].max_opset)
          r.push_back(target);
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

std::vector<std::string> Registry::targets() const {
  std::vector<std::string> r;
  for (auto& [k, v] : table_) r.push_back(k);
  std::sort(r.begin(), r.end());
  return r;
}

const Registry& registry() {
  static const Registry r = [] {
    Registry x;
    register_activation(x);
    register_attention(x);
    register_backward(x);
    register_chebyshev(x);
    register_chunk_cat(x);
    register_complex(x);
    register_control_flow(x);
    register_conv(x);
    register_creation(x);
    register_eigen(x);
    register_elementwise(x);
    register_gradient(x);
    register_histogram(x);
    register_householder(x);
    register_indexing(x);
    register_item(x);
    register_layout(x);
    register_linalg(x);
    register_linear_cross_entropy(x);
    register_loss(x);
    register_math(x);
    register_scatter_gather(x);
    register_segment(x);
    register_matmul(x);
    register_misc(x);
    register_moe(x);
    register_mutation(x);
    register_norm(x);
    register_pad(x);
    register_pool(x);
    register_quantize(x);
    register_random(x);
    register_reduce(x);
    register_resize(x);
    register_rnn(x);
    register_shape(x);
    register_signal(x);
    register_sort(x);
    register_storage(x);
    register_prims(x);
    register_subclass(x);
    register_symint(x);
    register_torchvision_ops(x);
    return x;
  }();
  return r;
}

}  // namespace pt2onnx
