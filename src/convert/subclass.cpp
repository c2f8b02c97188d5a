// export.access_subclass_inner_tensor: a tensor-subclass weight's inner
// tensor (torchao's quantized weights: qdata, scale, zero_point). The
// weight's inner tensors are initializers of their own (add_inner_tensors in
// convert_graph.cpp); this names the one asked for.
#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

void access_subclass_inner_tensor(Ctx& c) {
  const schema::Argument* src = c.arg("src_subclass_tensor");
  if (!src) src = c.arg("src");
  std::optional<std::string> attr = c.str("attr");
  if (!src || src->kind != schema::ArgKind::Tensor || !attr)
    c.fail("access_subclass_inner_tensor needs a tensor and an attribute name");
  auto it = c.env.cache.find(subclass_inner_key(src->name, *attr));
  if (it == c.env.cache.end())
    c.fail("'" + src->name + "' is not a tensor-subclass weight with inner tensor '" + *attr + "'");
  const ValueType& t = c.type(it->second);
  if (t.dtype != c.out_dtype())
    c.fail("inner tensor '" + *attr + "' is " + std::string(dtype_name(t.dtype)) +
           " but the program records " + std::string(dtype_name(c.out_dtype())));
  c.set_output(0, it->second);
}

}  // namespace

void register_subclass(Registry& r) {
  r.add("torch.ops.export.access_subclass_inner_tensor.default", access_subclass_inner_tensor);
}

}  // namespace pt2onnx
