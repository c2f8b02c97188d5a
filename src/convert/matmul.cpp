// Matrix products: linear, addmm, mm, bmm, matmul, t.
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

void linear(Ctx& c) {
  std::string x = c.tensor("input");
  std::string w = c.tensor("weight");
  auto bias = c.opt_tensor("bias");
  if (c.rank(x) == 2 && c.rank(w) == 2) {
    // Gemm takes W as stored (transB): no transposed copy of the weight.
    std::vector<std::string> in{x, w};
    if (bias) in.push_back(*bias);
    c.set_output(0, c.b.op("Gemm", in, {Attr::Int("transB", 1)}));
    return;
  }
  // MatMul needs W^T: a Transpose of an initializer, folded by runtimes at load.
  std::string wt = c.rank(w) == 2 ? c.transpose(w, {1, 0}) : w;
  std::string y = c.b.op("MatMul", {x, wt});
  if (bias) y = c.b.op("Add", {y, *bias});
  c.set_output(0, y);
}

void addmm(Ctx& c) {
  std::string bias = c.tensor("self");
  std::string a = c.tensor("mat1"), m = c.tensor("mat2");
  double beta = c.f("beta", 1.0), alpha = c.f("alpha", 1.0);
  std::vector<Attr> attrs;
  if (alpha != 1.0) attrs.push_back(Attr::Float("alpha", static_cast<float>(alpha)));
  if (beta != 1.0) attrs.push_back(Attr::Float("beta", static_cast<float>(beta)));
  c.set_output(0, c.b.op("Gemm", {a, m, bias}, attrs));
}

void matmul(Ctx& c) {
  std::string a = c.tensor("self");
  std::string m = c.arg("mat2") ? c.tensor("mat2") : c.tensor("other");
  c.set_output(0, c.b.op("MatMul", {a, m}));
}

void t(Ctx& c) {
  std::string x = c.tensor("self");
  if (c.rank(x) < 2) return c.set_output(0, x);
  c.set_output(0, transpose_last2(c, x));
}

}  // namespace

void register_matmul(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "linear.default", linear);
  r.add(p + "addmm.default", addmm);
  for (const char* o : {"mm.default", "bmm.default", "matmul.default"}) r.add(p + o, matmul);
  r.add(p + "t.default", t);
}

}  // namespace pt2onnx
