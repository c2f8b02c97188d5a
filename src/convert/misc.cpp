// Ops that are identities on ONNX values: clone (any memory_format),
// contiguous, alias, detach, lift_fresh(_copy). (Dropout is in random.cpp.)
#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

void identity(Ctx& c) {
  const char* arg = c.arg("self") ? "self" : "input";
  c.set_output(0, c.tensor(arg));
}

}  // namespace

void register_misc(Registry& r) {
  const std::string p = "torch.ops.aten.";
  for (const char* o : {"clone.default", "contiguous.default", "alias.default", "detach.default",
                        "lift_fresh_copy.default", "lift_fresh.default"})
    r.add(p + o, identity);
}

}  // namespace pt2onnx
