// Convolutions: convolution (1d/2d/3d, groups, dilation, padding, transposed)
// and the conv1d/2d/3d, conv_transpose1d/2d/3d forms torch.export keeps.
#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

// Expands a per-dim list that torch lets be given once for all dims.
std::vector<int64_t> per_dim(std::vector<int64_t> v, size_t n, const char* what, const Ctx& c) {
  if (v.size() == 1 && n > 1) v.assign(n, v[0]);
  if (v.size() != n)
    c.fail(std::string(what) + " has " + std::to_string(v.size()) + " values for " +
           std::to_string(n) + " spatial dims");
  return v;
}

// The spatial dims of a convolution weight (out, in / groups, k1, ...): a
// crafted program's weight of rank < 3 fails here instead of underflowing the
// count that indexes the kernel sizes.
size_t spatial_rank(const Ctx& c, const std::string& w) {
  size_t r = c.rank(w);
  if (r < 3) c.fail("convolution weight of rank " + std::to_string(r) + " (3 or more expected)");
  return r - 2;
}

void emit_conv(Ctx& c, std::string x, std::string w, std::optional<std::string> bias,
               std::vector<int64_t> stride, std::vector<int64_t> pads_begin,
               std::vector<int64_t> pads_end, std::vector<int64_t> dilation, int64_t groups,
               bool transposed, std::vector<int64_t> output_padding) {
  // Computed in the type onnxruntime has a kernel for, cast back at the end.
  DType t = c.dtype(x), kt = c.kernel_type("Conv", t);
  x = c.cast(x, kt), w = c.cast(w, kt);
  if (bias) bias = c.cast(*bias, kt);
  const ValueType& wt = c.type(w);
  auto wdims = wt.static_dims();
  if (!wdims) c.fail("convolution weight needs a static shape");
  size_t n = spatial_rank(c, w);
  std::vector<int64_t> kernel(wdims->begin() + 2, wdims->end());
  stride = per_dim(stride, n, "stride", c);
  dilation = per_dim(dilation, n, "dilation", c);
  pads_begin = per_dim(pads_begin, n, "padding", c);
  pads_end = per_dim(pads_end, n, "padding", c);
  std::vector<int64_t> pads = pads_begin;
  pads.insert(pads.end(), pads_end.begin(), pads_end.end());
  std::vector<Attr> attrs{Attr::Ints("kernel_shape", kernel), Attr::Ints("strides", stride),
                          Attr::Ints("pads", pads), Attr::Ints("dilations", dilation),
                          Attr::Int("group", groups)};
  std::vector<std::string> in{x, w};
  std::string op = "Conv";
  // Transposed: output_padding only lengthens the end of the output; it is
  // taken from the end padding, and what exceeds it is zero-padded after
  // (onnxruntime rejects an output_padding attribute >= stride, which torch
  // allows when below the dilation).
  std::vector<int64_t> extra;
  bool any_extra = false;
  if (transposed) {
    op = "ConvTranspose";
    output_padding = per_dim(output_padding, n, "output_padding", c);
    for (size_t k = 0; k < n; ++k) {
      int64_t e = pads_end[k] - output_padding[k];
      extra.push_back(e < 0 ? -e : 0);
      any_extra |= e < 0;
      pads[n + k] = e < 0 ? 0 : e;
    }
    attrs[2] = Attr::Ints("pads", pads);
  }
  if (bias && !any_extra) in.push_back(*bias);
  ValueType out = c.out_type();
  out.dtype = kt;
  if (any_extra) {
    bool unbatched = c.rank(x) == n + 1;
    if (unbatched) in[0] = c.unsqueeze(x, {0});
    std::string y = c.b.op(op, in, attrs, ValueType{c.dtype(x), std::nullopt});
    std::vector<int64_t> pv(2 * (n + 2), 0);
    for (size_t k = 0; k < n; ++k) pv[n + 2 + 2 + k] = extra[k];
    y = c.b.op("Pad", {y, c.b.const_i64(pv)}, {}, ValueType{c.dtype(x), std::nullopt});
    if (bias) {
      std::vector<int64_t> axes;
      for (size_t k = 1; k <= n; ++k) axes.push_back(static_cast<int64_t>(k));
      y = c.b.op("Add", {y, c.unsqueeze(*bias, axes)});
    }
    if (unbatched) y = c.squeeze(y, {0});
    c.set_output(0, c.cast(y, t));
    return;
  }
  if (c.rank(x) == n + 1) {
    // Unbatched input: add the batch axis for ONNX and drop it after.
    in[0] = c.unsqueeze(x, {0});
    out.shape->insert(out.shape->begin(), Dim::of(1));
    c.set_output(0, c.cast(c.squeeze(c.b.op(op, in, attrs, out), {0}), t));
    return;
  }
  c.set_output(0, c.cast(c.b.op(op, in, attrs, out), t));
}

void convolution(Ctx& c) {
  std::string x = c.tensor("input"), w = c.tensor("weight");
  size_t n = spatial_rank(c, w);
  auto pad = c.ints("padding", {0});
  pad = per_dim(pad, n, "padding", c);
  emit_conv(c, x, w, c.opt_tensor("bias"), c.ints("stride", {1}), pad, pad, c.ints("dilation", {1}),
            c.i("groups", 1), c.flag("transposed", false), c.ints("output_padding", {0}));
}

void conv_nd(Ctx& c) {
  std::string x = c.tensor("input"), w = c.tensor("weight");
  size_t n = spatial_rank(c, w);
  auto dilation = per_dim(c.ints("dilation", {1}), n, "dilation", c);
  std::vector<int64_t> pb, pe;
  const schema::Argument* pad_arg = c.arg("padding");
  if (pad_arg && pad_arg->kind == schema::ArgKind::String) {
    const std::string* mode = &pad_arg->s;
    // conv{1,2,3}d.padding: "valid" or "same" (stride 1); torch puts the odd
    // extra padding at the end.
    auto kernel_dims = c.type(w).static_dims();
    if (!kernel_dims) c.fail("padding='" + *mode + "' needs the weight's size static");
    const std::vector<int64_t>& kernel = *kernel_dims;
    for (size_t k = 0; k < n; ++k) {
      int64_t total = *mode == "same" ? dilation[k] * (kernel[k + 2] - 1) : 0;
      if (*mode != "same" && *mode != "valid") c.fail("unknown padding mode '" + *mode + "'");
      pb.push_back(total / 2);
      pe.push_back(total - total / 2);
    }
  } else {
    pb = pe = per_dim(c.ints("padding", {0}), n, "padding", c);
  }
  emit_conv(c, x, w, c.opt_tensor("bias"), c.ints("stride", {1}), pb, pe, dilation,
            c.i("groups", 1), false, {0});
}

void conv_transpose_nd(Ctx& c) {
  std::string x = c.tensor("input"), w = c.tensor("weight");
  size_t n = spatial_rank(c, w);
  auto pad = per_dim(c.ints("padding", {0}), n, "padding", c);
  emit_conv(c, x, w, c.opt_tensor("bias"), c.ints("stride", {1}), pad, pad, c.ints("dilation", {1}),
            c.i("groups", 1), true, c.ints("output_padding", {0}));
}

}  // namespace

void register_conv(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "convolution.default", convolution);
  for (const char* o : {"conv1d.default", "conv2d.default", "conv3d.default", "conv1d.padding",
                        "conv2d.padding", "conv3d.padding"})
    r.add(p + o, conv_nd);
  for (const char* o :
       {"conv_transpose1d.default", "conv_transpose2d.input", "conv_transpose3d.input"})
    r.add(p + o, conv_transpose_nd);
}

}  // namespace pt2onnx
