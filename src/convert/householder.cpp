// QR through Householder reflectors, unrolled for static matrix sizes (ONNX
// has no QR): geqrf, linalg_qr / qr, linalg_householder_product / orgqr and
// ormqr. The reflectors follow LAPACK's conventions (dgeqrf / dlarfg), so Q
// and R come out as torch gives them, signs included:
//   column j below the diagonal: x = (alpha, x'), beta = -sign(alpha) |x|,
//   tau = (beta - alpha) / beta, v = (1, x' / (alpha - beta)); x' = 0 gives
//   tau = 0 (H = I). H_j = I - tau_j v_j v_j^T, Q = H_0 H_1 ... H_{k-1}.
// geqrf packs R on and above the diagonal and the v's below it. Batch dims
// may be symbolic; the matrix dims must be static.
#include "convert/context.h"
#include "convert/expr.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

struct Householder : Expr {
  Householder(Ctx& ctx, DType type) : Expr{ctx, type} {}
  // 1.0 where pred(i) else 0.0, a [n] constant of type t.
  template <typename P>
  std::string mask(int64_t n, P pred) {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < n; ++i) v.push_back(pred(i) ? 1 : 0);
    return c.cast(c.b.const_i64(v), t);
  }
  std::string bool_mask(int64_t n, int64_t j, const char* cmp) {
    std::string idx = c.b.const_i64([&] {
      std::vector<int64_t> v;
      for (int64_t i = 0; i < n; ++i) v.push_back(i);
      return v;
    }());
    return op(cmp, {idx, c.b.const_i64({j})});
  }
  // [..., r, cols] column j -> [..., r]
  std::string column(const std::string& a, int64_t j) {
    return c.b.op("Gather", {a, c.b.scalar_i64(j)}, {Attr::Int("axis", -1)});
  }
  // v_j from the packed column j of `a` (m rows): 1 at j, a's values below.
  std::string reflector(const std::string& a, int64_t m, int64_t j) {
    std::string below = op("Mul", {column(a, j), mask(m, [&](int64_t i) { return i > j; })});
    return op("Add", {below, mask(m, [&](int64_t i) { return i == j; })});
  }
  std::string tau_at(const std::string& tau, int64_t j) {
    return c.b.op("Gather", {tau, c.b.scalar_i64(j)}, {Attr::Int("axis", -1)});
  }
  // X - tau v (v^T X) for X [..., m, p]; X - tau (X v) v^T for X [..., p, m].
  std::string apply(const std::string& x, const std::string& v, const std::string& tau, bool left) {
    std::string tau2 = c.unsqueeze(tau, {-1, -2});
    std::string outer;
    if (left) {
      std::string vtx = op("MatMul", {c.unsqueeze(v, {-2}), x});
      outer = op("Mul", {c.unsqueeze(v, {-1}), vtx});
    } else {
      std::string xv = op("MatMul", {x, c.unsqueeze(v, {-1})});
      outer = op("Mul", {xv, c.unsqueeze(v, {-2})});
    }
    return op("Sub", {x, op("Mul", {tau2, outer})});
  }

  // geqrf of a [..., m, n] -> (packed a, tau [..., k]).
  std::pair<std::string, std::string> geqrf(std::string a, int64_t m, int64_t n,
                                            const Shape& tau_shape) {
    int64_t kk = std::min(m, n);
    std::vector<std::string> taus;
    for (int64_t j = 0; j < kk; ++j) {
      std::string col = column(a, j);
      std::string below = op("Mul", {col, mask(m, [&](int64_t i) { return i > j; })});
      std::string alpha = c.b.op("Gather", {col, c.b.scalar_i64(j)}, {Attr::Int("axis", -1)});
      std::string xn2 = c.reduce("ReduceSum", op("Mul", {below, below}), {-1}, false);
      std::string norm = op("Sqrt", {op("Add", {op("Mul", {alpha, alpha}), xn2})});
      std::string sgn = op("Where", {op("GreaterOrEqual", {alpha, k(0)}), k(1), k(-1)});
      std::string beta = op("Neg", {op("Mul", {sgn, norm})});
      std::string none = op("Equal", {xn2, k(0)});
      std::string safe_beta = op("Where", {none, k(1), beta});
      std::string tau = op("Where", {none, k(0), op("Div", {op("Sub", {beta, alpha}), safe_beta})});
      std::string denom = op("Where", {none, k(1), op("Sub", {alpha, beta})});
      std::string vbelow = op("Div", {below, c.unsqueeze(denom, {-1})});
      std::string v = op("Add", {vbelow, mask(m, [&](int64_t i) { return i == j; })});
      std::string diag = op("Where", {none, alpha, beta});
      // The packed column: R above and on the diagonal, v below it.
      std::string packed =
          op("Add", {op("Add", {op("Mul", {col, mask(m, [&](int64_t i) { return i < j; })}),
                                op("Mul", {c.unsqueeze(diag, {-1}),
                                           mask(m, [&](int64_t i) { return i == j; })})}),
                     vbelow});
      std::string updated = apply(a, v, tau, true);
      a = op("Where", {bool_mask(n, j, "Greater"), updated,
                       op("Where", {bool_mask(n, j, "Equal"), c.unsqueeze(packed, {-1}), a})});
      taus.push_back(c.unsqueeze(tau, {-1}));
    }
    std::string tau;
    if (taus.empty()) {
      std::vector<int64_t> dims;
      for (auto& d : tau_shape) {
        if (!d.is_static()) c.fail("geqrf of an empty matrix needs static batch dims");
        dims.push_back(d.value);
      }
      tau = c.b.op("Expand", {k(0), c.b.const_i64(dims)});
    } else {
      tau = taus.size() == 1 ? taus[0] : c.b.op("Concat", taus, {Attr::Int("axis", -1)});
    }
    return {a, tau};
  }

  // H_0 ... H_{k-1} applied to the first `cols` columns of I_m.
  std::string product(const std::string& a, const std::string& tau, int64_t m, int64_t cols,
                      int64_t kk) {
    std::string q = c.eye(m, cols, t);
    for (int64_t j = kk; j-- > 0;) q = apply(q, reflector(a, m, j), tau_at(tau, j), true);
    return q;
  }
};

Shape batch_with(const Shape& s, int64_t last) {
  Shape r(s.begin(), s.end() - 2);
  r.push_back(Dim::of(last));
  return r;
}

std::string triu(Householder& h, const std::string& a, int64_t m, int64_t n) {
  std::vector<int64_t> u;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) u.push_back(j >= i ? 1 : 0);
  return h.op("Mul",
              {a, h.c.cast(h.c.b.constant(TensorData::from_vector(DType::Int64, {m, n}, u)), h.t)});
}

std::string rows(Ctx& c, const std::string& a, int64_t from, int64_t to, int64_t axis) {
  return c.b.op("Slice", {a, c.b.const_i64({from}), c.b.const_i64({to}), c.b.const_i64({axis})});
}

void geqrf(Ctx& c) {
  std::string a = c.tensor("self");
  Householder h{c, c.dtype(a)};
  auto [m, n] = c.static_matrix_dims(a, "geqrf");
  auto [packed, tau] = h.geqrf(a, m, n, *c.out_type(1).shape);
  c.set_output(0, packed);
  c.set_output(1, tau);
}

void emit_qr(Ctx& c, const std::string& a, const std::string& mode) {
  Householder h{c, c.dtype(a)};
  auto [m, n] = c.static_matrix_dims(a, "QR");
  int64_t kk = std::min(m, n);
  auto [packed, tau] = h.geqrf(a, m, n, batch_with(c.shape(a), kk));
  std::string r = triu(h, packed, m, n);
  if (mode == "complete") {
    c.set_output(0, h.product(packed, tau, m, m, kk));
    c.set_output(1, r);
    return;
  }
  r = rows(c, r, 0, kk, -2);
  if (mode == "r") {
    c.set_output(0, c.b.op("Expand", {h.k(0), c.b.const_i64({0})}));
  } else if (mode == "reduced") {
    c.set_output(0, h.product(packed, tau, m, kk, kk));
  } else {
    c.fail("unknown QR mode '" + mode + "'");
  }
  c.set_output(1, r);
}

void linalg_qr(Ctx& c) { emit_qr(c, c.tensor("A"), c.str("mode").value_or("reduced")); }
void qr(Ctx& c) { emit_qr(c, c.tensor("self"), c.flag("some", true) ? "reduced" : "complete"); }

// householder_product(A [..., m, n], tau [..., k]) = H_0 ... H_{k-1} I[m, n].
void householder_product(Ctx& c) {
  std::string a = c.tensor(c.arg("input") ? "input" : "self");
  std::string tau = c.tensor(c.arg("tau") ? "tau" : "input2");
  Householder h{c, c.out_dtype()};
  auto [m, n] = c.static_matrix_dims(a, "householder_product");
  const Shape& ts = c.shape(tau);
  if (ts.empty() || !ts.back().is_static()) c.fail("householder_product needs a static tau size");
  c.set_output(0, h.product(c.cast(a, h.t), c.cast(tau, h.t), m, n, ts.back().value));
}

// ormqr(A, tau, C, left, transpose): Q C, Q^T C, C Q or C Q^T.
void ormqr(Ctx& c) {
  std::string a = c.tensor("self"), tau = c.tensor("input2"), x = c.tensor("input3");
  bool left = c.flag("left", true), trans = c.flag("transpose", false);
  Householder h{c, c.out_dtype()};
  auto [m, n] = c.static_matrix_dims(a, "ormqr");
  (void)n;
  const Shape& ts = c.shape(tau);
  if (ts.empty() || !ts.back().is_static()) c.fail("ormqr needs a static tau size");
  int64_t kk = ts.back().value;
  // Q = H_0 ... H_{k-1}: Q C applies H_{k-1} first; Q^T C, C Q apply H_0 first.
  bool forward = left == trans;
  for (int64_t s = 0; s < kk; ++s) {
    int64_t j = forward ? s : kk - 1 - s;
    x = h.apply(x, h.reflector(a, m, j), h.tau_at(tau, j), left);
  }
  c.set_output(0, x);
}

}  // namespace

void register_householder(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "geqrf.default", geqrf);
  r.add(p + "linalg_qr.default", linalg_qr);
  r.add(p + "qr.default", qr);
  r.add(p + "linalg_householder_product.default", householder_product);
  r.add(p + "orgqr.default", householder_product);
  r.add(p + "ormqr.default", ormqr);
}

}  // namespace pt2onnx
