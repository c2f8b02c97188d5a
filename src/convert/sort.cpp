// Sorting and selection: sort/argsort/msort/topk, kthvalue, median/nanmedian,
// mode, quantile/nanquantile, unique/unique_consecutive, histc, bucketize/
// searchsorted, isin.
//
// Everything sorts through TopK (k = dim size). ONNX TopK breaks ties by the
// lower index first, which is torch's stable order for both directions.
// torch orders NaN above +inf: floats are sorted on a key with NaN replaced
// by +inf and the values gathered back from the input by index (a NaN and a
// real +inf then keep index order, torch puts the NaN last).
#include <algorithm>
#include <cmath>
#include <limits>

#include "convert/context.h"
#include "convert/expr.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string typed(Ctx& c, const std::string& op, std::vector<std::string> in, ValueType t,
                  std::vector<Attr> attrs = {}) {
  return c.b.op(op, std::move(in), std::move(attrs), std::move(t));
}

std::string is_nan(Ctx& c, const std::string& x) {
  return typed(c, "IsNaN", {x}, ValueType{DType::Bool, c.type(x).shape});
}

// The type TopK sorts in: ORT's TopK takes float/double/int32/int64.
DType key_type(DType t) {
  switch (t) {
    case DType::Float:
    case DType::Double:
    case DType::Int64:
    case DType::Int32:
      return t;
    case DType::Float16:
    case DType::BFloat16:
      return DType::Float;
    default:
      return DType::Int64;
  }
}

// Sort key: exact in key_type, NaN -> +inf.
std::string sort_key(Ctx& c, const std::string& x) {
  std::string k = c.cast(x, key_type(c.dtype(x)));
  if (is_floating(c.dtype(k))) k = c.b.op("Where", {is_nan(c, k), c.b.scalar(c.dtype(k), kInf), k});
  return k;
}

struct Sorted {
  std::string values, indices;
};

// TopK of `key` along `axis` with k (1-D int64) and the known output dim.
Sorted topk(Ctx& c, const std::string& key, const std::string& k, Dim kdim, int64_t axis,
            bool largest, bool sorted = true) {
  Shape s = c.shape(key);
  s[static_cast<size_t>(axis)] = kdim;
  auto outs = c.b.add_node("TopK", {key, k}, 2,
                           {Attr::Int("axis", axis), Attr::Int("largest", largest ? 1 : 0),
                            Attr::Int("sorted", sorted ? 1 : 0)},
                           {ValueType{c.dtype(key), s}, ValueType{DType::Int64, s}});
  return {outs[0], outs[1]};
}

std::string gather_el(Ctx& c, const std::string& data, const std::string& idx, int64_t axis) {
  return typed(c, "GatherElements", {data, idx}, ValueType{c.dtype(data), c.type(idx).shape},
               {Attr::Int("axis", axis)});
}

// Full sort of x along axis: indices, and the values in x's type (NaN kept).
Sorted full_sort(Ctx& c, const std::string& x, int64_t axis, bool descending) {
  // A dim torch would refuse (a crafted program): an error, not a read past the shape.
  if (axis < 0 || axis >= static_cast<int64_t>(c.rank(x)))
    c.fail("dim " + std::to_string(axis) + " is out of range for rank " +
           std::to_string(c.rank(x)));
  const Dim& d = c.shape(x)[static_cast<size_t>(axis)];
  std::string key = sort_key(c, x);
  Sorted s = topk(c, key, c.dim_value(x, axis), d, axis, descending);
  if (is_floating(c.dtype(x)) || c.dtype(key) != c.dtype(x))
    s.values = gather_el(c, x, s.indices, axis);
  return s;
}

void sort(Ctx& c) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  if (r == 0) {
    c.set_output(0, x);
    c.set_output(1, c.b.scalar_i64(0));
    return;
  }
  Sorted s = full_sort(c, x, Ctx::norm_axis(c.i("dim", -1), r), c.flag("descending", false));
  c.set_output(0, s.values);
  c.set_output(1, s.indices);
}

void argsort(Ctx& c) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  if (r == 0) return c.set_output(0, c.b.scalar_i64(0));
  c.set_output(
      0, full_sort(c, x, Ctx::norm_axis(c.i("dim", -1), r), c.flag("descending", false)).indices);
}

void msort(Ctx& c) {
  std::string x = c.tensor("self");
  if (c.rank(x) == 0) return c.set_output(0, x);
  c.set_output(0, full_sort(c, x, 0, false).values);
}

void topk_(Ctx& c) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  auto ks = c.symints("k");
  std::string k = c.symint_value(ks[0]);
  if (r == 0) {
    c.set_output(0, x);
    c.set_output(1, c.b.scalar_i64(0));
    return;
  }
  int64_t a = Ctx::norm_axis(c.i("dim", -1), r);
  bool largest = c.flag("largest", true);
  std::string key = sort_key(c, x);
  Shape os = *c.out_type(0).shape;
  Sorted s = topk(c, key, k, os[static_cast<size_t>(a)], a, largest);
  if (is_floating(c.dtype(x)) || c.dtype(key) != c.dtype(x))
    s.values = gather_el(c, x, s.indices, a);
  c.set_output(0, s.values);
  c.set_output(1, s.indices);
}

// Element `pos` (keep-dim shaped int64 index) of the ascending sort.
void select_sorted(Ctx& c, const std::string& x, const Sorted& s, const std::string& pos, int64_t a,
                   bool keep) {
  std::string idx = gather_el(c, s.indices, pos, a);
  std::string val = gather_el(c, x, idx, a);
  if (!keep) {
    idx = c.squeeze(idx, {a});
    val = c.squeeze(val, {a});
  }
  c.set_output(0, val);
  c.set_output(1, idx);
}

// Keep-dim shaped [..1..] int64 tensor holding v (broadcast by Expand).
std::string keep_shaped(Ctx& c, const std::string& x, int64_t a, const std::string& v) {
  size_t r = c.rank(x);
  std::vector<std::string> dims;
  for (size_t k = 0; k < r; ++k)
    dims.push_back(static_cast<int64_t>(k) == a ? c.b.const_i64({1})
                                                : c.dim_value(x, static_cast<int64_t>(k)));
  std::string shape = r == 1 ? dims[0] : c.b.op("Concat", dims, {Attr::Int("axis", 0)});
  Shape s = c.shape(x);
  s[static_cast<size_t>(a)] = Dim::of(1);
  return typed(c, "Expand", {v, shape}, ValueType{DType::Int64, s});
}

void kthvalue(Ctx& c) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  bool keep = c.flag("keepdim", false);
  if (r == 0) {
    c.set_output(0, x);
    c.set_output(1, c.b.scalar_i64(0));
    return;
  }
  int64_t a = Ctx::norm_axis(c.i("dim", -1), r);
  Sorted s = full_sort(c, x, a, false);
  auto ks = c.symints("k");
  if (ks.size() != 1) c.fail("k must be one integer");
  std::string k = c.symint_value(ks[0]);
  std::string pos = c.b.op("Sub", {k, c.b.const_i64({1})});
  select_sorted(c, x, s, keep_shaped(c, x, a, pos), a, keep);
}

// median / nanmedian: the lower median; median is NaN (at the first NaN's
// index) when the slice has a NaN, nanmedian skips NaNs.
void emit_median(Ctx& c, bool nan_skip) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  bool has_dim = c.has("dim");
  bool keep = c.flag("keepdim", false);
  if (r == 0) {
    c.set_output(0, x);
    if (has_dim) c.set_output(1, c.b.scalar_i64(0));
    return;
  }
  int64_t a = 0;
  if (has_dim)
    a = Ctx::norm_axis(c.i("dim"), r);
  else
    x = c.reshape(x, c.b.const_i64({-1})), keep = false;
  Sorted s = full_sort(c, x, a, false);
  bool flt = is_floating(c.dtype(x));
  std::string n = c.dim_value(x, a);  // 1-D int64
  std::string pos;
  if (nan_skip && flt) {
    std::string valid = c.cast(c.b.op("Not", {is_nan(c, x)}), DType::Int64);
    std::string cnt = c.reduce("ReduceSum", valid, {a}, true);
    pos = c.b.op("Div", {c.b.op("Sub", {cnt, c.b.scalar_i64(1)}), c.b.scalar_i64(2)});
    pos = c.b.op("Max", {pos, c.b.scalar_i64(0)});
  } else {
    pos = c.b.op("Div", {c.b.op("Sub", {n, c.b.const_i64({1})}), c.b.const_i64({2})});
    pos = keep_shaped(c, x, a, pos);
  }
  std::string idx = gather_el(c, s.indices, pos, a);
  std::string val = gather_el(c, x, idx, a);
  if (!nan_skip && flt) {
    std::string nan_i = c.cast(is_nan(c, x), DType::Int32);
    std::string any = c.cast(c.reduce("ReduceMax", nan_i, {a}, true), DType::Bool);
    std::string first = typed(c, "ArgMax", {nan_i}, ValueType{DType::Int64, c.type(idx).shape},
                              {Attr::Int("axis", a), Attr::Int("keepdims", 1)});
    idx = c.b.op("Where", {any, first, idx});
    val = c.b.op("Where", {any, c.b.scalar(c.dtype(x), kNaN), val});
  }
  if (!keep) {
    idx = c.squeeze(idx, {a});
    val = c.squeeze(val, {a});
  }
  c.set_output(0, val);
  if (has_dim) c.set_output(1, idx);
}
void median(Ctx& c) { emit_median(c, false); }
void nanmedian(Ctx& c) { emit_median(c, true); }

// mode: the most frequent value (the smallest among equally frequent ones)
// and the last index holding it, by pairwise comparison along the dim.
void mode(Ctx& c) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  bool keep = c.flag("keepdim", false);
  if (r == 0) {
    c.set_output(0, x);
    c.set_output(1, c.b.scalar_i64(0));
    return;
  }
  int64_t a = Ctx::norm_axis(c.i("dim", -1), r);
  DType t = c.dtype(x);
  std::string k = c.cast(x, key_type(t));
  DType kt = c.dtype(k);
  std::string eq = c.b.op("Equal", {c.unsqueeze(k, {a + 1}), c.unsqueeze(k, {a})});
  std::string cnt = c.reduce("ReduceSum", c.cast(eq, DType::Int64), {a + 1}, false);
  std::string best = c.reduce("ReduceMax", cnt, {a}, true);
  std::string cand = c.b.op("Equal", {cnt, best});
  std::string big = kt == DType::Int64 ? c.b.const_i64({std::numeric_limits<int64_t>::max()})
                    : is_floating(kt)  ? c.b.scalar(kt, kInf)
                                       : c.b.scalar(kt, 2147483647.0);
  std::string val = c.reduce("ReduceMin", c.b.op("Where", {cand, k, big}), {a}, true);
  std::string at = c.b.op("Equal", {k, val});
  const Dim& d = c.shape(x)[static_cast<size_t>(a)];
  std::string idx;
  {
    std::string n = c.squeeze(c.dim_value(x, a), {0});
    std::string ar = typed(c, "Range", {c.b.scalar_i64(0), n, c.b.scalar_i64(1)},
                           ValueType{DType::Int64, Shape{d}});
    std::vector<int64_t> trail;
    for (size_t j = 1; j + static_cast<size_t>(a) < r; ++j)
      trail.push_back(static_cast<int64_t>(j));
    if (!trail.empty()) ar = c.unsqueeze(ar, trail);
    idx = c.reduce("ReduceMax", c.b.op("Where", {at, ar, c.b.scalar_i64(-1)}), {a}, true);
  }
  val = c.cast(val, t);
  if (!keep) {
    val = c.squeeze(val, {a});
    idx = c.squeeze(idx, {a});
  }
  c.set_output(0, val);
  c.set_output(1, idx);
}

// quantile / nanquantile over a dim (or the flattened input).
void emit_quantile(Ctx& c, bool nan_skip) {
  std::string x = c.tensor("self");
  DType t = c.out_dtype();
  size_t r0 = c.rank(x);
  bool has_dim = c.has("dim");
  bool keep = c.flag("keepdim", false);
  std::string interp = c.str("interpolation").value_or("linear");
  // q as 1-D [Q] in t.
  std::string q;
  bool q_vec = false;
  if (c.arg("q")->kind == schema::ArgKind::Tensor) {
    q = c.cast(c.tensor("q"), t);
    q_vec = c.rank(q) == 1;
    if (!q_vec) q = c.unsqueeze(q, {0});
  } else {
    q = c.unsqueeze(c.b.scalar(t, c.f("q", 0.5)), {0});
  }
  int64_t a = 0;
  if (!has_dim) {
    x = c.reshape(x, c.b.const_i64({-1}));
  } else if (r0 > 0) {
    a = Ctx::norm_axis(c.i("dim"), r0);
  } else {
    x = c.reshape(x, c.b.const_i64({1}));
  }
  size_t r = c.rank(x);
  // Move the dim last: [..., n].
  std::vector<int64_t> perm;
  for (size_t k = 0; k < r; ++k)
    if (static_cast<int64_t>(k) != a) perm.push_back(static_cast<int64_t>(k));
  perm.push_back(a);
  x = c.transpose(c.cast(x, t), perm);
  int64_t last = static_cast<int64_t>(r) - 1;
  std::string key = sort_key(c, x);
  Sorted s = topk(c, key, c.dim_value(x, last), c.shape(x)[static_cast<size_t>(last)], last, false);
  std::string nan = is_nan(c, x);
  std::string cnt;
  if (nan_skip)
    cnt = c.reduce("ReduceSum", c.cast(c.b.op("Not", {nan}), t), {last}, true);
  else
    cnt = c.cast(c.dim_value(x, last), t);
  // rank per q: [..., Q]
  std::string rank = c.b.op("Mul", {q, c.b.op("Sub", {cnt, c.b.scalar(t, 1)})});
  rank = c.b.op("Max", {rank, c.b.scalar(t, 0)});
  // Index tensors need x's leading dims: expand to [..., Q].
  std::vector<std::string> dims;
  for (int64_t k = 0; k < last; ++k) dims.push_back(c.dim_value(x, k));
  dims.push_back(c.dim_value(q, 0));
  std::string shape = dims.size() == 1 ? dims[0] : c.b.op("Concat", dims, {Attr::Int("axis", 0)});
  Shape rs(c.shape(x).begin(), c.shape(x).end() - 1);
  rs.push_back(c.shape(q)[0]);
  rank = typed(c, "Expand", {rank, shape}, ValueType{t, rs});
  std::string lo = c.b.op("Floor", {rank}), hi = c.b.op("Ceil", {rank});
  auto at = [&](const std::string& p) {
    return gather_el(c, s.values, c.cast(p, DType::Int64), last);
  };
  std::string res;
  if (interp == "lower") {
    res = at(lo);
  } else if (interp == "higher") {
    res = at(hi);
  } else if (interp == "nearest") {
    res = at(c.b.op("Round", {rank}));
  } else {
    std::string vl = at(lo), vh = at(hi);
    std::string w = interp == "midpoint" ? c.b.scalar(t, 0.5) : c.b.op("Sub", {rank, lo});
    res = c.b.op("Add", {vl, c.b.op("Mul", {c.b.op("Sub", {vh, vl}), w})});
  }
  std::string bad;
  if (nan_skip)
    bad = c.b.op("Equal", {cnt, c.b.scalar(t, 0)});
  else
    bad = c.cast(c.reduce("ReduceMax", c.cast(nan, DType::Int32), {last}, true), DType::Bool);
  res = c.b.op("Where", {bad, c.b.scalar(t, kNaN), res});
  // res: [lead..., Q] -> [Q, lead...] (or drop Q), then keepdim.
  size_t rr = c.rank(res);
  if (q_vec) {
    std::vector<int64_t> p2{static_cast<int64_t>(rr) - 1};
    for (size_t k = 0; k + 1 < rr; ++k) p2.push_back(static_cast<int64_t>(k));
    res = c.transpose(res, p2);
  } else {
    res = c.squeeze(res, {static_cast<int64_t>(rr) - 1});
  }
  if (keep) {
    int64_t off = q_vec ? 1 : 0;
    if (!has_dim) {
      std::vector<int64_t> ax;
      for (size_t k = 0; k < r0; ++k) ax.push_back(off + static_cast<int64_t>(k));
      if (!ax.empty()) res = c.unsqueeze(res, ax);
    } else if (r0 > 0) {
      res = c.unsqueeze(res, {off + a});
    }
  }
  c.set_output(0, res);
}
void quantile(Ctx& c) { emit_quantile(c, false); }
void nanquantile(Ctx& c) { emit_quantile(c, true); }

// ---- unique

std::string empty_i64(Ctx& c) {
  TensorData d = *TensorData::scalar(DType::Int64, 0, {0});
  return c.b.constant(d);
}

// ORT's Unique takes float, double, int8 and int64: others go through those.
DType unique_type(DType t) {
  if (t == DType::Float || t == DType::Double) return t;
  return is_floating(t) ? DType::Float : DType::Int64;
}

// _unique2: ONNX Unique (sorted) on the flattened input.
void unique2(Ctx& c) {
  std::string x = c.tensor("self");
  DType t = c.dtype(x);
  DType ut = unique_type(t);
  std::string flat = c.reshape(c.cast(x, ut), c.b.const_i64({-1}));
  Shape u{Dim::unknown()};
  auto outs =
      c.b.add_node("Unique", {flat}, 4, {Attr::Int("sorted", 1)},
                   {ValueType{ut, u}, ValueType{DType::Int64, u},
                    ValueType{DType::Int64, c.type(flat).shape}, ValueType{DType::Int64, u}});
  c.set_output(0, c.cast(outs[0], t));
  bool inv = c.flag("return_inverse", false), cnt = c.flag("return_counts", false);
  if (c.n_outputs() > 1) {
    std::string shape = c.b.op("Shape", {x});
    c.set_output(1, inv ? c.reshape(outs[2], shape) : empty_i64(c));
  }
  if (c.n_outputs() > 2) c.set_output(2, cnt ? outs[3] : empty_i64(c));
}

// unique_dim: ONNX Unique along an axis (sorted lexicographically by slice).
void unique_dim(Ctx& c) {
  std::string x = c.tensor("self");
  DType t = c.dtype(x);
  DType ut = unique_type(t);
  int64_t a = Ctx::norm_axis(c.i("dim"), c.rank(x));
  Shape s = c.shape(x);
  s[static_cast<size_t>(a)] = Dim::unknown();
  Shape u{Dim::unknown()};
  Shape inv_s{c.shape(x)[static_cast<size_t>(a)]};
  auto outs =
      c.b.add_node("Unique", {c.cast(x, ut)}, 4, {Attr::Int("sorted", 1), Attr::Int("axis", a)},
                   {ValueType{ut, s}, ValueType{DType::Int64, u}, ValueType{DType::Int64, inv_s},
                    ValueType{DType::Int64, u}});
  c.set_output(0, c.cast(outs[0], t));
  bool inv = c.flag("return_inverse", false), cnt = c.flag("return_counts", false);
  if (c.n_outputs() > 1) c.set_output(1, inv ? outs[2] : empty_i64(c));
  if (c.n_outputs() > 2) c.set_output(2, cnt ? outs[3] : empty_i64(c));
}

std::string slice(Ctx& c, const std::string& x, int64_t axis, int64_t start, int64_t end) {
  return c.b.op("Slice", {x, c.b.const_i64({start}), c.b.const_i64({end}), c.b.const_i64({axis})});
}

// unique_consecutive: a run starts where a slice differs from the previous.
void unique_consecutive(Ctx& c) {
  std::string x = c.tensor("self");
  bool has_dim = c.has("dim");
  int64_t a = 0;
  std::string v = x;
  if (!has_dim)
    v = c.reshape(x, c.b.const_i64({-1}));
  else
    a = Ctx::norm_axis(c.i("dim"), c.rank(x));
  size_t r = c.rank(v);
  std::string ne =
      c.b.op("Not", {c.b.op("Equal", {slice(c, v, a, 1, INT64_MAX), slice(c, v, a, 0, -1)})});
  if (r > 1) {
    std::vector<int64_t> others;
    for (size_t k = 0; k < r; ++k)
      if (static_cast<int64_t>(k) != a) others.push_back(static_cast<int64_t>(k));
    ne = c.cast(c.reduce("ReduceMax", c.cast(ne, DType::Int32), others, false), DType::Bool);
  }
  // start[0] = true (also for an empty input: Slice clips).
  std::string first = c.b.op("Equal", {c.b.const_i64({0}), c.b.const_i64({0})});
  std::string start = c.b.op("Concat", {first, ne}, {Attr::Int("axis", 0)});
  const Dim& n = c.shape(v)[static_cast<size_t>(a)];
  start = slice(c, start, 0, 0, n.is_static() ? n.value : INT64_MAX);
  if (!n.is_static())
    start = c.b.op("Slice", {start, c.b.const_i64({0}), c.dim_value(v, a), c.b.const_i64({0})});
  Shape vs = c.shape(v);
  vs[static_cast<size_t>(a)] = Dim::unknown();
  DType kt = c.kernel_type("Compress", c.dtype(v));
  c.set_output(0, c.cast(typed(c, "Compress", {c.cast(v, kt), start}, ValueType{kt, vs},
                               {Attr::Int("axis", a)}),
                         c.dtype(v)));
  bool inv = c.flag("return_inverse", false), cnt = c.flag("return_counts", false);
  if (c.n_outputs() > 1) {
    if (inv) {
      std::string cs = typed(c, "CumSum", {c.cast(start, DType::Int64), c.b.scalar_i64(0)},
                             ValueType{DType::Int64, c.type(start).shape});
      std::string i = c.b.op("Sub", {cs, c.b.scalar_i64(1)});
      if (!has_dim) i = c.reshape(i, c.b.op("Shape", {x}));
      c.set_output(1, i);
    } else {
      c.set_output(1, empty_i64(c));
    }
  }
  if (c.n_outputs() > 2) {
    if (cnt) {
      std::string pos =
          typed(c, "NonZero", {start}, ValueType{DType::Int64, Shape{Dim::of(1), Dim::unknown()}});
      pos = c.squeeze(pos, {0});
      std::string ends = c.b.op("Concat", {slice(c, pos, 0, 1, INT64_MAX), c.dim_value(v, a)},
                                {Attr::Int("axis", 0)});
      c.set_output(2, c.b.op("Sub", {ends, pos}));
    } else {
      c.set_output(2, empty_i64(c));
    }
  }
}

// ---- histograms and bucketing

void histc(Ctx& c) {
  DType t = c.out_dtype();
  DType w = (t == DType::Float16 || t == DType::BFloat16) ? DType::Float : t;
  std::string x = c.reshape(c.cast(c.tensor("self"), w), c.b.const_i64({-1}));
  int64_t bins = c.i("bins", 100);
  double mn = c.f("min", 0), mx = c.f("max", 0);
  std::string lo, hi;
  if (mn == mx) {
    // The data's range (NaN-free); a flat range widens by 1 on each side.
    std::string ok = c.b.op("Not", {is_nan(c, x)});
    lo = c.reduce("ReduceMin", c.b.op("Where", {ok, x, c.b.scalar(w, kInf)}), {0}, false);
    hi = c.reduce("ReduceMax", c.b.op("Where", {ok, x, c.b.scalar(w, -kInf)}), {0}, false);
    std::string same = c.b.op("Equal", {lo, hi});
    lo = c.b.op("Where", {same, c.b.op("Sub", {lo, c.b.scalar(w, 1)}), lo});
    hi = c.b.op("Where", {same, c.b.op("Add", {hi, c.b.scalar(w, 1)}), hi});
  } else {
    lo = c.b.scalar(w, mn);
    hi = c.b.scalar(w, mx);
  }
  std::string pos = c.b.op("Mul", {c.b.op("Div", {c.b.op("Sub", {x, lo}), c.b.op("Sub", {hi, lo})}),
                                   c.b.scalar(w, static_cast<double>(bins))});
  std::string in =
      c.b.op("And", {c.b.op("GreaterOrEqual", {x, lo}), c.b.op("LessOrEqual", {x, hi})});
  pos = c.b.op("Where", {in, pos, c.b.scalar(w, -1)});
  std::string idx = c.cast(c.b.op("Floor", {pos}), DType::Int64);
  idx = c.b.op("Min", {idx, c.b.scalar_i64(bins - 1)});  // x == max -> last bin
  std::vector<int64_t> ar(static_cast<size_t>(bins));
  for (size_t k = 0; k < ar.size(); ++k) ar[k] = static_cast<int64_t>(k);
  std::string hit = c.b.op("Equal", {c.unsqueeze(idx, {1}), c.unsqueeze(c.b.const_i64(ar), {0})});
  std::string h = c.reduce("ReduceSum", c.cast(hit, w), {0}, false);
  c.set_output(0, c.cast(h, t));
}

// Number of sorted entries below (or not above, right=) each value.
std::string count_below(Ctx& c, const std::string& seq, const std::string& v, bool right,
                        bool seq_1d) {
  const Dim& m = c.shape(seq).back();
  if (m.is_static() && m.value == 0)  // (ORT keeps the reduced empty axis)
    return c.b.op("Expand", {c.b.scalar_i64(0), c.b.op("Shape", {v})});
  std::string vu = c.unsqueeze(v, {-1});
  std::string su = seq_1d ? seq : c.unsqueeze(seq, {-2});
  std::string cmp = c.b.op(right ? "LessOrEqual" : "Less", {su, vu});
  return c.reduce("ReduceSum", c.cast(cmp, DType::Int64), {-1}, false);
}

DType compare_type(Ctx& c, const char* a, const char* b) {
  auto [ta, ca] = c.operand_class(a);
  auto [tb, cb] = c.operand_class(b);
  return opmath(promote_types(ta, ca, tb, cb));
}

void bucketize(Ctx& c) {
  DType t = compare_type(c, "self", "boundaries");
  std::string v = c.operand("self", t);
  std::string bnd = c.cast(c.tensor("boundaries"), t);
  std::string n = count_below(c, bnd, v, c.flag("right", false), true);
  c.set_output(0, c.cast(n, c.out_dtype()));
}

void searchsorted(Ctx& c) {
  DType t = compare_type(c, "sorted_sequence", "self");
  std::string seq = c.cast(c.tensor("sorted_sequence"), t);
  if (auto so = c.opt_tensor("sorter"))
    seq = gather_el(c, seq, *so, -1 + static_cast<int64_t>(c.rank(seq)));
  std::string v = c.operand("self", t);
  bool right = c.flag("right", false) || c.str("side").value_or("left") == "right";
  std::string n = count_below(c, seq, v, right, c.rank(seq) == 1);
  c.set_output(0, c.cast(n, c.out_dtype()));
}

void isin(Ctx& c) {
  DType t = compare_type(c, "elements", "test_elements");
  std::string e = c.operand("elements", t);
  std::string test = c.operand("test_elements", t);
  std::string r;
  if (c.rank(test) == 0) {
    r = c.b.op("Equal", {e, test});
  } else {
    test = c.reshape(test, c.b.const_i64({-1}));
    std::string eq = c.b.op("Equal", {c.unsqueeze(e, {-1}), test});
    r = c.cast(c.reduce("ReduceMax", c.cast(eq, DType::Int32), {-1}, false), DType::Bool);
  }
  if (c.flag("invert", false)) r = c.b.op("Not", {r});
  c.set_output(0, r);
}

}  // namespace

void register_sort(Registry& r) {
  const std::string p = "torch.ops.aten.";
  for (const char* o : {"sort.default", "sort.stable"}) r.add(p + o, sort);
  for (const char* o : {"argsort.default", "argsort.stable"}) r.add(p + o, argsort);
  r.add(p + "msort.default", msort);
  r.add(p + "topk.default", topk_);
  r.add(p + "kthvalue.default", kthvalue);
  for (const char* o : {"median.default", "median.dim"}) r.add(p + o, median);
  for (const char* o : {"nanmedian.default", "nanmedian.dim"}) r.add(p + o, nanmedian);
  r.add(p + "mode.default", mode);
  for (const char* o : {"quantile.default", "quantile.scalar"}) r.add(p + o, quantile);
  for (const char* o : {"nanquantile.default", "nanquantile.scalar"}) r.add(p + o, nanquantile);
  r.add(p + "_unique2.default", unique2);
  r.add(p + "unique_dim.default", unique_dim);
  r.add(p + "unique_consecutive.default", unique_consecutive);
  r.add(p + "histc.default", histc);
  for (const char* o : {"bucketize.Tensor", "bucketize.Scalar"}) r.add(p + o, bucketize);
  for (const char* o : {"searchsorted.Tensor", "searchsorted.Scalar"}) r.add(p + o, searchsorted);
  for (const char* o : {"isin.Tensor_Tensor", "isin.Tensor_Scalar", "isin.Scalar_Tensor"})
    r.add(p + o, isin);
}

}  // namespace pt2onnx
