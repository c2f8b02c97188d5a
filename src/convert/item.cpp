// Tensor.item(): aten._local_scalar_dense / aten.item turn a one-element
// tensor into a Python scalar, which the exported graph then uses as a
// SymInt / SymFloat / SymBool (a 1-D one-element tensor here: int64 for
// SymInt, double for SymFloat, bool for SymBool).
#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

void local_scalar_dense(Ctx& c) {
  std::string x = c.reshape(c.tensor("self"), c.b.const_i64({1}));
  if (c.node.outputs.empty()) c.fail("item() has no output");
  DType want = DType::Undefined;
  switch (c.node.outputs[0].kind) {
    case schema::ArgKind::SymInt:
    case schema::ArgKind::Int:
      want = DType::Int64;
      break;
    case schema::ArgKind::SymFloat:
    case schema::ArgKind::Float:
      want = DType::Double;
      break;
    case schema::ArgKind::SymBool:
    case schema::ArgKind::Bool:
      want = DType::Bool;
      break;
    default:
      c.fail("item() of a " + c.node.outputs[0].variant + " result");
  }
  DType in = c.dtype(x);
  if (want == DType::Int64 && is_floating(in)) c.fail("item() typed as an int of a float tensor");
  c.set_output(0, c.cast(x, want));
}

}  // namespace

void register_item(Registry& r) {
  r.add("torch.ops.aten._local_scalar_dense.default", local_scalar_dense);
  r.add("torch.ops.aten.item.default", local_scalar_dense);
}

}  // namespace pt2onnx
