// Gather / scatter: gather, scatter (src, value, reduce), scatter_add,
// scatter_reduce, index_add/copy/fill/reduce, index_select, take,
// take_along_dim, put, slice/select/diagonal/as_strided_scatter.
// ScatterElements/ScatterND reductions exist from opset 16 (add, mul) and 18
// (max, min); lower opsets fail with the reason.
#include "convert/scatter_gather.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <numeric>

#include "convert/registry.h"

namespace pt2onnx {

std::string shape_of(Ctx& c, const std::string& v) {
  if (auto s = c.type(v).static_dims()) return c.b.const_i64(*s);
  size_t r = c.rank(v);
  return c.b.op("Shape", {v}, {}, ValueType{DType::Int64, Shape{Dim::of(static_cast<int64_t>(r))}});
}

std::string dim_scalar(Ctx& c, const std::string& v, int64_t axis) {
  const Shape& s = c.shape(v);
  const Dim& d = s[static_cast<size_t>(Ctx::norm_axis(axis, s.size()))];
  if (d.is_static()) return c.b.scalar_i64(d.value);
  if (c.opset() < 15)  // Shape's start/end came with opset 15
    return c.b.op("Gather", {c.b.op("Shape", {v}), c.b.scalar_i64(axis)}, {Attr::Int("axis", 0)});
  return c.squeeze(c.dim_value(v, axis), {0});
}

// Dim `axis` of `v` as 1-D int64 (Ctx::dim_value needs opset 15 when symbolic).
static std::string dim_1d(Ctx& c, const std::string& v, int64_t axis) {
  if (c.opset() >= 15) return c.dim_value(v, axis);
  return c.unsqueeze(dim_scalar(c, v, axis), {0});
}

std::string dims_of(Ctx& c, const std::string& v, const std::vector<int64_t>& axes) {
  const Shape& s = c.shape(v);
  std::vector<int64_t> vals;
  bool all_static = true;
  for (auto a : axes) {
    const Dim& d = s[static_cast<size_t>(a)];
    all_static &= d.is_static();
    vals.push_back(d.value);
  }
  if (all_static) return c.b.const_i64(vals);
  std::vector<std::string> parts;
  for (auto a : axes) parts.push_back(dim_1d(c, v, a));
  if (parts.size() == 1) return parts[0];
  return c.b.op("Concat", parts, {Attr::Int("axis", 0)},
                ValueType{DType::Int64, Shape{Dim::of(static_cast<int64_t>(parts.size()))}});
}

std::string wrap_index(Ctx& c, const std::string& idx, const std::string& size) {
  std::string i = c.cast(idx, DType::Int64);
  std::string neg = c.b.op("Less", {i, c.b.scalar_i64(0)});
  return c.b.op("Where", {neg, c.b.op("Add", {i, size}), i}, {}, c.type(i));
}

std::string expand_to(Ctx& c, const std::string& v, const std::string& shape, size_t rank) {
  auto k = c.b.const_ints(shape);
  if (k) {
    const ValueType& t = c.type(v);
    if (t.static_dims() && *t.static_dims() == *k) return v;
    return c.b.op("Expand", {v, shape});
  }
  return c.b.op("Expand", {v, shape}, {}, ValueType{c.dtype(v), Shape(rank, Dim::unknown())});
}

namespace {

std::string identity_value(Ctx& c, const std::string& red, DType t) {
  if (red == "add") return c.b.scalar(t, 0);
  if (red == "mul") return c.b.scalar(t, 1);
  bool mx = red == "max";
  if (is_floating(t)) return c.b.scalar(t, mx ? -INFINITY : INFINITY);
  if (t == DType::Int32) return c.b.scalar(t, mx ? -2147483648.0 : 2147483647.0);
  int64_t v = mx ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
  return c.b.constant(TensorData::from_vector<int64_t>(DType::Int64, {}, {v}));
}

// ScatterElements with a reduction for opsets without one: each update
// one-hot along `axis`, reduced over the index's extent of that axis, padded
// to the data's shape with the reduction's identity and combined with data.
// Costs |index| * data.shape[axis].
std::string scatter_elements_lowered(Ctx& c, const std::string& data, int64_t axis,
                                     const std::string& idx, const std::string& upd,
                                     const std::string& red) {
  DType t = c.dtype(data);
  size_t r = c.rank(data);
  int64_t ri = static_cast<int64_t>(r);
  std::string size = dim_scalar(c, data, axis);
  std::string i = wrap_index(c, idx, size);
  std::string rng = c.b.op("Range", {c.b.scalar_i64(0), size, c.b.scalar_i64(1)});
  std::string oh = c.b.op("Equal", {c.unsqueeze(i, {ri}), rng});
  std::string ident = identity_value(c, red, t);
  std::string m = c.b.op("Where", {oh, c.unsqueeze(upd, {ri}), ident});
  const char* rop = red == "add"   ? "ReduceSum"
                    : red == "mul" ? "ReduceProd"
                    : red == "max" ? "ReduceMax"
                                   : "ReduceMin";
  std::string g = c.reduce(rop, m, {axis}, false);  // idx's shape without axis, + [size]
  std::vector<int64_t> perm;
  for (int64_t k = 0; k < ri; ++k) perm.push_back(k < axis ? k : k == axis ? ri - 1 : k - 1);
  g = c.transpose(g, perm);
  std::string pads;
  auto ds = c.type(data).static_dims();
  auto gs = c.type(g).static_dims();
  if (ds && gs) {
    if (*ds != *gs) {
      std::vector<int64_t> pv(r, 0);
      for (size_t k = 0; k < r; ++k) pv.push_back((*ds)[k] - (*gs)[k]);
      pads = c.b.const_i64(pv);
    }
  } else {
    std::string diff = c.b.op("Sub", {c.b.op("Shape", {data}), c.b.op("Shape", {g})});
    pads =
        c.b.op("Concat", {c.b.const_i64(std::vector<int64_t>(r, 0)), diff}, {Attr::Int("axis", 0)});
  }
  if (!pads.empty()) g = c.b.op("Pad", {g, pads, ident}, {}, ValueType{t, c.type(data).shape});
  const char* comb = red == "add" ? "Add" : red == "mul" ? "Mul" : red == "max" ? "Max" : "Min";
  return c.b.op(comb, {data, g}, {}, c.type(data));
}

// ScatterND with a reduction for opsets without one: the k indexed leading
// dims flattened to one (static sizes needed for k > 1), then as
// ScatterElements along that dim.
std::string scatter_nd_lowered(Ctx& c, const std::string& data, const std::string& idx,
                               const std::string& upd, const std::string& red) {
  const Shape& is = c.shape(idx);
  const Dim& kd = is.back();
  if (!kd.is_static()) c.fail("ScatterND reduction lowering: index depth unknown");
  int64_t k = kd.value;
  size_t r = c.rank(data);
  const Shape& ds = c.shape(data);
  std::string lin;
  int64_t stride = 1;
  for (int64_t j = k - 1; j >= 0; --j) {
    std::string col = c.b.op("Gather", {idx, c.b.scalar_i64(j)}, {Attr::Int("axis", -1)});
    col = wrap_index(c, col, dim_scalar(c, data, j));
    if (stride != 1) col = c.b.op("Mul", {col, c.b.scalar_i64(stride)});
    lin = lin.empty() ? col : c.b.op("Add", {lin, col});
    if (j > 0) {
      if (!ds[static_cast<size_t>(j)].is_static())
        c.fail("ScatterND reduction lowering needs static indexed dims");
      stride *= ds[static_cast<size_t>(j)].value;
    }
  }
  // data as [N, R], updates as [M, R], lin as [M, R].
  std::string dshape = shape_of(c, data);
  int64_t rn = 1;
  bool rn_static = true;
  for (size_t q = static_cast<size_t>(k); q < r; ++q) {
    rn_static &= ds[q].is_static();
    rn *= std::max<int64_t>(ds[q].value, 1);
  }
  ValueType two{c.dtype(data), Shape{Dim::unknown(), Dim::unknown()}};
  std::string d2, u2;
  if (rn_static) {
    d2 = c.b.op("Reshape", {data, c.b.const_i64({-1, rn})}, {}, two);
    u2 = c.b.op("Reshape", {upd, c.b.const_i64({-1, rn})}, {}, two);
  } else if (k == 1) {
    d2 = c.b.op("Reshape", {data, c.b.const_i64({0, -1})}, {}, two);
    std::string rs =
        c.b.op("Slice", {c.b.op("Shape", {d2}), c.b.const_i64({1}), c.b.const_i64({2})});
    u2 =
        c.b.op("Reshape",
               {upd, c.b.op("Concat", {c.b.const_i64({-1}), rs}, {Attr::Int("axis", 0)})}, {}, two);
  } else {
    c.fail("ScatterND reduction lowering needs static trailing dims");
  }
  std::string l2 = c.b.op("Reshape", {lin, c.b.const_i64({-1, 1})});
  l2 = c.b.op("Expand", {l2, c.b.op("Shape", {u2})}, {},
              ValueType{DType::Int64, Shape{Dim::unknown(), Dim::unknown()}});
  std::string out = scatter_elements_lowered(c, d2, 0, l2, u2, red);
  return c.b.op("Reshape", {out, dshape}, {}, c.type(data));
}

}  // namespace

// ScatterND / ScatterElements. onnxruntime has reductions for float,
// double, int32 and int64 only: other types go through float / int32 (exact
// for bool, small ints and float16 / bfloat16 values).
std::string scatter_node(Ctx& c, const std::string& op, const std::string& data,
                         const std::string& idx, const std::string& upd,
                         const std::string& reduction, std::vector<Attr> a) {
  DType t = c.dtype(data);
  std::string u = c.cast(upd, t);
  std::string i = c.cast(idx, DType::Int64);
  if (reduction == "none") return c.b.op(op, {data, i, u}, a, c.type(data));
  a.push_back(Attr::Str("reduction", reduction));
  DType w = t;
  if (t == DType::Float16 || t == DType::BFloat16) w = DType::Float;
  if (t == DType::Bool || t == DType::Int8 || t == DType::UInt8 || t == DType::Int16 ||
      t == DType::UInt16)
    w = DType::Int32;
  int need = reduction == "max" || reduction == "min" ? 18 : 16;
  ValueType wt{w, c.type(data).shape};
  std::string dw =
      w == t ? data : c.b.op("Cast", {data}, {Attr::Int("to", static_cast<int64_t>(w))}, wt);
  std::string uw = c.cast(u, w);
  std::string r;
  if (c.opset() >= need)
    r = c.b.op(op, {dw, i, uw}, a, wt);
  else if (op == "ScatterElements")
    r = scatter_elements_lowered(c, dw, a[0].i, i, uw, reduction);
  else
    r = scatter_nd_lowered(c, dw, i, uw, reduction);
  return c.cast(r, t);
}

std::string scatter_nd(Ctx& c, const std::string& data, const std::string& idx,
                       const std::string& upd, const std::string& reduction) {
  return scatter_node(c, "ScatterND", data, idx, upd, reduction, {});
}

std::string where_any(Ctx& c, const std::string& cond, const std::string& a, const std::string& b) {
  DType t = c.dtype(a);
  if (t == DType::Bool || t == DType::Int8 || t == DType::Int16 || t == DType::UInt16) {
    std::string r = c.b.op("Where", {cond, c.cast(a, DType::Int32), c.cast(b, DType::Int32)});
    return c.cast(r, t);
  }
  return c.b.op("Where", {cond, a, c.cast(b, t)});
}

namespace {

std::string scatter_elements(Ctx& c, const std::string& data, int64_t axis, const std::string& idx,
                             const std::string& upd, const std::string& reduction = "none") {
  return scatter_node(c, "ScatterElements", data, idx, upd, reduction, {Attr::Int("axis", axis)});
}

bool statically_empty(Ctx& c, const std::string& v) {
  const ValueType& t = c.type(v);
  if (!t.shape) return false;
  for (auto& d : *t.shape)
    if (d.is_static() && d.value == 0) return true;
  return false;
}

// An empty tensor of torch's output type (static shape with a zero dim).
std::string empty_output(Ctx& c) {
  ValueType t = c.out_type();
  auto dims = t.static_dims();
  if (!dims) c.fail("internal: empty output with a symbolic shape");
  std::string z =
      c.b.op("ConstantOfShape", {c.b.const_i64(*dims)}, {}, ValueType{DType::Float, t.shape});
  return c.cast(z, t.dtype);
}

std::vector<int64_t> iota(size_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

std::vector<int64_t> inverse(const std::vector<int64_t>& p) {
  std::vector<int64_t> r(p.size());
  for (size_t i = 0; i < p.size(); ++i) r[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
  return r;
}

// perm moving `axis` to the front.
std::vector<int64_t> front_perm(int64_t axis, size_t rank) {
  std::vector<int64_t> p{axis};
  for (int64_t k = 0; k < static_cast<int64_t>(rank); ++k)
    if (k != axis) p.push_back(k);
  return p;
}

// Identity element of a reduction in dtype t.
std::string identity_of(Ctx& c, const std::string& reduce, DType t) {
  if (reduce == "sum" || reduce == "mean") return c.b.scalar(t, 0);
  if (reduce == "prod") return c.b.scalar(t, 1);
  bool mx = reduce == "amax";
  if (is_floating(t)) return c.b.scalar(t, mx ? -INFINITY : INFINITY);
  if (t == DType::Bool) return c.b.scalar(t, mx ? 0 : 1);
  double lo = 0, hi = 0;
  switch (t) {
    case DType::UInt8:
      lo = 0, hi = 255;
      break;
    case DType::Int8:
      lo = -128, hi = 127;
      break;
    case DType::Int16:
      lo = -32768, hi = 32767;
      break;
    case DType::Int32:
      lo = -2147483648.0, hi = 2147483647.0;
      break;
    default:
      lo = static_cast<double>(std::numeric_limits<int64_t>::min());
      hi = 0;
      break;
  }
  if (t == DType::Int64 && !mx) {
    TensorData d =
        TensorData::from_vector<int64_t>(DType::Int64, {}, {std::numeric_limits<int64_t>::max()});
    return c.b.constant(std::move(d));
  }
  return c.b.scalar(t, mx ? lo : hi);
}

const char* onnx_reduction(Ctx& c, const std::string& reduce) {
  if (reduce == "sum" || reduce == "add" || reduce == "mean") return "add";
  if (reduce == "prod" || reduce == "multiply") return "mul";
  if (reduce == "amax") return "max";
  if (reduce == "amin") return "min";
  c.fail("unknown scatter reduction '" + reduce + "'");
}

// Floor division of integers by a positive divisor.
std::string div_like_torch(Ctx& c, const std::string& a, const std::string& b) {
  DType t = c.dtype(a);
  std::string q = c.b.op("Div", {a, b});
  if (is_floating(t)) return q;
  std::string r = c.b.op("Sub", {a, c.b.op("Mul", {q, b})});
  std::string adj = c.cast(c.b.op("Less", {r, c.b.scalar(t, 0)}), t);
  return c.b.op("Sub", {q, adj});
}

// The core of scatter/scatter_add/scatter_reduce/index_reduce: self
// (rank >= 1), idx and src of idx's shape (src already cut to it).
std::string scatter_reduce_core(Ctx& c, const std::string& self, int64_t axis,
                                const std::string& idx, const std::string& src,
                                const std::string& reduce, bool include_self) {
  DType t = c.dtype(self);
  if (reduce == "none") return scatter_elements(c, self, axis, idx, src);
  std::string red = onnx_reduction(c, reduce);
  std::string idx_shape = shape_of(c, idx);
  size_t r = c.rank(idx);
  std::string base = self;
  if (!include_self) {
    std::string fill = expand_to(c, identity_of(c, reduce, t), idx_shape, r);
    base = scatter_elements(c, self, axis, idx, fill);
  }
  std::string sum = scatter_elements(c, base, axis, idx, src, red);
  if (reduce != "mean") return sum;
  std::string ones = expand_to(c, c.b.scalar(t, 1), idx_shape, r);
  std::string cnt0 =
      c.b.op("Expand", {c.b.scalar(t, include_self ? 1 : 0), shape_of(c, self)}, {}, c.type(self));
  std::string cnt = scatter_elements(c, cnt0, axis, idx, ones, "add");
  std::string zero = c.b.op("Equal", {cnt, c.b.scalar(t, 0)});
  cnt = where_any(c, zero, c.b.scalar(t, 1), cnt);
  return div_like_torch(c, sum, cnt);
}

// src cut to idx's shape (torch reads only that corner of src).
std::string fit_src(Ctx& c, const std::string& src, const std::string& idx) {
  const ValueType& ts = c.type(src);
  const ValueType& ti = c.type(idx);
  if (ts.shape && ti.shape && same_shape(*ts.shape, *ti.shape)) return src;
  size_t r = c.rank(idx);
  return c.b.op(
      "Slice",
      {src, c.b.const_i64(std::vector<int64_t>(r, 0)), shape_of(c, idx), c.b.const_i64(iota(r))},
      {}, ValueType{c.dtype(src), ti.shape});
}

// Shared shell: 0-d operands lifted to 1-D, result dropped back.
void scatter_common(Ctx& c, std::string self, int64_t dim, std::string idx, std::string src,
                    const std::string& reduce, bool include_self) {
  DType t = c.out_dtype();
  self = c.cast(self, t);
  src = c.cast(src, t);
  if (statically_empty(c, idx)) return c.set_output(0, self);
  bool scalar = c.rank(self) == 0;
  if (scalar) self = c.unsqueeze(self, {0});
  if (c.rank(idx) == 0) idx = c.unsqueeze(idx, {0});
  if (c.rank(src) == 0) src = c.unsqueeze(src, {0});
  int64_t axis = Ctx::norm_axis(dim, c.rank(self));
  idx = c.cast(idx, DType::Int64);
  src = fit_src(c, src, idx);
  std::string out = scatter_reduce_core(c, self, axis, idx, src, reduce, include_self);
  if (scalar) out = c.squeeze(out, {0});
  c.set_output(0, out);
}

std::string scatter_reduce_name(Ctx& c) {
  auto r = c.str("reduce");
  return r ? *r : "none";
}

void scatter_src(Ctx& c) {
  std::string reduce = scatter_reduce_name(c);
  if (reduce == "add") reduce = "sum";
  if (reduce == "multiply") reduce = "prod";
  scatter_common(c, c.tensor("self"), c.i("dim"), c.tensor("index"), c.tensor("src"), reduce, true);
}

void scatter_value(Ctx& c) {
  std::string reduce = scatter_reduce_name(c);
  if (reduce == "add") reduce = "sum";
  if (reduce == "multiply") reduce = "prod";
  std::string idx = c.tensor("index");
  std::string v = c.operand("value", c.out_dtype());
  std::string src = c.rank(idx) == 0 ? v : expand_to(c, v, shape_of(c, idx), c.rank(idx));
  scatter_common(c, c.tensor("self"), c.i("dim"), idx, src, reduce, true);
}

void scatter_add(Ctx& c) {
  scatter_common(c, c.tensor("self"), c.i("dim"), c.tensor("index"), c.tensor("src"), "sum", true);
}

void scatter_reduce_two(Ctx& c) {
  scatter_common(c, c.tensor("self"), c.i("dim"), c.tensor("index"), c.tensor("src"),
                 *c.str("reduce"), c.flag("include_self", true));
}

void gather(Ctx& c) {
  std::string x = c.tensor("self"), idx = c.cast(c.tensor("index"), DType::Int64);
  if (statically_empty(c, idx)) return c.set_output(0, empty_output(c));
  if (c.rank(x) == 0) x = c.unsqueeze(x, {0});
  if (c.rank(idx) == 0) idx = c.unsqueeze(idx, {0});
  int64_t axis = Ctx::norm_axis(c.i("dim"), c.rank(x));
  ValueType t{c.dtype(x), c.type(idx).shape};
  std::string out = c.b.op("GatherElements", {x, idx}, {Attr::Int("axis", axis)}, t);
  if (c.out_type().shape->empty()) out = c.squeeze(out, {0});
  c.set_output(0, out);
}

void index_select(Ctx& c) {
  std::string x = c.tensor("self"), idx = c.tensor("index");
  bool scalar = c.rank(x) == 0;
  if (scalar) x = c.unsqueeze(x, {0});
  if (c.rank(idx) == 0) idx = c.unsqueeze(idx, {0});
  int64_t axis = Ctx::norm_axis(c.i("dim"), c.rank(x));
  std::string out = c.b.op("Gather", {x, idx}, {Attr::Int("axis", axis)});
  if (scalar) out = c.squeeze(out, {0});
  c.set_output(0, out);
}

// A 1-D index along `axis` broadcast to `src`'s shape (index_add & co).
std::string index_along(Ctx& c, std::string idx, int64_t axis, const std::string& src) {
  size_t r = c.rank(src);
  std::vector<int64_t> shape(r, 1);
  shape[static_cast<size_t>(axis)] = -1;
  idx = c.b.op("Reshape", {c.cast(idx, DType::Int64), c.b.const_i64(shape)});
  return expand_to(c, idx, shape_of(c, src), r);
}

void index_family(Ctx& c, const std::string& reduce, bool include_self, bool alpha) {
  DType t = c.out_dtype();
  std::string self = c.cast(c.tensor("self"), t);
  std::string src = c.cast(c.tensor("source"), t);
  bool scalar = c.rank(self) == 0;
  if (scalar) self = c.unsqueeze(self, {0});
  if (c.rank(src) == 0) src = c.unsqueeze(src, {0});
  int64_t axis = Ctx::norm_axis(c.i("dim"), c.rank(self));
  if (alpha && c.has("alpha")) {
    auto a = c.scalar_value("alpha");
    if (t == DType::Bool)
      src = c.b.op("And", {src, c.operand("alpha", t)});
    else if (!a || *a != 1.0)
      src = c.b.op("Mul", {src, c.operand("alpha", t)});
  }
  std::string idx = index_along(c, c.tensor("index"), axis, src);
  std::string out = scatter_reduce_core(c, self, axis, idx, src, reduce, include_self);
  if (scalar) out = c.squeeze(out, {0});
  c.set_output(0, out);
}

void index_add(Ctx& c) { index_family(c, "sum", true, true); }
void index_copy(Ctx& c) { index_family(c, "none", true, false); }
void index_reduce(Ctx& c) {
  index_family(c, *c.str("reduce"), c.flag("include_self", true), false);
}

void index_fill(Ctx& c) {
  DType t = c.out_dtype();
  std::string x = c.cast(c.tensor("self"), t);
  bool scalar = c.rank(x) == 0;
  if (scalar) x = c.unsqueeze(x, {0});
  size_t r = c.rank(x);
  int64_t axis = Ctx::norm_axis(c.i("dim"), r);
  std::string size = dim_scalar(c, x, axis);
  std::string idx = c.b.op("Reshape", {c.tensor("index"), c.b.const_i64({-1, 1})});
  idx = wrap_index(c, idx, size);
  std::string rng = c.b.op("Range", {c.b.scalar_i64(0), size, c.b.scalar_i64(1)});
  std::string hit = c.cast(c.b.op("Equal", {idx, rng}), DType::Int64);
  std::string any = c.b.op("Greater", {c.reduce("ReduceSum", hit, {0}, false), c.b.scalar_i64(0)});
  std::vector<int64_t> shape(r - static_cast<size_t>(axis), 1);
  shape[0] = -1;
  std::string mask = c.b.op("Reshape", {any, c.b.const_i64(shape)});
  std::string out = where_any(c, mask, c.operand("value", t), x);
  if (scalar) out = c.squeeze(out, {0});
  c.set_output(0, out);
}

void take(Ctx& c) {
  std::string x = c.b.op("Reshape", {c.tensor("self"), c.b.const_i64({-1})});
  std::string idx = c.cast(c.tensor("index"), DType::Int64);
  c.set_output(0, c.b.op("Gather", {x, idx}, {Attr::Int("axis", 0)}, c.out_type()));
}

// v's shape with dim `axis` set to `value` (1-D int64).
std::string shape_with(Ctx& c, const std::string& v, int64_t axis, int64_t value) {
  size_t r = c.rank(v);
  if (auto s = c.type(v).static_dims()) {
    (*s)[static_cast<size_t>(axis)] = value;
    return c.b.const_i64(*s);
  }
  std::vector<std::string> parts;
  std::string s = shape_of(c, v);
  auto part = [&](int64_t a, int64_t b) {
    if (a < b)
      parts.push_back(c.b.op("Slice", {s, c.b.const_i64({a}), c.b.const_i64({b})}, {},
                             ValueType{DType::Int64, Shape{Dim::of(b - a)}}));
  };
  part(0, axis);
  parts.push_back(c.b.const_i64({value}));
  part(axis + 1, static_cast<int64_t>(r));
  if (parts.size() == 1) return parts[0];
  return c.b.op("Concat", parts, {Attr::Int("axis", 0)},
                ValueType{DType::Int64, Shape{Dim::of(static_cast<int64_t>(r))}});
}

void take_along_dim(Ctx& c) {
  std::string x = c.tensor("self"), idx = c.cast(c.tensor("indices"), DType::Int64);
  if (!c.has("dim")) {
    x = c.b.op("Reshape", {x, c.b.const_i64({-1})});
    idx = c.b.op("Reshape", {idx, c.b.const_i64({-1})});
    return c.set_output(0,
                        c.b.op("GatherElements", {x, idx}, {Attr::Int("axis", 0)}, c.out_type()));
  }
  size_t r = std::max(c.rank(x), c.rank(idx));
  if (r == 0) {
    x = c.unsqueeze(x, {0});
    idx = c.unsqueeze(idx, {0});
    r = 1;
  }
  while (c.rank(x) < r) x = c.unsqueeze(x, {0});
  while (c.rank(idx) < r) idx = c.unsqueeze(idx, {0});
  int64_t axis = Ctx::norm_axis(c.i("dim"), r);
  ValueType ot = c.out_type();
  // Broadcast all dims but `axis`. Dims not known to be the same (unknown
  // ones included) are expanded: GatherElements would take idx's 1 where x
  // has n.
  std::string xe = x, ie = idx;
  auto differs = [&](const std::string& a, const std::string& b) {
    const Shape& sa = c.shape(a);
    const Shape& sb = c.shape(b);
    for (size_t k = 0; k < r; ++k)
      if (static_cast<int64_t>(k) != axis && !sa[k].same_as(sb[k])) return true;
    return false;
  };
  if (differs(x, idx)) {
    xe = expand_to(c, x, shape_with(c, idx, axis, 1), r);
    ie = expand_to(c, idx, shape_with(c, x, axis, 1), r);
  }
  std::string out = c.b.op("GatherElements", {xe, ie}, {Attr::Int("axis", axis)}, ot);
  if (ot.shape->empty()) out = c.squeeze(out, {0});
  c.set_output(0, out);
}

void put(Ctx& c) {
  bool acc = c.flag("accumulate", false);
  std::string self = c.tensor("self");
  std::string flat = c.b.op("Reshape", {self, c.b.const_i64({-1})});
  std::string n = c.b.op("Size", {self}, {}, ValueType{DType::Int64, Shape{}});
  std::string idx = c.b.op("Reshape", {c.tensor("index"), c.b.const_i64({-1, 1})});
  idx = wrap_index(c, idx, n);
  std::string src = c.b.op("Reshape", {c.tensor("source"), c.b.const_i64({-1})});
  std::string out = scatter_nd(c, flat, idx, src, acc ? "add" : "none");
  c.set_output(0, c.b.op("Reshape", {out, shape_of(c, self)}, {}, c.out_type()));
}

SliceBound bound_arg(Ctx& c, const char* name) {
  if (!c.has(name)) return {};
  auto s = c.symints(name)[0];
  if (auto k = c.symint_const(s)) return {*k, {}};
  return {std::nullopt, c.symint_value(s)};
}

void slice_scatter(Ctx& c) {
  std::string self = c.tensor("self");
  int64_t axis = Ctx::norm_axis(c.i("dim", 0), c.rank(self));
  std::string out = slice_scatter_value(c, self, c.tensor("src"), axis, bound_arg(c, "start"),
                                        bound_arg(c, "end"), c.i("step", 1));
  c.set_output(0, out);
}

void select_scatter(Ctx& c) {
  std::string self = c.tensor("self");
  size_t r = c.rank(self);
  int64_t axis = Ctx::norm_axis(c.i("dim"), r);
  SliceBound idx = bound_arg(c, "index");
  std::string src = c.unsqueeze(c.tensor("src"), {axis});
  const Dim& d = c.shape(self)[static_cast<size_t>(axis)];
  SliceBound start, end;
  if (idx.c && (*idx.c >= 0 || d.is_static())) {
    int64_t i = *idx.c < 0 ? *idx.c + d.value : *idx.c;
    start.c = i, end.c = i + 1;
  } else {
    std::string v = idx.c ? c.b.const_i64({*idx.c}) : idx.v;
    v = wrap_index(c, v, dim_1d(c, self, axis));
    start.v = v;
    end.v = c.b.op("Add", {v, c.b.const_i64({1})});
  }
  c.set_output(0, slice_scatter_value(c, self, src, axis, start, end, 1));
}

void diagonal_scatter(Ctx& c) {
  std::string self = c.tensor("self"), src = c.cast(c.tensor("src"), c.dtype(self));
  size_t r = c.rank(self);
  int64_t off = c.i("offset", 0);
  int64_t d1 = Ctx::norm_axis(c.i("dim1", 0), r), d2 = Ctx::norm_axis(c.i("dim2", 1), r);
  std::vector<int64_t> perm{d1, d2};
  for (int64_t k = 0; k < static_cast<int64_t>(r); ++k)
    if (k != d1 && k != d2) perm.push_back(k);
  size_t sr = c.rank(src);
  std::string len =
      c.b.op("Squeeze", {dims_of(c, src, {static_cast<int64_t>(sr) - 1}), c.b.const_i64({0})});
  std::string i = c.b.op("Range", {c.b.scalar_i64(0), len, c.b.scalar_i64(1)});
  std::string rows = c.b.op("Add", {i, c.b.scalar_i64(std::max<int64_t>(-off, 0))});
  std::string cols = c.b.op("Add", {i, c.b.scalar_i64(std::max<int64_t>(off, 0))});
  std::string idx =
      c.b.op("Concat", {c.unsqueeze(rows, {1}), c.unsqueeze(cols, {1})}, {Attr::Int("axis", 1)});
  std::vector<int64_t> sp{static_cast<int64_t>(sr) - 1};
  for (int64_t k = 0; k + 1 < static_cast<int64_t>(sr); ++k) sp.push_back(k);
  std::string xt = c.transpose(self, perm);
  std::string out = scatter_nd(c, xt, idx, c.transpose(src, sp));
  c.set_output(0, c.transpose(out, inverse(perm)));
}

void as_strided_scatter(Ctx& c) {
  std::string self = c.tensor("self"), src = c.tensor("src");
  auto size = c.ints("size", {});
  auto stride = c.ints("stride", {});
  int64_t offset = c.i("storage_offset", 0);
  if (size.size() != stride.size()) c.fail("as_strided_scatter: size and stride differ in length");
  std::vector<int64_t> pos{offset};
  for (size_t k = 0; k < size.size(); ++k) {
    std::vector<int64_t> next;
    for (auto p : pos)
      for (int64_t j = 0; j < size[k]; ++j) next.push_back(p + j * stride[k]);
    pos = std::move(next);
  }
  int64_t n = static_cast<int64_t>(pos.size());
  std::string idx = c.b.constant(TensorData::from_vector<int64_t>(DType::Int64, {n, 1}, pos));
  std::string flat = c.b.op("Reshape", {self, c.b.const_i64({-1})});
  std::string upd = c.b.op("Reshape", {src, c.b.const_i64({-1})});
  std::string out = n == 0 ? flat : scatter_nd(c, flat, idx, upd);
  c.set_output(0, c.b.op("Reshape", {out, shape_of(c, self)}, {}, c.out_type()));
}

}  // namespace

std::string slice_scatter_value(Ctx& c, const std::string& self, const std::string& src_in,
                                int64_t axis, SliceBound start, SliceBound end, int64_t step) {
  std::string src = c.cast(src_in, c.dtype(self));
  size_t r = c.rank(self);
  const Dim& d = c.shape(self)[static_cast<size_t>(axis)];
  auto norm_c = [&](int64_t v) {
    if (v < 0) v += d.value;
    return std::clamp<int64_t>(v, 0, d.value);
  };
  bool static_bounds = d.is_static() && (start.none() || start.c) && (end.none() || end.c);
  if (static_bounds) {
    int64_t s = start.c ? norm_c(*start.c) : 0;
    int64_t e = end.c ? norm_c(*end.c) : d.value;
    e = std::max(e, s);
    if (s == e) return self;
    if (step == 1) {
      if (s == 0 && e == d.value) return src;
      std::vector<std::string> parts;
      std::string ax = c.b.const_i64({axis});
      if (s > 0)
        parts.push_back(c.b.op("Slice", {self, c.b.const_i64({0}), c.b.const_i64({s}), ax}));
      parts.push_back(src);
      if (e < d.value)
        parts.push_back(
            c.b.op("Slice", {self, c.b.const_i64({e}), c.b.const_i64({INT64_MAX}), ax}));
      return c.b.op("Concat", parts, {Attr::Int("axis", axis)}, c.type(self));
    }
    std::vector<int64_t> pos;
    for (int64_t k = s; k < e; k += step) pos.push_back(k);
    int64_t n = static_cast<int64_t>(pos.size());
    std::string idx = c.b.constant(TensorData::from_vector<int64_t>(DType::Int64, {n, 1}, pos));
    auto perm = front_perm(axis, r);
    std::string out = scatter_nd(c, c.transpose(self, perm), idx, c.transpose(src, perm));
    return c.transpose(out, inverse(perm));
  }
  // Runtime bounds, normalized as python does.
  std::string size = dim_1d(c, self, axis);
  auto norm = [&](const SliceBound& b, bool is_end) -> std::string {
    if (b.none()) return is_end ? size : c.b.const_i64({0});
    std::string v = b.c ? c.b.const_i64({*b.c}) : c.cast(b.v, DType::Int64);
    if (b.c && *b.c >= 0) return c.b.op("Min", {v, size});
    std::string w = wrap_index(c, v, size);
    return c.b.op("Min", {c.b.op("Max", {w, c.b.const_i64({0})}), size});
  };
  std::string s = norm(start, false);
  std::string e = c.b.op("Max", {norm(end, true), s});
  std::string ax = c.b.const_i64({axis});
  if (step == 1) {
    std::vector<std::string> parts;
    if (!start.none() && !(start.c && *start.c == 0))
      parts.push_back(c.b.op("Slice", {self, c.b.const_i64({0}), s, ax}));
    parts.push_back(src);
    if (!end.none() && !(end.c && *end.c == INT64_MAX))
      parts.push_back(c.b.op("Slice", {self, e, c.b.const_i64({INT64_MAX}), ax}));
    if (parts.size() == 1) return src;
    return c.b.op("Concat", parts, {Attr::Int("axis", axis)}, c.type(self));
  }
  std::string pos = c.b.op("Range", {c.squeeze(s, {0}), c.squeeze(e, {0}), c.b.scalar_i64(step)});
  std::string idx = c.unsqueeze(pos, {1});
  auto perm = front_perm(axis, r);
  std::string out = scatter_nd(c, c.transpose(self, perm), idx, c.transpose(src, perm));
  return c.transpose(out, inverse(perm));
}

void register_scatter_gather(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "gather.default", gather);
  r.add(p + "scatter.src", scatter_src);
  r.add(p + "scatter.value", scatter_value);
  r.add(p + "scatter.reduce", scatter_src);
  r.add(p + "scatter.value_reduce", scatter_value);
  r.add(p + "scatter_add.default", scatter_add);
  r.add(p + "scatter_reduce.two", scatter_reduce_two);
  r.add(p + "index_select.default", index_select);
  r.add(p + "index_add.default", index_add);
  r.add(p + "index_copy.default", index_copy);
  r.add(p + "index_reduce.default", index_reduce);
  r.add(p + "index_fill.int_Scalar", index_fill);
  r.add(p + "index_fill.int_Tensor", index_fill);
  r.add(p + "take.default", take);
  r.add(p + "take_along_dim.default", take_along_dim);
  r.add(p + "put.default", put);
  r.add(p + "slice_scatter.default", slice_scatter);
  r.add(p + "select_scatter.default", select_scatter);
  r.add(p + "diagonal_scatter.default", diagonal_scatter);
  r.add(p + "as_strided_scatter.default", as_strided_scatter);
}

}  // namespace pt2onnx
