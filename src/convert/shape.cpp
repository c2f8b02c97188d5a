// Shape manipulation: view/reshape/flatten/unflatten, permute/transpose,
// unsqueeze/squeeze, cat/stack, split/split_with_sizes/chunk, expand.
// Reshape targets are built from torch's recorded output shape: static dims
// as numbers, dims equal to the input's at the same position as 0 (copy),
// one remaining symbolic dim as -1, so most dynamic reshapes need no Shape op.
#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

struct Target {
  std::string shape;
  bool allowzero = false;
};

Target reshape_target(Ctx& c, const std::string& x, const ValueType& out,
                      const std::vector<schema::SymIntArg>* sizes) {
  const Shape& od = *out.shape;
  const ValueType& in = c.type(x);
  bool has_zero = false, all_static = true;
  for (auto& d : od) {
    has_zero |= d.is_static() && d.value == 0;
    all_static &= d.is_static();
  }
  if (all_static) {
    std::vector<int64_t> v;
    for (auto& d : od) v.push_back(d.value);
    return {c.b.const_i64(v), has_zero};
  }
  if (!has_zero) {
    std::vector<int64_t> v;
    int unresolved = 0;
    for (size_t i = 0; i < od.size(); ++i) {
      if (od[i].is_static()) {
        v.push_back(od[i].value);
      } else if (in.shape && i < in.shape->size() && (*in.shape)[i].same_as(od[i])) {
        v.push_back(0);
      } else {
        v.push_back(-1);
        ++unresolved;
      }
    }
    if (unresolved <= 1) return {c.b.const_i64(v), false};
  }
  if (sizes) return {c.shape_tensor(*sizes), has_zero};
  // Each symbolic output dim equal to some input dim is read from the input.
  std::vector<std::string> parts;
  for (auto& d : od) {
    if (d.is_static()) {
      parts.push_back(c.b.const_i64({d.value}));
      continue;
    }
    bool found = false;
    for (size_t j = 0; in.shape && j < in.shape->size() && !found; ++j)
      if ((*in.shape)[j].same_as(d)) {
        parts.push_back(c.dim_value(x, static_cast<int64_t>(j)));
        found = true;
      }
    if (!found) c.fail("cannot express reshape target dim '" + d.sym + "' from the input's dims");
  }
  return {c.b.op("Concat", parts, {Attr::Int("axis", 0)}), has_zero};
}

void emit_reshape(Ctx& c, const std::string& x, const std::vector<schema::SymIntArg>* sizes) {
  ValueType out = c.out_type();
  const ValueType& in = c.type(x);
  if (in.shape && *in.shape == *out.shape) return c.set_output(0, x);
  Target t = reshape_target(c, x, out, sizes);
  std::vector<Attr> attrs;
  if (t.allowzero) attrs.push_back(Attr::Int("allowzero", 1));
  c.set_output(0, c.b.op("Reshape", {x, t.shape}, attrs, out));
}

void view(Ctx& c) {
  const char* arg = c.arg("size") ? "size" : "shape";
  auto sizes = c.symints(arg);
  emit_reshape(c, c.tensor("self"), &sizes);
}

void flatten(Ctx& c) { emit_reshape(c, c.tensor("self"), nullptr); }

void unflatten(Ctx& c) {
  // sizes cover only the unflattened dim; the output metadata has the rest.
  emit_reshape(c, c.tensor("self"), nullptr);
}

void permute(Ctx& c) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  std::vector<int64_t> perm = c.ints("dims", {});
  for (auto& p : perm) p = Ctx::norm_axis(p, r);
  c.set_output(0, c.transpose(x, perm));
}

void transpose(Ctx& c) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  if (r < 2) return c.set_output(0, x);
  std::vector<int64_t> perm;
  for (size_t k = 0; k < r; ++k) perm.push_back(static_cast<int64_t>(k));
  int64_t a = Ctx::norm_axis(c.i("dim0"), r), b = Ctx::norm_axis(c.i("dim1"), r);
  std::swap(perm[static_cast<size_t>(a)], perm[static_cast<size_t>(b)]);
  c.set_output(0, c.transpose(x, perm));
}

void unsqueeze(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t d = Ctx::norm_axis(c.i("dim"), c.rank(x) + 1);
  c.set_output(0, c.unsqueeze(x, {d}));
}

void squeeze(Ctx& c) {
  std::string x = c.tensor("self");
  const Shape& s = *c.type(x).shape;
  std::vector<int64_t> dims;
  if (c.arg("dim"))
    dims = {c.i("dim")};
  else if (c.arg("dims"))
    dims = c.ints("dims", {});
  else
    for (size_t k = 0; k < s.size(); ++k) dims.push_back(static_cast<int64_t>(k));
  // torch squeezes only dims of size 1; others are left alone.
  std::vector<int64_t> axes;
  for (auto d : dims) {
    if (s.empty()) break;
    int64_t a = Ctx::norm_axis(d, s.size());
    if (s[static_cast<size_t>(a)].is_static() && s[static_cast<size_t>(a)].value == 1)
      axes.push_back(a);
  }
  if (axes.empty()) return c.set_output(0, x);
  c.set_output(0, c.squeeze(x, axes));
}

void cat(Ctx& c) {
  DType t = c.out_dtype();
  size_t r = c.out_type().shape->size();
  int64_t axis = Ctx::norm_axis(c.i("dim", 0), r);
  std::vector<std::string> parts;
  for (auto& v : c.tensors("tensors")) {
    const ValueType& vt = c.type(v);
    // torch.cat skips 1-D empty tensors whatever the other shapes.
    if (vt.shape && vt.shape->size() == 1 && (*vt.shape)[0].is_static() &&
        (*vt.shape)[0].value == 0 && r != 1)
      continue;
    parts.push_back(c.cast(v, t));
  }
  if (parts.size() == 1) return c.set_output(0, parts[0]);
  c.set_output(0, c.b.op("Concat", parts, {Attr::Int("axis", axis)}, c.out_type()));
}

void stack(Ctx& c) {
  DType t = c.out_dtype();
  size_t r = c.out_type().shape->size();
  int64_t axis = Ctx::norm_axis(c.i("dim", 0), r);
  std::vector<std::string> parts;
  for (auto& v : c.tensors("tensors")) parts.push_back(c.unsqueeze(c.cast(v, t), {axis}));
  if (parts.size() == 1) return c.set_output(0, parts[0]);
  c.set_output(0, c.b.op("Concat", parts, {Attr::Int("axis", axis)}, c.out_type()));
}

void split(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t axis = Ctx::norm_axis(c.i("dim", 0), c.rank(x));
  size_t n = c.n_outputs();
  std::vector<int64_t> sizes;
  std::vector<ValueType> types;
  for (size_t k = 0; k < n; ++k) {
    ValueType t = c.out_type(k);
    const Dim& d = (*t.shape)[static_cast<size_t>(axis)];
    if (!d.is_static())
      c.fail("split along a dimension of symbolic size '" + d.sym + "' is not converted yet");
    sizes.push_back(d.value);
    types.push_back(std::move(t));
  }
  if (n == 1) return c.set_output(0, x);
  auto outs = c.b.add_node("Split", {x, c.b.const_i64(sizes)}, n, {Attr::Int("axis", axis)}, types);
  for (size_t k = 0; k < n; ++k) c.set_output(k, outs[k]);
}

void unbind(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t axis = Ctx::norm_axis(c.i("dim", 0), c.rank(x));
  const Dim& d = (*c.type(x).shape)[static_cast<size_t>(axis)];
  size_t n = c.n_outputs();
  if (!d.is_static() || static_cast<size_t>(d.value) != n)
    c.fail("unbind along a dimension of symbolic size is not converted");
  std::vector<std::string> parts{x};
  if (n > 1)
    parts = c.b.add_node("Split", {x, c.b.const_i64(std::vector<int64_t>(n, 1))}, n,
                         {Attr::Int("axis", axis)});
  for (size_t k = 0; k < n; ++k) c.set_output(k, c.squeeze(parts[k], {axis}));
}

void expand(Ctx& c) {
  std::string x = c.tensor("self");
  auto sizes = c.symints("size");
  ValueType out = c.out_type();
  const Shape& in = *c.type(x).shape;
  const Shape& od = *out.shape;
  // Expand broadcasts: a 1 keeps the input's dim, so dims torch keeps (-1 or
  // equal to the input's) need no runtime size.
  std::vector<schema::SymIntArg> target;
  size_t lead = od.size() - in.size();
  for (size_t k = 0; k < od.size(); ++k) {
    bool keep =
        k >= lead && (in[k - lead].same_as(od[k]) || (sizes[k].value && *sizes[k].value == -1));
    if (keep)
      target.push_back(schema::SymIntArg{1, {}});
    else if (od[k].is_static())
      target.push_back(schema::SymIntArg{od[k].value, {}});
    else
      target.push_back(sizes[k]);
  }
  if (in == od) return c.set_output(0, x);
  c.set_output(0, c.b.op("Expand", {x, c.shape_tensor(target)}, {}, out));
}

void expand_as(Ctx& c) {
  std::string x = c.tensor("self");
  std::string other = c.tensor("other");
  c.set_output(0, c.b.op("Expand", {x, c.b.op("Shape", {other})}, {}, c.out_type()));
}

}  // namespace

void register_shape(Registry& r) {
  const std::string p = "torch.ops.aten.";
  for (const char* o : {"view.default", "reshape.default", "_unsafe_view.default"})
    r.add(p + o, view);
  r.add(p + "flatten.using_ints", flatten);
  r.add(p + "unflatten.int", unflatten);
  r.add(p + "permute.default", permute);
  r.add(p + "transpose.int", transpose);
  r.add(p + "unsqueeze.default", unsqueeze);
  for (const char* o : {"squeeze.default", "squeeze.dim", "squeeze.dims"}) r.add(p + o, squeeze);
  for (const char* o : {"cat.default", "concat.default", "concatenate.default"}) r.add(p + o, cat);
  r.add(p + "stack.default", stack);
  for (const char* o : {"split.Tensor", "split_with_sizes.default", "chunk.default",
                        "tensor_split.sections", "unsafe_split.Tensor"})
    r.add(p + o, split);
  r.add(p + "unbind.int", unbind);
  r.add(p + "expand.default", expand);
  r.add(p + "expand_as.default", expand_as);
}

}  // namespace pt2onnx
