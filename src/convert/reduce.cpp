// Reductions and scans: sum/mean/prod, amax/amin/max/min/aminmax, argmax/
// argmin, any/all, std/var(_mean), nansum/nanmean, count_nonzero, logsumexp,
// trace, vector/matrix norms, renorm, cumsum/cumprod/cummax/cummin/
// logcumsumexp, diff, trapezoid rules.
//
// Half types are reduced in float32 (torch accumulates them in float32) and
// cast back. torch's max/min propagate NaN; ONNX Reduce ops do not promise
// it, so NaN is propagated explicitly. Cumulative products/extrema have no
// ONNX scan op: they reduce a masked [n, n] expansion along the scanned dim
// (exact, O(n^2) memory).
#include <algorithm>
#include <cmath>
#include <limits>

#include "convert/context.h"
#include "convert/eigen.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

DType work_type(DType t) {
  return (t == DType::Float16 || t == DType::BFloat16) ? DType::Float : t;
}

// Sorted, normalized, de-duplicated axes; none given (or empty) = all.
std::vector<int64_t> axes_of(const std::vector<int64_t>& given, size_t r) {
  std::vector<int64_t> a;
  if (r == 0) return a;
  for (auto x : given) a.push_back(Ctx::norm_axis(x, r));
  if (a.empty())
    for (size_t k = 0; k < r; ++k) a.push_back(static_cast<int64_t>(k));
  std::sort(a.begin(), a.end());
  a.erase(std::unique(a.begin(), a.end()), a.end());
  return a;
}

std::vector<int64_t> dim_arg(Ctx& c, const char* name, size_t r) {
  return axes_of(c.has(name) ? c.ints(name, {}) : std::vector<int64_t>{}, r);
}

// Reduce unless rank 0 (a 0-d tensor reduces to itself).
std::string red(Ctx& c, const std::string& op, const std::string& x,
                const std::vector<int64_t>& axes, bool keep) {
  if (c.rank(x) == 0) return x;
  return c.reduce(op, x, axes, keep);
}

// A node whose output type the builder does not infer.
std::string typed(Ctx& c, const std::string& op, std::vector<std::string> in, ValueType t,
                  std::vector<Attr> attrs = {}) {
  return c.b.op(op, std::move(in), std::move(attrs), std::move(t));
}

std::string is_nan(Ctx& c, const std::string& x) {
  return typed(c, "IsNaN", {x}, ValueType{DType::Bool, c.type(x).shape});
}

// True where any reduced element is NaN.
std::string any_nan(Ctx& c, const std::string& x, const std::vector<int64_t>& axes, bool keep) {
  std::string n = c.cast(is_nan(c, x), DType::Int32);
  return c.cast(red(c, "ReduceMax", n, axes, keep), DType::Bool);
}

// Number of elements over `axes` as a 0-d value of type t.
std::string count(Ctx& c, const std::string& x, const std::vector<int64_t>& axes, DType t) {
  const ValueType& vt = c.type(x);
  int64_t n = 1;
  bool stat = true;
  for (auto a : axes) {
    const Dim& d = (*vt.shape)[static_cast<size_t>(a)];
    if (d.is_static())
      n *= d.value;
    else
      stat = false;
  }
  if (stat) return c.b.scalar(t, static_cast<double>(n));
  std::string s = c.b.op("Shape", {x});
  s = c.b.op("Gather", {s, c.b.const_i64(axes)}, {Attr::Int("axis", 0)});
  return c.cast(c.reduce("ReduceProd", s, {0}, false), t);
}

// 1-D int64 [0, n) for dim `axis` of x.
std::string arange(Ctx& c, const std::string& x, int64_t axis) {
  const Dim& d = c.shape(x)[static_cast<size_t>(axis)];
  if (d.is_static()) {
    std::vector<int64_t> v(static_cast<size_t>(d.value));
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<int64_t>(k);
    return c.b.const_i64(v);
  }
  std::string n = c.squeeze(c.dim_value(x, axis), {0});
  return typed(c, "Range", {c.b.scalar_i64(0), n, c.b.scalar_i64(1)},
               ValueType{DType::Int64, Shape{d}});
}

// Max/Min reduction with torch's NaN propagation; bool through int32.
std::string extreme(Ctx& c, const std::string& op, std::string x, const std::vector<int64_t>& axes,
                    bool keep) {
  DType t = c.dtype(x);
  if (c.rank(x) == 0) return x;
  if (t == DType::Bool) return c.cast(c.reduce(op, c.cast(x, DType::Int32), axes, keep), t);
  DType w = work_type(t);
  x = c.cast(x, w);
  std::string r = c.reduce(op, x, axes, keep);
  if (is_floating(w)) r = c.b.op("Where", {any_nan(c, x, axes, keep), c.b.scalar(w, kNaN), r});
  return c.cast(r, t);
}

// ArgMax/ArgMin over one axis: the first extreme index, a NaN counting as
// the extreme (as torch does).
std::string arg_extreme(Ctx& c, const std::string& op, std::string x, int64_t axis, bool keep) {
  DType t = c.dtype(x);
  if (t == DType::Bool || t == DType::Int32) x = c.cast(x, DType::Int64);
  if (t == DType::Float16 || t == DType::BFloat16) x = c.cast(x, DType::Float);
  Shape s = c.shape(x);
  if (keep)
    s[static_cast<size_t>(axis)] = Dim::of(1);
  else
    s.erase(s.begin() + axis);
  std::vector<Attr> attrs{Attr::Int("axis", axis), Attr::Int("keepdims", keep ? 1 : 0)};
  if (!is_floating(c.dtype(x))) return typed(c, op, {x}, ValueType{DType::Int64, s}, attrs);
  std::string nan = is_nan(c, x);
  std::string nan_i = c.cast(nan, DType::Int32);
  std::string first_nan = typed(c, "ArgMax", {nan_i}, ValueType{DType::Int64, s}, attrs);
  std::string anyn = c.cast(c.reduce("ReduceMax", nan_i, {axis}, keep), DType::Bool);
  std::string idx = typed(c, op, {x}, ValueType{DType::Int64, s}, attrs);
  return c.b.op("Where", {anyn, first_nan, idx});
}

void emit_reduce(Ctx& c, const std::string& op) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  std::vector<int64_t> axes = dim_arg(c, "dim", r);
  bool keep = c.flag("keepdim", false);
  DType t = c.out_dtype();
  // sum of ints / bools is int64 in torch; dtype= casts before reducing.
  x = c.cast(c.cast(x, t), work_type(t));
  if (op == "ReduceMean") {
    // sum / n: the mean of nothing is NaN, as in torch.
    std::string s = red(c, "ReduceSum", x, axes, keep);
    return c.set_output(0, c.cast(c.b.op("Div", {s, count(c, x, axes, work_type(t))}), t));
  }
  c.set_output(0, c.cast(red(c, op, x, axes, keep), t));
}

// any / all: reduce the truth values as int32 (ReduceMax / ReduceMin do not
// take bool in every opset), then back to bool.
void emit_any_all(Ctx& c, const std::string& op) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  if (c.dtype(x) != DType::Bool)
    x = c.b.op("Not", {c.b.op("Equal", {x, c.b.scalar(c.dtype(x), 0)})});
  x = c.cast(x, DType::Int32);
  std::vector<int64_t> axes = dim_arg(c, "dim", r);
  x = red(c, op, x, axes, c.flag("keepdim", false));
  c.set_output(0, c.cast(x, c.out_dtype()));
}
void any(Ctx& c) { emit_any_all(c, "ReduceMax"); }
void all(Ctx& c) { emit_any_all(c, "ReduceMin"); }

void mean(Ctx& c) { emit_reduce(c, "ReduceMean"); }
void sum(Ctx& c) { emit_reduce(c, "ReduceSum"); }
void prod(Ctx& c) { emit_reduce(c, "ReduceProd"); }

void emit_extreme(Ctx& c, const std::string& op) {
  std::string x = c.tensor("self");
  std::vector<int64_t> axes = dim_arg(c, "dim", c.rank(x));
  c.set_output(0, extreme(c, op, x, axes, c.flag("keepdim", false)));
}
void amax(Ctx& c) { emit_extreme(c, "ReduceMax"); }
void amin(Ctx& c) { emit_extreme(c, "ReduceMin"); }

void aminmax(Ctx& c) {
  std::string x = c.tensor("self");
  bool keep = c.flag("keepdim", false);
  std::vector<int64_t> axes = axes_of({}, c.rank(x));
  if (c.has("dim")) axes = axes_of({c.i("dim")}, c.rank(x));
  if (!c.has("dim") && keep && c.rank(x) > 0) {
    // keepdim without dim keeps every dim as 1.
    c.set_output(0, extreme(c, "ReduceMin", x, axes, true));
    c.set_output(1, extreme(c, "ReduceMax", x, axes, true));
    return;
  }
  c.set_output(0, extreme(c, "ReduceMin", x, axes, keep));
  c.set_output(1, extreme(c, "ReduceMax", x, axes, keep));
}

// max.dim / min.dim: values and first index of the extreme.
void extreme_dim(Ctx& c, const std::string& op, const std::string& arg) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  bool keep = c.flag("keepdim", false);
  if (r == 0) {
    c.set_output(0, x);
    c.set_output(1, c.b.scalar_i64(0));
    return;
  }
  int64_t a = Ctx::norm_axis(c.i("dim"), r);
  c.set_output(0, extreme(c, op, x, {a}, keep));
  c.set_output(1, arg_extreme(c, arg, x, a, keep));
}
void max_dim(Ctx& c) { extreme_dim(c, "ReduceMax", "ArgMax"); }
void min_dim(Ctx& c) { extreme_dim(c, "ReduceMin", "ArgMin"); }

void emit_arg(Ctx& c, const std::string& op) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  bool keep = c.flag("keepdim", false);
  if (r == 0) return c.set_output(0, c.b.scalar_i64(0));
  if (c.has("dim"))
    return c.set_output(0, arg_extreme(c, op, x, Ctx::norm_axis(c.i("dim"), r), keep));
  std::string flat = c.reshape(x, c.b.const_i64({-1}));
  std::string i = arg_extreme(c, op, flat, 0, false);
  if (keep) i = c.reshape(i, c.b.const_i64(std::vector<int64_t>(r, 1)));
  c.set_output(0, i);
}
void argmax(Ctx& c) { emit_arg(c, "ArgMax"); }
void argmin(Ctx& c) { emit_arg(c, "ArgMin"); }

// maximum-like binary max/min (max.other): NaN propagates.
void emit_binary_extreme(Ctx& c, const std::string& op) {
  DType t = c.out_dtype();
  std::string x = c.operand("self", t), y = c.operand("other", t);
  if (t == DType::Bool) return c.set_output(0, c.b.op(op == "Max" ? "Or" : "And", {x, y}));
  std::string r = c.b.op(op, {x, y});
  if (is_floating(t)) {
    std::string n = c.b.op("Or", {is_nan(c, x), is_nan(c, y)});
    r = c.b.op("Where", {n, c.b.op("Add", {x, y}), r});
  }
  c.set_output(0, r);
}
void max_other(Ctx& c) { emit_binary_extreme(c, "Max"); }
void min_other(Ctx& c) { emit_binary_extreme(c, "Min"); }

// ---- std / var

void emit_var(Ctx& c, bool is_std, bool with_mean) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  std::vector<int64_t> axes = dim_arg(c, "dim", r);
  double corr = 1.0;
  if (c.has("correction"))
    corr = c.f("correction", 1.0);
  else if (c.arg("unbiased"))
    corr = c.flag("unbiased", true) ? 1.0 : 0.0;
  bool keep = c.flag("keepdim", false);
  DType t = c.out_dtype(0), w = work_type(t);
  x = c.cast(x, w);
  // sum / n rather than ReduceMean: an empty reduction is NaN as in torch.
  std::string n = count(c, x, axes, w);
  std::string m = c.b.op("Div", {red(c, "ReduceSum", x, axes, true), n});
  std::string d = c.b.op("Sub", {x, m});
  std::string s = red(c, "ReduceSum", c.b.op("Mul", {d, d}), axes, keep);
  std::string den = c.b.op("Max", {c.b.op("Sub", {n, c.b.scalar(w, corr)}), c.b.scalar(w, 0)});
  std::string v = c.b.op("Div", {s, den});
  if (is_std) v = c.b.op("Sqrt", {v});
  c.set_output(0, c.cast(v, t));
  if (with_mean) {
    if (!keep && r > 0) m = c.squeeze(m, axes);
    c.set_output(1, c.cast(m, c.out_dtype(1)));
  }
}
void var(Ctx& c) { emit_var(c, false, false); }
void std_(Ctx& c) { emit_var(c, true, false); }
void var_mean(Ctx& c) { emit_var(c, false, true); }
void std_mean(Ctx& c) { emit_var(c, true, true); }

// ---- NaN-ignoring reductions, counts

void nansum(Ctx& c) {
  std::string x = c.tensor("self");
  std::vector<int64_t> axes = dim_arg(c, "dim", c.rank(x));
  DType t = c.out_dtype(), w = work_type(t);
  x = c.cast(c.cast(x, t), w);
  if (is_floating(w)) x = c.b.op("Where", {is_nan(c, x), c.b.scalar(w, 0), x});
  c.set_output(0, c.cast(red(c, "ReduceSum", x, axes, c.flag("keepdim", false)), t));
}

void nanmean(Ctx& c) {
  std::string x = c.tensor("self");
  std::vector<int64_t> axes = dim_arg(c, "dim", c.rank(x));
  bool keep = c.flag("keepdim", false);
  DType t = c.out_dtype(), w = work_type(t);
  x = c.cast(x, w);
  std::string nan = is_nan(c, x);
  std::string s = red(c, "ReduceSum", c.b.op("Where", {nan, c.b.scalar(w, 0), x}), axes, keep);
  std::string n = red(c, "ReduceSum", c.cast(c.b.op("Not", {nan}), w), axes, keep);
  c.set_output(0, c.cast(c.b.op("Div", {s, n}), t));
}

void count_nonzero(Ctx& c) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  std::vector<int64_t> axes = dim_arg(c, "dim", r);
  std::string nz = c.b.op("Not", {c.b.op("Equal", {x, c.b.scalar(c.dtype(x), 0)})});
  c.set_output(0, red(c, "ReduceSum", c.cast(nz, DType::Int64), axes, false));
}

// log(sum(exp(x))) stabilized by the max (0 where the max is infinite).
std::string logsumexp_of(Ctx& c, const std::string& x, const std::vector<int64_t>& axes,
                         bool keep) {
  DType w = c.dtype(x);
  if (c.rank(x) == 0) return x;
  std::string m = c.reduce("ReduceMax", x, axes, true);
  std::string inf = c.b.op("Equal", {c.b.op("Abs", {m}), c.b.scalar(w, kInf)});
  m = c.b.op("Where", {inf, c.b.scalar(w, 0), m});
  std::string s = c.reduce("ReduceSum", c.b.op("Exp", {c.b.op("Sub", {x, m})}), axes, keep);
  if (!keep) m = c.squeeze(m, axes);
  return c.b.op("Add", {c.b.op("Log", {s}), m});
}

void logsumexp(Ctx& c) {
  std::string x = c.tensor("self");
  std::vector<int64_t> axes = dim_arg(c, "dim", c.rank(x));
  DType t = c.out_dtype(), w = work_type(t);
  c.set_output(0, c.cast(logsumexp_of(c, c.cast(x, w), axes, c.flag("keepdim", false)), t));
}

void trace(Ctx& c) {
  std::string x = c.tensor("self");
  DType t = c.out_dtype(), w = work_type(t);
  std::string i = c.unsqueeze(arange(c, x, 0), {1});
  std::string j = c.unsqueeze(arange(c, x, 1), {0});
  std::string diag = c.b.op("Equal", {i, j});
  std::string v = c.b.op("Where", {diag, c.cast(x, w), c.b.scalar(w, 0)});
  c.set_output(0, c.cast(c.reduce("ReduceSum", v, {0, 1}, false), t));
}

// ---- norms

std::string vector_norm(Ctx& c, std::string x, double ord, const std::vector<int64_t>& axes,
                        bool keep) {
  DType w = c.dtype(x);
  std::string a = c.b.op("Abs", {x});
  if (std::isinf(ord)) return extreme(c, ord > 0 ? "ReduceMax" : "ReduceMin", a, axes, keep);
  if (ord == 0)
    return red(c, "ReduceSum", c.cast(c.b.op("Not", {c.b.op("Equal", {a, c.b.scalar(w, 0)})}), w),
               axes, keep);
  if (ord == 1) return red(c, "ReduceSum", a, axes, keep);
  if (ord == 2) return c.b.op("Sqrt", {red(c, "ReduceSum", c.b.op("Mul", {a, a}), axes, keep)});
  std::string s = red(c, "ReduceSum", c.b.op("Pow", {a, c.b.scalar(w, ord)}), axes, keep);
  return c.b.op("Pow", {s, c.b.scalar(w, 1.0 / ord)});
}

std::string matrix_norm(Ctx& c, const std::string& x, const std::string& ord, double p,
                        std::vector<int64_t> dims, bool keep) {
  size_t r = c.rank(x);
  for (auto& d : dims) d = Ctx::norm_axis(d, r);
  if (ord == "fro") return vector_norm(c, x, 2, axes_of(dims, r), keep);
  if (ord == "nuc" || std::fabs(p) == 2) {
    // Singular values (eigen.cpp) of the matrices spanned by dims.
    std::vector<int64_t> perm;
    for (size_t k = 0; k < r; ++k)
      if (static_cast<int64_t>(k) != dims[0] && static_cast<int64_t>(k) != dims[1])
        perm.push_back(static_cast<int64_t>(k));
    perm.push_back(dims[0]);
    perm.push_back(dims[1]);
    std::string s = singular_values(c, c.transpose(x, perm));
    std::string m = ord == "nuc" ? c.reduce("ReduceSum", s, {-1}, false)
                    : p > 0      ? c.reduce("ReduceMax", s, {-1}, false)
                                 : c.reduce("ReduceMin", s, {-1}, false);
    if (keep) {
      auto sorted = dims;
      std::sort(sorted.begin(), sorted.end());
      m = c.unsqueeze(m, sorted);
    }
    return m;
  }
  // 1 / -1: max/min over dims[1] of column sums over dims[0]; inf: swapped.
  int64_t sum_ax = std::isinf(p) ? dims[1] : dims[0];
  int64_t ext_ax = std::isinf(p) ? dims[0] : dims[1];
  if (std::fabs(p) != 1 && !std::isinf(p)) c.fail("unsupported matrix norm ord");
  std::string s = c.reduce("ReduceSum", c.b.op("Abs", {x}), {sum_ax}, true);
  std::string m = extreme(c, p > 0 ? "ReduceMax" : "ReduceMin", s, {ext_ax}, true);
  if (!keep) m = c.squeeze(m, axes_of(dims, r));
  return m;
}

DType norm_type(Ctx& c) { return work_type(c.out_dtype()); }

void linalg_vector_norm(Ctx& c) {
  std::string x = c.tensor("self");
  DType t = c.out_dtype();
  x = c.cast(x, norm_type(c));
  double ord = c.f(c.arg("ord") ? "ord" : "p", 2.0);
  std::vector<int64_t> axes = dim_arg(c, "dim", c.rank(x));
  c.set_output(0, c.cast(vector_norm(c, x, ord, axes, c.flag("keepdim", false)), t));
}

void linalg_matrix_norm(Ctx& c) {
  std::string x = c.cast(c.tensor("self"), norm_type(c));
  const schema::Argument* o = c.arg("ord");
  bool is_str = o && o->kind == schema::ArgKind::String;
  std::string ord = is_str ? *c.str("ord") : std::string();
  double p = is_str ? 0 : c.f("ord", 2.0);
  if (!o || o->kind == schema::ArgKind::None) ord = "fro";  // str_ord's default
  auto dims = c.ints("dim", {-2, -1});
  c.set_output(0, c.cast(matrix_norm(c, x, ord, p, dims, c.flag("keepdim", false)), c.out_dtype()));
}

void linalg_norm(Ctx& c) {
  std::string x = c.cast(c.tensor("self"), norm_type(c));
  size_t r = c.rank(x);
  bool keep = c.flag("keepdim", false);
  std::vector<int64_t> dims = c.has("dim") ? c.ints("dim", {}) : std::vector<int64_t>{};
  std::string out;
  const schema::Argument* o = c.arg("ord");
  bool has_ord = o && o->kind != schema::ArgKind::None;
  if (!has_ord) {
    out = vector_norm(c, x, 2, axes_of(dims, r), keep);
  } else if (o->kind == schema::ArgKind::String) {
    if (dims.empty()) dims = {0, 1};
    out = matrix_norm(c, x, *c.str("ord"), 0, dims, keep);
  } else {
    double p = c.f("ord", 2.0);
    if (dims.size() == 1 || (dims.empty() && r == 1))
      out = vector_norm(c, x, p, axes_of(dims, r), keep);
    else
      out = matrix_norm(c, x, "", p, dims.empty() ? std::vector<int64_t>{0, 1} : dims, keep);
  }
  c.set_output(0, c.cast(out, c.out_dtype()));
}

void renorm(Ctx& c) {
  DType t = c.out_dtype(), w = work_type(t);
  std::string x = c.cast(c.tensor("self"), w);
  size_t r = c.rank(x);
  int64_t d = Ctx::norm_axis(c.i("dim"), r);
  std::vector<int64_t> axes;
  for (size_t k = 0; k < r; ++k)
    if (static_cast<int64_t>(k) != d) axes.push_back(static_cast<int64_t>(k));
  double p = c.f("p", 2.0), maxnorm = c.f("maxnorm", 1.0);
  std::string n = axes.empty() ? c.b.op("Abs", {x}) : vector_norm(c, x, p, axes, true);
  if (axes.empty() && p == 0)
    n = c.cast(c.b.op("Not", {c.b.op("Equal", {x, c.b.scalar(w, 0)})}), w);
  std::string mx = c.b.scalar(w, maxnorm);
  std::string f = c.b.op("Div", {mx, c.b.op("Add", {n, c.b.scalar(w, 1e-7)})});
  f = c.b.op("Where", {c.b.op("Greater", {n, mx}), f, c.b.scalar(w, 1)});
  c.set_output(0, c.cast(c.b.op("Mul", {x, f}), t));
}

// _weight_norm(v, g, dim): v * g / ||v||, the 2-norm over every axis but `dim` (over all of v
// when dim is -1), kept for broadcasting against g. _weight_norm_interface (what
// torch.compile's graphs hold) also returns that norm.
void weight_norm(Ctx& c) {
  DType t = c.out_dtype(), w = work_type(t);
  std::string v = c.cast(c.tensor("v"), w), g = c.cast(c.tensor("g"), w);
  size_t r = c.rank(v);
  int64_t d = c.i("dim", 0);
  std::vector<int64_t> axes;
  for (size_t k = 0; k < r; ++k)
    if (d == -1 || static_cast<int64_t>(k) != Ctx::norm_axis(d, r))
      axes.push_back(static_cast<int64_t>(k));
  std::string n = axes.empty() ? c.b.op("Abs", {v}) : vector_norm(c, v, 2.0, axes, true);
  c.set_output(0, c.cast(c.b.op("Mul", {v, c.b.op("Div", {g, n})}), t));
  if (c.n_outputs() > 1) c.set_output(1, c.cast(n, c.out_dtype(1)));
}

// ---- scans

void cumsum(Ctx& c) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  DType t = c.out_dtype(), w = work_type(t);
  x = c.cast(c.cast(x, t), w);
  if (r == 0) return c.set_output(0, c.cast(x, t));
  int64_t a = Ctx::norm_axis(c.i("dim"), r);
  std::string s = typed(c, "CumSum", {x, c.b.scalar_i64(a)}, c.type(x));
  c.set_output(0, c.cast(s, t));
}

// x expanded to [.., 1, n(j), ..] and the mask j <= i as [n(i), n(j), 1..]
// broadcasting against it: a reduction over axis a+1 of the masked expansion
// is the inclusive scan along a.
struct Tri {
  std::string xe, mask, j;  // j: index along a+1, broadcastable
  int64_t axis;
};
Tri tri(Ctx& c, const std::string& x, int64_t a) {
  size_t r = c.rank(x);
  std::vector<int64_t> trail;
  for (size_t k = static_cast<size_t>(a) + 1; k < r; ++k)
    trail.push_back(static_cast<int64_t>(k - a + 1));
  std::string idx = arange(c, x, a);
  std::string i = c.unsqueeze(idx, {1}), j = c.unsqueeze(idx, {0});
  std::string mask = c.b.op("GreaterOrEqual", {i, j});
  if (!trail.empty()) mask = c.unsqueeze(mask, trail);
  std::string jj = idx;
  std::vector<int64_t> trail1;
  for (size_t k = 0; k + static_cast<size_t>(a) + 1 < r; ++k)
    trail1.push_back(static_cast<int64_t>(k + 1));
  if (!trail1.empty()) jj = c.unsqueeze(idx, trail1);
  return Tri{c.unsqueeze(x, {a}), mask, jj, a + 1};
}

void cumprod(Ctx& c) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  DType t = c.out_dtype(), w = work_type(t);
  x = c.cast(c.cast(x, t), w);
  if (r == 0) return c.set_output(0, c.cast(x, t));
  Tri m = tri(c, x, Ctx::norm_axis(c.i("dim"), r));
  std::string v = c.b.op("Where", {m.mask, m.xe, c.b.scalar(w, 1)});
  c.set_output(0, c.cast(c.reduce("ReduceProd", v, {m.axis}, false), t));
}

double lowest(DType t, bool for_max) {
  double s = for_max ? -1 : 1;
  switch (t) {
    case DType::Int32:
      return for_max ? -2147483648.0 : 2147483647.0;
    case DType::Int64:
      return for_max ? -9223372036854775808.0 : 9223372036854775807.0;
    default:
      return s * kInf;
  }
}

// cummax / cummin: values and the last index attaining them (NaN sticks).
void cum_extreme(Ctx& c, bool is_max) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  DType t = c.out_dtype(0);
  if (r == 0) {
    c.set_output(0, x);
    c.set_output(1, c.b.scalar_i64(0));
    return;
  }
  DType w = t == DType::Bool ? DType::Int32 : work_type(t);
  x = c.cast(x, w);
  Tri m = tri(c, x, Ctx::norm_axis(c.i("dim"), r));
  const char* op = is_max ? "ReduceMax" : "ReduceMin";
  double fill = lowest(w, is_max);
  // int64's max is not exact as a double.
  std::string f = w == DType::Int64 && !is_max
                      ? c.b.const_i64({std::numeric_limits<int64_t>::max()})
                      : c.b.scalar(w, fill);
  std::string v = c.b.op("Where", {m.mask, m.xe, f});
  std::string vals = c.reduce(op, v, {m.axis}, false);
  std::string hit;
  std::string vu = c.unsqueeze(vals, {m.axis});
  if (is_floating(w)) {
    std::string nx = is_nan(c, m.xe);
    std::string nan_seen = c.cast(
        c.reduce("ReduceMax", c.cast(c.b.op("And", {m.mask, nx}), DType::Int32), {m.axis}, false),
        DType::Bool);
    vals = c.b.op("Where", {nan_seen, c.b.scalar(w, kNaN), vals});
    vu = c.unsqueeze(vals, {m.axis});
    hit = c.b.op("Or", {c.b.op("Equal", {m.xe, vu}), c.b.op("And", {nx, is_nan(c, vu)})});
  } else {
    hit = c.b.op("Equal", {m.xe, vu});
  }
  hit = c.b.op("And", {hit, m.mask});
  std::string idx = c.b.op("Where", {hit, m.j, c.b.scalar_i64(-1)});
  c.set_output(0, c.cast(vals, t));
  c.set_output(1, c.reduce("ReduceMax", idx, {m.axis}, false));
}
void cummax(Ctx& c) { cum_extreme(c, true); }
void cummin(Ctx& c) { cum_extreme(c, false); }

void logcumsumexp(Ctx& c) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  DType t = c.out_dtype(), w = work_type(t);
  x = c.cast(x, w);
  if (r == 0) return c.set_output(0, c.cast(x, t));
  Tri m = tri(c, x, Ctx::norm_axis(c.i("dim"), r));
  std::string v = c.b.op("Where", {m.mask, m.xe, c.b.scalar(w, -kInf)});
  c.set_output(0, c.cast(logsumexp_of(c, v, {m.axis}, false), t));
}

// ---- differences and trapezoid rules

std::string slice(Ctx& c, const std::string& x, int64_t axis, int64_t start, int64_t end) {
  return c.b.op("Slice", {x, c.b.const_i64({start}), c.b.const_i64({end}), c.b.const_i64({axis})});
}
constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();

std::string diff1(Ctx& c, const std::string& x, int64_t a) {
  std::string hi = slice(c, x, a, 1, kEnd), lo = slice(c, x, a, 0, -1);
  if (c.dtype(x) == DType::Bool) return c.b.op("Xor", {hi, lo});
  return c.b.op("Sub", {hi, lo});
}

void diff(Ctx& c) {
  DType t = c.out_dtype();
  std::string x = c.cast(c.tensor("self"), t);
  size_t r = c.rank(x);
  int64_t a = Ctx::norm_axis(c.i("dim", -1), r);
  std::vector<std::string> parts;
  if (auto p = c.opt_tensor("prepend")) parts.push_back(c.cast(*p, t));
  parts.push_back(x);
  if (auto p = c.opt_tensor("append")) parts.push_back(c.cast(*p, t));
  if (parts.size() > 1) x = c.b.op("Concat", parts, {Attr::Int("axis", a)});
  int64_t n = c.i("n", 1);
  for (int64_t k = 0; k < n; ++k) x = diff1(c, x, a);
  c.set_output(0, x);
}

// (y[1:] + y[:-1]) / 2 * dx along the dim.
std::string trapezoids(Ctx& c, std::string& y, int64_t& a) {
  DType w = work_type(c.out_dtype());
  y = c.cast(c.tensor("y"), w);
  size_t r = c.rank(y);
  a = Ctx::norm_axis(c.i("dim", -1), r);
  std::string avg = c.b.op("Add", {slice(c, y, a, 1, kEnd), slice(c, y, a, 0, -1)});
  if (c.arg("x") && c.has("x")) {
    std::string x = c.cast(c.tensor("x"), w);
    std::string dx;
    if (c.rank(x) == 1) {
      dx = diff1(c, x, 0);
      std::vector<int64_t> trail;
      for (size_t k = 1; k + static_cast<size_t>(a) < r; ++k)
        trail.push_back(static_cast<int64_t>(k));
      if (!trail.empty()) dx = c.unsqueeze(dx, trail);
    } else {
      dx = diff1(c, x, Ctx::norm_axis(c.i("dim", -1), c.rank(x)));
    }
    return c.b.op("Div", {c.b.op("Mul", {avg, dx}), c.b.scalar(w, 2)});
  }
  double dx = c.f("dx", 1.0);
  return c.b.op("Mul", {avg, c.b.scalar(w, dx / 2)});
}

void trapezoid(Ctx& c) {
  std::string y;
  int64_t a = 0;
  std::string v = trapezoids(c, y, a);
  c.set_output(0, c.cast(c.reduce("ReduceSum", v, {a}, false), c.out_dtype()));
}

void cumulative_trapezoid(Ctx& c) {
  std::string y;
  int64_t a = 0;
  std::string v = trapezoids(c, y, a);
  std::string s = typed(c, "CumSum", {v, c.b.scalar_i64(a)}, c.type(v));
  c.set_output(0, c.cast(s, c.out_dtype()));
}

}  // namespace

void register_reduce(Registry& r) {
  const std::string p = "torch.ops.aten.";
  for (const char* o : {"mean.dim", "mean.default", "mean.dtype_out"}) r.add(p + o, mean);
  for (const char* o : {"sum.dim_IntList", "sum.default"}) r.add(p + o, sum);
  for (const char* o : {"prod.default", "prod.dim_int"}) r.add(p + o, prod);
  r.add(p + "amax.default", amax);
  r.add(p + "amin.default", amin);
  r.add(p + "max.default", amax);
  r.add(p + "min.default", amin);
  r.add(p + "max.dim", max_dim);
  r.add(p + "min.dim", min_dim);
  r.add(p + "max.other", max_other);
  r.add(p + "min.other", min_other);
  r.add(p + "aminmax.default", aminmax);
  r.add(p + "argmax.default", argmax);
  r.add(p + "argmin.default", argmin);
  for (const char* o : {"any.default", "any.dim", "any.dims"}) r.add(p + o, any);
  for (const char* o : {"all.default", "all.dim", "all.dims"}) r.add(p + o, all);
  // torch's checks of a bool tensor (torch.distributions' validate_args): all.default's.
  r.add(p + "_is_all_true.default", all);
  r.add(p + "_is_any_true.default", any);
  for (const char* o : {"var.default", "var.dim", "var.correction"}) r.add(p + o, var);
  for (const char* o : {"std.default", "std.dim", "std.correction"}) r.add(p + o, std_);
  for (const char* o : {"var_mean.default", "var_mean.dim", "var_mean.correction"})
    r.add(p + o, var_mean);
  for (const char* o : {"std_mean.default", "std_mean.dim", "std_mean.correction"})
    r.add(p + o, std_mean);
  r.add(p + "nansum.default", nansum);
  r.add(p + "nanmean.default", nanmean);
  for (const char* o : {"count_nonzero.default", "count_nonzero.dim_IntList"})
    r.add(p + o, count_nonzero);
  r.add(p + "logsumexp.default", logsumexp);
  r.add(p + "trace.default", trace);
  r.add(p + "linalg_vector_norm.default", linalg_vector_norm);
  for (const char* o :
       {"norm.Scalar", "norm.ScalarOpt_dim", "norm.ScalarOpt_dim_dtype", "norm.ScalarOpt_dtype"})
    r.add(p + o, linalg_vector_norm);
  for (const char* o : {"linalg_matrix_norm.default", "linalg_matrix_norm.str_ord"})
    r.add(p + o, linalg_matrix_norm);
  for (const char* o : {"linalg_norm.default", "linalg_norm.ord_str"}) r.add(p + o, linalg_norm);
  r.add(p + "renorm.default", renorm);
  r.add(p + "_weight_norm.default", weight_norm);
  r.add(p + "_weight_norm_interface.default", weight_norm);
  r.add(p + "cumsum.default", cumsum);
  r.add(p + "cumprod.default", cumprod);
  r.add(p + "cummax.default", cummax);
  r.add(p + "cummin.default", cummin);
  r.add(p + "logcumsumexp.default", logcumsumexp);
  r.add(p + "diff.default", diff);
  for (const char* o : {"trapezoid.x", "trapezoid.dx", "trapz.x", "trapz.dx"})
    r.add(p + o, trapezoid);
  for (const char* o : {"cumulative_trapezoid.x", "cumulative_trapezoid.dx"})
    r.add(p + o, cumulative_trapezoid);
}

}  // namespace pt2onnx
