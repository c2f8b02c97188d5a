// torch.gradient (aten.gradient.*): finite differences along each requested
// dim, second-order central differences inside, first- or second-order
// one-sided differences at the two ends (edge_order 1 / 2). Spacing is one
// scalar for every dim, one scalar per dim, or one coordinate tensor per dim
// (non-uniform spacing).
#include <limits>

#include "convert/context.h"
#include "convert/expr.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();

struct Fd : Expr {
  Fd(Ctx& ctx, DType type) : Expr{ctx, type} {}
  std::string slice(const std::string& v, int64_t axis, int64_t start, int64_t end) {
    return c.b.op("Slice",
                  {v, c.b.const_i64({start}), c.b.const_i64({end}), c.b.const_i64({axis})});
  }
};

// One dim, uniform spacing h (a scalar value of type t).
std::string uniform(Fd& f, const std::string& x, int64_t d, const std::string& h, int64_t order) {
  std::string x0 = f.slice(x, d, 0, 1), x1 = f.slice(x, d, 1, 2);
  std::string xl = f.slice(x, d, -1, kEnd), xm = f.slice(x, d, -2, -1);
  std::string center =
      f.div(f.sub(f.slice(x, d, 2, kEnd), f.slice(x, d, 0, -2)), f.mul(f.k(2.0), h));
  std::string pre, app;
  if (order == 1) {
    pre = f.div(f.sub(x1, x0), h);
    app = f.div(f.sub(xl, xm), h);
  } else {
    std::string x2 = f.slice(x, d, 2, 3), xn = f.slice(x, d, -3, -2);
    pre = f.add(f.add(f.mul(f.k(-1.5), x0), f.mul(f.k(2.0), x1)), f.mul(f.k(-0.5), x2));
    app = f.add(f.add(f.mul(f.k(0.5), xn), f.mul(f.k(-2.0), xm)), f.mul(f.k(1.5), xl));
    pre = f.div(pre, h);
    app = f.div(app, h);
  }
  return f.c.b.op("Concat", {pre, center, app}, {Attr::Int("axis", d)});
}

// One dim, coordinates `coord` (1-D, one per position along d).
std::string coords(Fd& f, const std::string& x, int64_t d, size_t r, std::string coord,
                   int64_t order) {
  coord = f.c.cast(coord, f.t);
  std::vector<int64_t> bshape(r, 1);
  bshape[static_cast<size_t>(d)] = -1;
  auto along = [&](const std::string& v) { return f.c.reshape(v, f.c.b.const_i64(bshape)); };
  std::string dx = f.sub(f.slice(coord, 0, 1, kEnd), f.slice(coord, 0, 0, -1));  // n - 1
  std::string h1 = f.slice(dx, 0, 0, -1), h2 = f.slice(dx, 0, 1, kEnd);
  std::string s12 = f.add(h1, h2);
  std::string a = f.div(f.op("Neg", {h2}), f.mul(h1, s12));
  std::string b = f.div(f.sub(h2, h1), f.mul(h1, h2));
  std::string cc = f.div(h1, f.mul(h2, s12));
  std::string center =
      f.add(f.add(f.mul(along(a), f.slice(x, d, 0, -2)), f.mul(along(b), f.slice(x, d, 1, -1))),
            f.mul(along(cc), f.slice(x, d, 2, kEnd)));
  std::string x0 = f.slice(x, d, 0, 1), x1 = f.slice(x, d, 1, 2);
  std::string xl = f.slice(x, d, -1, kEnd), xm = f.slice(x, d, -2, -1);
  // Scalars from dx (0-D after Squeeze).
  auto at = [&](int64_t i) { return f.c.squeeze(f.slice(dx, 0, i, i == -1 ? kEnd : i + 1), {0}); };
  std::string pre, app;
  if (order == 1) {
    pre = f.div(f.sub(x1, x0), at(0));
    app = f.div(f.sub(xl, xm), at(-1));
  } else {
    std::string x2 = f.slice(x, d, 2, 3), xn = f.slice(x, d, -3, -2);
    std::string p0 = at(0), p1 = at(1), ps = f.add(p0, p1);
    std::string a0 = f.div(f.op("Neg", {f.add(f.mul(f.k(2.0), p0), p1)}), f.mul(p0, ps));
    std::string b0 = f.div(ps, f.mul(p0, p1));
    std::string c0 = f.div(f.op("Neg", {p0}), f.mul(p1, ps));
    pre = f.add(f.add(f.mul(a0, x0), f.mul(b0, x1)), f.mul(c0, x2));
    std::string q1 = at(-1), q2 = at(-2), qs = f.add(q1, q2);
    std::string a1 = f.div(q1, f.mul(q2, qs));
    std::string b1 = f.div(f.op("Neg", {qs}), f.mul(q1, q2));
    std::string c1 = f.div(f.add(f.mul(f.k(2.0), q1), q2), f.mul(q1, qs));
    app = f.add(f.add(f.mul(a1, xn), f.mul(b1, xm)), f.mul(c1, xl));
  }
  return f.c.b.op("Concat", {pre, center, app}, {Attr::Int("axis", d)});
}

void gradient(Ctx& c) {
  Fd f{c, c.out_dtype()};
  std::string x = c.cast(c.tensor("self"), f.t);
  size_t r = c.rank(x);
  int64_t order = c.i("edge_order", 1);
  if (order != 1 && order != 2) c.fail("edge_order must be 1 or 2");
  std::vector<int64_t> dims;
  const schema::Argument* da = c.arg("dim");
  if (!da || da->kind == schema::ArgKind::None) {
    for (size_t k = 0; k < r; ++k) dims.push_back(static_cast<int64_t>(k));
  } else {
    dims = c.ints("dim", {});
  }
  for (auto& d : dims) d = Ctx::norm_axis(d, r);
  if (dims.size() != c.n_outputs()) c.fail("one output per dim expected");
  for (auto d : dims) {
    const Dim& s = c.shape(x)[static_cast<size_t>(d)];
    if (s.is_static() && s.value < order + 1)
      c.fail("torch.gradient needs at least edge_order + 1 elements along each dim");
  }
  // Spacing: none (1), one scalar, a list of scalars, or a list of tensors.
  const schema::Argument* sp = c.arg("spacing");
  std::vector<std::string> h;      // per-dim scalar spacing
  std::vector<std::string> coord;  // per-dim coordinates
  using schema::ArgKind;
  if (!sp || sp->kind == ArgKind::None) {
    h.assign(dims.size(), f.k(1.0));
  } else if (sp->kind == ArgKind::Tensors) {
    coord = c.tensors("spacing");
  } else if (sp->kind == ArgKind::Floats || sp->kind == ArgKind::Ints) {
    if (sp->kind == ArgKind::Floats)
      for (double v : sp->floats) h.push_back(f.k(v));
    else
      for (int64_t v : sp->ints) h.push_back(f.k(static_cast<double>(v)));
  } else {
    h.assign(dims.size(), c.operand("spacing", f.t));
  }
  if (h.size() == 1 && dims.size() > 1) h.assign(dims.size(), h[0]);
  if (!h.empty() && h.size() != dims.size()) c.fail("spacing has a different length than dim");
  if (!coord.empty() && coord.size() != dims.size())
    c.fail("spacing has a different length than dim");
  for (size_t i = 0; i < dims.size(); ++i)
    c.set_output(i, coord.empty() ? uniform(f, x, dims[i], h[i], order)
                                  : coords(f, x, dims[i], r, coord[i], order));
}

}  // namespace

void register_gradient(Registry& r) {
  const std::string p = "torch.ops.aten.gradient.";
  for (const char* o : {"scalarint", "scalararray", "array", "scalarrayint", "scalarrayarray",
                        "tensorarrayint", "tensorarray"})
    r.add(p + o, gradient);
}

}  // namespace pt2onnx
