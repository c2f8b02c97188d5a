// Indexing: slice, select, narrow, embedding, index (one integer index tensor).
#include <climits>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

void slice(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t axis = Ctx::norm_axis(c.i("dim", 0), c.rank(x));
  int64_t step = c.i("step", 1);
  const auto* start = c.arg("start");
  const auto* end = c.arg("end");
  auto bound = [&](const schema::Argument* a, const char* name, int64_t def) -> std::string {
    if (!a || a->kind == schema::ArgKind::None) return c.b.const_i64({def});
    return c.symint_value(c.symints(name)[0]);
  };
  auto start_c = (!start || start->kind == schema::ArgKind::None)
                     ? std::optional<int64_t>(0)
                     : c.symint_const(c.symints("start")[0]);
  auto end_c = (!end || end->kind == schema::ArgKind::None) ? std::optional<int64_t>(INT64_MAX)
                                                            : c.symint_const(c.symints("end")[0]);
  const Dim& d = (*c.type(x).shape)[static_cast<size_t>(axis)];
  // The whole axis: no Slice at all.
  if (step == 1 && start_c && *start_c == 0 && end_c &&
      (*end_c == INT64_MAX || (d.is_static() && *end_c >= d.value)))
    return c.set_output(0, x);
  std::string s = bound(start, "start", 0), e = bound(end, "end", INT64_MAX);
  std::vector<std::string> in{x, s, e, c.b.const_i64({axis})};
  if (step != 1) in.push_back(c.b.const_i64({step}));
  c.set_output(0, c.b.op("Slice", in, {}, c.out_type()));
}

void narrow(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t axis = Ctx::norm_axis(c.i("dim"), c.rank(x));
  std::string s = c.symint_value(c.symints("start")[0]);
  std::string len = c.symint_value(c.symints("length")[0]);
  std::string e = c.b.op("Add", {s, len});
  c.set_output(0, c.b.op("Slice", {x, s, e, c.b.const_i64({axis})}, {}, c.out_type()));
}

void select(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t axis = Ctx::norm_axis(c.i("dim"), c.rank(x));
  auto idx = c.symints("index")[0];
  std::string i = idx.value ? c.b.scalar_i64(*idx.value) : c.squeeze(c.symint_value(idx), {0});
  c.set_output(0, c.b.op("Gather", {x, i}, {Attr::Int("axis", axis)}, c.out_type()));
}

void embedding(Ctx& c) {
  std::string w = c.tensor("weight");
  std::string idx = c.tensor("indices");
  c.set_output(0, c.b.op("Gather", {w, idx}, {Attr::Int("axis", 0)}, c.out_type()));
}

void index(Ctx& c) {
  std::string x = c.tensor("self");
  auto idx = c.tensors("indices");
  int axis = -1;
  for (size_t k = 0; k < idx.size(); ++k) {
    if (idx[k].empty()) continue;
    if (axis >= 0) c.fail("indexing with several index tensors is not converted yet");
    axis = static_cast<int>(k);
  }
  if (axis < 0) return c.set_output(0, x);
  std::string i = idx[static_cast<size_t>(axis)];
  if (!is_integral(c.dtype(i)))
    c.fail("indexing with a " + std::string(dtype_name(c.dtype(i))) +
           " mask is data-dependent and not converted");
  c.set_output(0, c.b.op("Gather", {x, i}, {Attr::Int("axis", axis)}, c.out_type()));
}

}  // namespace

void register_indexing(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "slice.Tensor", slice);
  r.add(p + "narrow.default", narrow);
  r.add(p + "select.int", select);
  r.add(p + "embedding.default", embedding);
  r.add(p + "index.Tensor", index);
}

}  // namespace pt2onnx
