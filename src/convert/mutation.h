// In-place ops and aliasing. torch.export's default (training) IR keeps
// in-place overloads (relu_, add_, index_put_, copy_, fill_, ...). Each is
// converted through its functional form, and then:
//  - the mutated tensor's FX name (and the in-place node's output, which is
//    the same tensor) is rebound to the new value for every later reader;
//  - when the mutated tensor is a view of another (x[0].fill_(1), a slice, a
//    transpose, a reshape), the new value is written back into the base
//    (slice_scatter, select_scatter, inverse permutation, reshape), up to the
//    root tensor;
//  - every other view of that root made earlier is recomputed from the new
//    root, so views see the mutation as they do in PyTorch.
// A mutation that cannot be written back (through expand, or a view kind
// with no inverse here) fails the export with the node named.
#pragma once
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

// "torch.ops.aten.add_.Tensor" -> "torch.ops.aten.add.Tensor"; "" when the
// target is not an in-place overload.
std::string functional_target(const std::string& target);

// The converter for `target` at `opset`: its own, or its functional form's
// for an in-place overload; nullptr if neither.
ConvertFn find_converter(const std::string& target, int opset);

class AliasTracker {
 public:
  AliasTracker(GraphBuilder& b, const schema::Program& p, Env& env) : b_(b), prog_(p), env_(env) {}

  // After converting `n`: records the views it created.
  void after_node(const schema::Node& n);
  // After converting in-place node `n`: rebinds and propagates the mutation.
  void after_inplace(const schema::Node& n);

 private:
  struct Parent {
    std::string base;                    // FX name of the tensor viewed
    const schema::Node* node = nullptr;  // the view op; nullptr: same tensor
    size_t out_index = 0;                // which output of `node`
  };
  void link(const std::string& view, Parent p);
  std::string write_back(const std::string& view, const Parent& p, const std::string& value);
  void refresh(const schema::Node& n, const std::string& root,
               const std::unordered_set<std::string>& chain);
  // Throws when the alias link from `view` to `base` went stale (an in-place
  // view op such as unsqueeze_ changed the shape of one side after the view
  // was made) and mutation `n` would have to cross it.
  void check_fresh(const schema::Node& n, const std::string& view, const std::string& base) const;
  std::string run_synthetic(const std::string& target, const schema::Node& like,
                            std::vector<schema::NamedArgument> args, const std::string& base_fx);

  GraphBuilder& b_;
  const schema::Program& prog_;
  Env& env_;
  std::unordered_map<std::string, Parent> parent_;
  std::unordered_map<std::string, std::vector<std::string>> children_;
  // View FX name -> the in-place view node ("name' (target") that made its
  // link to its base stale.
  std::unordered_map<std::string, std::string> stale_;
  int synthetic_ = 0;
};

}  // namespace pt2onnx
