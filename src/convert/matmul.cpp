// Matrix products: linear, addmm, mm, bmm, matmul, t, addbmm, addmv, addr,
// baddbmm, dot, vdot, inner, outer, mv, tensordot, einsum, bilinear,
// linalg_vecdot, linalg_multi_dot, chain_matmul.
// onnxruntime's MatMul and Einsum take float, double, float16, int32 and
// int64; Gemm only floating types, so integer products go through MatMul.
#include <algorithm>
#include <cctype>
#include <map>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

// Swap the last two axes.
std::string transpose_last2(Ctx& c, const std::string& v) {
  size_t r = c.rank(v);
  std::vector<int64_t> perm;
  for (size_t k = 0; k < r; ++k) perm.push_back(static_cast<int64_t>(k));
  std::swap(perm[r - 1], perm[r - 2]);
  return c.transpose(v, perm);
}

// MatMul of two tensors in the output type.
std::string matmul_in(Ctx& c, const std::string& a, const std::string& m, DType t) {
  return c.b.op("MatMul", {c.cast(a, t), c.cast(m, t)});
}

// beta * self + alpha * prod, as torch computes it: with beta == 0 `self`
// is not read at all (NaN and inf in it do not propagate). `prod` already has
// the output shape (self broadcasts to it). Bool: (beta and self) or (alpha and prod).
std::string scale_add(Ctx& c, std::string prod, DType t) {
  double beta = c.f("beta", 1.0), alpha = c.f("alpha", 1.0);
  if (t == DType::Bool) {
    if (alpha == 0.0) prod = c.b.op("And", {prod, c.b.scalar(DType::Bool, 0)});
    if (beta == 0.0) return prod;
    return c.b.op("Or", {c.cast(c.tensor("self"), t), prod});
  }
  if (alpha != 1.0) prod = c.b.op("Mul", {prod, c.b.scalar(t, alpha)});
  if (beta == 0.0) return prod;
  std::string s = c.cast(c.tensor("self"), t);
  if (beta != 1.0) s = c.b.op("Mul", {s, c.b.scalar(t, beta)});
  return c.b.op("Add", {s, prod});
}

// Gemm: floating types only, and a contraction dim known to be non-zero
// (onnxruntime's Gemm returns garbage instead of beta * C when K == 0).
bool gemm_ok(Ctx& c, DType t, const std::string& a) {
  if (t != DType::Float && t != DType::Double && t != DType::Float16) return false;
  const auto& s = c.type(a).shape;
  return s && !s->empty() && s->back().is_static() && s->back().value > 0;
}

// Dims `axes` of `v` as one 1-D int64 value (static parts constant).
std::string dims_of(Ctx& c, const std::string& v, const std::vector<int64_t>& axes) {
  if (axes.empty()) return c.b.const_i64({});
  const Shape& s = c.shape(v);
  std::vector<int64_t> stat;
  bool all_static = true;
  for (auto a : axes) {
    all_static &= s[static_cast<size_t>(a)].is_static();
    if (all_static) stat.push_back(s[static_cast<size_t>(a)].value);
  }
  if (all_static) return c.b.const_i64(stat);
  std::vector<std::string> parts;
  for (auto a : axes) parts.push_back(c.dim_value(v, a));
  if (parts.size() == 1) return parts[0];
  return c.b.op("Concat", parts, {Attr::Int("axis", 0)});
}

// Product of dims `axes` of `v` as a 1-D int64 value of one element.
std::string prod_of(Ctx& c, const std::string& v, const std::vector<int64_t>& axes) {
  const Shape& s = c.shape(v);
  int64_t p = 1;
  bool all_static = true;
  for (auto a : axes) {
    const Dim& d = s[static_cast<size_t>(a)];
    if (d.is_static())
      p *= d.value;
    else
      all_static = false;
  }
  if (all_static) return c.b.const_i64({p});
  return c.reduce("ReduceProd", dims_of(c, v, axes), {0}, true);
}

// Contract dims `da` of `a` with dims `db` of `b` (pairwise, same sizes):
// result dims are a's free dims then b's free dims. One MatMul on
// [free_a, contracted] x [contracted, free_b].
std::string tensordot_impl(Ctx& c, std::string a, std::string m, std::vector<int64_t> da,
                           std::vector<int64_t> db, DType t) {
  a = c.cast(a, t);
  m = c.cast(m, t);
  size_t ra = c.rank(a), rb = c.rank(m);
  for (auto& d : da) d = Ctx::norm_axis(d, ra);
  for (auto& d : db) d = Ctx::norm_axis(d, rb);
  // torch broadcasts a contracted dim of size 1 against the other side.
  auto sa = c.type(a).static_dims(), sb = c.type(m).static_dims();
  if (sa && sb) {
    std::vector<int64_t> ea = *sa, eb = *sb;
    for (size_t k = 0; k < da.size() && k < db.size(); ++k) {
      auto ia = static_cast<size_t>(da[k]), ib = static_cast<size_t>(db[k]);
      if (ea[ia] == 1) ea[ia] = eb[ib];
      if (eb[ib] == 1) eb[ib] = ea[ia];
    }
    if (ea != *sa) a = c.b.op("Expand", {a, c.b.const_i64(ea)});
    if (eb != *sb) m = c.b.op("Expand", {m, c.b.const_i64(eb)});
  }
  std::vector<int64_t> fa, fb;
  for (int64_t k = 0; k < static_cast<int64_t>(ra); ++k)
    if (std::find(da.begin(), da.end(), k) == da.end()) fa.push_back(k);
  for (int64_t k = 0; k < static_cast<int64_t>(rb); ++k)
    if (std::find(db.begin(), db.end(), k) == db.end()) fb.push_back(k);
  std::string out_shape =
      c.b.op("Concat", {dims_of(c, a, fa), dims_of(c, m, fb)}, {Attr::Int("axis", 0)});
  std::vector<int64_t> pa = fa, pb = db;
  pa.insert(pa.end(), da.begin(), da.end());
  pb.insert(pb.end(), fb.begin(), fb.end());
  std::string a2 =
      c.reshape(c.transpose(a, pa),
                c.b.op("Concat", {prod_of(c, a, fa), prod_of(c, a, da)}, {Attr::Int("axis", 0)}));
  std::string b2 =
      c.reshape(c.transpose(m, pb),
                c.b.op("Concat", {prod_of(c, m, db), prod_of(c, m, fb)}, {Attr::Int("axis", 0)}));
  return c.reshape(c.b.op("MatMul", {a2, b2}), out_shape);
}

void linear(Ctx& c) {
  DType t = c.out_dtype();
  std::string x = c.cast(c.tensor("input"), t);
  std::string w = c.cast(c.tensor("weight"), t);
  auto bias = c.opt_tensor("bias");
  if (c.rank(x) == 2 && c.rank(w) == 2 && gemm_ok(c, t, x)) {
    // Gemm takes W as stored (transB): no transposed copy of the weight.
    std::vector<std::string> in{x, w};
    if (bias) in.push_back(c.cast(*bias, t));
    c.set_output(0, c.b.op("Gemm", in, {Attr::Int("transB", 1)}));
    return;
  }
  // MatMul needs W^T: a Transpose of an initializer, folded by runtimes at load.
  std::string wt = c.rank(w) == 2 ? c.transpose(w, {1, 0}) : w;
  std::string y = c.b.op("MatMul", {x, wt});
  if (bias) y = c.b.op("Add", {y, c.cast(*bias, t)});
  c.set_output(0, y);
}

void addmm(Ctx& c) {
  DType t = c.out_dtype();
  std::string a = c.cast(c.tensor("mat1"), t), m = c.cast(c.tensor("mat2"), t);
  double beta = c.f("beta", 1.0), alpha = c.f("alpha", 1.0);
  if (!gemm_ok(c, t, a)) return c.set_output(0, scale_add(c, c.b.op("MatMul", {a, m}), t));
  std::vector<Attr> attrs;
  if (alpha != 1.0) attrs.push_back(Attr::Float("alpha", static_cast<float>(alpha)));
  std::vector<std::string> in{a, m};
  // beta == 0: no C at all, so NaN / inf in self do not leak in (as in torch).
  if (beta != 0.0) {
    in.push_back(c.cast(c.tensor("self"), t));
    if (beta != 1.0) attrs.push_back(Attr::Float("beta", static_cast<float>(beta)));
  }
  c.set_output(0, c.b.op("Gemm", in, attrs));
}

void matmul(Ctx& c) {
  std::string a = c.tensor("self");
  std::string m = c.arg("mat2") ? c.tensor("mat2") : c.tensor("other");
  c.set_output(0, matmul_in(c, a, m, c.out_dtype()));
}

void t(Ctx& c) {
  std::string x = c.tensor("self");
  if (c.rank(x) < 2) return c.set_output(0, x);
  c.set_output(0, transpose_last2(c, x));
}

// addbmm: beta * self + alpha * sum_b batch1[b] @ batch2[b].
void addbmm(Ctx& c) {
  DType t = c.out_dtype();
  std::string p = matmul_in(c, c.tensor("batch1"), c.tensor("batch2"), t);
  c.set_output(0, scale_add(c, c.reduce("ReduceSum", p, {0}, false), t));
}

void baddbmm(Ctx& c) {
  DType t = c.out_dtype();
  c.set_output(0, scale_add(c, matmul_in(c, c.tensor("batch1"), c.tensor("batch2"), t), t));
}

void addmv(Ctx& c) {
  DType t = c.out_dtype();
  c.set_output(0, scale_add(c, matmul_in(c, c.tensor("mat"), c.tensor("vec"), t), t));
}

// Outer product by broadcasting (exact for every type, bool included).
std::string outer_of(Ctx& c, const std::string& a, const std::string& v, DType t) {
  std::string col = c.unsqueeze(c.cast(a, t), {1});
  return c.b.op(t == DType::Bool ? "And" : "Mul", {col, c.cast(v, t)});
}

void addr(Ctx& c) {
  DType t = c.out_dtype();
  c.set_output(0, scale_add(c, outer_of(c, c.tensor("vec1"), c.tensor("vec2"), t), t));
}

void outer(Ctx& c) {
  c.set_output(0, outer_of(c, c.tensor("self"), c.tensor("vec2"), c.out_dtype()));
}

void dot(Ctx& c) {
  std::string other = c.arg("tensor") ? c.tensor("tensor") : c.tensor("other");
  c.set_output(0, matmul_in(c, c.tensor("self"), other, c.out_dtype()));
}

void mv(Ctx& c) { c.set_output(0, matmul_in(c, c.tensor("self"), c.tensor("vec"), c.out_dtype())); }

void inner(Ctx& c) {
  DType t = c.out_dtype();
  std::string a = c.cast(c.tensor("self"), t), m = c.cast(c.tensor("other"), t);
  if (c.rank(a) == 0 || c.rank(m) == 0) return c.set_output(0, c.b.op("Mul", {a, m}));
  c.set_output(0, tensordot_impl(c, a, m, {-1}, {-1}, t));
}

void tensordot(Ctx& c) {
  c.set_output(0, tensordot_impl(c, c.tensor("self"), c.tensor("other"), c.ints("dims_self", {}),
                                 c.ints("dims_other", {}), c.out_dtype()));
}

void linalg_vecdot(Ctx& c) {
  DType t = c.out_dtype();
  std::string x = c.cast(c.tensor("x"), t), y = c.cast(c.tensor("y"), t);
  size_t r = std::max(c.rank(x), c.rank(y));
  int64_t dim = Ctx::norm_axis(c.i("dim", -1), r);
  c.set_output(0, c.reduce("ReduceSum", c.b.op("Mul", {x, y}), {dim}, false));
}

// multi_dot / chain_matmul: a left-to-right chain of MatMuls (the first and
// last operands of multi_dot may be 1-D; MatMul drops those dims like torch).
void multi_dot(Ctx& c) {
  DType t = c.out_dtype();
  auto xs = c.arg("tensors") ? c.tensors("tensors") : c.tensors("matrices");
  std::string y = c.cast(xs.at(0), t);
  for (size_t k = 1; k < xs.size(); ++k) y = matmul_in(c, y, xs[k], t);
  c.set_output(0, y);
}

// bilinear: y[..., o] = x1[..., i] W[o, i, j] x2[..., j] + b[o], as
// (x1 @ W) * x2 summed over j on flattened batches: [N, i] @ [i, o*j] ->
// [N, o, j]. (A broadcasting MatMul would be shorter, but onnxruntime's
// MatMul rejects broadcasting an empty batch.)
void bilinear(Ctx& c) {
  DType t = c.out_dtype();
  std::string x1 = c.cast(c.tensor("input1"), t), x2 = c.cast(c.tensor("input2"), t);
  std::string w = c.cast(c.tensor("weight"), t);
  int64_t r = static_cast<int64_t>(c.rank(x1));
  std::vector<int64_t> batch;
  for (int64_t k = 0; k + 1 < r; ++k) batch.push_back(k);
  auto cat = [&](std::vector<std::string> v) {
    return c.b.op("Concat", v, {Attr::Int("axis", 0)});
  };
  std::string n = prod_of(c, x1, batch);
  std::string wi =
      c.reshape(c.transpose(w, {1, 0, 2}), cat({dims_of(c, w, {1}), prod_of(c, w, {0, 2})}));
  std::string p = c.b.op("MatMul", {c.reshape(x1, cat({n, dims_of(c, x1, {r - 1})})), wi});
  p = c.reshape(p, cat({n, dims_of(c, w, {0}), dims_of(c, w, {2})}));
  std::string x2f = c.reshape(x2, cat({n, c.b.const_i64({1}), dims_of(c, x2, {r - 1})}));
  std::string y = c.reduce("ReduceSum", c.b.op("Mul", {p, x2f}), {2}, false);
  y = c.reshape(y, cat({dims_of(c, x1, batch), dims_of(c, w, {0})}));
  if (auto bias = c.opt_tensor("bias")) y = c.b.op("Add", {y, c.cast(*bias, t)});
  c.set_output(0, y);
}

// _trilinear (bilinear's decomposed form): the three inputs unsqueezed at
// their expand dims to one rank, multiplied, summed over sumdim.
void trilinear(Ctx& c) {
  DType t = c.out_dtype();
  std::string p;
  for (const char* k : {"1", "2", "3"}) {
    std::string v = c.cast(c.tensor(std::string("i") + k), t);
    auto e = c.ints(std::string("expand") + k, {});
    if (!e.empty()) v = c.unsqueeze(v, e);
    p = p.empty() ? v : c.b.op("Mul", {p, v});
  }
  auto sum = c.ints("sumdim", {});
  if (!sum.empty()) p = c.reduce("ReduceSum", p, sum, false);
  c.set_output(0, p);
}

// einsum: ONNX Einsum with the equation made explicit in torch's sense (an
// implicit output is "..." then the labels used once, in ASCII order).
void einsum(Ctx& c) {
  DType t = c.out_dtype();
  std::string eq;
  for (char ch : c.str("equation").value_or(""))
    if (ch != ' ') eq += ch;
  if (eq.find("->") == std::string::npos) {
    std::map<char, int> count;
    for (char ch : eq)
      if (std::isalpha(static_cast<unsigned char>(ch))) ++count[ch];
    std::string out = eq.find("...") != std::string::npos ? "..." : "";
    for (auto& [ch, n] : count)
      if (n == 1) out += ch;
    eq += "->" + out;
  }
  std::vector<std::string> in;
  for (auto& v : c.tensors("tensors")) in.push_back(c.cast(v, t));
  // onnxruntime wants every "..." to cover the same number of dims; torch
  // right-aligns them (broadcasting), so pad the shorter ones with 1s.
  std::vector<std::string> terms;
  std::string lhs = eq.substr(0, eq.find("->"));
  for (size_t s = 0;;) {
    size_t e = lhs.find(',', s);
    terms.push_back(lhs.substr(s, e == std::string::npos ? e : e - s));
    if (e == std::string::npos) break;
    s = e + 1;
  }
  if (terms.size() == in.size()) {
    std::vector<int64_t> ell(in.size(), -1);
    int64_t most = 0;
    for (size_t k = 0; k < in.size(); ++k) {
      if (terms[k].find("...") == std::string::npos) continue;
      int64_t letters = static_cast<int64_t>(terms[k].size()) - 3;
      ell[k] = static_cast<int64_t>(c.rank(in[k])) - letters;
      most = std::max(most, ell[k]);
    }
    for (size_t k = 0; k < in.size(); ++k) {
      if (ell[k] < 0 || ell[k] == most) continue;
      int64_t at = static_cast<int64_t>(terms[k].find("..."));
      std::vector<int64_t> axes;
      for (int64_t j = 0; j < most - ell[k]; ++j) axes.push_back(at + j);
      in[k] = c.unsqueeze(in[k], axes);
    }
    // onnxruntime also wants "..." in the output when an input has one: name
    // the dims it covers with unused letters so they are summed out.
    std::string out = eq.substr(eq.find("->") + 2);
    if (most >= 0 && lhs.find("...") != std::string::npos && out.find("...") == std::string::npos) {
      std::string fresh;
      for (char ch = 'A'; ch <= 'z' && static_cast<int64_t>(fresh.size()) < most; ++ch)
        if (std::isalpha(static_cast<unsigned char>(ch)) && eq.find(ch) == std::string::npos)
          fresh += ch;
      std::string lhs2;
      for (size_t k = 0; k < terms.size(); ++k) {
        std::string tk = terms[k];
        if (auto at = tk.find("..."); at != std::string::npos) tk.replace(at, 3, fresh);
        lhs2 += (k ? "," : "") + tk;
      }
      eq = lhs2 + "->" + out;
    }
  }
  DType ot = c.out_dtype(), kt = c.kernel_type("Einsum", ot);
  for (auto& v : in) v = c.cast(v, kt);
  c.set_output(0, c.cast(c.b.op("Einsum", in, {Attr::Str("equation", eq)}), ot));
}

// int8 x int8 -> int32 (torchao's dynamically quantized linear).
void int_mm(Ctx& c) {
  c.set_output(0, c.b.op("MatMulInteger", {c.tensor("self"), c.tensor("mat2")}, {},
                         ValueType{DType::Int32, c.out_type().shape}));
}

}  // namespace

void register_matmul(Registry& r) {
  r.add("torch.ops.aten._int_mm.default", int_mm);
  const std::string p = "torch.ops.aten.";
  r.add(p + "linear.default", linear);
  r.add(p + "addmm.default", addmm);
  for (const char* o : {"mm.default", "bmm.default", "matmul.default"}) r.add(p + o, matmul);
  r.add(p + "t.default", t);
  // Real types: the conjugate transposes are transposes.
  r.add(p + "addbmm.default", addbmm);
  r.add(p + "baddbmm.default", baddbmm);
  r.add(p + "addmv.default", addmv);
  r.add(p + "addr.default", addr);
  r.add(p + "outer.default", outer);
  r.add(p + "ger.default", outer);
  for (const char* o : {"dot.default", "vdot.default"}) r.add(p + o, dot);
  r.add(p + "mv.default", mv);
  r.add(p + "inner.default", inner);
  r.add(p + "tensordot.default", tensordot);
  r.add(p + "linalg_vecdot.default", linalg_vecdot);
  for (const char* o : {"linalg_multi_dot.default", "chain_matmul.default"})
    r.add(p + o, multi_dot);
  r.add(p + "bilinear.default", bilinear);
  r.add(p + "_trilinear.default", trilinear);
  r.add(p + "einsum.default", einsum, 12);
}

}  // namespace pt2onnx
