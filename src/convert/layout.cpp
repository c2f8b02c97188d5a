// Layout ops: flip/roll/rot90, tril/triu, diagonal/diag/diag_embed/diagflat,
// block_diag, kron, cartesian_prod, combinations, meshgrid, pixel and channel
// shuffles, Tensor.unfold, im2col/col2im, as_strided, repeat/tile/
// repeat_interleave. Also the shared integer-expression helpers (layout.h).
#include "convert/layout.h"

#include <climits>
#include <functional>

#include "convert/registry.h"

namespace pt2onnx::layout {

IE dim(Ctx& c, const std::string& x, int64_t axis) {
  const Shape& s = c.shape(x);
  int64_t a = Ctx::norm_axis(axis, s.size());
  if (a < 0 || a >= static_cast<int64_t>(s.size()))
    c.fail("internal: dim " + std::to_string(axis) + " of a value of rank " +
           std::to_string(s.size()));
  const Dim& d = s[static_cast<size_t>(a)];
  if (d.is_static()) return IE::of(d.value);
  return {std::nullopt, c.dim_value(x, axis)};
}

IE sym(Ctx& c, const schema::SymIntArg& a) {
  if (auto k = c.symint_const(a)) return IE::of(*k);
  return {std::nullopt, c.symint_value(a)};
}

std::string val(Ctx& c, const IE& e) { return e.k ? c.b.const_i64({*e.k}) : e.v; }

IE bin(Ctx& c, const std::string& op, const IE& a, const IE& b) {
  if (a.k && b.k) {
    int64_t x = *a.k, y = *b.k;
    if (op == "Add") return IE::of(x + y);
    if (op == "Sub") return IE::of(x - y);
    if (op == "Mul") return IE::of(x * y);
    if (op == "Min") return IE::of(std::min(x, y));
    if (op == "Max") return IE::of(std::max(x, y));
    if (y == 0) c.fail("internal: integer division by zero in a shape computation");
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
    return IE::of(op == "Div" ? q : m);
  }
  if (op == "Add" && a.is(0)) return b;
  if ((op == "Add" || op == "Sub") && b.is(0)) return a;
  if (op == "Mul" && a.is(1)) return b;
  if ((op == "Mul" || op == "Div") && b.is(1)) return a;
  return {std::nullopt, c.b.op(op, {val(c, a), val(c, b)})};
}

std::string shape_of(Ctx& c, const std::vector<IE>& dims) {
  std::vector<std::string> parts;
  std::vector<int64_t> run;
  for (auto& d : dims) {
    if (d.k) {
      run.push_back(*d.k);
      continue;
    }
    if (!run.empty()) parts.push_back(c.b.const_i64(run)), run.clear();
    parts.push_back(d.v);
  }
  if (!run.empty() || parts.empty()) parts.push_back(c.b.const_i64(run));
  if (parts.size() == 1) return parts[0];
  return c.b.op("Concat", parts, {Attr::Int("axis", 0)});
}

std::vector<IE> dims_of(Ctx& c, const std::string& x) {
  std::vector<IE> r;
  for (size_t k = 0; k < c.rank(x); ++k) r.push_back(dim(c, x, static_cast<int64_t>(k)));
  return r;
}

std::string zeros(Ctx& c, DType t, const std::vector<IE>& dims) {
  DType e = t == DType::BFloat16 ? DType::Float : t;
  std::string z = c.b.op("Expand", {c.b.scalar(e, 0), shape_of(c, dims)});
  return c.cast(z, t);
}

std::string reshape(Ctx& c, const std::string& x, const std::vector<IE>& dims) {
  bool all_const = true, zero = false;
  for (auto& d : dims) {
    all_const &= d.k.has_value();
    zero |= d.is(0);
  }
  if (all_const && zero && c.opset() < 14) return zeros(c, c.dtype(x), dims);
  std::vector<Attr> attrs;
  if ((zero || !all_const) && c.opset() >= 14) attrs.push_back(Attr::Int("allowzero", 1));
  return c.b.op("Reshape", {x, shape_of(c, dims)}, attrs);
}

std::string slice(Ctx& c, const std::string& x, int64_t axis, const IE& start, const IE& end,
                  int64_t step) {
  std::vector<std::string> in{x, val(c, start), val(c, end), c.b.const_i64({axis})};
  if (step != 1) in.push_back(c.b.const_i64({step}));
  return c.b.op("Slice", in);
}

std::string flip(Ctx& c, const std::string& x, const std::vector<int64_t>& axes) {
  if (axes.empty()) return x;
  size_t n = axes.size();
  return c.b.op("Slice", {x, c.b.const_i64(std::vector<int64_t>(n, -1)),
                          c.b.const_i64(std::vector<int64_t>(n, INT64_MIN)), c.b.const_i64(axes),
                          c.b.const_i64(std::vector<int64_t>(n, -1))});
}

std::string pad(Ctx& c, const std::string& x, const std::vector<IE>& pads, const std::string& mode,
                std::optional<double> value) {
  DType t = c.dtype(x);
  std::string v = t == DType::BFloat16 ? c.cast(x, DType::Float) : x;
  const Shape& s = c.shape(x);
  size_t r = s.size();
  // Pad's `pads` input holds a begin and an end per axis of x.
  if (pads.size() != 2 * r)
    c.fail("internal: " + std::to_string(pads.size()) + " pads for a value of rank " +
           std::to_string(r));
  ValueType vt{c.dtype(v), Shape{}};
  for (size_t k = 0; k < r; ++k) {
    const IE &a = pads[k], &b = pads[k + r];
    vt.shape->push_back(s[k].is_static() && a.k && b.k ? Dim::of(s[k].value + *a.k + *b.k)
                        : a.is(0) && b.is(0)           ? s[k]
                                                       : Dim::unknown());
  }
  std::vector<std::string> in{v, shape_of(c, pads)};
  std::vector<Attr> attrs;
  if (mode != "constant")
    attrs.push_back(Attr::Str("mode", mode));
  else if (value && *value != 0.0)
    in.push_back(c.b.scalar(vt.dtype, *value));
  std::string y = c.b.op("Pad", in, attrs, vt);
  return c.cast(y, t);
}

namespace {

// Runs `f` on x, through float32 for bfloat16 (onnxruntime lacks bfloat16
// kernels for Expand, Tile, Pad, Trilu, Where); exact for data movement.
std::string via_f32(Ctx& c, const std::string& x,
                    const std::function<std::string(const std::string&)>& f) {
  if (c.dtype(x) != DType::BFloat16) return f(x);
  return c.cast(f(c.cast(x, DType::Float)), DType::BFloat16);
}

std::string expand(Ctx& c, const std::string& x, const std::vector<IE>& dims) {
  return via_f32(c, x, [&](const std::string& v) {
    return c.b.op("Expand", {v, shape_of(c, dims)});
  });
}

// mask ? x : 0 for every dtype.
std::string keep_where(Ctx& c, const std::string& mask, const std::string& x) {
  if (c.dtype(x) == DType::Bool) return c.b.op("And", {mask, x});
  return via_f32(c, x, [&](const std::string& v) {
    return c.b.op("Where", {mask, v, c.b.scalar(c.dtype(v), 0)});
  });
}

// 0..n-1 as 1-D int64.
std::string arange(Ctx& c, const IE& n) {
  if (n.k && *n.k <= 4096) {
    std::vector<int64_t> v;
    for (int64_t k = 0; k < *n.k; ++k) v.push_back(k);
    if (!v.empty()) return c.b.const_i64(v);
  }
  return c.b.op("Range", {c.b.scalar_i64(0), c.squeeze(val(c, bin(c, "Max", n, IE::of(0))), {0}),
                          c.b.scalar_i64(1)});
}

std::vector<int64_t> norm_axes(std::vector<int64_t> a, size_t r) {
  for (auto& x : a) x = Ctx::norm_axis(x, r);
  return a;
}

void flip_op(Ctx& c) {
  std::string x = c.tensor("self");
  if (c.rank(x) == 0) return c.set_output(0, x);
  c.set_output(0, flip(c, x, norm_axes(c.ints("dims", {}), c.rank(x))));
}

void fliplr(Ctx& c) { c.set_output(0, flip(c, c.tensor("self"), {1})); }
void flipud(Ctx& c) { c.set_output(0, flip(c, c.tensor("self"), {0})); }

std::string roll_axis(Ctx& c, const std::string& x, int64_t axis, int64_t shift) {
  IE d = dim(c, x, axis);
  if (d.is(0)) return x;
  IE s = bin(c, "Mod", IE::of(shift), d);
  if (s.is(0)) return x;
  IE cut = bin(c, "Sub", d, s);
  return c.b.op("Concat",
                {slice(c, x, axis, cut, IE::of(INT64_MAX)), slice(c, x, axis, IE::of(0), cut)},
                {Attr::Int("axis", axis)});
}

void roll(Ctx& c) {
  std::string x = c.tensor("self");
  auto shifts = c.ints("shifts", {});
  auto dims = c.ints("dims", {});
  if (dims.empty()) {
    std::vector<IE> orig = dims_of(c, x);
    IE n = IE::of(1);
    for (auto& d : orig) n = bin(c, "Mul", n, d);
    std::string flat = reshape(c, x, {n});
    return c.set_output(0, reshape(c, roll_axis(c, flat, 0, shifts.at(0)), orig));
  }
  size_t r = std::max<size_t>(c.rank(x), 1);
  for (size_t k = 0; k < dims.size(); ++k)
    x = roll_axis(c, x, Ctx::norm_axis(dims[k], r), shifts.at(k));
  c.set_output(0, x);
}

std::vector<int64_t> swap_perm(size_t r, int64_t a, int64_t b) {
  std::vector<int64_t> p;
  for (size_t k = 0; k < r; ++k) p.push_back(static_cast<int64_t>(k));
  std::swap(p[static_cast<size_t>(a)], p[static_cast<size_t>(b)]);
  return p;
}

void rot90(Ctx& c) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  auto dims = norm_axes(c.ints("dims", {0, 1}), r);
  int64_t k = ((c.i("k", 1) % 4) + 4) % 4;
  int64_t a = dims.at(0), b = dims.at(1);
  std::string y = x;
  if (k == 1) y = c.transpose(flip(c, x, {b}), swap_perm(r, a, b));
  if (k == 2) y = flip(c, x, {a, b});
  if (k == 3) y = c.transpose(flip(c, x, {a}), swap_perm(r, a, b));
  c.set_output(0, y);
}

void trilu(Ctx& c, bool upper) {
  std::string x = c.tensor("self");
  int64_t k = c.i("diagonal", 0);
  if (c.opset() >= 14) {
    return c.set_output(
        0, via_f32(c, x, [&](const std::string& v) {
          return c.b.op("Trilu", {v, c.b.scalar_i64(k)}, {Attr::Int("upper", upper ? 1 : 0)});
        }));
  }
  size_t r = c.rank(x);
  IE n = dim(c, x, static_cast<int64_t>(r) - 2), m = dim(c, x, static_cast<int64_t>(r) - 1);
  std::string rows = c.unsqueeze(arange(c, n), {1}), cols = arange(c, m);
  std::string diff = c.b.op("Sub", {cols, rows});
  std::string kk = c.b.scalar_i64(k);
  // triu keeps col - row >= k, tril keeps col - row <= k.
  std::string mask = upper ? c.b.op("Not", {c.b.op("Less", {diff, kk})})
                           : c.b.op("Not", {c.b.op("Greater", {diff, kk})});
  c.set_output(0, keep_where(c, mask, x));
}

void triu(Ctx& c) { trilu(c, true); }
void tril(Ctx& c) { trilu(c, false); }

std::string diagonal_of(Ctx& c, const std::string& x, int64_t off, int64_t d1, int64_t d2) {
  size_t r = c.rank(x);
  d1 = Ctx::norm_axis(d1, r), d2 = Ctx::norm_axis(d2, r);
  std::vector<int64_t> perm;
  for (size_t k = 0; k < r; ++k)
    if (static_cast<int64_t>(k) != d1 && static_cast<int64_t>(k) != d2)
      perm.push_back(static_cast<int64_t>(k));
  perm.push_back(d1), perm.push_back(d2);
  std::string xt = c.transpose(x, perm);
  std::vector<IE> ds = dims_of(c, xt);
  IE n = ds[r - 2], m = ds[r - 1];
  IE r0 = IE::of(std::max<int64_t>(-off, 0)), c0 = IE::of(std::max<int64_t>(off, 0));
  IE len = bin(c, "Max", IE::of(0), bin(c, "Min", bin(c, "Sub", n, r0), bin(c, "Sub", m, c0)));
  std::vector<IE> fd(ds.begin(), ds.end() - 2);
  fd.push_back(bin(c, "Mul", n, m));
  std::string flat = reshape(c, xt, fd);
  IE first = bin(c, "Add", bin(c, "Mul", r0, m), c0);
  std::string idx;
  if (len.k && m.k) {
    std::vector<int64_t> v;
    for (int64_t t = 0; t < *len.k; ++t) v.push_back(*first.k + t * (*m.k + 1));
    idx = v.empty() ? c.b.op("Slice", {c.b.const_i64({0}), c.b.const_i64({0}), c.b.const_i64({0})})
                    : c.b.const_i64(v);
  } else {
    std::string step = val(c, bin(c, "Add", m, IE::of(1)));
    idx = c.b.op("Add", {c.b.op("Mul", {arange(c, len), step}), val(c, first)});
  }
  return c.b.op("Gather", {flat, idx}, {Attr::Int("axis", static_cast<int64_t>(r) - 2)});
}

void diagonal(Ctx& c) {
  std::string x = c.tensor(c.arg("self") ? "self" : "A");
  bool linalg = c.arg("A") != nullptr;
  c.set_output(0, diagonal_of(c, x, c.i("offset", 0), c.i("dim1", linalg ? -2 : 0),
                              c.i("dim2", linalg ? -1 : 1)));
}

std::string diag_embed_of(Ctx& c, const std::string& x, int64_t off, int64_t d1, int64_t d2) {
  size_t R = c.rank(x) + 1;
  d1 = Ctx::norm_axis(d1, R), d2 = Ctx::norm_axis(d2, R);
  std::vector<IE> ds = dims_of(c, x);
  int64_t a = off < 0 ? -off : off;
  std::string t = x;
  if (a > 0) {
    std::vector<IE> zd = ds;
    zd.back() = IE::of(a);
    std::string z = zeros(c, c.dtype(x), zd);
    t = c.b.op("Concat", off >= 0 ? std::vector<std::string>{x, z} : std::vector<std::string>{z, x},
               {Attr::Int("axis", -1)});
  }
  IE N = bin(c, "Add", ds.back(), IE::of(a));
  std::string rows = c.unsqueeze(arange(c, N), {1}), cols = arange(c, N);
  std::string mask = c.b.op("Equal", {c.b.op("Sub", {cols, rows}), c.b.scalar_i64(off)});
  std::string v = c.unsqueeze(t, {static_cast<int64_t>(R) - 1});  // (..., N, 1)
  std::vector<IE> full(ds.begin(), ds.end() - 1);
  full.push_back(N), full.push_back(N);
  std::string y = keep_where(c, mask, expand(c, v, full));
  std::vector<int64_t> perm;
  int64_t next = 0;
  for (size_t p = 0; p < R; ++p) {
    if (static_cast<int64_t>(p) == d1)
      perm.push_back(static_cast<int64_t>(R) - 2);
    else if (static_cast<int64_t>(p) == d2)
      perm.push_back(static_cast<int64_t>(R) - 1);
    else
      perm.push_back(next++);
  }
  return c.transpose(y, perm);
}

void diag_embed(Ctx& c) {
  c.set_output(
      0, diag_embed_of(c, c.tensor("self"), c.i("offset", 0), c.i("dim1", -2), c.i("dim2", -1)));
}

void diag(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t off = c.i("diagonal", 0);
  if (c.rank(x) == 1) return c.set_output(0, diag_embed_of(c, x, off, 0, 1));
  c.set_output(0, diagonal_of(c, x, off, 0, 1));
}

void diagflat(Ctx& c) {
  std::string x = c.tensor("self");
  IE n = IE::of(1);
  for (auto& d : dims_of(c, x)) n = bin(c, "Mul", n, d);
  c.set_output(0, diag_embed_of(c, reshape(c, x, {n}), c.i("offset", 0), 0, 1));
}

void block_diag(Ctx& c) {
  DType t = c.out_dtype();
  std::vector<std::string> ms;
  std::vector<IE> rs, cs;
  for (auto& v : c.tensors("tensors")) {
    std::string m = c.cast(v, t);
    size_t r = c.rank(m);
    if (r == 0) m = reshape(c, m, {IE::of(1), IE::of(1)});
    if (r == 1) m = c.unsqueeze(m, {0});
    rs.push_back(dim(c, m, 0)), cs.push_back(dim(c, m, 1));
    ms.push_back(m);
  }
  IE total = IE::of(0);
  for (auto& x : cs) total = bin(c, "Add", total, x);
  std::vector<std::string> rows;
  IE left = IE::of(0);
  for (size_t k = 0; k < ms.size(); ++k) {
    IE right = bin(c, "Sub", bin(c, "Sub", total, left), cs[k]);
    std::vector<std::string> parts;
    if (!left.is(0)) parts.push_back(zeros(c, t, {rs[k], left}));
    parts.push_back(ms[k]);
    if (!right.is(0)) parts.push_back(zeros(c, t, {rs[k], right}));
    rows.push_back(parts.size() == 1 ? parts[0] : c.b.op("Concat", parts, {Attr::Int("axis", 1)}));
    left = bin(c, "Add", left, cs[k]);
  }
  if (rows.empty()) return c.set_output(0, zeros(c, t, {IE::of(0), IE::of(0)}));
  c.set_output(0, rows.size() == 1 ? rows[0] : c.b.op("Concat", rows, {Attr::Int("axis", 0)}));
}

void kron(Ctx& c) {
  DType t = c.out_dtype();
  std::string a = c.cast(c.tensor("self"), t), b = c.cast(c.tensor("other"), t);
  size_t R = std::max(c.rank(a), c.rank(b));
  auto lift = [&](std::string v) {
    std::vector<int64_t> ax;
    for (size_t k = c.rank(v); k < R; ++k) ax.push_back(static_cast<int64_t>(k - c.rank(v)));
    return ax.empty() ? v : c.unsqueeze(v, ax);
  };
  a = lift(a), b = lift(b);
  if (R == 0) return c.set_output(0, c.b.op(t == DType::Bool ? "And" : "Mul", {a, b}));
  std::vector<IE> da = dims_of(c, a), db = dims_of(c, b), out;
  std::vector<int64_t> odd, even;
  for (size_t k = 0; k < R; ++k) {
    odd.push_back(static_cast<int64_t>(2 * k + 1)), even.push_back(static_cast<int64_t>(2 * k));
    out.push_back(bin(c, "Mul", da[k], db[k]));
  }
  std::string ae = c.unsqueeze(a, odd), be = c.unsqueeze(b, even);
  std::string p = via_f32(c, ae, [&](const std::string& v) {
    std::string w = c.cast(be, c.dtype(v));
    return c.b.op(t == DType::Bool ? "And" : "Mul", {v, w});
  });
  c.set_output(0, reshape(c, p, out));
}

// Each 1-D (or 0-D) tensor expanded over the grid of all of them; `swap`
// puts the first two along axes 1 and 0 (indexing="xy").
std::vector<std::string> grid(Ctx& c, const std::vector<std::string>& ts, bool swap, DType t) {
  size_t n = ts.size();
  std::vector<IE> lens;
  std::vector<std::string> flat;
  for (auto& v : ts) {
    std::string f = c.cast(v, t);
    if (c.rank(f) == 0) f = c.unsqueeze(f, {0});
    flat.push_back(f);
    lens.push_back(dim(c, f, 0));
  }
  std::vector<size_t> pos(n);
  for (size_t k = 0; k < n; ++k) pos[k] = k;
  if (swap && n >= 2) std::swap(pos[0], pos[1]);
  std::vector<IE> shape(n);
  for (size_t k = 0; k < n; ++k) shape[pos[k]] = lens[k];
  std::vector<std::string> outs;
  for (size_t k = 0; k < n; ++k) {
    std::vector<int64_t> ax;
    for (size_t p = 0; p < n; ++p)
      if (p != pos[k]) ax.push_back(static_cast<int64_t>(p));
    std::string v = ax.empty() ? flat[k] : c.unsqueeze(flat[k], ax);
    outs.push_back(expand(c, v, shape));
  }
  return outs;
}

void meshgrid(Ctx& c) {
  auto ts = c.tensors("tensors");
  bool xy = c.str("indexing").value_or("ij") == "xy";
  auto outs = grid(c, ts, xy, c.out_dtype());
  for (size_t k = 0; k < outs.size(); ++k) c.set_output(k, outs[k]);
}

void cartesian_prod(Ctx& c) {
  auto ts = c.tensors("tensors");
  DType t = c.out_dtype();
  if (ts.size() == 1) return c.set_output(0, c.cast(ts[0], t));
  auto outs = grid(c, ts, false, t);
  IE n = IE::of(1);
  for (auto& d : dims_of(c, outs[0])) n = bin(c, "Mul", n, d);
  std::vector<std::string> cols;
  for (auto& o : outs) cols.push_back(reshape(c, o, {n, IE::of(1)}));
  c.set_output(0, c.b.op("Concat", cols, {Attr::Int("axis", 1)}));
}

void combinations(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t r = c.i("r", 2);
  bool rep = c.flag("with_replacement", false);
  IE n = dim(c, x, 0);
  if (!n.k) c.fail("combinations of a tensor of symbolic length is not converted");
  std::vector<int64_t> idx, cur;
  int64_t count = 0;
  std::function<void(int64_t)> rec = [&](int64_t from) {
    if (static_cast<int64_t>(cur.size()) == r) {
      idx.insert(idx.end(), cur.begin(), cur.end());
      ++count;
      return;
    }
    for (int64_t k = from; k < *n.k; ++k) {
      cur.push_back(k);
      rec(rep ? k : k + 1);
      cur.pop_back();
    }
  };
  if (r > 0) rec(0);
  ValueType ot = c.out_type();
  const Shape& os = *ot.shape;
  std::vector<IE> od;
  for (auto& d : os) od.push_back(IE::of(d.value));
  if (idx.empty()) return c.set_output(0, zeros(c, c.out_dtype(), od));
  std::string g = c.b.op("Gather", {x, c.b.const_i64(idx)}, {Attr::Int("axis", 0)});
  c.set_output(0, reshape(c, g, {IE::of(count), IE::of(r)}));
}

void pixel_shuffle(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t f = c.i("upscale_factor");
  auto ds = dims_of(c, x);
  size_t L = ds.size() - 3;
  std::vector<IE> lead(ds.begin(), ds.begin() + static_cast<long>(L));
  IE C = bin(c, "Div", ds[L], IE::of(f * f)), H = ds[L + 1], W = ds[L + 2];
  auto s1 = lead;
  for (IE e : {C, IE::of(f), IE::of(f), H, W}) s1.push_back(e);
  std::vector<int64_t> perm;
  for (size_t k = 0; k < L; ++k) perm.push_back(static_cast<int64_t>(k));
  int64_t l = static_cast<int64_t>(L);
  for (int64_t k : {0, 3, 1, 4, 2}) perm.push_back(l + k);
  auto s2 = lead;
  for (IE e : {C, bin(c, "Mul", H, IE::of(f)), bin(c, "Mul", W, IE::of(f))}) s2.push_back(e);
  c.set_output(0, reshape(c, c.transpose(reshape(c, x, s1), perm), s2));
}

void pixel_unshuffle(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t f = c.i("downscale_factor");
  auto ds = dims_of(c, x);
  size_t L = ds.size() - 3;
  std::vector<IE> lead(ds.begin(), ds.begin() + static_cast<long>(L));
  IE C = ds[L], H = bin(c, "Div", ds[L + 1], IE::of(f)), W = bin(c, "Div", ds[L + 2], IE::of(f));
  auto s1 = lead;
  for (IE e : {C, H, IE::of(f), W, IE::of(f)}) s1.push_back(e);
  std::vector<int64_t> perm;
  for (size_t k = 0; k < L; ++k) perm.push_back(static_cast<int64_t>(k));
  int64_t l = static_cast<int64_t>(L);
  for (int64_t k : {0, 2, 4, 1, 3}) perm.push_back(l + k);
  auto s2 = lead;
  for (IE e : {bin(c, "Mul", C, IE::of(f * f)), H, W}) s2.push_back(e);
  c.set_output(0, reshape(c, c.transpose(reshape(c, x, s1), perm), s2));
}

void channel_shuffle(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t g = c.i("groups");
  auto ds = dims_of(c, x);
  std::vector<IE> s1{ds[0], IE::of(g), bin(c, "Div", ds[1], IE::of(g))};
  s1.insert(s1.end(), ds.begin() + 2, ds.end());
  std::vector<int64_t> perm = swap_perm(s1.size(), 1, 2);
  c.set_output(0, reshape(c, c.transpose(reshape(c, x, s1), perm), ds));
}

void unfold(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t size = c.i("size"), step = c.i("step");
  size_t r = c.rank(x);
  if (r == 0) {
    std::vector<IE> od;
    ValueType ot = c.out_type();
    for (auto& d : *ot.shape) od.push_back(IE::of(d.value));
    return c.set_output(0, reshape(c, x, od));
  }
  int64_t d = Ctx::norm_axis(c.i("dimension"), r);
  IE D = dim(c, x, d);
  IE nw = bin(c, "Add", bin(c, "Div", bin(c, "Sub", D, IE::of(size)), IE::of(step)), IE::of(1));
  std::string idx;
  if (nw.k) {
    std::vector<int64_t> v;
    for (int64_t w = 0; w < *nw.k; ++w)
      for (int64_t k = 0; k < size; ++k) v.push_back(w * step + k);
    if (v.empty()) {
      std::vector<IE> od;
      ValueType ot = c.out_type();
      for (auto& e : *ot.shape) od.push_back(IE::of(e.value));
      return c.set_output(0, zeros(c, c.out_dtype(), od));
    }
    idx = reshape(c, c.b.const_i64(v), {nw, IE::of(size)});
  } else {
    std::string w = c.unsqueeze(c.b.op("Mul", {arange(c, nw), c.b.scalar_i64(step)}), {1});
    idx = c.b.op("Add", {w, arange(c, IE::of(size))});
  }
  std::string g = c.b.op("Gather", {x, idx}, {Attr::Int("axis", d)});
  std::vector<int64_t> perm;
  for (int64_t k = 0; k <= static_cast<int64_t>(r); ++k)
    if (k != d + 1) perm.push_back(k);
  perm.push_back(d + 1);
  c.set_output(0, c.transpose(g, perm));
}

std::string pad_spatial(Ctx& c, const std::string& x, int64_t ph, int64_t pw) {
  if (ph == 0 && pw == 0) return x;
  std::vector<IE> p;
  for (int64_t v : {0L, 0L, ph, pw, 0L, 0L, ph, pw}) p.push_back(IE::of(v));
  return pad(c, x, p);
}

void im2col(Ctx& c) {
  std::string x = c.tensor("self");
  auto ks = c.ints("kernel_size", {}), dil = c.ints("dilation", {}), pd = c.ints("padding", {}),
       st = c.ints("stride", {});
  bool batched = c.rank(x) == 4;
  if (!batched) x = c.unsqueeze(x, {0});
  x = pad_spatial(c, x, pd[0], pd[1]);
  auto ds = dims_of(c, x);
  IE oh = bin(c, "Add",
              bin(c, "Div", bin(c, "Sub", ds[2], IE::of(dil[0] * (ks[0] - 1) + 1)), IE::of(st[0])),
              IE::of(1));
  IE ow = bin(c, "Add",
              bin(c, "Div", bin(c, "Sub", ds[3], IE::of(dil[1] * (ks[1] - 1) + 1)), IE::of(st[1])),
              IE::of(1));
  std::vector<std::string> parts;
  for (int64_t i = 0; i < ks[0]; ++i)
    for (int64_t j = 0; j < ks[1]; ++j) {
      IE h0 = IE::of(i * dil[0]), w0 = IE::of(j * dil[1]);
      IE h1 = bin(c, "Add", h0, bin(c, "Mul", oh, IE::of(st[0])));
      IE w1 = bin(c, "Add", w0, bin(c, "Mul", ow, IE::of(st[1])));
      std::string s = slice(c, slice(c, x, 2, h0, h1, st[0]), 3, w0, w1, st[1]);
      parts.push_back(c.unsqueeze(s, {2}));
    }
  std::string y = parts.size() == 1 ? parts[0] : c.b.op("Concat", parts, {Attr::Int("axis", 2)});
  y = reshape(c, y, {ds[0], bin(c, "Mul", ds[1], IE::of(ks[0] * ks[1])), bin(c, "Mul", oh, ow)});
  if (!batched) y = c.squeeze(y, {0});
  c.set_output(0, y);
}

void col2im(Ctx& c) {
  std::string x = c.tensor("self");
  auto os = c.ints("output_size", {}), ks = c.ints("kernel_size", {}), dil = c.ints("dilation", {}),
       pd = c.ints("padding", {}), st = c.ints("stride", {});
  bool batched = c.rank(x) == 3;
  if (!batched) x = c.unsqueeze(x, {0});
  DType t = c.dtype(x);
  int64_t Hp = os[0] + 2 * pd[0], Wp = os[1] + 2 * pd[1];
  int64_t oh = (Hp - dil[0] * (ks[0] - 1) - 1) / st[0] + 1;
  int64_t ow = (Wp - dil[1] * (ks[1] - 1) - 1) / st[1] + 1;
  IE N = dim(c, x, 0);
  IE C = bin(c, "Div", dim(c, x, 1), IE::of(ks[0] * ks[1]));
  std::string y5 = reshape(c, x, {N, C, IE::of(ks[0] * ks[1]), IE::of(oh), IE::of(ow)});
  std::string acc;
  auto pad4 = [&](const std::string& v, const std::vector<int64_t>& p) {
    std::vector<IE> e;
    for (auto k : p) e.push_back(IE::of(k));
    return pad(c, v, e);
  };
  for (int64_t i = 0; i < ks[0]; ++i)
    for (int64_t j = 0; j < ks[1]; ++j) {
      std::string blk =
          c.b.op("Gather", {y5, c.b.scalar_i64(i * ks[1] + j)}, {Attr::Int("axis", 2)});
      if (st[0] > 1 || st[1] > 1) {
        // Spread by the stride: (N,C,oh,1,ow,1) padded to (N,C,oh,sh,ow,sw).
        std::string u = c.unsqueeze(blk, {3, 5});
        u = pad4(u, {0, 0, 0, 0, 0, 0, 0, 0, 0, st[0] - 1, 0, st[1] - 1});
        blk = reshape(c, u, {N, C, IE::of(oh * st[0]), IE::of(ow * st[1])});
      }
      int64_t h0 = i * dil[0], w0 = j * dil[1];
      int64_t hend = Hp - h0 - oh * st[0], wend = Wp - w0 - ow * st[1];
      blk = pad4(blk, {0, 0, h0, w0, 0, 0, hend, wend});
      acc = acc.empty() ? blk : c.b.op("Add", {acc, blk});
    }
  (void)t;
  std::string y = slice(c, slice(c, acc, 2, IE::of(pd[0]), IE::of(pd[0] + os[0])), 3, IE::of(pd[1]),
                        IE::of(pd[1] + os[1]));
  if (!batched) y = c.squeeze(y, {0});
  c.set_output(0, y);
}

// as_strided of a tensor as it lies: the input's own sizes (symbols
// included, read from the output's type), offset 0, and its contiguous
// strides wherever a size is not 1. torch.compile's graphs carry these (the
// strides of the size-1 dims after a keepdim reduction); the values are the
// input's, whatever its dims.
bool as_strided_is_identity(Ctx& c, const std::string& x) {
  const ValueType& tx = c.type(x);
  ValueType ty = c.out_type();
  if (!tx.shape || !ty.shape || *tx.shape != *ty.shape) return false;
  for (const Dim& d : *tx.shape)
    if (d.is_unknown()) return false;
  if (c.has("storage_offset")) {
    auto off = c.symints("storage_offset");
    if (!off.empty() && c.symint_const(off[0]).value_or(-1) != 0) return false;
  }
  auto stride = c.symints("stride");
  const Shape& s = *tx.shape;
  if (stride.size() != s.size()) return false;
  int64_t inner = 1;  // the contiguous stride of dim k: the product of the sizes after it
  for (size_t k = s.size(); k-- > 0;) {
    if (!(s[k].is_static() && s[k].value == 1)) {
      auto st = c.symint_const(stride[k]);
      if (inner < 0 || !st || *st != inner) return false;
    }
    inner = s[k].is_static() && inner >= 0 ? inner * s[k].value : -1;
  }
  return true;
}

void as_strided(Ctx& c) {
  std::string x = c.tensor("self");
  if (as_strided_is_identity(c, x)) return c.set_output(0, x);
  auto size = c.ints("size", {}), stride = c.ints("stride", {});
  int64_t off = c.i("storage_offset", 0);
  std::vector<IE> od;
  for (auto s : size) od.push_back(IE::of(s));
  int64_t n = 1;
  for (auto s : size) n *= s;
  if (n == 0) return c.set_output(0, zeros(c, c.dtype(x), od));
  std::vector<int64_t> idx{off};
  for (size_t k = 0; k < size.size(); ++k) {
    std::vector<int64_t> next;
    for (auto base : idx)
      for (int64_t t = 0; t < size[k]; ++t) next.push_back(base + t * stride[k]);
    idx = std::move(next);
  }
  IE numel = IE::of(1);
  for (auto& d : dims_of(c, x)) numel = bin(c, "Mul", numel, d);
  std::string flat = reshape(c, x, {numel});
  std::string g = c.b.op("Gather", {flat, c.b.const_i64(idx)}, {Attr::Int("axis", 0)});
  c.set_output(0, reshape(c, g, od));
}

std::string tile_to(Ctx& c, std::string x, const std::vector<schema::SymIntArg>& reps) {
  size_t R = reps.size(), r = c.rank(x);
  if (R > r) {
    std::vector<int64_t> ax;
    for (size_t k = 0; k < R - r; ++k) ax.push_back(static_cast<int64_t>(k));
    x = c.unsqueeze(x, ax);
  }
  std::vector<IE> rs;
  bool ones = true;
  for (auto& s : reps) {
    rs.push_back(sym(c, s));
    ones &= rs.back().is(1);
  }
  if (ones) return x;
  const Shape& s = c.shape(x);
  return via_f32(c, x, [&](const std::string& v) {
    ValueType vt{c.dtype(v), Shape{}};
    for (size_t k = 0; k < s.size(); ++k)
      vt.shape->push_back(s[k].is_static() && rs[k].k ? Dim::of(s[k].value * *rs[k].k)
                          : rs[k].is(1)               ? s[k]
                                                      : Dim::unknown());
    return c.b.op("Tile", {v, shape_of(c, rs)}, {}, vt);
  });
}

void repeat(Ctx& c) { c.set_output(0, tile_to(c, c.tensor("self"), c.symints("repeats"))); }

void tile(Ctx& c) {
  std::string x = c.tensor("self");
  auto reps = c.symints("dims");
  while (reps.size() < c.rank(x)) reps.insert(reps.begin(), schema::SymIntArg{1, {}});
  c.set_output(0, tile_to(c, x, reps));
}

void repeat_interleave_int(Ctx& c) {
  std::string x = c.tensor("self");
  IE rep = sym(c, c.symints("repeats")[0]);
  int64_t d = 0;
  if (!c.has("dim")) {
    IE n = IE::of(1);
    for (auto& e : dims_of(c, x)) n = bin(c, "Mul", n, e);
    x = reshape(c, x, {n});
  } else {
    d = Ctx::norm_axis(c.i("dim"), std::max<size_t>(c.rank(x), 1));
    if (c.rank(x) == 0) x = c.unsqueeze(x, {0});
  }
  auto ds = dims_of(c, x);
  std::string u = c.unsqueeze(x, {d + 1});
  std::vector<IE> e = ds;
  e.insert(e.begin() + d + 1, rep);
  u = expand(c, u, e);
  ds[static_cast<size_t>(d)] = bin(c, "Mul", ds[static_cast<size_t>(d)], rep);
  c.set_output(0, reshape(c, u, ds));
}

// Gather indices that repeat position k repeats[k] times.
std::string repeat_index(Ctx& c, std::string reps, const IE& n, std::optional<int64_t> total) {
  reps = c.cast(reps, DType::Int64);
  if (c.rank(reps) == 0 || (c.type(reps).shape && c.shape(reps)[0].is_static() &&
                            c.shape(reps)[0].value == 1 && !n.is(1)))
    reps = c.b.op("Expand", {c.b.op("Reshape", {reps, c.b.const_i64({-1})}), val(c, n)});
  std::string cs = c.b.op("CumSum", {reps, c.b.scalar_i64(0)}, {}, c.type(reps));
  std::string tot =
      total ? c.b.scalar_i64(*total) : c.b.op("ReduceSum", {reps}, {Attr::Int("keepdims", 0)});
  std::string j = c.unsqueeze(c.b.op("Range", {c.b.scalar_i64(0), tot, c.b.scalar_i64(1)}), {1});
  std::string le = c.cast(c.b.op("LessOrEqual", {c.unsqueeze(cs, {0}), j}), DType::Int64);
  return c.reduce("ReduceSum", le, {1}, false);
}

void repeat_interleave_self_tensor(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t d = 0;
  if (!c.has("dim")) {
    IE n = IE::of(1);
    for (auto& e : dims_of(c, x)) n = bin(c, "Mul", n, e);
    x = reshape(c, x, {n});
  } else {
    d = Ctx::norm_axis(c.i("dim"), std::max<size_t>(c.rank(x), 1));
    if (c.rank(x) == 0) x = c.unsqueeze(x, {0});
  }
  std::optional<int64_t> total;
  if (c.has("output_size")) total = c.i("output_size");
  std::string idx = repeat_index(c, c.tensor("repeats"), dim(c, x, d), total);
  c.set_output(0, c.b.op("Gather", {x, idx}, {Attr::Int("axis", d)}));
}

void repeat_interleave_tensor(Ctx& c) {
  std::string reps = c.tensor("repeats");
  if (c.rank(reps) == 0) reps = c.unsqueeze(reps, {0});
  std::optional<int64_t> total;
  if (c.has("output_size")) total = c.i("output_size");
  c.set_output(0, c.cast(repeat_index(c, reps, dim(c, reps, 0), total), c.out_dtype()));
}

}  // namespace
}  // namespace pt2onnx::layout

namespace pt2onnx {

void register_layout(Registry& r) {
  using namespace layout;
  const std::string p = "torch.ops.aten.";
  r.add(p + "flip.default", flip_op);
  r.add(p + "fliplr.default", fliplr);
  r.add(p + "flipud.default", flipud);
  r.add(p + "roll.default", roll);
  r.add(p + "rot90.default", rot90);
  r.add(p + "triu.default", triu);
  r.add(p + "tril.default", tril);
  for (const char* o : {"diagonal.default", "diagonal_copy.default", "linalg_diagonal.default"})
    r.add(p + o, diagonal);
  r.add(p + "diag_embed.default", diag_embed);
  r.add(p + "diag.default", diag);
  r.add(p + "diagflat.default", diagflat);
  r.add(p + "block_diag.default", block_diag);
  r.add(p + "kron.default", kron);
  for (const char* o : {"meshgrid.default", "meshgrid.indexing"}) r.add(p + o, meshgrid);
  r.add(p + "cartesian_prod.default", cartesian_prod);
  r.add(p + "combinations.default", combinations);
  r.add(p + "pixel_shuffle.default", pixel_shuffle);
  r.add(p + "pixel_unshuffle.default", pixel_unshuffle);
  for (const char* o : {"channel_shuffle.default", "native_channel_shuffle.default"})
    r.add(p + o, channel_shuffle);
  for (const char* o : {"unfold.default", "unfold_copy.default"}) r.add(p + o, unfold);
  r.add(p + "im2col.default", im2col);
  r.add(p + "col2im.default", col2im);
  for (const char* o : {"as_strided.default", "as_strided_copy.default"}) r.add(p + o, as_strided);
  r.add(p + "repeat.default", repeat);
  r.add(p + "tile.default", tile);
  r.add(p + "repeat_interleave.self_int", repeat_interleave_int);
  r.add(p + "repeat_interleave.self_Tensor", repeat_interleave_self_tensor);
  r.add(p + "repeat_interleave.Tensor", repeat_interleave_tensor);
}

}  // namespace pt2onnx
