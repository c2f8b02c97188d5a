// segment_reduce: sum / mean / max / min / prod over consecutive segments of
// one axis, the segments given by lengths or offsets (data-dependent, so
// computed at run time). Each segment is a mask over the axis positions
// ([.., S, N]: start <= j < end); the data is broadcast against it with the
// reduction's identity outside the segment, then reduced over N.
#include <limits>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

// Last axis [start, end) of v (end may be INT64_MAX): a Slice.
std::string slice_last(Ctx& c, const std::string& v, int64_t start, int64_t end) {
  return c.b.op("Slice", {v, c.b.const_i64({start}), c.b.const_i64({end}), c.b.const_i64({-1})});
}

void segment_reduce(Ctx& c) {
  DType t = c.out_dtype();
  std::string data = c.cast(c.tensor("data"), t);
  std::string reduce = c.str("reduce").value_or("");
  if (c.has("indices")) c.fail("segment_reduce with indices is not implemented by torch either");
  size_t r = c.rank(data);
  if (r == 0) c.fail("segment_reduce of a 0-d tensor");
  int64_t axis = Ctx::norm_axis(c.i("axis", 0), r);
  size_t n_post = r - static_cast<size_t>(axis) - 1;

  // starts / ends: [pre..., S] int64.
  std::string starts, ends, lengths;
  if (auto off = c.opt_tensor("offsets")) {
    std::string o = c.cast(*off, DType::Int64);
    starts = slice_last(c, o, 0, -1);
    ends = slice_last(c, o, 1, std::numeric_limits<int64_t>::max());
    lengths = c.b.op("Sub", {ends, starts});
  } else if (auto len = c.opt_tensor("lengths")) {
    lengths = c.cast(*len, DType::Int64);
    int64_t last = static_cast<int64_t>(c.rank(lengths)) - 1;
    ends = c.b.op("CumSum", {lengths, c.b.const_i64({last})}, {}, c.type(lengths));
    starts = c.b.op("Sub", {ends, lengths});
  } else {
    c.fail("segment_reduce needs lengths or offsets");
  }
  std::string n = c.squeeze(c.dim_value(data, axis), {0});
  std::string j = c.b.op("Range", {c.b.scalar_i64(0), n, c.b.scalar_i64(1)});
  std::string mask = c.b.op("And", {c.b.op("LessOrEqual", {c.unsqueeze(starts, {-1}), j}),
                                    c.b.op("Less", {j, c.unsqueeze(ends, {-1})})});  // [pre, S, N]
  std::vector<int64_t> trailing;
  for (size_t k = 0; k < n_post; ++k) trailing.push_back(-1 - static_cast<int64_t>(k));
  if (!trailing.empty()) mask = c.unsqueeze(mask, trailing);  // [pre, S, N, 1...]
  std::string x = c.unsqueeze(data, {axis});                  // [pre, 1, N, post]

  double inf = std::numeric_limits<double>::infinity();
  bool fl = is_floating(t);
  double lowest = fl ? -inf : (t == DType::Int32 ? -2147483648.0 : -9223372036854775808.0);
  double highest = fl ? inf : (t == DType::Int32 ? 2147483647.0 : 9223372036854775807.0);
  std::string op;
  double neutral = 0;
  if (reduce == "sum" || reduce == "mean") {
    op = "ReduceSum";
  } else if (reduce == "prod") {
    op = "ReduceProd", neutral = 1;
  } else if (reduce == "max") {
    op = "ReduceMax", neutral = lowest;
  } else if (reduce == "min") {
    op = "ReduceMin", neutral = highest;
  } else {
    c.fail("unknown reduction '" + reduce + "'");
  }
  std::string masked = c.b.op("Where", {mask, x, c.b.scalar(t, neutral)});
  std::string y = c.reduce(op, masked, {axis + 1}, false);  // [pre, S, post]
  std::optional<std::string> init;
  if (c.has("initial")) init = c.operand("initial", t);
  if (init) {
    if (reduce == "sum" || reduce == "mean") y = c.b.op("Add", {y, *init});
    if (reduce == "prod") y = c.b.op("Mul", {y, *init});
    if (reduce == "max") y = c.b.op("Max", {y, *init});
    if (reduce == "min") y = c.b.op("Min", {y, *init});
  }
  if (reduce == "mean") {
    std::string cnt = c.cast(lengths, t);
    if (!trailing.empty()) cnt = c.unsqueeze(cnt, trailing);
    std::string q = c.b.op("Div", {y, cnt});
    // An empty segment is `initial` when given (else 0 / 0 = NaN, as torch).
    if (init) q = c.b.op("Where", {c.b.op("Equal", {cnt, c.b.scalar(t, 0)}), *init, q});
    y = q;
  }
  c.set_output(0, y);
}

}  // namespace

void register_segment(Registry& r) {
  r.add("torch.ops.aten.segment_reduce.default", segment_reduce);
}

}  // namespace pt2onnx
