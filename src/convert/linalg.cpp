// Linear algebra: cross products, determinants (ONNX Det), matrix powers and
// the factorizations ONNX has no operator for, unrolled over a static matrix
// size: LU with partial pivoting (LAPACK getrf's pivot choice: the first
// row of largest magnitude), triangular solves (trtrs), solve / inverse as
// getrf + getrs (torch computes inv as solve(A, I)), Cholesky (potrf) and
// the Cholesky solves (potrs / potri). Each step is vectorized over the batch
// and the rows, so a graph grows linearly in n. Row swaps select with Where
// (exact), never multiply by one-hot matrices.
#include <algorithm>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

// Largest matrix size the factorizations are unrolled for.
constexpr int64_t kMaxUnrolled = 32;

std::string slice(Ctx& c, const std::string& v, int64_t axis, int64_t s, int64_t e) {
  return c.b.op("Slice", {v, c.b.const_i64({s}), c.b.const_i64({e}), c.b.const_i64({axis})});
}

std::string cat(Ctx& c, const std::vector<std::string>& v, int64_t axis) {
  if (v.size() == 1) return v[0];
  return c.b.op("Concat", v, {Attr::Int("axis", axis)});
}

// Swap the last two axes.
std::string mT(Ctx& c, const std::string& v) {
  size_t r = c.rank(v);
  std::vector<int64_t> perm;
  for (size_t k = 0; k < r; ++k) perm.push_back(static_cast<int64_t>(k));
  std::swap(perm[r - 1], perm[r - 2]);
  return c.transpose(v, perm);
}

// A bool constant of shape `dims` from a predicate on the flat index.
template <typename F>
std::string mask(Ctx& c, std::vector<int64_t> dims, F pred) {
  int64_t n = 1;
  for (auto d : dims) n *= d;
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = pred(k) ? 1 : 0;
  return c.b.constant(TensorData::from_vector(DType::Bool, std::move(dims), v));
}

// Rows (axis -2, shape [n, 1]) for which pred(row) holds.
template <typename F>
std::string row_mask(Ctx& c, int64_t n, F pred) {
  return mask(c, {n, 1}, pred);
}

std::string zero(Ctx& c, DType t) { return c.b.scalar(t, 0); }

// The identity of size n in type t.
std::string eye(Ctx& c, int64_t n, DType t) {
  std::string m = mask(c, {n, n}, [n](int64_t k) { return k / n == k % n; });
  return c.b.op("Where", {m, c.b.scalar(t, 1), zero(c, t)});
}

// The static size n of the square matrices in `a` (last two dims).
int64_t matrix_n(Ctx& c, const std::string& a) {
  const auto& s = c.type(a).shape;
  if (!s || s->size() < 2) c.fail("linear algebra: expected a (batch of) matrix");
  const Dim& r = (*s)[s->size() - 2];
  const Dim& k = s->back();
  if (!r.is_static() || !k.is_static())
    c.fail("linear algebra: the matrix size must be static (the factorization is unrolled)");
  if (r.value != k.value) c.fail("linear algebra: expected square matrices");
  if (k.value > kMaxUnrolled)
    c.fail("linear algebra: matrices larger than " + std::to_string(kMaxUnrolled) +
           " are not unrolled into ONNX ops");
  return k.value;
}

// Row `p` (per batch, [..., 1, 1] int64 index) of m as [..., 1, W]: exact.
std::string pick_row(Ctx& c, const std::string& m, const std::string& is_p) {
  return c.reduce("ReduceSum", c.b.op("Where", {is_p, m, zero(c, c.dtype(m))}), {-2}, true);
}

struct LU {
  std::string lu;                 // U on and above the diagonal, L's multipliers below
  std::vector<std::string> swap;  // per step k: [..., n, 1] bool mask of the pivot row
  std::vector<std::string> piv;   // per step k: [..., 1] int64, 0-based pivot row
};

// LU with partial pivoting (getrf, unblocked): P A = L U.
std::string row_index(Ctx& c, int64_t m) {
  std::vector<int64_t> v(static_cast<size_t>(m));
  for (int64_t k = 0; k < m; ++k) v[static_cast<size_t>(k)] = k;
  return c.b.constant(TensorData::from_vector(DType::Int64, {m, 1}, v));
}

// getrf on [..., m, n] (rows m, cols n); min(m, n) steps.
LU lu_factor(Ctx& c, std::string m, int64_t rows_n, int64_t cols_n) {
  DType t = c.dtype(m);
  LU r;
  std::string rows = row_index(c, rows_n);
  for (int64_t k = 0; k < std::min(rows_n, cols_n); ++k) {
    if (k == rows_n - 1) {
      r.piv.push_back(c.b.const_i64({k}));
      r.swap.emplace_back();
      break;
    }
    std::string col = c.squeeze(slice(c, m, -1, k, k + 1), {-1});  // [..., m]
    std::string a = c.b.op("Abs", {col});
    if (k > 0) {
      std::string above = mask(c, {rows_n}, [k](int64_t i) { return i < k; });
      a = c.b.op("Where", {above, c.b.scalar(t, -1), a});
    }
    // ArgMax returns the first index of the maximum, as LAPACK's i?amax.
    std::string p = c.b.op("ArgMax", {a}, {Attr::Int("axis", -1), Attr::Int("keepdims", 1)});
    r.piv.push_back(p);
    std::string is_p = c.b.op("Equal", {rows, c.unsqueeze(p, {-1})});  // [..., m, 1]
    r.swap.push_back(is_p);
    std::string is_k = row_mask(c, rows_n, [k](int64_t i) { return i == k; });
    std::string row_k = slice(c, m, -2, k, k + 1);
    std::string row_p = pick_row(c, m, is_p);
    m = c.b.op("Where", {is_k, row_p, c.b.op("Where", {is_p, row_k, m})});
    std::string pivot = slice(c, row_p, -1, k, k + 1);  // [..., 1, 1]
    std::string below = row_mask(c, rows_n, [k](int64_t i) { return i > k; });
    std::string f =
        c.b.op("Where", {below, c.b.op("Div", {slice(c, m, -1, k, k + 1), pivot}), zero(c, t)});
    // Update the trailing columns only (the columns before k hold L's
    // multipliers); column k below the diagonal takes this step's multipliers.
    std::string upd = c.b.op("Sub", {m, c.b.op("Mul", {f, row_p})});
    std::string col_k = mask(c, {1, cols_n}, [k](int64_t j) { return j == k; });
    std::string after = mask(c, {1, cols_n}, [k](int64_t j) { return j > k; });
    m = c.b.op("Where", {after, upd, c.b.op("Where", {col_k, c.b.op("Where", {below, f, m}), m})});
  }
  r.lu = m;
  return r;
}
LU lu_factor(Ctx& c, const std::string& m, int64_t n) { return lu_factor(c, m, n, n); }

// Solves T X = B for a triangular T ([..., n, n], only its triangle read)
// by substitution, row by row; unit: the diagonal is taken as ones.
std::string tri_solve(Ctx& c, const std::string& tm, const std::string& bm, int64_t n, bool upper,
                      bool unit) {
  if (n == 0) return bm;
  std::string block;  // rows solved so far, in row order
  for (int64_t s = 0; s < n; ++s) {
    int64_t i = upper ? n - 1 - s : s;
    std::string row = slice(c, tm, -2, i, i + 1);  // [..., 1, n]
    std::string r = slice(c, bm, -2, i, i + 1);    // [..., 1, m]
    if (s > 0) {
      std::string coef = upper ? slice(c, row, -1, i + 1, n) : slice(c, row, -1, 0, i);
      r = c.b.op("Sub", {r, c.b.op("MatMul", {coef, block})});
    }
    if (!unit) r = c.b.op("Div", {r, slice(c, row, -1, i, i + 1)});
    block = s == 0 ? r : (upper ? cat(c, {r, block}, -2) : cat(c, {block, r}, -2));
  }
  return block;
}

// Apply the row swaps of an LU to B (P B), exactly; `inverse`: in reverse
// order (P^T B). Rows of B: m.
std::string permute_rows(Ctx& c, const LU& f, std::string bm, int64_t m, bool inverse = false) {
  int64_t steps = static_cast<int64_t>(f.swap.size());
  for (int64_t s = 0; s < steps; ++s) {
    int64_t k = inverse ? steps - 1 - s : s;
    const std::string& is_p = f.swap[static_cast<size_t>(k)];
    if (is_p.empty()) continue;  // the last row: no swap
    std::string is_k = row_mask(c, m, [k](int64_t i) { return i == k; });
    std::string row_k = slice(c, bm, -2, k, k + 1);
    std::string row_p = pick_row(c, bm, is_p);
    bm = c.b.op("Where", {is_k, row_p, c.b.op("Where", {is_p, row_k, bm})});
  }
  return bm;
}

// Row swap masks from LAPACK pivots ([..., k] int, 1-based) for m rows.
LU swaps_from_pivots(Ctx& c, const std::string& lu, const std::string& piv, int64_t m) {
  LU f;
  f.lu = lu;
  const auto& s = c.type(piv).shape;
  if (!s || s->empty() || !s->back().is_static()) c.fail("lu: the number of pivots must be static");
  int64_t k = s->back().value;
  std::string p0 = c.b.op("Sub", {c.cast(piv, DType::Int64), c.b.const_i64({1})});
  std::string rows = row_index(c, m);
  for (int64_t j = 0; j < k; ++j) {
    std::string p = c.unsqueeze(slice(c, p0, -1, j, j + 1), {-1});  // [..., 1, 1]
    f.swap.push_back(c.b.op("Equal", {rows, p}));
    f.piv.push_back(p);
  }
  return f;
}

// getrs: X = U^-1 L^-1 P B.
std::string lu_solve(Ctx& c, const LU& f, const std::string& bm, int64_t n) {
  std::string y = tri_solve(c, f.lu, permute_rows(c, f, bm, n), n, false, true);
  return tri_solve(c, f.lu, y, n, true, false);
}

// 1 + the index of the first set flag along the last axis, 0 if none
// (LAPACK's info), from int32 0/1 flags [..., n] -> [...] int32. ArgMax and
// GatherElements rather than ReduceMax: onnxruntime's ReduceMax returns an
// empty input unreduced.
std::string first_flag_info(Ctx& c, const std::string& z) {
  // An empty batch: onnxruntime's ArgMax returns a wrongly shaped result.
  const auto& zs = c.type(z).shape;
  bool empty = false;
  for (size_t k = 0; zs && k + 1 < zs->size(); ++k)
    empty |= (*zs)[k].is_static() && (*zs)[k].value == 0;
  if (empty) {
    std::string s = c.shape_part(z, 0, -1);
    return c.b.op("ConstantOfShape", {s},
                  {Attr::Tensor("value", *TensorData::scalar(DType::Int32, 0, {1}))});
  }
  std::string first = c.b.op("ArgMax", {z}, {Attr::Int("axis", -1), Attr::Int("keepdims", 1)});
  std::string val = c.b.op("GatherElements", {z, first}, {Attr::Int("axis", -1)});
  first = c.b.op("Add", {c.cast(first, DType::Int32), c.b.scalar(DType::Int32, 1)});
  return c.squeeze(c.b.op("Mul", {first, val}), {-1});
}

// info of getrf: 1 + the first zero pivot, 0 if none ([...] int32).
std::string lu_info(Ctx& c, const LU& f, int64_t n) {
  DType t = c.dtype(f.lu);
  std::string diag_m = mask(c, {n, n}, [n](int64_t k) { return k / n == k % n; });
  std::string d = c.reduce("ReduceSum", c.b.op("Where", {diag_m, f.lu, zero(c, t)}), {-1}, false);
  std::string z = c.cast(c.b.op("Equal", {d, zero(c, t)}), DType::Int32);
  return first_flag_info(c, z);
}

// int32 zeros of the batch shape of `a` (an "info" output of a call that cannot fail here).
std::string batch_zeros_i32(Ctx& c, const std::string& a) {
  std::string s = c.shape_part(a, 0, -2);
  return c.b.op("ConstantOfShape", {s},
                {Attr::Tensor("value", *TensorData::scalar(DType::Int32, 0, {1}))});
}

// When every output is statically empty (an empty batch), emit them as
// constants: onnxruntime's reductions and ArgMax mis-shape empty inputs.
bool empty_outputs(Ctx& c) {
  for (size_t i = 0; i < c.n_outputs(); ++i) {
    auto d = c.out_type(i).static_dims();
    if (!d || std::find(d->begin(), d->end(), 0) == d->end()) return false;
  }
  for (size_t i = 0; i < c.n_outputs(); ++i) {
    auto d = *c.out_type(i).static_dims();
    auto v = TensorData::scalar(c.out_dtype(i), 0, {1});
    if (!v) c.fail("internal: no zero of the output type");
    c.set_output(i, c.b.op("ConstantOfShape", {c.b.const_i64(d)}, {Attr::Tensor("value", *v)}));
  }
  return true;
}

// ---- determinants

std::string det_of(Ctx& c, const std::string& a) {
  DType t = c.dtype(a);
  if (t != DType::Float && t != DType::Float16)
    c.fail("det: onnxruntime's Det takes float32 and float16 only");
  ValueType vt;
  vt.dtype = t;
  if (const auto& s = c.type(a).shape) vt.shape = Shape(s->begin(), s->end() - 2);
  return c.b.op("Det", {a}, {}, vt);
}

void linalg_det(Ctx& c) {
  std::string a = c.arg("A") ? c.tensor("A") : c.tensor("self");
  c.set_output(0, det_of(c, c.cast(a, c.out_dtype())));
}

void logdet(Ctx& c) {
  // log of a negative determinant is NaN, of zero -inf, as in torch.
  c.set_output(0, c.b.op("Log", {det_of(c, c.cast(c.tensor("self"), c.out_dtype()))}));
}

void slogdet(Ctx& c) {
  std::string a = c.arg("A") ? c.tensor("A") : c.tensor("self");
  std::string d = det_of(c, c.cast(a, c.out_dtype()));
  c.set_output(0, c.b.op("Sign", {d}));
  c.set_output(1, c.b.op("Log", {c.b.op("Abs", {d})}));
}

// _linalg_det / _linalg_slogdet (the decomposed forms) also return the LU
// factorization and its 1-based int32 pivots.
void set_lu_outputs(Ctx& c, const std::string& a, size_t first) {
  int64_t n = matrix_n(c, a);
  LU f = lu_factor(c, c.cast(a, c.out_dtype(first)), n);
  c.set_output(first, f.lu);
  // int64 zeros [..., 1] to give every pivot (constants included) the batch shape
  std::string bshape = c.shape_part(a, 0, -2);
  std::string base = c.b.op("ConstantOfShape", {cat(c, {bshape, c.b.const_i64({1})}, 0)},
                            {Attr::Tensor("value", *TensorData::scalar(DType::Int64, 0, {1}))});
  std::vector<std::string> ps;
  for (auto& p : f.piv) ps.push_back(c.b.op("Add", {p, base}));
  if (n == 0) {
    std::string s0 = c.shape_part(a, 0, -1);
    c.set_output(first + 1,
                 c.b.op("ConstantOfShape", {s0},
                        {Attr::Tensor("value", *TensorData::scalar(DType::Int32, 0, {1}))}));
    return;
  }
  std::string piv = c.b.op("Add", {cat(c, ps, -1), c.b.const_i64({1})});
  c.set_output(first + 1, c.cast(piv, DType::Int32));
}

void linalg_det_ex(Ctx& c) {
  if (empty_outputs(c)) return;
  std::string a = c.tensor("A");
  c.set_output(0, det_of(c, c.cast(a, c.out_dtype())));
  set_lu_outputs(c, a, 1);
}

void linalg_slogdet_ex(Ctx& c) {
  if (empty_outputs(c)) return;
  std::string a = c.tensor("A");
  std::string d = det_of(c, c.cast(a, c.out_dtype()));
  c.set_output(0, c.b.op("Sign", {d}));
  c.set_output(1, c.b.op("Log", {c.b.op("Abs", {d})}));
  set_lu_outputs(c, a, 2);
}

// ---- solve / inverse

// Solves A X = B (B: [..., n, k]) as torch: getrf + getrs.
std::string solve_mat(Ctx& c, const std::string& a, const std::string& bm, int64_t n,
                      LU* out = nullptr) {
  if (n == 0) return bm;
  LU f = lu_factor(c, a, n);
  std::string x = lu_solve(c, f, bm, n);
  if (out) *out = f;
  return x;
}

// B of rank(A) - 1: vectors when B's shape is A's without the last dim
// (torch's rule). Where a dim is unknown here (a computed shape), torch's
// result says which: of B's rank for vectors, of A's for matrices.
bool b_is_vectors(Ctx& c, const std::string& a, const std::string& bm) {
  const Shape& sa = c.shape(a);
  const Shape& sb = c.shape(bm);
  bool unknown = false;
  for (size_t k = 0; k < sb.size(); ++k) {
    if (sa[k].same_as(sb[k])) continue;
    if (!sa[k].is_unknown() && !sb[k].is_unknown()) return false;
    unknown = true;
  }
  if (!unknown) return true;
  const ValueType out = c.out_type();
  if (!out.shape)
    c.fail(
        "linalg.solve of operands of unknown dims needs the result's rank to tell "
        "vectors from matrices");
  return out.shape->size() == sb.size();
}

// linalg_solve(A, B, left): B is a vector when it is 1-D or has A's batch
// shape without the last dim (torch's rule).
std::string solve_general(Ctx& c, std::string a, std::string bm, bool left, LU* out = nullptr) {
  DType t = c.out_dtype();
  a = c.cast(a, t);
  bm = c.cast(bm, t);
  int64_t n = matrix_n(c, a);
  size_t ra = c.rank(a), rb = c.rank(bm);
  bool vec = rb == 1 || (rb + 1 == ra && b_is_vectors(c, a, bm));
  if (vec) bm = c.unsqueeze(bm, {left ? -1 : -2});
  if (!left) {
    a = mT(c, a);
    bm = mT(c, bm);
  }
  std::string x = solve_mat(c, a, bm, n, out);
  if (!left) x = mT(c, x);
  if (vec) x = c.squeeze(x, {left ? -1 : -2});
  return x;
}

void linalg_solve(Ctx& c) {
  if (empty_outputs(c)) return;
  c.set_output(0, solve_general(c, c.tensor("A"), c.tensor("B"), c.flag("left", true)));
}

void linalg_solve_ex(Ctx& c) {
  if (empty_outputs(c)) return;
  LU f;
  std::string a = c.tensor("A");
  c.set_output(0, solve_general(c, a, c.tensor("B"), c.flag("left", true), &f));
  int64_t n = matrix_n(c, a);
  if (c.n_outputs() == 2) {  // linalg_solve_ex: (result, info)
    c.set_output(1, n == 0 ? batch_zeros_i32(c, a) : lu_info(c, f, n));
    return;
  }
  // _linalg_solve_ex: (result, LU, pivots, info), the LU of A (A^T for left=False)
  std::string at = c.cast(a, c.out_dtype());
  if (!c.flag("left", true)) at = mT(c, at);
  set_lu_outputs(c, at, 1);
  c.set_output(3, n == 0 ? batch_zeros_i32(c, a) : lu_info(c, f, n));
}

std::string inverse_of(Ctx& c, std::string a) {
  a = c.cast(a, c.out_dtype());
  int64_t n = matrix_n(c, a);
  if (n == 0) return a;
  return solve_mat(c, a, eye(c, n, c.dtype(a)), n);
}

void linalg_inv(Ctx& c) {
  if (empty_outputs(c)) return;
  c.set_output(0, inverse_of(c, c.arg("A") ? c.tensor("A") : c.tensor("self")));
}

void linalg_inv_ex(Ctx& c) {
  if (empty_outputs(c)) return;
  std::string a = c.cast(c.tensor("A"), c.out_dtype());
  int64_t n = matrix_n(c, a);
  if (n == 0) {
    c.set_output(0, a);
    c.set_output(1, batch_zeros_i32(c, a));
    return;
  }
  LU f;
  c.set_output(0, solve_mat(c, a, eye(c, n, c.dtype(a)), n, &f));
  c.set_output(1, lu_info(c, f, n));
}

// matrix_power(A, n): repeated squaring; a negative n inverts first.
void matrix_power(Ctx& c) {
  if (empty_outputs(c)) return;
  DType t = c.out_dtype();
  std::string a = c.cast(c.tensor("self"), t);
  int64_t e = c.i("n");
  const auto& s = c.type(a).shape;
  if (!s || s->size() < 2 || !s->back().is_static())
    c.fail("matrix_power: the matrix size must be static");
  int64_t n = s->back().value;
  if (e == 0) {
    // The identity, broadcast to A's shape (Where keeps A's batch, exact).
    std::string i = eye(c, n, t);
    return c.set_output(0, c.b.op("Where", {c.b.op("Equal", {a, a}), i, i}));
  }
  if (e < 0) {
    if (!is_floating(t)) c.fail("matrix_power: negative powers need a floating type");
    a = inverse_of(c, a);
    e = -e;
  }
  std::string result, sq = a;
  while (e > 0) {
    if (e & 1) result = result.empty() ? sq : c.b.op("MatMul", {result, sq});
    e >>= 1;
    if (e > 0) sq = c.b.op("MatMul", {sq, sq});
  }
  c.set_output(0, result);
}

// ---- triangular solves

// linalg_solve_triangular(A, B, upper, left, unitriangular)
void linalg_solve_triangular(Ctx& c) {
  if (empty_outputs(c)) return;
  DType t = c.out_dtype();
  std::string a = c.cast(c.tensor("self"), t), bm = c.cast(c.tensor("B"), t);
  bool upper = c.flag("upper", false), left = c.flag("left", true);
  bool unit = c.flag("unitriangular", false);
  int64_t n = matrix_n(c, a);
  if (left) return c.set_output(0, tri_solve(c, a, bm, n, upper, unit));
  // X A = B  <=>  A^T X^T = B^T
  c.set_output(0, mT(c, tri_solve(c, mT(c, a), mT(c, bm), n, !upper, unit)));
}

// triangular_solve(B, A, upper, transpose, unitriangular) -> (X, A)
void triangular_solve(Ctx& c) {
  if (empty_outputs(c)) return;
  DType t = c.out_dtype();
  std::string bm = c.cast(c.tensor("self"), t), a = c.cast(c.tensor("A"), t);
  bool upper = c.flag("upper", true), trans = c.flag("transpose", false);
  bool unit = c.flag("unitriangular", false);
  int64_t n = matrix_n(c, a);
  std::string x =
      trans ? tri_solve(c, mT(c, a), bm, n, !upper, unit) : tri_solve(c, a, bm, n, upper, unit);
  c.set_output(0, x);
  c.set_output(1, c.b.op("Identity", {a}));
}

// ---- Cholesky

struct Chol {
  std::string l;
  std::string info;  // [...] int32: 1 + the first non-positive pivot, 0 if none
};

// potrf, column by column (lower): reads the lower triangle of a.
Chol cholesky_lower(Ctx& c, const std::string& a, int64_t n) {
  DType t = c.dtype(a);
  std::string l;
  std::vector<std::string> pivots;
  for (int64_t j = 0; j < n; ++j) {
    std::string col = slice(c, a, -1, j, j + 1);  // [..., n, 1]
    if (j > 0) {
      std::string lrow = slice(c, l, -2, j, j + 1);  // [..., 1, j]
      col = c.b.op("Sub", {col, c.b.op("MatMul", {l, mT(c, lrow)})});
    }
    std::string dd = slice(c, col, -2, j, j + 1);  // [..., 1, 1]
    pivots.push_back(dd);
    std::string d = c.b.op("Sqrt", {dd});
    std::string below = row_mask(c, n, [j](int64_t i) { return i > j; });
    std::string is_j = row_mask(c, n, [j](int64_t i) { return i == j; });
    std::string nc =
        c.b.op("Where", {below, c.b.op("Div", {col, d}), c.b.op("Where", {is_j, d, zero(c, t)})});
    l = j == 0 ? nc : cat(c, {l, nc}, -1);
  }
  Chol r;
  r.l = l;
  // info: first pivot that is not > 0 (NaN included)
  std::string pv = c.squeeze(cat(c, pivots, -1), {-2});  // [..., n]
  std::string bad = c.cast(c.b.op("Not", {c.b.op("Greater", {pv, zero(c, t)})}), DType::Int32);
  r.info = first_flag_info(c, bad);
  return r;
}

// upper: U with U^H U = A, from A's upper triangle (the lower one of A^T).
Chol cholesky_of(Ctx& c, std::string a, bool upper) {
  a = c.cast(a, c.out_dtype());
  int64_t n = matrix_n(c, a);
  if (n == 0) return Chol{a, batch_zeros_i32(c, a)};
  Chol r = cholesky_lower(c, upper ? mT(c, a) : a, n);
  if (upper) r.l = mT(c, r.l);
  return r;
}

void cholesky(Ctx& c) {
  if (empty_outputs(c)) return;
  c.set_output(0, cholesky_of(c, c.tensor("self"), c.flag("upper", false)).l);
}

void cholesky_ex(Ctx& c) {
  if (empty_outputs(c)) return;
  Chol r = cholesky_of(c, c.tensor("self"), c.flag("upper", false));
  c.set_output(0, r.l);
  c.set_output(1, r.info);
}

// potrs: A = L L^T (or U^T U); X = L^-T (L^-1 B).
std::string chol_solve(Ctx& c, const std::string& f, const std::string& bm, bool upper) {
  int64_t n = matrix_n(c, f);
  std::string lo = upper ? mT(c, f) : f;  // lower factor
  std::string up = upper ? f : mT(c, f);
  return tri_solve(c, up, tri_solve(c, lo, bm, n, false, false), n, true, false);
}

void cholesky_solve(Ctx& c) {
  if (empty_outputs(c)) return;
  DType t = c.out_dtype();
  c.set_output(0, chol_solve(c, c.cast(c.tensor("input2"), t), c.cast(c.tensor("self"), t),
                             c.flag("upper", false)));
}

void cholesky_inverse(Ctx& c) {
  if (empty_outputs(c)) return;
  DType t = c.out_dtype();
  std::string f = c.cast(c.tensor("self"), t);
  int64_t n = matrix_n(c, f);
  if (n == 0) return c.set_output(0, f);
  std::string x = chol_solve(c, f, eye(c, n, t), c.flag("upper", false));
  // The inverse of a symmetric matrix: potri returns it exactly symmetric.
  std::string lower = mask(c, {n, n}, [n](int64_t k) { return k / n >= k % n; });
  c.set_output(0, c.b.op("Where", {lower, x, mT(c, x)}));
}

// ---- LU family

std::pair<int64_t, int64_t> matrix_mn(Ctx& c, const std::string& a) {
  const auto& s = c.type(a).shape;
  if (!s || s->size() < 2) c.fail("lu: expected a (batch of) matrix");
  const Dim& r = (*s)[s->size() - 2];
  const Dim& k = s->back();
  if (!r.is_static() || !k.is_static())
    c.fail("lu: the matrix size must be static (the factorization is unrolled)");
  if (std::max(r.value, k.value) > kMaxUnrolled)
    c.fail("lu: matrices larger than " + std::to_string(kMaxUnrolled) + " are not unrolled");
  return {r.value, k.value};
}

// linalg_lu_factor(_ex) / _lu_with_info: (LU, pivots[, info])
void lu_factor_ex(Ctx& c) {
  if (empty_outputs(c)) return;
  if (!c.flag("pivot", true)) c.fail("lu: pivot=False (LU without pivoting) is CUDA-only in torch");
  std::string a = c.cast(c.arg("A") ? c.tensor("A") : c.tensor("self"), c.out_dtype());
  auto [m, n] = matrix_mn(c, a);
  LU f = lu_factor(c, a, m, n);
  std::string bshape = c.shape_part(a, 0, -2);
  std::string base = c.b.op("ConstantOfShape", {cat(c, {bshape, c.b.const_i64({1})}, 0)},
                            {Attr::Tensor("value", *TensorData::scalar(DType::Int64, 0, {1}))});
  std::vector<std::string> ps;
  for (auto& p : f.piv) ps.push_back(c.b.op("Add", {p, base}));
  std::string piv = c.b.op("Add", {cat(c, ps, -1), c.b.const_i64({1})});
  std::string info;
  if (c.n_outputs() > 2) {
    int64_t k = std::min(m, n);
    // An init-capture: clang 14 (the fuzz build) cannot capture a structured binding.
    std::string diag_m = mask(c, {m, n}, [cols = n](int64_t q) { return q / cols == q % cols; });
    std::string d =
        c.reduce("ReduceSum", c.b.op("Where", {diag_m, f.lu, zero(c, c.dtype(a))}), {-1}, false);
    d = slice(c, d, -1, 0, k);
    info = first_flag_info(c, c.cast(c.b.op("Equal", {d, zero(c, c.dtype(a))}), DType::Int32));
  }
  // outputs last: set_output renames the value it is given
  c.set_output(0, f.lu);
  c.set_output(1, c.cast(piv, DType::Int32));
  if (!info.empty()) c.set_output(2, info);
}

// P, L, U from an LU and its row swaps: A = P L U.
void set_plu(Ctx& c, const LU& f, int64_t m, int64_t n, DType t, size_t rank) {
  int64_t k = std::min(m, n);
  std::string pt = permute_rows(c, f, eye(c, m, t), m);  // P^T = the swaps applied to I
  std::string lmask = mask(c, {m, k}, [k](int64_t q) { return q / k > q % k; });
  std::string emask = mask(c, {m, k}, [k](int64_t q) { return q / k == q % k; });
  std::string lpart = slice(c, f.lu, -1, 0, k);
  std::string l =
      c.b.op("Where", {lmask, lpart, c.b.op("Where", {emask, c.b.scalar(t, 1), zero(c, t)})});
  std::string umask = mask(c, {k, n}, [n](int64_t q) { return q / n <= q % n; });
  std::string u = c.b.op("Where", {umask, slice(c, f.lu, -2, 0, k), zero(c, t)});
  std::vector<int64_t> perm;
  for (size_t q = 0; q < rank; ++q) perm.push_back(static_cast<int64_t>(q));
  std::swap(perm[rank - 1], perm[rank - 2]);
  c.set_output(0, c.transpose(pt, perm));
  c.set_output(1, l);
  c.set_output(2, u);
}

void linalg_lu(Ctx& c) {
  if (empty_outputs(c)) return;
  if (!c.flag("pivot", true)) c.fail("lu: pivot=False (LU without pivoting) is CUDA-only in torch");
  std::string a = c.cast(c.tensor("A"), c.out_dtype());
  auto [m, n] = matrix_mn(c, a);
  set_plu(c, lu_factor(c, a, m, n), m, n, c.dtype(a), c.rank(a));
}

void lu_unpack(Ctx& c) {
  if (empty_outputs(c)) return;
  if (!c.flag("unpack_data", true) || !c.flag("unpack_pivots", true))
    c.fail("lu_unpack: unpack_data / unpack_pivots = False return empty tensors");
  std::string lu = c.cast(c.tensor("LU_data"), c.out_dtype(1));
  auto [m, n] = matrix_mn(c, lu);
  set_plu(c, swaps_from_pivots(c, lu, c.tensor("LU_pivots"), m), m, n, c.dtype(lu), c.rank(lu));
}

// Solves with a given LU: left/adjoint as torch.linalg.lu_solve.
std::string lu_solve_given(Ctx& c, const std::string& lu, const std::string& piv, std::string bm,
                           bool left, bool adjoint) {
  int64_t n = matrix_n(c, lu);
  LU f = swaps_from_pivots(c, lu, piv, n);
  // X A = B <=> A^T X^T = B^T (real types: adjoint = transpose)
  if (!left) {
    bm = mT(c, bm);
    adjoint = !adjoint;
  }
  std::string x;
  if (!adjoint) {
    x = lu_solve(c, f, bm, n);
  } else {
    // A^T = U^T L^T P_r: X = P_r^T L^-T U^-T B
    std::string y = tri_solve(c, mT(c, lu), bm, n, false, false);
    y = tri_solve(c, mT(c, lu), y, n, true, true);
    x = permute_rows(c, f, y, n, true);
  }
  return left ? x : mT(c, x);
}

void linalg_lu_solve(Ctx& c) {
  if (empty_outputs(c)) return;
  DType t = c.out_dtype();
  c.set_output(
      0, lu_solve_given(c, c.cast(c.tensor("LU"), t), c.tensor("pivots"), c.cast(c.tensor("B"), t),
                        c.flag("left", true), c.flag("adjoint", false)));
}

void lu_solve_old(Ctx& c) {
  if (empty_outputs(c)) return;
  DType t = c.out_dtype();
  c.set_output(0, lu_solve_given(c, c.cast(c.tensor("LU_data"), t), c.tensor("LU_pivots"),
                                 c.cast(c.tensor("self"), t), true, false));
}

// ---- tensorinv / tensorsolve (static shapes): reshaped inv / solve

std::vector<int64_t> static_shape(Ctx& c, const std::string& v, const char* what) {
  auto d = c.type(v).static_dims();
  if (!d) c.fail(std::string(what) + ": needs a static shape");
  return *d;
}

int64_t prod(const std::vector<int64_t>& v, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t k = from; k < to; ++k) p *= v[k];
  return p;
}

void tensorinv(Ctx& c) {
  if (empty_outputs(c)) return;
  std::string a = c.cast(c.tensor("self"), c.out_dtype());
  auto s = static_shape(c, a, "tensorinv");
  size_t ind = static_cast<size_t>(c.i("ind", 2));
  int64_t rows = prod(s, 0, ind), cols = prod(s, ind, s.size());
  std::string x = inverse_of(c, c.reshape(a, c.b.const_i64({rows, cols})));
  std::vector<int64_t> out(s.begin() + static_cast<std::ptrdiff_t>(ind), s.end());
  out.insert(out.end(), s.begin(), s.begin() + static_cast<std::ptrdiff_t>(ind));
  c.set_output(0, c.reshape(x, c.b.const_i64(out)));
}

void tensorsolve(Ctx& c) {
  if (empty_outputs(c)) return;
  DType t = c.out_dtype();
  std::string a = c.cast(c.tensor("self"), t), bm = c.cast(c.tensor("other"), t);
  auto sa = static_shape(c, a, "tensorsolve");
  auto sb = static_shape(c, bm, "tensorsolve");
  if (c.has("dims")) {
    // move `dims` of A to the end
    auto dims = c.ints("dims", {});
    std::vector<int64_t> perm;
    for (auto& d : dims) d = Ctx::norm_axis(d, sa.size());
    for (int64_t k = 0; k < static_cast<int64_t>(sa.size()); ++k)
      if (std::find(dims.begin(), dims.end(), k) == dims.end()) perm.push_back(k);
    perm.insert(perm.end(), dims.begin(), dims.end());
    a = c.transpose(a, perm);
    sa = static_shape(c, a, "tensorsolve");
  }
  int64_t rows = prod(sb, 0, sb.size());
  std::vector<int64_t> xs(sa.begin() + static_cast<std::ptrdiff_t>(sb.size()), sa.end());
  int64_t cols = prod(xs, 0, xs.size());
  std::string a2 = c.reshape(a, c.b.const_i64({rows, cols}));
  int64_t n = matrix_n(c, a2);
  std::string x = solve_mat(c, a2, c.reshape(bm, c.b.const_i64({rows, 1})), n);
  c.set_output(0, c.reshape(x, c.b.const_i64(xs)));
}

// ---- cross products

// cross(a, b, dim): components by Slice, c = (a1 b2 - a2 b1, a2 b0 - a0 b2, a0 b1 - a1 b0).
void emit_cross(Ctx& c, std::optional<int64_t> dim) {
  DType t = c.out_dtype();
  std::string a = c.cast(c.tensor("self"), t), m = c.cast(c.tensor("other"), t);
  size_t r = std::max(c.rank(a), c.rank(m));
  auto lift = [&](std::string v) {
    std::vector<int64_t> axes;
    for (size_t k = 0; k < r - c.rank(v); ++k) axes.push_back(static_cast<int64_t>(k));
    return axes.empty() ? v : c.unsqueeze(v, axes);
  };
  a = lift(a);
  m = lift(m);
  int64_t d;
  if (dim) {
    d = Ctx::norm_axis(*dim, r);
  } else {
    // torch: the first dim of size 3
    const auto& s = c.out_type().shape;
    d = -1;
    for (size_t k = 0; s && k < s->size(); ++k)
      if ((*s)[k].is_static() && (*s)[k].value == 3) {
        d = static_cast<int64_t>(k);
        break;
      }
    if (d < 0) c.fail("cross: no dimension of size 3");
  }
  auto comp = [&](const std::string& v, int64_t k) { return slice(c, v, d, k, k + 1); };
  std::string a0 = comp(a, 0), a1 = comp(a, 1), a2 = comp(a, 2);
  std::string b0 = comp(m, 0), b1 = comp(m, 1), b2 = comp(m, 2);
  auto term = [&](const std::string& x, const std::string& y, const std::string& z,
                  const std::string& w) {
    return c.b.op("Sub", {c.b.op("Mul", {x, y}), c.b.op("Mul", {z, w})});
  };
  c.set_output(0, cat(c, {term(a1, b2, a2, b1), term(a2, b0, a0, b2), term(a0, b1, a1, b0)}, d));
}

void linalg_cross(Ctx& c) { emit_cross(c, c.i("dim", -1)); }
void cross(Ctx& c) {
  if (c.has("dim")) return emit_cross(c, c.i("dim"));
  emit_cross(c, std::nullopt);
}

}  // namespace

// linalg.vander(x, N): [..., n] -> [..., n, N], column k = x^k (torch: a
// cumulative product; Pow gives the same integers exactly and floats within
// rounding).
void linalg_vander(Ctx& c) {
  std::string x = c.tensor("x");
  if (c.rank(x) == 0) x = c.unsqueeze(x, {0});  // a 0-d x is one element
  DType t = c.out_dtype();
  const Dim& last = c.shape(x).back();
  int64_t n = c.has("N") ? c.i("N") : (last.is_static() ? last.value : -1);
  if (n < 0) c.fail("linalg.vander of a symbolic-length input needs N");
  std::vector<int64_t> k(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) k[static_cast<size_t>(i)] = i;
  std::string e = c.cast(c.b.const_i64(k), t);
  c.set_output(0, c.b.op("Pow", {c.unsqueeze(c.cast(x, t), {-1}), e}, {}, c.out_type()));
}

void register_linalg(Registry& r) {
  r.add("torch.ops.aten.linalg_vander.default", linalg_vander);
  const std::string p = "torch.ops.aten.";
  r.add(p + "linalg_cross.default", linalg_cross);
  r.add(p + "cross.default", cross);
  for (const char* o : {"linalg_det.default", "det.default"}) r.add(p + o, linalg_det);
  r.add(p + "logdet.default", logdet);
  for (const char* o : {"linalg_slogdet.default", "slogdet.default"}) r.add(p + o, slogdet);
  r.add(p + "_linalg_det.default", linalg_det_ex);
  r.add(p + "_linalg_slogdet.default", linalg_slogdet_ex);
  r.add(p + "linalg_solve.default", linalg_solve);
  for (const char* o : {"linalg_solve_ex.default", "_linalg_solve_ex.default"})
    r.add(p + o, linalg_solve_ex);
  for (const char* o : {"linalg_inv.default", "inverse.default"}) r.add(p + o, linalg_inv);
  r.add(p + "linalg_inv_ex.default", linalg_inv_ex);
  for (const char* o : {"linalg_matrix_power.default", "matrix_power.default"})
    r.add(p + o, matrix_power);
  r.add(p + "linalg_solve_triangular.default", linalg_solve_triangular);
  r.add(p + "triangular_solve.default", triangular_solve);
  for (const char* o : {"linalg_cholesky.default", "cholesky.default"}) r.add(p + o, cholesky);
  r.add(p + "linalg_cholesky_ex.default", cholesky_ex);
  r.add(p + "cholesky_solve.default", cholesky_solve);
  r.add(p + "cholesky_inverse.default", cholesky_inverse);
  for (const char* o :
       {"linalg_lu_factor_ex.default", "linalg_lu_factor.default", "_lu_with_info.default"})
    r.add(p + o, lu_factor_ex);
  r.add(p + "linalg_lu.default", linalg_lu);
  r.add(p + "lu_unpack.default", lu_unpack);
  r.add(p + "linalg_lu_solve.default", linalg_lu_solve);
  r.add(p + "lu_solve.default", lu_solve_old);
  r.add(p + "linalg_tensorinv.default", tensorinv);
  r.add(p + "linalg_tensorsolve.default", tensorsolve);
}

}  // namespace pt2onnx
