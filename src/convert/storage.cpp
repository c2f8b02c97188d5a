// Storage resizing: resize_ / resize_as_ (a contiguous tensor re-viewed with
// a new shape: its first numel(new shape) elements; growing it would expose
// uninitialized memory, which has no ONNX counterpart). (sym_storage_offset
// is converted in creation.cpp with the other storage queries.)
#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

// x re-viewed as `shape` (1-D int64): its first numel(shape) elements.
void resize_to(Ctx& c, const std::string& shape, std::optional<int64_t> new_numel) {
  std::string x = c.tensor("self");
  std::optional<int64_t> old;
  if (auto dims = c.type(x).static_dims()) {
    old = 1;
    for (auto d : *dims) *old *= d;
  }
  if (old && new_numel && *new_numel > *old)
    c.fail("resize_ grows the tensor from " + std::to_string(*old) + " to " +
           std::to_string(*new_numel) +
           " elements; the new elements are uninitialized memory, which has no ONNX "
           "counterpart");
  std::string flat = c.reshape(x, c.b.const_i64({-1}));
  if (!(old && new_numel && *old == *new_numel)) {
    std::string n = c.reduce("ReduceProd", shape, {0}, true);
    flat = c.b.op("Slice", {flat, c.b.const_i64({0}), n, c.b.const_i64({0})});
  }
  c.set_output(0, c.reshape(flat, shape));
}

void resize(Ctx& c) {
  auto sizes = c.symints("size");
  std::optional<int64_t> numel = 1;
  for (auto& s : sizes) {
    auto v = c.symint_const(s);
    if (!v)
      numel.reset();
    else if (numel)
      *numel *= *v;
  }
  resize_to(c, c.shape_tensor(sizes), numel);
}

void resize_as(Ctx& c) {
  std::string tmpl = c.tensor("the_template");
  std::optional<int64_t> numel;
  if (auto d = c.type(tmpl).static_dims()) {
    numel = 1;
    for (auto v : *d) *numel *= v;
  }
  resize_to(c, c.b.op("Shape", {tmpl}), numel);
}

}  // namespace

void register_storage(Registry& r) {
  const std::string p = "torch.ops.aten.";
  // resize_ / resize_as_ convert through these (see mutation.h).
  r.add(p + "resize.default", resize);
  r.add(p + "resize_as.default", resize_as);
}

}  // namespace pt2onnx
