// Reductions: mean, sum, amax, amin.
#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

void emit_reduce(Ctx& c, const std::string& op) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  std::vector<int64_t> axes = c.ints("dim", {});
  for (auto& a : axes) a = Ctx::norm_axis(a, r);
  bool keep = c.flag("keepdim", false);
  // sum of ints / bools is int64 in torch; dtype= casts before reducing.
  x = c.cast(x, c.out_dtype());
  if (r == 0) return c.set_output(0, x);
  if (axes.empty())
    for (size_t k = 0; k < r; ++k) axes.push_back(static_cast<int64_t>(k));
  c.set_output(0, c.reduce(op, x, axes, keep));
}

void mean(Ctx& c) { emit_reduce(c, "ReduceMean"); }
void sum(Ctx& c) { emit_reduce(c, "ReduceSum"); }
void amax(Ctx& c) { emit_reduce(c, "ReduceMax"); }
void amin(Ctx& c) { emit_reduce(c, "ReduceMin"); }

}  // namespace

void register_reduce(Registry& r) {
  const std::string p = "torch.ops.aten.";
  for (const char* o : {"mean.dim", "mean.default"}) r.add(p + o, mean);
  for (const char* o : {"sum.dim_IntList", "sum.default"}) r.add(p + o, sum);
  r.add(p + "amax.default", amax);
  r.add(p + "amin.default", amin);
}

}  // namespace pt2onnx
