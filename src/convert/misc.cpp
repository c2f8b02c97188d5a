// Ops that are identities in an inference graph: dropout (eval), clone,
// contiguous, alias, detach, lift_fresh_copy.
#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

void identity(Ctx& c) {
  const char* arg = c.arg("self") ? "self" : "input";
  c.set_output(0, c.tensor(arg));
}

void dropout(Ctx& c) {
  if (c.flag("train", false) && c.f("p", 0.5) != 0.0)
    c.fail("dropout in training mode is random; export the model in eval() mode");
  c.set_output(0, c.tensor("input"));
}

}  // namespace

void register_misc(Registry& r) {
  const std::string p = "torch.ops.aten.";
  for (const char* o : {"clone.default", "contiguous.default", "alias.default", "detach.default",
                        "lift_fresh_copy.default"})
    r.add(p + o, identity);
  for (const char* o : {"dropout.default", "feature_dropout.default", "alpha_dropout.default"})
    r.add(p + o, dropout);
}

}  // namespace pt2onnx
