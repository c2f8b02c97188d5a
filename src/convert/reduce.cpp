// Reductions: mean, sum, amax, amin, any, all.
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

// any / all: reduce the truth values as int32 (ReduceMax / ReduceMin do not
// take bool in every opset), then back to bool.
void emit_any_all(Ctx& c, const std::string& op) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  if (c.dtype(x) != DType::Bool)
    x = c.b.op("Not", {c.b.op("Equal", {x, c.b.scalar(c.dtype(x), 0)})});
  x = c.cast(x, DType::Int32);
  std::vector<int64_t> axes = c.ints("dim", {});
  for (auto& a : axes) a = Ctx::norm_axis(a, r);
  if (axes.empty())
    for (size_t k = 0; k < r; ++k) axes.push_back(static_cast<int64_t>(k));
  if (r > 0) x = c.reduce(op, x, axes, c.flag("keepdim", false));
  c.set_output(0, c.cast(x, DType::Bool));
}
void any(Ctx& c) { emit_any_all(c, "ReduceMax"); }
void all(Ctx& c) { emit_any_all(c, "ReduceMin"); }

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
  for (const char* o : {"any.default", "any.dim", "any.dims"}) r.add(p + o, any);
  for (const char* o : {"all.default", "all.dim", "all.dims"}) r.add(p + o, all);
}

}  // namespace pt2onnx
