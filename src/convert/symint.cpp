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
// Python's a // b on int64 values: integer Div truncates toward zero, which is
// one more than the floor where the remainder is non-zero and of the other
// sign than b. Sizes never are, but SymInts can be negative ((n - 10) // 3).
std::string floor_div_i64(Ctx& c, const std::string& a, const std::string& b) {
  std::string q = c.b.op("Div", {a, b});
  std::string r = c.b.op("Sub", {a, c.b.op("Mul", {q, b})});
  std::string zero = c.b.const_i64({0});
  std::string off =
      c.b.op("And", {c.b.op("Not", {c.b.op("Equal", {r, zero})}),
                     c.b.op("Xor", {c.b.op("Less", {r, zero}), c.b.op("Less", {b, zero})})});
  return c.b.op("Sub", {q, c.cast(off, DType::Int64)});
}
void floordiv(Ctx& c) {
  if (c.emit_known_symint()) return;
  if (is_sym_float(c, "a") || is_sym_float(c, "b")) {  // a SymFloat: floor(a / b), a float
    std::string q = c.b.op("Div", {c.operand("a", DType::Double), c.operand("b", DType::Double)});
    c.set_output(0, c.reshape(c.b.op("Floor", {q}), c.b.const_i64({1})));
    return;
  }
  c.set_output(0, floor_div_i64(c, symint_arg(c, "a"), symint_arg(c, "b")));
}
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

bool is_sym_int(Ctx& c, const char* name) {
  const schema::Argument* a = c.arg(name);
  return a && (a->kind == schema::ArgKind::SymInt || a->kind == schema::ArgKind::Int);
}

// `|`, `&`, `^` and `not` on SymBools (torch.export's deferred runtime
// asserts combine conditions so), as Bool tensors of one element, 1-D as the
// comparisons make them; `|`, `&`, `^` on SymInts
// are bitwise, which ONNX has from opset 18.
void logical(Ctx& c, const char* op, const char* bitwise) {
  if (is_sym_int(c, "a") || is_sym_int(c, "b")) {
    if (c.emit_known_symint()) return;
    if (c.opset() < 18)
      c.fail(std::string("a bitwise ") + bitwise + " of SymInts needs opset 18 (ONNX's " + bitwise +
             ")");
    c.set_output(0, c.b.op(bitwise, {symint_arg(c, "a"), symint_arg(c, "b")}));
    return;
  }
  std::string v = c.b.op(op, {c.operand("a", DType::Bool), c.operand("b", DType::Bool)});
  c.set_output(0, c.reshape(v, c.b.const_i64({1})));
}
void or_(Ctx& c) { logical(c, "Or", "BitwiseOr"); }
void and_(Ctx& c) { logical(c, "And", "BitwiseAnd"); }
void xor_(Ctx& c) { logical(c, "Xor", "BitwiseXor"); }
void not_(Ctx& c) {
  c.set_output(0, c.reshape(c.b.op("Not", {c.operand("a", DType::Bool)}), c.b.const_i64({1})));
}

// a >> b: a // 2**b (ONNX's BitShift takes unsigned types only).
void rshift(Ctx& c) {
  if (c.emit_known_symint()) return;
  std::string p = c.b.op("Pow", {c.b.const_i64({2}), symint_arg(c, "b")});
  c.set_output(0, floor_div_i64(c, symint_arg(c, "a"), p));
}
void pos(Ctx& c) {
  if (c.emit_known_symint()) return;
  c.set_output(0, c.reshape(c.operand("a", is_sym_float(c, "a") ? DType::Double : DType::Int64),
                            c.b.const_i64({1})));
}
void abs_(Ctx& c) {
  if (c.emit_known_symint()) return;
  DType t = is_sym_float(c, "a") ? DType::Double : DType::Int64;
  c.set_output(0, c.reshape(c.b.op("Abs", {c.operand("a", t)}), c.b.const_i64({1})));
}

// math.ceil / math.floor / round(x) of a SymFloat: a SymInt. round(x, n): a
// SymFloat. ONNX's Round rounds halves to even, as Python's round does.
void rounded(Ctx& c, const char* arg, const char* op) {
  if (c.emit_known_symint()) return;
  std::string v = c.b.op(op, {c.operand(arg, DType::Double)});
  c.set_output(0, c.reshape(c.cast(v, DType::Int64), c.b.const_i64({1})));
}
void ceil_(Ctx& c) { rounded(c, "x", "Ceil"); }
void floor_(Ctx& c) { rounded(c, "x", "Floor"); }
void round_(Ctx& c) {
  if (!c.has("ndigits")) return rounded(c, "number", "Round");
  if (c.emit_known_symint()) return;
  std::string scale =
      c.b.op("Pow", {c.b.scalar(DType::Double, 10.0), c.operand("ndigits", DType::Double)});
  std::string x = c.b.op("Mul", {c.operand("number", DType::Double), scale});
  std::string r = c.b.op("Div", {c.b.op("Round", {x}), scale});
  c.set_output(0, c.reshape(r, c.b.const_i64({1})));
}
// torch.sym_int(x): a SymFloat truncated toward zero, as int() does.
void sym_int(Ctx& c) {
  if (c.emit_known_symint()) return;
  c.set_output(0,
               c.reshape(c.cast(c.operand("a", DType::Double), DType::Int64), c.b.const_i64({1})));
}

// torch._sym_sqrt, _sym_cos, ... (math.sqrt(h), math.cos(h) on sizes): a
// SymFloat, computed in double where onnxruntime has the op for it (else in
// the type kernel_type names).
void sym_math(Ctx& c, const char* op) {
  if (c.emit_known_symint()) return;
  DType t = c.kernel_type(op, DType::Double);
  std::string v = c.cast(c.b.op(op, {c.operand("a", t)}), DType::Double);
  c.set_output(0, c.reshape(v, c.b.const_i64({1})));
}
void sym_log2(Ctx& c) {
  if (c.emit_known_symint()) return;
  std::string v = c.b.op("Log", {c.operand("a", DType::Double)});
  v = c.b.op("Div", {v, c.b.scalar(DType::Double, 0.69314718055994530942)});
  c.set_output(0, c.reshape(v, c.b.const_i64({1})));
}
void sym_not(Ctx& c) { not_(c); }

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
  r.add("_operator.xor", xor_);
  r.add("_operator.not_", not_);
  r.add("torch.sym_not", sym_not);
  r.add("_operator.rshift", rshift);
  r.add("_operator.pos", pos);
  r.add("_operator.abs", abs_);
  r.add("math.ceil", ceil_);
  r.add("math.floor", floor_);
  r.add("builtins.round", round_);
  r.add("torch.sym_int", sym_int);
  // math.<f>(size): torch._sym_<f> (torch.fx.experimental.sym_node's math_op_names).
  static const std::pair<const char*, void (*)(Ctx&)> math_ops[] = {
      {"torch._sym_sqrt", [](Ctx& c) { sym_math(c, "Sqrt"); }},
      {"torch._sym_cos", [](Ctx& c) { sym_math(c, "Cos"); }},
      {"torch._sym_cosh", [](Ctx& c) { sym_math(c, "Cosh"); }},
      {"torch._sym_sin", [](Ctx& c) { sym_math(c, "Sin"); }},
      {"torch._sym_sinh", [](Ctx& c) { sym_math(c, "Sinh"); }},
      {"torch._sym_tan", [](Ctx& c) { sym_math(c, "Tan"); }},
      {"torch._sym_tanh", [](Ctx& c) { sym_math(c, "Tanh"); }},
      {"torch._sym_asin", [](Ctx& c) { sym_math(c, "Asin"); }},
      {"torch._sym_acos", [](Ctx& c) { sym_math(c, "Acos"); }},
      {"torch._sym_atan", [](Ctx& c) { sym_math(c, "Atan"); }},
      {"torch._sym_log2", sym_log2},
  };
  for (auto& [target, fn] : math_ops) r.add(target, fn);
}

}  // namespace pt2onnx
