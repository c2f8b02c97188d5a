// Symmetric eigenvalue problems and what is built on them, for static matrix
// sizes (ONNX has no eigen-solver or SVD): cyclic Jacobi rotations, unrolled
// (a fixed number of sweeps; the off-diagonal mass falls quadratically, so a
// few sweeps reach float64 precision for the sizes allowed), in float64.
//   linalg_eigvalsh, linalg_eigh       eigh of the UPLO triangle, ascending
//   linalg_svdvals                     sqrt of the eigenvalues of the smaller
//                                      Gram matrix (A^T A or A A^T), descending
//   linalg_matrix_rank, linalg_pinv,   torch's tolerances (atol, rtol default
//   pinverse, linalg_cond              eps * max(m, n)) on those values
//   linalg_matrix_sqrth, linalg_polar  (torch 2.14) sign-free products of
//                                      the eigenvectors
// Eigenvectors are unique up to sign (torch's come from LAPACK): products
// such as pinv are sign-free and match; the vectors themselves may differ
// in sign per column. The Gram route squares the condition number, which
// float64 absorbs for the float32 models it serves.
#include "convert/eigen.h"

#include <algorithm>
#include <limits>

#include "convert/expr.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

constexpr int64_t kMaxSize = 32;

struct Jacobi : Expr {
  explicit Jacobi(Ctx& ctx) : Expr{ctx, DType::Double} {}
  std::string f64(const std::vector<double>& v, int64_t n) {
    return c.b.constant(TensorData::from_vector(DType::Double, {n, n}, v));
  }
  std::string unit(int64_t n, int64_t i, int64_t j) {
    std::vector<double> v(static_cast<size_t>(n * n), 0);
    v[static_cast<size_t>(i * n + j)] = 1;
    return f64(v, n);
  }
  std::string eye(int64_t n) { return c.eye(n, n, DType::Double); }
  std::string elem(const std::string& a, int64_t i, int64_t j) {
    std::string row = c.b.op("Gather", {a, c.b.scalar_i64(i)}, {Attr::Int("axis", -2)});
    return c.b.op("Gather", {row, c.b.scalar_i64(j)}, {Attr::Int("axis", -1)});
  }
  std::string mT(const std::string& a) {
    size_t r = c.rank(a);
    std::vector<int64_t> perm;
    for (size_t i = 0; i < r; ++i) perm.push_back(static_cast<int64_t>(i));
    std::swap(perm[r - 1], perm[r - 2]);
    return c.transpose(a, perm);
  }
  std::string mm(const std::string& a, const std::string& b) { return op("MatMul", {a, b}); }
  std::string scal(const std::string& s) { return c.unsqueeze(s, {-1, -2}); }

  // Eigenvalues (unsorted, [..., n]) and optionally eigenvectors (columns of
  // V) of the symmetric a [..., n, n].
  std::pair<std::string, std::optional<std::string>> solve(std::string a, int64_t n, bool want_v) {
    if (n > kMaxSize)
      c.fail("the unrolled Jacobi eigen-solver handles matrices up to " + std::to_string(kMaxSize) +
             "x" + std::to_string(kMaxSize) + ", not " + std::to_string(n) + "x" +
             std::to_string(n));
    std::optional<std::string> v;
    if (want_v) v = eye(n);
    int sweeps = n <= 4 ? 6 : n <= 12 ? 8 : 10;
    std::string id = eye(n);
    for (int s = 0; s < sweeps; ++s)
      for (int64_t p = 0; p < n; ++p)
        for (int64_t q = p + 1; q < n; ++q) {
          std::string app = elem(a, p, p), aqq = elem(a, q, q), apq = elem(a, p, q);
          std::string zero = op("Equal", {apq, k(0)});
          std::string theta =
              op("Div", {op("Sub", {aqq, app}), op("Mul", {k(2), op("Where", {zero, k(1), apq})})});
          std::string sgn = op("Where", {op("GreaterOrEqual", {theta, k(0)}), k(1), k(-1)});
          std::string tt =
              op("Div",
                 {sgn, op("Add", {op("Abs", {theta}),
                                  op("Sqrt", {op("Add", {op("Mul", {theta, theta}), k(1)})})})});
          tt = op("Where", {zero, k(0), tt});
          std::string cs = op("Reciprocal", {op("Sqrt", {op("Add", {op("Mul", {tt, tt}), k(1)})})});
          std::string sn = op("Mul", {tt, cs});
          std::string diag = op("Add", {unit(n, p, p), unit(n, q, q)});
          std::string skew = op("Sub", {unit(n, p, q), unit(n, q, p)});
          std::string j = op("Add", {id, op("Add", {op("Mul", {scal(op("Sub", {cs, k(1)})), diag}),
                                                    op("Mul", {scal(sn), skew})})});
          a = mm(mT(j), mm(a, j));
          if (v) v = mm(*v, j);
        }
    std::string lam = c.reduce("ReduceSum", op("Mul", {a, id}), {-1}, false);
    return {lam, v};
  }

  // Values sorted along the last axis (and V's columns with them).
  std::pair<std::string, std::optional<std::string>> sorted(const std::string& lam,
                                                            const std::optional<std::string>& v,
                                                            int64_t n, bool ascending) {
    if (n <= 1) return {lam, v};
    auto outs = c.b.add_node(
        "TopK", {lam, c.b.const_i64({n})}, 2,
        {Attr::Int("axis", -1), Attr::Int("largest", ascending ? 0 : 1), Attr::Int("sorted", 1)},
        {c.type(lam), ValueType{DType::Int64, c.type(lam).shape}});
    std::optional<std::string> vs;
    if (v) {
      std::string idx = c.unsqueeze(outs[1], {-2});
      idx = c.b.op("Expand", {idx, c.b.op("Shape", {*v})});
      vs = c.b.op("GatherElements", {*v, idx}, {Attr::Int("axis", -1)}, c.type(*v));
    }
    return {outs[0], vs};
  }
};

// The symmetric matrix of a's lower (UPLO 'L') or upper triangle, float64.
std::string symmetric(Ctx& c, Jacobi& j, const std::string& a, int64_t n, bool lower) {
  std::vector<double> keep(static_cast<size_t>(n * n), 0), diag(static_cast<size_t>(n * n), 0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t q = 0; q < n; ++q) {
      keep[static_cast<size_t>(r * n + q)] = (lower ? q < r : q > r) ? 1 : 0;
      diag[static_cast<size_t>(r * n + q)] = r == q ? 1 : 0;
    }
  std::string x = c.cast(a, DType::Double);
  std::string off = j.op("Mul", {x, j.f64(keep, n)});
  return j.op("Add", {j.op("Add", {off, j.mT(off)}), j.op("Mul", {x, j.f64(diag, n)})});
}

struct Spectrum {
  std::string values;                  // [..., k] float64
  std::optional<std::string> vectors;  // [..., k, k]
  int64_t m = 0, n = 0, k = 0;
  bool gram_of_rows = false;  // A A^T (m < n) instead of A^T A
};

// Singular values of a (descending) through the smaller Gram matrix.
Spectrum svd_values(Ctx& c, Jacobi& j, const std::string& a, bool want_v) {
  auto [m, n] = c.static_matrix_dims(a, "singular values");
  Spectrum s;
  s.m = m, s.n = n, s.k = std::min(m, n);
  s.gram_of_rows = m < n;
  std::string x = c.cast(a, DType::Double);
  std::string g = s.gram_of_rows ? j.mm(x, j.mT(x)) : j.mm(j.mT(x), x);
  auto [lam, v] = j.solve(g, s.k, want_v);
  auto [ls, vs] = j.sorted(lam, v, s.k, false);
  s.values = j.op("Sqrt", {j.op("Max", {ls, j.k(0)})});
  s.vectors = vs;
  return s;
}

// torch's (atol, rtol): rtol defaults to eps * max(m, n), or 0 when atol > 0.
std::pair<std::string, std::string> tolerances(Ctx& c, Jacobi& j, int64_t m, int64_t n, DType t) {
  double eps = t == DType::Double     ? std::numeric_limits<double>::epsilon()
               : t == DType::Float16  ? 0.0009765625
               : t == DType::BFloat16 ? 0.0078125
                                      : static_cast<double>(std::numeric_limits<float>::epsilon());
  std::string def = j.k(eps * static_cast<double>(std::max(m, n)));
  bool has_atol = c.has("atol"), has_rtol = c.has("rtol");
  std::string atol = has_atol ? c.operand("atol", DType::Double) : j.k(0);
  std::string rtol = has_rtol   ? c.operand("rtol", DType::Double)
                     : has_atol ? j.op("Where", {j.op("Greater", {atol, j.k(0)}), j.k(0), def})
                                : def;
  return {atol, rtol};
}

// max(atol, rtol * largest) per matrix, [..., 1].
std::string threshold(Ctx& c, Jacobi& j, const std::string& atol, const std::string& rtol,
                      const std::string& largest) {
  std::string a = c.rank(atol) ? c.unsqueeze(atol, {-1}) : atol;
  std::string r = c.rank(rtol) ? c.unsqueeze(rtol, {-1}) : rtol;
  return j.op("Max", {a, j.op("Mul", {r, largest})});
}

std::string empty_like_out(Ctx& c, size_t i = 0) {
  auto d = c.out_type(i).static_dims();
  if (!d) c.fail("an empty matrix needs static batch dims");
  return c.b.op("Expand", {c.b.scalar(c.out_dtype(i), 0), c.b.const_i64(*d)});
}

bool is_empty(Ctx& c, const std::string& a) {
  auto d = c.type(a).static_dims();
  if (!d) return false;
  for (auto v : *d)
    if (v == 0) return true;
  return false;
}

void eigh(Ctx& c, bool vectors) {
  std::string a = c.tensor(c.arg("A") ? "A" : "self");
  auto [m, n] = c.static_matrix_dims(a, "eigh");
  if (m != n) c.fail("eigh of a non-square matrix");
  if (is_empty(c, a)) {
    for (size_t i = 0; i < c.n_outputs(); ++i) c.set_output(i, empty_like_out(c, i));
    return;
  }
  Jacobi j{c};
  bool lower = c.str("UPLO").value_or("L") == "L";
  bool want = vectors && c.flag("compute_v", true) && c.n_outputs() > 1 &&
              c.out_name(1).find("_unused_") == std::string::npos;
  auto [lam, v] = j.solve(symmetric(c, j, a, n, lower), n, want);
  auto [ls, vs] = j.sorted(lam, v, n, true);
  c.set_output(0, c.cast(ls, c.out_dtype(0)));
  if (c.n_outputs() > 1) c.set_output(1, vs ? c.cast(*vs, c.out_dtype(1)) : empty_like_out(c, 1));
}
void linalg_eigvalsh(Ctx& c) { eigh(c, false); }
void linalg_eigh(Ctx& c) { eigh(c, true); }

void linalg_svdvals(Ctx& c) {
  std::string a = c.tensor("A");
  if (is_empty(c, a)) return c.set_output(0, empty_like_out(c));
  Jacobi j{c};
  c.set_output(0, c.cast(svd_values(c, j, a, false).values, c.out_dtype()));
}

// Largest magnitude per matrix [..., 1] and the magnitudes, from the
// eigenvalues (hermitian) or the singular values.
struct Magnitudes {
  std::string values, largest;
  Spectrum spec;
};
Magnitudes magnitudes(Ctx& c, Jacobi& j, const std::string& a, bool hermitian, bool want_v) {
  Magnitudes r;
  if (hermitian) {
    auto [m, n] = c.static_matrix_dims(a, "hermitian spectrum");
    if (m != n) c.fail("hermitian=True needs a square matrix");
    auto [lam, v] = j.solve(symmetric(c, j, a, n, true), n, want_v);
    r.spec.values = lam, r.spec.vectors = v, r.spec.m = r.spec.n = r.spec.k = n;
    r.values = j.op("Abs", {lam});
  } else {
    r.spec = svd_values(c, j, a, want_v);
    r.values = r.spec.values;
  }
  r.largest = c.reduce("ReduceMax", r.values, {-1}, true);
  return r;
}

void linalg_matrix_rank(Ctx& c) {
  std::string a = c.tensor(c.arg("input") ? "input" : "self");
  if (is_empty(c, a)) return c.set_output(0, empty_like_out(c));
  Jacobi j{c};
  auto [m, n] = c.static_matrix_dims(a, "matrix_rank");
  auto [atol, rtol] = tolerances(c, j, m, n, c.dtype(a));
  Magnitudes mg = magnitudes(c, j, a, c.flag("hermitian", false), false);
  std::string tol = threshold(c, j, atol, rtol, mg.largest);
  std::string above = c.cast(j.op("Greater", {mg.values, tol}), DType::Int64);
  c.set_output(0, c.cast(c.reduce("ReduceSum", above, {-1}, false), c.out_dtype()));
}

// pinv: sum over kept values of v v^T / lambda (hermitian), or through the
// Gram matrix: V diag(1/s^2) V^T A^T (m >= n) or A^T U diag(1/s^2) U^T.
// `rcond`: pinverse's rtol (atol 0) instead of torch's default tolerances.
void emit_pinv(Ctx& c, const std::string& a, bool hermitian, std::optional<double> rcond) {
  if (is_empty(c, a)) return c.set_output(0, empty_like_out(c));
  Jacobi j{c};
  auto [m, n] = c.static_matrix_dims(a, "pinv");
  auto [atol, rtol] =
      rcond ? std::make_pair(j.k(0), j.k(*rcond)) : tolerances(c, j, m, n, c.dtype(a));
  Magnitudes mg = magnitudes(c, j, a, hermitian, true);
  std::string tol = threshold(c, j, atol, rtol, mg.largest);
  std::string keep = j.op("Greater", {mg.values, tol});
  const std::string& v = *mg.spec.vectors;
  std::string x = c.cast(a, DType::Double), r;
  if (hermitian) {
    std::string inv = j.op("Where", {keep, j.op("Reciprocal", {mg.spec.values}), j.k(0)});
    r = j.mm(j.op("Mul", {v, c.unsqueeze(inv, {-2})}), j.mT(v));
  } else {
    std::string s2 = j.op("Mul", {mg.values, mg.values});
    std::string inv = j.op("Where", {keep, j.op("Reciprocal", {s2}), j.k(0)});
    std::string core = j.mm(j.op("Mul", {v, c.unsqueeze(inv, {-2})}), j.mT(v));
    r = mg.spec.gram_of_rows ? j.mm(j.mT(x), core) : j.mm(core, j.mT(x));
  }
  c.set_output(0, c.cast(r, c.out_dtype()));
}
void linalg_pinv(Ctx& c) {
  emit_pinv(c, c.tensor("self"), c.flag("hermitian", false), std::nullopt);
}
void pinverse(Ctx& c) { emit_pinv(c, c.tensor("self"), false, c.f("rcond", 1e-15)); }

// cond(A, p): p = None / 2: s_max / s_min; -2: s_min / s_max.
void linalg_cond(Ctx& c) {
  std::string a = c.tensor("self");
  const schema::Argument* p = c.arg("p");
  double ord = 2;
  if (p && p->kind != schema::ArgKind::None) {
    if (p->kind == schema::ArgKind::String)
      c.fail("linalg.cond with p='" + *c.str("p") + "' is not converted");
    ord = c.f("p", 2);
  }
  if (ord != 2 && ord != -2)
    c.fail("linalg.cond with p=" + std::to_string(ord) + " is not converted");
  Jacobi j{c};
  std::string s = svd_values(c, j, a, false).values;
  std::string hi = c.reduce("ReduceMax", s, {-1}, false),
              lo = c.reduce("ReduceMin", s, {-1}, false);
  c.set_output(0, c.cast(ord > 0 ? j.op("Div", {hi, lo}) : j.op("Div", {lo, hi}), c.out_dtype()));
}

// _linalg_svd / linalg_svd (A, full_matrices, compute_uv) -> (U, S, Vh): S
// from the Gram matrix, the singular vectors of the smaller side from its
// eigenvectors and the other side as A V / s (or A^T U / s). Signs are ours
// (LAPACK's may differ per pair of columns); products like U S Vh and pinv
// match. full_matrices of a non-square matrix (completing U or V) is not
// converted.
// svd(self, some, compute_uv) -> (U, S, V): the same, V not transposed.
void linalg_svd(Ctx& c) {
  bool legacy = c.node.target == "torch.ops.aten.svd.default";
  std::string a = c.tensor(legacy ? "self" : "A");
  bool uv = c.flag("compute_uv", true);
  // Defaults differ: linalg_svd full, _linalg_svd reduced, svd some=True.
  bool full = legacy
                  ? !c.flag("some", true)
                  : c.flag("full_matrices", c.node.target == "torch.ops.aten.linalg_svd.default");
  if (is_empty(c, a)) {
    for (size_t i = 0; i < c.n_outputs(); ++i) c.set_output(i, empty_like_out(c, i));
    return;
  }
  Jacobi j{c};
  auto [m, n] = c.static_matrix_dims(a, "svd");
  if (uv && full && m != n)
    c.fail(
        "svd with full_matrices=True of a non-square matrix (completing U or V) is not "
        "converted; use full_matrices=False");
  Spectrum s = svd_values(c, j, a, uv);
  c.set_output(1, c.cast(s.values, c.out_dtype(1)));
  if (!uv) {
    c.set_output(0, empty_like_out(c, 0));
    c.set_output(2, empty_like_out(c, 2));
    return;
  }
  std::string x = c.cast(a, DType::Double);
  std::string pos = j.op("Greater", {s.values, j.k(0)});
  std::string inv = c.unsqueeze(
      j.op("Where", {pos, j.op("Reciprocal", {j.op("Where", {pos, s.values, j.k(1)})}), j.k(0)}),
      {-2});
  const std::string& e = *s.vectors;
  std::string u = s.gram_of_rows ? e : j.op("Mul", {j.mm(x, e), inv});
  std::string v = s.gram_of_rows ? j.op("Mul", {j.mm(j.mT(x), e), inv}) : e;
  c.set_output(0, c.cast(u, c.out_dtype(0)));
  c.set_output(2, c.cast(legacy ? v : j.mT(v), c.out_dtype(2)));
}

// linalg_matrix_sqrth(A): V diag(sqrt(max(w, 0))) V^T from eigh of the
// lower triangle (torch clamps negative eigenvalues to 0).
void linalg_matrix_sqrth(Ctx& c) {
  std::string a = c.tensor("self");
  auto [m, n] = c.static_matrix_dims(a, "matrix_sqrth");
  if (m != n) c.fail("matrix_sqrth of a non-square matrix");
  if (is_empty(c, a)) return c.set_output(0, empty_like_out(c));
  Jacobi j{c};
  auto [lam, v] = j.solve(symmetric(c, j, a, n, true), n, true);
  std::string root = c.unsqueeze(j.op("Sqrt", {j.op("Max", {lam, j.k(0)})}), {-2});
  c.set_output(0, c.cast(j.mm(j.op("Mul", {*v, root}), j.mT(*v)), c.out_dtype()));
}

// linalg_polar(A) -> (U, H), m >= n: from the eigenvectors V and values s^2
// of A^T A, U = A V diag(1/s) V^T and H = V diag(s) V^T (sign-free products;
// a zero singular value contributes nothing to U, where torch's SVD picks
// arbitrary columns).
void linalg_polar(Ctx& c) {
  std::string a = c.tensor("A");
  auto [m, n] = c.static_matrix_dims(a, "polar");
  if (m < n)
    c.fail("linalg.polar needs m >= n, got " + std::to_string(m) + "x" + std::to_string(n));
  if (is_empty(c, a)) {
    for (size_t i = 0; i < c.n_outputs(); ++i) c.set_output(i, empty_like_out(c, i));
    return;
  }
  Jacobi j{c};
  std::string x = c.cast(a, DType::Double);
  auto [lam, v] = j.solve(j.mm(j.mT(x), x), n, true);
  std::string s = j.op("Sqrt", {j.op("Max", {lam, j.k(0)})});
  std::string pos = j.op("Greater", {s, j.k(0)});
  std::string inv =
      j.op("Where", {pos, j.op("Reciprocal", {j.op("Where", {pos, s, j.k(1)})}), j.k(0)});
  std::string vt = j.mT(*v);
  std::string u = j.mm(x, j.mm(j.op("Mul", {*v, c.unsqueeze(inv, {-2})}), vt));
  std::string h = j.mm(j.op("Mul", {*v, c.unsqueeze(s, {-2})}), vt);
  c.set_output(0, c.cast(u, c.out_dtype(0)));
  c.set_output(1, c.cast(h, c.out_dtype(1)));
}

}  // namespace

std::string singular_values(Ctx& c, const std::string& x) {
  Jacobi j{c};
  return c.cast(svd_values(c, j, x, false).values, c.dtype(x));
}

void register_eigen(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "linalg_eigvalsh.default", linalg_eigvalsh);
  r.add(p + "linalg_eigh.default", linalg_eigh);
  r.add(p + "_linalg_eigh.default", linalg_eigh);
  r.add(p + "linalg_svdvals.default", linalg_svdvals);
  r.add(p + "_linalg_svd.default", linalg_svd);
  r.add(p + "linalg_svd.default", linalg_svd);
  r.add(p + "svd.default", linalg_svd);
  for (const char* o :
       {"linalg_matrix_rank.atol_rtol_tensor", "linalg_matrix_rank.atol_rtol_float"})
    r.add(p + o, linalg_matrix_rank);
  for (const char* o : {"linalg_pinv.atol_rtol_tensor", "linalg_pinv.atol_rtol_float"})
    r.add(p + o, linalg_pinv);
  r.add(p + "pinverse.default", pinverse);
  r.add(p + "linalg_cond.default", linalg_cond);
  r.add(p + "linalg_matrix_sqrth.default", linalg_matrix_sqrth);
  r.add(p + "linalg_polar.default", linalg_polar);
}

}  // namespace pt2onnx
