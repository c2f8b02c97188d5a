// Pooling: max_pool{1,2,3}d (with or without indices), avg_pool{1,2,3}d,
// adaptive_avg_pool{1,2,3}d.
#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

std::vector<int64_t> expand(std::vector<int64_t> v, size_t n) {
  if (v.size() == 1 && n > 1) v.assign(n, v[0]);
  return v;
}

// Pools that accept an unbatched input (C, spatial...) get a batch axis.
std::string pool(Ctx& c, const std::string& op, std::string x, size_t n, std::vector<Attr> attrs,
                 size_t n_outputs = 1) {
  bool unbatched = c.rank(x) == n + 1;
  ValueType out = c.out_type();  // torch's output shape (pool arithmetic done once, by torch)
  if (unbatched) {
    x = c.unsqueeze(x, {0});
    out.shape->insert(out.shape->begin(), Dim::of(1));
  }
  std::string y = c.b.add_node(op, {x}, n_outputs, std::move(attrs), {out})[0];
  return unbatched ? c.squeeze(y, {0}) : y;
}

void max_pool(Ctx& c, size_t n) {
  std::string x = c.tensor("self");
  auto kernel = expand(c.ints("kernel_size", {}), n);
  auto stride = c.ints("stride", {});
  stride = stride.empty() ? kernel : expand(stride, n);
  auto pad = expand(c.ints("padding", {0}), n);
  auto dil = expand(c.ints("dilation", {1}), n);
  std::vector<int64_t> pads = pad;
  pads.insert(pads.end(), pad.begin(), pad.end());
  std::vector<Attr> attrs{Attr::Ints("kernel_shape", kernel), Attr::Ints("strides", stride),
                          Attr::Ints("pads", pads), Attr::Ints("dilations", dil),
                          Attr::Int("ceil_mode", c.flag("ceil_mode", false) ? 1 : 0)};
  if (c.n_outputs() > 1 && c.out_name(1).find("_unused_") == std::string::npos)
    c.fail("max_pool indices output is used; it is not converted yet");
  c.set_output(0, pool(c, "MaxPool", x, n, attrs));
}
void max_pool1d(Ctx& c) { max_pool(c, 1); }
void max_pool2d(Ctx& c) { max_pool(c, 2); }
void max_pool3d(Ctx& c) { max_pool(c, 3); }

void avg_pool(Ctx& c, size_t n) {
  std::string x = c.tensor("self");
  auto kernel = expand(c.ints("kernel_size", {}), n);
  auto stride = c.ints("stride", {});
  stride = stride.empty() ? kernel : expand(stride, n);
  auto pad = expand(c.ints("padding", {0}), n);
  if (c.has("divisor_override")) c.fail("avg_pool with divisor_override is not converted");
  std::vector<int64_t> pads = pad;
  pads.insert(pads.end(), pad.begin(), pad.end());
  std::vector<Attr> attrs{
      Attr::Ints("kernel_shape", kernel), Attr::Ints("strides", stride), Attr::Ints("pads", pads),
      Attr::Int("ceil_mode", c.flag("ceil_mode", false) ? 1 : 0),
      Attr::Int("count_include_pad", c.flag("count_include_pad", true) ? 1 : 0)};
  c.set_output(0, pool(c, "AveragePool", x, n, attrs));
}
void avg_pool1d(Ctx& c) { avg_pool(c, 1); }
void avg_pool2d(Ctx& c) { avg_pool(c, 2); }
void avg_pool3d(Ctx& c) { avg_pool(c, 3); }

void adaptive_avg_pool(Ctx& c) {
  std::string x = c.tensor("self");
  auto out = c.ints("output_size", {});
  size_t n = out.size();
  bool global = true;
  for (auto v : out) global &= v == 1;
  if (global) {
    c.set_output(0, pool(c, "GlobalAveragePool", x, n, {}));
    return;
  }
  // Equal windows when each input size is a multiple of the output size.
  const ValueType& t = c.type(x);
  std::vector<int64_t> kernel;
  for (size_t k = 0; k < n; ++k) {
    const Dim& d = (*t.shape)[t.shape->size() - n + k];
    if (!d.is_static() || d.value % out[k] != 0)
      c.fail("adaptive_avg_pool with output " + std::to_string(out[k]) +
             " needs a static input size divisible by it (got " +
             (d.is_static() ? std::to_string(d.value) : d.sym) + ")");
    kernel.push_back(d.value / out[k]);
  }
  c.set_output(0, pool(c, "AveragePool", x, n,
                       {Attr::Ints("kernel_shape", kernel), Attr::Ints("strides", kernel)}));
}

}  // namespace

void register_pool(Registry& r) {
  const std::string p = "torch.ops.aten.";
  for (const char* o : {"max_pool1d.default", "max_pool1d_with_indices.default"})
    r.add(p + o, max_pool1d);
  for (const char* o : {"max_pool2d.default", "max_pool2d_with_indices.default"})
    r.add(p + o, max_pool2d);
  for (const char* o : {"max_pool3d.default", "max_pool3d_with_indices.default"})
    r.add(p + o, max_pool3d);
  r.add(p + "avg_pool1d.default", avg_pool1d);
  r.add(p + "avg_pool2d.default", avg_pool2d);
  r.add(p + "avg_pool3d.default", avg_pool3d);
  for (const char* o :
       {"adaptive_avg_pool1d.default", "adaptive_avg_pool2d.default", "adaptive_avg_pool3d.default",
        "_adaptive_avg_pool2d.default", "_adaptive_avg_pool3d.default"})
    r.add(p + o, adaptive_avg_pool);
}

}  // namespace pt2onnx
