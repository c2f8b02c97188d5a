// _chunk_cat(tensors, dim, num_chunks): every tensor is zero-padded along
// `dim` to a multiple of num_chunks, split into num_chunks equal chunks, each
// chunk flattened from `dim` on, and the chunks of all tensors concatenated:
// [leading..., num_chunks, sum of the per-tensor chunk sizes].
#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

void chunk_cat(Ctx& c) {
  DType t = c.out_dtype();
  auto xs = c.tensors("tensors");
  if (xs.empty()) c.fail("_chunk_cat of no tensors");
  int64_t n = c.i("num_chunks");
  if (n < 1) c.fail("num_chunks must be positive");
  int64_t dim0 = c.i("dim");
  std::vector<std::string> parts;
  for (auto& x0 : xs) {
    std::string x = c.cast(x0, t);
    size_t r = c.rank(x);
    int64_t dim = Ctx::norm_axis(dim0, c.rank(xs[0]));
    if (dim < 0 || dim >= static_cast<int64_t>(r)) c.fail("dim out of range");
    // Padding: (-size) mod n at the end of `dim`.
    const Dim& d = c.shape(x)[static_cast<size_t>(dim)];
    std::string pad_amount;
    if (d.is_static()) {
      int64_t pad = (n - d.value % n) % n;
      if (pad) pad_amount = c.b.const_i64({pad});
    } else {
      std::string nn = c.b.const_i64({n});
      pad_amount =
          c.b.op("Mod", {c.b.op("Sub", {nn, c.b.op("Mod", {c.dim_value(x, dim), nn})}), nn});
    }
    if (!pad_amount.empty()) {
      std::vector<std::string> pads;
      pads.push_back(c.b.const_i64(std::vector<int64_t>(r + static_cast<size_t>(dim), 0)));
      pads.push_back(pad_amount);
      if (r - static_cast<size_t>(dim) - 1 > 0)
        pads.push_back(c.b.const_i64(std::vector<int64_t>(r - static_cast<size_t>(dim) - 1, 0)));
      std::string p = c.b.op("Concat", pads, {Attr::Int("axis", 0)});
      Shape padded = c.type(x).shape.value();
      padded[static_cast<size_t>(dim)] =
          d.is_static() ? Dim::of(d.value + c.b.const_ints(pad_amount)->at(0)) : Dim::unknown();
      x = c.b.op("Pad", {x, p, c.b.scalar(t, 0)}, {}, ValueType{t, std::move(padded)});
    }
    std::vector<int64_t> shape(static_cast<size_t>(dim), 0);  // 0: keep the leading dims
    shape.push_back(n);
    shape.push_back(-1);
    parts.push_back(c.reshape(x, c.b.const_i64(shape)));
  }
  int64_t axis = Ctx::norm_axis(dim0, c.rank(xs[0])) + 1;
  c.set_output(0,
               parts.size() == 1 ? parts[0] : c.b.op("Concat", parts, {Attr::Int("axis", axis)}));
}

}  // namespace

void register_chunk_cat(Registry& r) { r.add("torch.ops.aten._chunk_cat.default", chunk_cat); }

}  // namespace pt2onnx
