// Symbolic integers (sizes computed at run time): sym_size, sym_numel and the
// Python operators torch.export records on them. A SymInt is a 1-D int64
// tensor of one element in the ONNX graph, so shape lists are one Concat.
#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

std::string symint_arg(Ctx& c, const char* name) {
  auto a = c.symints(name);
  return c.symint_value(a[0]);
}

void sym_size(Ctx& c) {
  if (c.emit_known_symint()) return;
  c.set_output(0, c.dim_value(c.tensor("self"), c.i("dim")));
}

void sym_numel(Ctx& c) {
  if (c.emit_known_symint()) return;
  std::string x = c.tensor("self");
  c.set_output(0, c.reduce("ReduceProd", c.b.op("Shape", {x}), {0}, true));
}

bool is_sym_float(Ctx& c, const char* name) {
  const schema::Argument* a = c.arg(name);
  return a && (a->kind == schema::ArgKind::SymFloat || a->kind == schema::ArgKind::Float);
}

void binop(Ctx& c, const char* op) {
  if (c.emit_known_symint()) return;
  // A SymFloat operand (float(h) * scale): the operation in double, as truediv.
  if (is_sym_float(c, "a") || is_sym_float(c, "b")) {
    std::string r = c.b.op(op, {c.operand("a", DType::Double), c.operand("b", DType::Double)});
    c.set_output(0, c.reshape(r, c.b.const_i64({1})));
    return;
  }
  c.set_output(0, c.b.op(op, {symint_arg(c, "a"), symint_arg(c, "b")}));
}

// torch.sym_float(n): a SymInt as a SymFloat (1-D one-element double).
void sym_float(Ctx& c) {
  c.set_output(0, c.reshape(c.operand("a", DType::Double), c.b.const_i64({1})));
}

// math.trunc(x) of a SymFloat: Cast to int64 truncates toward zero.
void trunc(Ctx& c) {
  if (c.emit_known_symint()) return;
  std::string v = c.cast(c.operand(c.arg("x") ? "x" : "a", DType::Double), DType::Int64);
  c.set_output(0, c.reshape(v, c.b.const_i64({1})));
}
void add(Ctx& c) { binop(c, "Add"); }
void sub(Ctx& c) { binop(c, "Sub"); }
void mul(Ctx& c) { binop(c, "Mul"); }
// Sizes are non-negative, where integer Div (truncating) equals floor division.
void floordiv(Ctx& c) { binop(c, "Div"); }
void mod(Ctx& c) { binop(c, "Mod"); }
// Python's `/` on SymInts / SymFloats (h / patch_size): a SymFloat, a 1-D
// one-element double tensor here, as item() makes them.
void truediv(Ctx& c) {
  std::string q = c.b.op("Div", {c.operand("a", DType::Double), c.operand("b", DType::Double)});
  c.set_output(0, c.reshape(q, c.b.const_i64({1})));
}
// `**` and `<<` on SymInts (torch's serializer lists operator.pow and
// operator.lshift among the functions a graph's sizes use): int64 Pow for
// SymInts, double for a SymFloat operand; ONNX's BitShift takes unsigned types
// only, so a << b is a * 2**b.
void sym_pow(Ctx& c) { binop(c, "Pow"); }
void lshift(Ctx& c) {
  if (c.emit_known_symint()) return;
  std::string p = c.b.op("Pow", {c.b.const_i64({2}), symint_arg(c, "b")});
  c.set_output(0, c.b.op("Mul", {symint_arg(c, "a"), p}));
}
void sym_max(Ctx& c) { binop(c, "Max"); }
void sym_min(Ctx& c) { binop(c, "Min"); }
void neg(Ctx& c) {
  if (c.emit_known_symint()) return;
  c.set_output(0, c.b.op("Neg", {symint_arg(c, "a")}));
}

// sym_ite(b, t, f): `t if b else f` on SymInts (a SymBool used as a number:
// bool + int is sym_ite(b, 1, 0)).
void sym_ite(Ctx& c) {
  if (c.emit_known_symint()) return;
  const schema::Argument* b = c.arg("b");
  if (!b || b->kind != schema::ArgKind::SymBool) c.fail("'b' is not a SymBool");
  // A 0-d condition: Where broadcasts it over the 1-element SymInts.
  c.set_output(
      0, c.b.op("Where", {c.operand("b", DType::Bool), symint_arg(c, "t"), symint_arg(c, "f")}));
}

void compare(Ctx& c, const char* op) {
  c.set_output(0, c.b.op(op, {symint_arg(c, "a"), symint_arg(c, "b")}));
}
void eq(Ctx& c) { compare(c, "Equal"); }
void lt(Ctx& c) { compare(c, "Less"); }
void le(Ctx& c) { compare(c, "LessOrEqual"); }
void gt(Ctx& c) { compare(c, "Greater"); }
void ge(Ctx& c) { compare(c, "GreaterOrEqual"); }
void ne(Ctx& c) {
  c.set_output(0, c.b.op("Not", {c.b.op("Equal", {symint_arg(c, "a"), symint_arg(c, "b")})}));
}

// `|`, `&` and `not` on SymBools (torch.export's deferred runtime asserts
// combine conditions so), as Bool tensors.
void logical(Ctx& c, const char* op) {
  c.set_output(0, c.b.op(op, {c.operand("a", DType::Bool), c.operand("b", DType::Bool)}));
}
void or_(Ctx& c) { logical(c, "Or"); }
void and_(Ctx& c) { logical(c, "And"); }
void not_(Ctx& c) { c.set_output(0, c.b.op("Not", {c.operand("a", DType::Bool)})); }

}  // namespace

void register_symint(Registry& r) {
  r.add("torch.ops.aten.sym_size.int", sym_size);
  r.add("torch.ops.aten.sym_numel.default", sym_numel);
  r.add("_operator.add", add);
  r.add("_operator.sub", sub);
  r.add("_operator.mul", mul);
  r.add("_operator.floordiv", floordiv);
  r.add("_operator.truediv", truediv);
  r.add("_operator.mod", mod);
  r.add("_operator.neg", neg);
  r.add("_operator.pow", sym_pow);
  r.add("_operator.lshift", lshift);
  r.add("torch.sym_max", sym_max);
  r.add("torch.sym_ite", sym_ite);
  r.add("torch.sym_min", sym_min);
  r.add("torch.sym_float", sym_float);
  r.add("math.trunc", trunc);
  r.add("_operator.eq", eq);
  r.add("_operator.lt", lt);
  r.add("_operator.le", le);
  r.add("_operator.gt", gt);
  r.add("_operator.ge", ge);
  r.add("_operator.ne", ne);
  r.add("_operator.or_", or_);
  r.add("_operator.and_", and_);
  r.add("_operator.not_", not_);
}

}  // namespace pt2onnx
