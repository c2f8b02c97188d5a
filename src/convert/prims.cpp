// prims: torch's primitive ops (torch.ops.prims), which its reference
// decompositions (torch._refs) emit and AOTAutograd leaves in compiled
// graphs: with every dim symbolic, a SymFloat times a tensor becomes
// prims.convert_element_type (issue 39). Most prims mean what an aten op
// means, so the node is converted as that op: its target and argument names
// as the aten schema has them, arguments aten has and the prim lacks at the
// prim's fixed value (an unnormalized FFT). Prims never promote types: their
// operands share the dtype the aten op would compute in. The others
// (broadcast_in_dim, collapse, split_dim, iota, ...) are lowered here.
// tests/python/test_prims.py enumerates torch.ops.prims: each op converts,
// checked in onnxruntime against eager, or is listed there with the reason it
// cannot reach a graph.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

using schema::ArgKind;

struct AsAten {
  std::string aten;                                       // torch.ops.aten.<op>.<overload>
  std::vector<std::pair<std::string, std::string>> args;  // prim argument -> aten argument
  std::vector<std::pair<std::string, int64_t>> ints;      // aten int arguments the prim fixes
};

std::string prim(const std::string& op) { return "torch.ops.prims." + op + ".default"; }
std::string aten(const std::string& op) { return "torch.ops.aten." + op; }

const std::unordered_map<std::string, AsAten>& as_aten_table() {
  static const std::unordered_map<std::string, AsAten> table = [] {
    std::unordered_map<std::string, AsAten> t;
    // Unary and binary elementwise prims: aten's argument names (self, other).
    for (const char* op :
         {"abs",         "acos",    "acosh",     "asin",  "asinh",      "atan",          "atanh",
          "bitwise_not", "ceil",    "cos",       "cosh",  "digamma",    "erf",           "erfc",
          "exp",         "exp2",    "expm1",     "floor", "isfinite",   "lgamma",        "log",
          "log10",       "log1p",   "log2",      "neg",   "reciprocal", "round",         "rsqrt",
          "sign",        "sin",     "sinh",      "sqrt",  "tan",        "tanh",          "trunc",
          "atan2",       "fmax",    "fmin",      "gcd",   "hypot",      "igamma",        "igammac",
          "maximum",     "minimum", "nextafter", "real",  "imag",       "conj_physical", "clone"})
      t[prim(op)] = {aten(std::string(op) + ".default"), {}, {}};
    const std::pair<const char*, const char*> renamed_ops[] = {
        {"erf_inv", "erfinv.default"},
        {"bessel_i0", "i0.default"},
        {"bessel_i0e", "special_i0e.default"},
        {"bessel_i1", "special_i1.default"},
        {"bessel_i1e", "special_i1e.default"},
        {"bessel_j0", "special_bessel_j0.default"},
        {"bessel_j1", "special_bessel_j1.default"},
        {"spherical_bessel_j0", "special_spherical_bessel_j0.default"},
        {"erfcx", "special_erfcx.default"},
        {"ndtri", "special_ndtri.default"},
        {"frexp", "frexp.Tensor"},
        {"add", "add.Tensor"},
        {"sub", "sub.Tensor"},
        {"mul", "mul.Tensor"},
        {"bitwise_and", "bitwise_and.Tensor"},
        {"bitwise_or", "bitwise_or.Tensor"},
        {"bitwise_xor", "bitwise_xor.Tensor"},
        {"eq", "eq.Tensor"},
        {"ne", "ne.Tensor"},
        {"ge", "ge.Tensor"},
        {"gt", "gt.Tensor"},
        {"le", "le.Tensor"},
        {"lt", "lt.Tensor"},
        {"fmod", "fmod.Tensor"},
        {"remainder", "remainder.Tensor"},
        {"shift_left", "bitwise_left_shift.Tensor"},
        {"shift_right_arithmetic", "bitwise_right_shift.Tensor"},
        {"zeta", "special_zeta.default"},
        {"cat", "cat.default"},
        {"scalar_tensor", "scalar_tensor.default"},
        {"fill", "fill.Scalar"},
    };
    for (auto& [p, a] : renamed_ops) t[prim(p)] = {aten(a), {}, {}};
    // Same meaning, other argument names.
    const std::pair<std::string, std::string> a_self = {"a", "self"};
    t[prim("convert_element_type")] = {aten("_to_copy.default"), {a_self}, {}};
    t[prim("pow")] = {aten("pow.Tensor_Tensor"), {{"other", "exponent"}}, {}};
    t[prim("where")] = {
        aten("where.self"), {{"pred", "condition"}, {"a", "self"}, {"b", "other"}}, {}};
    t[prim("rev")] = {aten("flip.default"), {a_self}, {}};
    t[prim("squeeze")] = {aten("squeeze.dims"), {a_self, {"dimensions", "dim"}}, {}};
    t[prim("transpose")] = {aten("permute.default"), {a_self, {"permutation", "dims"}}, {}};
    t[prim("reshape")] = {aten("reshape.default"), {a_self}, {}};
    t[prim("view_of")] = {aten("alias.default"), {a_self}, {}};
    t[prim("conj")] = {aten("conj.default"), {a_self}, {}};
    // A copy with other strides or on another device: the same values.
    t[prim("copy_strided")] = {aten("clone.default"), {a_self, {"stride", "unused_stride"}}, {}};
    t[prim("device_put")] = {aten("clone.default"), {a_self, {"device", "unused_device"}}, {}};
    t[prim("svd")] = {aten("_linalg_svd.default"), {}, {}};
    t[prim("as_strided")] = {aten("as_strided.default"), {a_self}, {}};
    t[prim("as_strided_scatter")] = {aten("as_strided_scatter.default"), {}, {}};
    const std::pair<std::string, std::string> shape_size = {"shape", "size"};
    t[prim("full")] = {aten("full.default"), {shape_size}, {}};
    t[prim("full_like")] = {aten("full_like.default"), {a_self}, {}};
    t[prim("empty")] = {aten("empty.memory_format"), {shape_size}, {}};
    t[prim("empty_strided")] = {
        aten("empty_strided.default"), {shape_size, {"strides", "stride"}}, {}};
    t[prim("empty_permuted")] = {aten("empty_permuted.default"), {shape_size}, {}};
    t[prim("normal")] = {aten("normal.float_float"), {shape_size}, {}};
    // Reductions over `dims` (None: all) into `output_dtype` (sum's dtype; for
    // the others the input's, real, dtype).
    const std::pair<std::string, std::string> inp = {"inp", "self"}, dims = {"dims", "dim"};
    t[prim("sum")] = {aten("sum.dim_IntList"), {inp, dims, {"output_dtype", "dtype"}}, {}};
    const std::pair<std::string, std::string> no_dtype = {"output_dtype", "unused_output_dtype"};
    t[prim("amax")] = {aten("amax.default"), {inp, dims, no_dtype}, {}};
    t[prim("amin")] = {aten("amin.default"), {inp, dims, no_dtype}, {}};
    t[prim("var")] = {aten("var.correction"), {inp, dims, no_dtype}, {}};
    // FFTs without normalization (prims leave scaling to the reference).
    t[prim("fft_r2c")] = {aten("_fft_r2c.default"), {}, {{"normalization", 0}}};
    t[prim("fft_c2c")] = {aten("_fft_c2c.default"), {}, {{"normalization", 0}}};
    t[prim("fft_c2r")] = {aten("_fft_c2r.default"), {}, {{"normalization", 0}}};
    return t;
  }();
  return table;
}

void as_aten(Ctx& c) {
  const AsAten& e = as_aten_table().at(c.node.target);
  schema::Node n = c.node;
  n.target = e.aten;
  for (auto& in : n.inputs)
    for (auto& [from, to] : e.args)
      if (in.name == from) in.name = to;
  for (auto& [name, value] : e.ints) {
    schema::NamedArgument a;
    a.name = name;
    a.arg.kind = ArgKind::Int;
    a.arg.variant = "as_int";
    a.arg.i = value;
    n.inputs.push_back(std::move(a));
  }
  ConvertFn fn = registry().find(n.target, c.opset());
  if (!fn) {
    int lowest = registry().min_opset(n.target);
    c.fail("converted as " + n.target +
           (lowest ? ", which needs opset " + std::to_string(lowest) : ", which has no converter"));
  }
  Ctx inner(c.b, c.prog, n, c.env);
  fn(inner);
}

// broadcast_in_dim(a, shape, broadcast_dimensions): a's dims go to the output
// dims listed; the others are new, then everything is expanded to `shape`.
void broadcast_in_dim(Ctx& c) {
  std::string a = c.tensor("a");
  auto shape = c.symints("shape");
  auto kept = c.ints("broadcast_dimensions", {});
  std::vector<int64_t> added;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d)
    if (std::find(kept.begin(), kept.end(), d) == kept.end()) added.push_back(d);
  if (!added.empty()) a = c.unsqueeze(a, added);
  c.set_output(0, c.b.op("Expand", {a, c.shape_tensor(shape)}));
}

// collapse(a, start, end): dims start..end (inclusive) merged into one.
void collapse(Ctx& c) {
  std::string a = c.tensor("a");
  if (c.rank(a) == 0) return c.set_output(0, c.reshape(a, c.b.const_i64({1})));
  int64_t start = Ctx::norm_axis(c.i("start"), c.rank(a));
  int64_t end = Ctx::norm_axis(c.i("end"), c.rank(a));
  std::vector<std::string> parts;
  if (start > 0) parts.push_back(c.shape_part(a, 0, start));
  parts.push_back(c.reduce("ReduceProd", c.shape_part(a, start, end + 1), {0}, true));
  if (end + 1 < static_cast<int64_t>(c.rank(a))) parts.push_back(c.shape_part(a, end + 1));
  std::string shape =
      parts.size() == 1 ? parts[0] : c.b.op("Concat", parts, {Attr::Int("axis", 0)});
  c.set_output(0, c.reshape(a, shape));
}

// split_dim(a, dim, outer_length): dim becomes (outer_length, length / outer_length).
void split_dim(Ctx& c) {
  std::string a = c.tensor("a");
  int64_t dim = Ctx::norm_axis(c.i("dim"), c.rank(a));
  std::string outer = c.symint_value(c.symints("outer_length")[0]);
  std::vector<std::string> parts;
  if (dim > 0) parts.push_back(c.shape_part(a, 0, dim));
  parts.push_back(outer);
  parts.push_back(c.b.op("Div", {c.dim_value(a, dim), outer}));
  if (dim + 1 < static_cast<int64_t>(c.rank(a))) parts.push_back(c.shape_part(a, dim + 1));
  c.set_output(0, c.reshape(a, c.b.op("Concat", parts, {Attr::Int("axis", 0)})));
}

// iota(length, start, step, dtype): start, start + step, ... (length values).
void iota(Ctx& c) {
  std::string length = c.symint_value(c.symints("length")[0]);
  std::string start = c.symint_value(c.symints("start")[0]);
  std::string step = c.symint_value(c.symints("step")[0]);
  std::string limit = c.b.op("Add", {start, c.b.op("Mul", {length, step})});
  auto scalar = [&](const std::string& v) { return c.squeeze(v, {0}); };
  std::string r = c.b.op("Range", {scalar(start), scalar(limit), scalar(step)});
  c.set_output(0, c.cast(r, c.scalar_type("dtype").value_or(DType::Int64)));
}

// The axes a prims reduction's `dims` names (None: every axis).
std::vector<int64_t> reduced_axes(Ctx& c, const std::string& x) {
  std::vector<int64_t> all;
  for (size_t d = 0; d < c.rank(x); ++d) all.push_back(static_cast<int64_t>(d));
  if (!c.has("dims")) return all;
  std::vector<int64_t> axes;
  for (int64_t d : c.ints("dims", {})) axes.push_back(Ctx::norm_axis(d, c.rank(x)));
  return axes;
}

// prod(inp, dims, output_dtype): the product over several dims at once
// (aten's prod takes one).
void prod(Ctx& c) {
  std::string x = c.tensor("inp");
  DType t = c.scalar_type("output_dtype").value_or(c.dtype(x));
  x = c.cast(x, t);
  auto axes = reduced_axes(c, x);
  c.set_output(0, axes.empty() ? x : c.reduce("ReduceProd", x, axes, false));
}

// uniform(shape, low, high, dtype, ...): ONNX's RandomUniformLike over a
// template of the shape (unseeded, as the aten random ops; random.cpp).
void uniform(Ctx& c) {
  DType t = c.scalar_type("dtype").value_or(DType::Float);
  DType draw = t == DType::Double ? DType::Double : DType::Float;
  std::string like = c.b.op("ConstantOfShape", {c.shape_tensor(c.symints("shape"))},
                            {Attr::Tensor("value", *TensorData::scalar(draw, 0.0, {1}))});
  std::string r = c.b.op("RandomUniformLike", {like},
                         {Attr::Float("low", static_cast<float>(c.f("low", 0.0))),
                          Attr::Float("high", static_cast<float>(c.f("high", 1.0)))});
  c.set_output(0, c.cast(r, t));
}

// div(a, b): true division of floats, truncating division of integers (both
// what ONNX's Div does).
void div(Ctx& c) { c.set_output(0, c.b.op("Div", {c.tensor("self"), c.tensor("other")})); }

// cbrt(x): the real cube root, sign(x) * |x|^(1/3) (Pow of a negative base
// to a fractional power is NaN).
void cbrt(Ctx& c) {
  std::string x = c.tensor("self");
  DType t = c.dtype(x);
  std::string r = c.b.op("Pow", {c.b.op("Abs", {x}), c.b.scalar(t, 1.0 / 3.0)});
  c.set_output(0, c.b.op("Mul", {c.b.op("Sign", {x}), r}));
}

// signbit(x): torch records the input's dtype for it (its meta), though its
// eager kernel returns bool; the graph's later nodes were traced with the
// recorded dtype, so that is what is computed: 1 where the sign bit is set
// (-0.0 included: 1 / -0.0 is -inf).
void signbit(Ctx& c) {
  std::string x = c.tensor("self");
  std::string zero = c.b.scalar(c.dtype(x), 0.0);
  std::string neg = c.b.op("Less", {x, zero});
  std::string neg_zero = c.b.op(
      "And", {c.b.op("Equal", {x, zero}), c.b.op("Less", {c.b.op("Reciprocal", {x}), zero})});
  c.set_output(0, c.cast(c.b.op("Or", {neg, neg_zero}), c.out_dtype()));
}

// copy_to(a, b): a with b's values (cast to a's dtype, broadcast to its
// shape). torch.export leaves this prim unfunctionalized: the graph uses its
// result, as here.
void copy_to(Ctx& c) {
  std::string a = c.tensor("a");
  std::string b = c.cast(c.tensor("b"), c.dtype(a));
  c.set_output(0, c.b.op("Expand", {b, c.b.op("Shape", {a})}));
}

// resize(a, shape): a's elements in order, cut to the new size or extended
// (with zeros: torch leaves the new elements unspecified).
void resize(Ctx& c) {
  std::string a = c.tensor("a");
  std::string flat = c.reshape(a, c.b.const_i64({-1}));
  std::string shape = c.shape_tensor(c.symints("shape"));
  std::string n = c.reduce("ReduceProd", shape, {0}, true);
  std::string more =
      c.b.op("Max", {c.b.op("Sub", {n, c.b.op("Shape", {flat})}), c.b.const_i64({0})});
  std::string pads = c.b.op("Concat", {c.b.const_i64({0}), more}, {Attr::Int("axis", 0)});
  ValueType flat_type{c.dtype(a), std::nullopt};
  std::string padded = c.b.op("Pad", {flat, pads}, {}, flat_type);
  std::string cut =
      c.b.op("Slice", {padded, c.b.const_i64({0}), n, c.b.const_i64({0})}, {}, flat_type);
  c.set_output(0, c.reshape(cut, shape));
}

// view_of_dtype(a, dtype) and aten's view.dtype: a's bytes read as another
// dtype of the same size: ONNX's BitCast (opset 26). Dtypes of another size
// change the last dim and are not converted.
void view_dtype(Ctx& c) {
  std::string x = c.tensor(c.arg("a") ? "a" : "self");
  DType to = *c.scalar_type("dtype");
  if (dtype_size(to) != dtype_size(c.dtype(x)))
    c.fail("a view as " + std::string(dtype_name(to)) + " of " +
           std::string(dtype_name(c.dtype(x))) +
           " values: only dtypes of the same size convert (ONNX's BitCast)");
  c.set_output(0,
               c.b.op("BitCast", {x}, {Attr::Int("to", static_cast<int64_t>(to))}, c.out_type()));
}

// Effect tokens (torch.compile's ordering of side-effecting ops): a token
// carries no data; _make_token makes an empty one, _sink_tokens consumes them.
void make_token(Ctx& c) {
  c.set_output(0, c.b.constant(TensorData::from_vector(DType::Float, {0}, std::vector<float>{})));
}
void sink_tokens(Ctx&) {}

}  // namespace

void register_prims(Registry& r) {
  for (auto& [target, _] : as_aten_table()) r.add(target, as_aten);
  r.add(prim("broadcast_in_dim"), broadcast_in_dim);
  r.add(prim("collapse"), collapse);
  r.add(prim("collapse_view"), collapse);
  r.add(prim("split_dim"), split_dim);
  r.add(prim("iota"), iota);
  r.add(prim("cbrt"), cbrt);
  r.add(prim("signbit"), signbit);
  r.add(prim("copy_to"), copy_to);
  r.add(prim("resize"), resize);
  r.add(prim("view_of_dtype"), view_dtype, 26);
  r.add("torch.ops.aten.view.dtype", view_dtype, 26);
  r.add(prim("div"), div);
  r.add(prim("prod"), prod);
  r.add(prim("uniform"), uniform);
  r.add(prim("_make_token"), make_token);
  r.add(prim("_sink_tokens"), sink_tokens);
}

}  // namespace pt2onnx
