// User converters (Options::custom_functions / converters / custom_opsets):
// consulted before the built-in registry, so they also override it.
//
// An ONNX function converter is parsed once per export and instantiated per
// node here, in C++: its body is copied into the graph with the function's
// inputs bound to the node's tensor arguments, its attribute references
// resolved from the node's other arguments, and its outputs bound to the
// node's outputs. No Python runs in the conversion loop.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>

#include "convert/context.h"
#include "ir/graph.h"
#include "pt2onnx/pt2onnx.h"

namespace pt2onnx {

// "mylib::foo", "mylib.foo", "mylib.foo.default", "torch.ops.mylib.foo.default"
// -> "torch.ops.mylib.foo.default" (the program's spelling of targets).
std::string normalize_target(std::string_view target);

class CustomConverters {
 public:
  // Parses the functions of `opt` (errors name the target) and keeps the rest.
  explicit CustomConverters(const Options& opt);
  bool empty() const { return functions_.empty() && cpp_.empty(); }
  bool handles(const std::string& target) const {
    return functions_.count(target) > 0 || cpp_.count(target) > 0;
  }
  // Converts c.node if a user converter handles its target.
  bool convert(Ctx& c) const;

 private:
  void instantiate(Ctx& c, const Function& f) const;
  int64_t domain_version(const Function& f, const std::string& domain) const;

  std::unordered_map<std::string, Function> functions_;
  std::unordered_map<std::string, ConvertFn> cpp_;
  std::map<std::string, int64_t> opsets_;
};

}  // namespace pt2onnx
