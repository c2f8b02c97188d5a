// Opt-in fallback for ops no converter handles (Options::Fallback::CustomDomain).
#pragma once
#include "convert/context.h"

namespace pt2onnx {

// The domain fallback nodes are written in (version 1 in the model's opset_import).
inline constexpr const char* kTorchOpsDomain = "pkg.torch.ops";

// A node's arguments as an ONNX call: tensor arguments (and dynamic sizes, as
// int64) are inputs in schema order, a None argument an empty input "" so that
// later inputs keep their positions (trailing ones dropped), the other
// arguments attributes named after the argument (bools as 0 / 1 ints, known
// sizes as ints). `what` names the target form in errors.
struct CallArgs {
  std::vector<std::string> inputs;
  std::vector<Attr> attrs;
};
CallArgs call_args(Ctx& c, const std::string& what);

// Writes the node as one node of domain pkg.torch.ops whose op_type is its
// target without "torch.ops." ("mylib.foo.default"): tensor arguments (and
// dynamic sizes, as int64) are its inputs in schema order, a None argument an
// empty input "" so that later inputs keep their positions (trailing ones
// dropped), the other arguments attributes named after the argument (bools as
// 0 / 1 ints, known sizes as ints), its outputs typed from torch's metadata. A runtime that
// implements the op (a custom-op library) can run the model; onnxruntime alone cannot.
void emit_custom_domain_node(Ctx& c);

}  // namespace pt2onnx
