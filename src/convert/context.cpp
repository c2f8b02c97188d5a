#include "convert/context.h"

#include <cmath>
#include <cstring>
#include <set>

#include "convert/mutation.h"
#include "pt2onnx/error.h"

namespace pt2onnx {

using schema::ArgKind;
using schema::Argument;

void Ctx::fail(const std::string& why) const { throw Error(why); }

const Argument* Ctx::arg(std::string_view name) const { return node.input(name); }

bool Ctx::has(std::string_view name) const {
  const Argument* a = arg(name);
  return a && a->kind != ArgKind::None;
}

std::string Ctx::tensor(std::string_view name) const {
  const Argument* a = arg(name);
  if (!a) fail("missing tensor argument '" + std::string(name) + "'");
  if (a->kind != ArgKind::Tensor)
    fail("argument '" + std::string(name) + "' is " + a->variant + ", expected a tensor");
  auto it = env.values.find(a->name);
  if (it == env.values.end())
    fail("argument '" + std::string(name) + "' uses undefined value '" + a->name + "'");
  return it->second;
}

std::optional<std::string> Ctx::opt_tensor(std::string_view name) const {
  if (!has(name)) return std::nullopt;
  return tensor(name);
}

std::vector<std::string> Ctx::tensors(std::string_view name) const {
  const Argument* a = arg(name);
  if (!a || (a->kind != ArgKind::Tensors && a->kind != ArgKind::OptionalTensors))
    fail("argument '" + std::string(name) + "' is not a list of tensors");
  std::vector<std::string> r;
  for (auto& n : a->names) {
    if (n.empty()) {
      r.emplace_back();
      continue;
    }
    auto it = env.values.find(n);
    if (it == env.values.end())
      fail("argument '" + std::string(name) + "' uses undefined '" + n + "'");
    r.push_back(it->second);
  }
  return r;
}

int64_t Ctx::i(std::string_view name) const {
  const Argument* a = arg(name);
  if (!a || a->kind == ArgKind::None) fail("missing integer argument '" + std::string(name) + "'");
  return i(name, 0);
}

int64_t Ctx::i(std::string_view name, int64_t def) const {
  const Argument* a = arg(name);
  if (!a || a->kind == ArgKind::None) return def;
  if (a->kind == ArgKind::Int) return a->i;
  if (a->kind == ArgKind::Bool) return a->b;
  if (a->kind == ArgKind::SymInt) {
    if (auto c = symint_const(a->symints[0])) return *c;
    fail("argument '" + std::string(name) + "' is a symbolic int; a constant is needed here");
  }
  fail("argument '" + std::string(name) + "' is " + a->variant + ", expected an int");
}

double Ctx::f(std::string_view name, double def) const {
  const Argument* a = arg(name);
  if (!a || a->kind == ArgKind::None) return def;
  if (a->kind == ArgKind::Float) return a->f;
  if (a->kind == ArgKind::Int) return static_cast<double>(a->i);
  if (a->kind == ArgKind::Bool) return a->b;
  fail("argument '" + std::string(name) + "' is " + a->variant + ", expected a float");
}

bool Ctx::flag(std::string_view name, bool def) const {
  const Argument* a = arg(name);
  if (!a || a->kind == ArgKind::None) return def;
  if (a->kind == ArgKind::Bool) return a->b;
  if (a->kind == ArgKind::Int) return a->i != 0;
  fail("argument '" + std::string(name) + "' is " + a->variant + ", expected a bool");
}

std::vector<int64_t> Ctx::ints(std::string_view name, std::vector<int64_t> def) const {
  const Argument* a = arg(name);
  if (!a || a->kind == ArgKind::None) return def;
  if (a->kind == ArgKind::Ints) return a->ints;
  if (a->kind == ArgKind::Int) return {a->i};
  if (a->kind == ArgKind::SymInts || a->kind == ArgKind::SymInt) {
    std::vector<int64_t> r;
    for (auto& s : a->symints) {
      auto c = symint_const(s);
      if (!c) fail("argument '" + std::string(name) + "' has a symbolic element; constants needed");
      r.push_back(*c);
    }
    return r;
  }
  fail("argument '" + std::string(name) + "' is " + a->variant + ", expected a list of ints");
}

std::optional<std::string> Ctx::str(std::string_view name) const {
  const Argument* a = arg(name);
  if (!a || a->kind == ArgKind::None) return std::nullopt;
  if (a->kind != ArgKind::String) fail("argument '" + std::string(name) + "' is not a string");
  return a->s;
}

std::optional<DType> Ctx::scalar_type(std::string_view name) const {
  const Argument* a = arg(name);
  if (!a || a->kind == ArgKind::None) return std::nullopt;
  if (a->kind != ArgKind::ScalarType) fail("argument '" + std::string(name) + "' is not a dtype");
  DType t = dtype_from_schema(a->i);
  if (t == DType::Undefined) {
    std::string_view n = schema_scalar_type_name(a->i);
    fail("unsupported dtype code " + std::to_string(a->i) +
         (n.empty() ? "" : " (" + std::string(n) + ")"));
  }
  return t;
}

std::optional<double> Ctx::scalar_value(std::string_view name) const {
  const Argument* a = arg(name);
  if (!a) return std::nullopt;
  switch (a->kind) {
    case ArgKind::Float:
      return a->f;
    case ArgKind::Int:
      return static_cast<double>(a->i);
    case ArgKind::Bool:
      return a->b ? 1.0 : 0.0;
    // A SymBool / SymFloat without a name is a literal (as_bool / as_float).
    case ArgKind::SymBool:
      return a->name.empty() ? std::optional<double>(a->b ? 1.0 : 0.0) : std::nullopt;
    case ArgKind::SymFloat:
      return a->name.empty() ? std::optional<double>(a->f) : std::nullopt;
    case ArgKind::SymInt: {
      auto c = symint_const(a->symints[0]);
      if (c) return static_cast<double>(*c);
      return std::nullopt;
    }
    default:
      return std::nullopt;
  }
}

std::pair<DType, int> Ctx::operand_class(std::string_view name) const {
  const Argument* a = arg(name);
  if (!a) fail("missing argument '" + std::string(name) + "'");
  switch (a->kind) {
    case ArgKind::Tensor: {
      auto it = prog.graph.tensor_values.find(a->name);
      if (it == prog.graph.tensor_values.end()) fail("no metadata for tensor '" + a->name + "'");
      return {it->second.dtype, it->second.sizes.empty() ? 1 : 2};
    }
    case ArgKind::Float:
    case ArgKind::SymFloat:
      return {DType::Double, 0};
    case ArgKind::Int:
    case ArgKind::SymInt:
      return {DType::Int64, 0};
    case ArgKind::Bool:
    case ArgKind::SymBool:
      return {DType::Bool, 0};
    default:
      fail("argument '" + std::string(name) + "' is " + a->variant + ", expected a number");
  }
}

std::string Ctx::operand(std::string_view name, DType t) {
  const Argument* a = arg(name);
  if (!a) fail("missing argument '" + std::string(name) + "'");
  if (a->kind == ArgKind::Tensor) return cast(tensor(name), t);
  if (auto v = scalar_value(name)) return b.scalar(t, *v);
  if (a->kind == ArgKind::SymInt) {
    std::string v = squeeze(symint_value(a->symints[0]), {0});
    return cast(v, t);
  }
  if ((a->kind == ArgKind::SymFloat || a->kind == ArgKind::SymBool) && !a->name.empty()) {
    auto it = env.values.find(a->name);
    if (it == env.values.end()) fail("undefined symbolic value '" + a->name + "'");
    return cast(squeeze(it->second, {0}), t);
  }
  fail("argument '" + std::string(name) + "' is " + a->variant + ", expected a number or tensor");
}

std::vector<schema::SymIntArg> Ctx::symints(std::string_view name) const {
  const Argument* a = arg(name);
  if (!a) fail("missing argument '" + std::string(name) + "'");
  if (a->kind == ArgKind::SymInts || a->kind == ArgKind::SymInt) return a->symints;
  std::vector<schema::SymIntArg> r;
  if (a->kind == ArgKind::Ints)
    for (auto v : a->ints) r.push_back(schema::SymIntArg{v, {}});
  else if (a->kind == ArgKind::Int)
    r.push_back(schema::SymIntArg{a->i, {}});
  else
    fail("argument '" + std::string(name) + "' is " + a->variant + ", expected int sizes");
  return r;
}

std::optional<int64_t> Ctx::symint_const(const schema::SymIntArg& a) const {
  if (a.value) return a.value;
  auto it = prog.graph.sym_int_values.find(a.name);
  if (it != prog.graph.sym_int_values.end()) {
    if (it->second.value) return it->second.value;
    if (it->second.expr && it->second.expr->is_integer()) return it->second.expr->eval({});
  }
  return std::nullopt;
}

std::string Ctx::symint_value(const schema::SymIntArg& a) {
  if (auto c = symint_const(a)) return b.const_i64({*c});
  auto it = env.values.find(a.name);
  if (it == env.values.end()) fail("undefined symbolic int '" + a.name + "'");
  return it->second;
}

std::string Ctx::shape_tensor(const std::vector<schema::SymIntArg>& dims) {
  // Runs of constants become one constant; symbolic pieces are concatenated.
  std::vector<std::string> parts;
  std::vector<int64_t> run;
  bool all_const = true;
  for (auto& d : dims) {
    if (auto c = symint_const(d)) {
      run.push_back(*c);
      continue;
    }
    all_const = false;
    if (!run.empty()) parts.push_back(b.const_i64(run)), run.clear();
    parts.push_back(symint_value(d));
  }
  if (all_const) return b.const_i64(run);
  if (!run.empty()) parts.push_back(b.const_i64(run));
  if (parts.size() == 1) return parts[0];
  return b.op("Concat", parts, {Attr::Int("axis", 0)});
}

const std::vector<std::string>& Ctx::out_names_() const {
  if (!out_names_cache_) {
    std::vector<std::string> r;
    for (auto& o : node.outputs) {
      if (o.kind == ArgKind::Tensors || o.kind == ArgKind::OptionalTensors) {
        r.insert(r.end(), o.names.begin(), o.names.end());
      } else if (o.kind == ArgKind::SymInt) {
        r.push_back(o.symints[0].name);
      } else {
        r.push_back(o.name);
      }
    }
    out_names_cache_ = std::move(r);
  }
  return *out_names_cache_;
}

const schema::TensorMeta* Ctx::find_meta(const std::string& fx) const {
  auto x = env.extra_meta.find(fx);
  if (x != env.extra_meta.end()) return &x->second;
  auto it = prog.graph.tensor_values.find(fx);
  return it == prog.graph.tensor_values.end() ? nullptr : &it->second;
}

const schema::TensorMeta& Ctx::out_meta(size_t i) const {
  const std::string& n = out_name(i);
  const schema::TensorMeta* m = find_meta(n);
  if (!m) fail("no tensor metadata for output '" + n + "'");
  return *m;
}

Dim Ctx::meta_dim(const schema::SymSize& s) const {
  if (s.value) return Dim::of(*s.value);
  if (s.expr->is_integer()) return Dim::of(*s.expr->eval({}));
  return Dim::symbol(s.expr->render(env.symbol_names));
}

ValueType Ctx::meta_type(const schema::TensorMeta& m) const {
  ValueType t;
  t.dtype = m.dtype;
  Shape s;
  for (auto& d : m.sizes) s.push_back(meta_dim(d));
  // A complex value is carried as its real components with a trailing
  // dimension of 2 (see convert/complex.cpp).
  if (is_complex(m.dtype)) {
    t.dtype = complex_component(m.dtype);
    s.push_back(Dim::of(2));
  }
  t.shape = std::move(s);
  return t;
}

ValueType Ctx::out_type(size_t i) const { return meta_type(out_meta(i)); }

void Ctx::set_output(size_t i, const std::string& produced) {
  const std::string& fx = out_name(i);
  std::string value = produced;
  // Give the ONNX value the FX name when this conversion created it.
  const schema::TensorMeta* meta = find_meta(fx);
  if (meta) {
    // The ONNX type torch's dtype maps to (complex: its real component type).
    const DType want = is_complex(meta->dtype) ? complex_component(meta->dtype) : meta->dtype;
    const ValueType* t = b.find_type(value);
    // An in-place op keeps its tensor's dtype: eq_ on floats computes a bool
    // and stores it as float, as torch copies the result into `self`.
    if (t && t->dtype != want && !functional_target(node.target).empty()) {
      value = cast(value, want);
      t = b.find_type(value);
    }
    if (t && t->dtype != want)
      fail("internal: converter produced " + std::string(dtype_name(t->dtype)) + " for output '" +
           fx + "' where torch records " + std::string(dtype_name(meta->dtype)));
  }
  if (value != fx && !env.nested && !b.is_used(fx) && b.rename_output(value, fx, first_node)) {
    env.values[fx] = fx;
    for (auto& [k, v] : env.cache)
      if (v == value) v = fx;
    if (meta) b.set_type(fx, declared_type(meta_type(*meta), b.find_type(fx)));
    return;
  }
  env.values[fx] = value;
}

std::string Ctx::cast(const std::string& v, DType t) {
  if (dtype(v) == t) return v;
  return b.op("Cast", {v}, {Attr::Int("to", static_cast<int64_t>(t))});
}

DType Ctx::kernel_type(std::string_view op, DType t) const {
  // Ops whose type lists have no bfloat16 at the opsets we write (onnx's
  // checker rejects it): computed in float32, which holds every bfloat16.
  static const std::set<std::string_view> no_bf16 = {
      "Conv",   "ConvTranspose",         "AveragePool", "MaxPool",    "Compress",
      "Einsum", "InstanceNormalization", "EyeLike",     "GridSample", "GlobalAveragePool"};
  if (t == DType::BFloat16 && no_bf16.count(op)) return DType::Float;
  // onnxruntime has only float kernels for these (not even double): integer
  // convolutions and average pools run in float32, exact while every
  // partial sum stays below 2^24 in magnitude.
  if (is_integral(t) &&
      (op == "Conv" || op == "ConvTranspose" || op == "AveragePool" || op == "GlobalAveragePool"))
    return DType::Float;
  // MaxPool has int8/uint8 kernels; wider integers go through float64
  // (exact below 2^53).
  if (op == "MaxPool" && is_integral(t) && t != DType::Int8 && t != DType::UInt8)
    return DType::Double;
  // onnxruntime's CPU provider has only float kernels for these (measured,
  // onnxruntime 1.32): float64 values are computed in float32.
  static const std::set<std::string_view> no_f64 = {"Tan",  "Asin",  "Acos",  "Atan",  "Sinh",
                                                    "Cosh", "Asinh", "Acosh", "Atanh", "Erf"};
  if (t == DType::Double && no_f64.count(op)) return DType::Float;
  // onnxruntime's EyeLike has no bool kernel.
  if (op == "EyeLike" && t == DType::Bool) return DType::Int32;
  return t;
}

ValueType declared_type(ValueType recorded, const ValueType* computed) {
  if (computed && computed->shape && recorded.shape &&
      computed->shape->size() != recorded.shape->size())
    return *computed;
  return recorded;
}

std::string Ctx::shape_part(const std::string& v, int64_t start, int64_t end) {
  if (opset() >= 15) {
    std::vector<Attr> attrs{Attr::Int("start", start)};
    if (end != kToEnd) attrs.push_back(Attr::Int("end", end));
    return b.op("Shape", {v}, std::move(attrs));
  }
  return b.op("Slice",
              {b.op("Shape", {v}), b.const_i64({start}), b.const_i64({end}), b.const_i64({0})});
}

std::string Ctx::dim_value(const std::string& v, int64_t axis) {
  const ValueType& t = type(v);
  if (!t.shape) fail("internal: rank unknown for '" + v + "'");
  axis = norm_axis(axis, t.shape->size());
  if (axis < 0 || axis >= static_cast<int64_t>(t.shape->size()))
    fail("internal: dim " + std::to_string(axis) + " of '" + v + "', of rank " +
         std::to_string(t.shape->size()));
  const Dim& d = (*t.shape)[static_cast<size_t>(axis)];
  if (d.is_static()) return b.const_i64({d.value});
  // One Shape read per symbolic size for the whole graph.
  std::string key = d.sym.empty() ? std::string() : "dim:" + d.sym;
  if (!key.empty())
    if (auto it = env.cache.find(key); it != env.cache.end()) return it->second;
  // Shape's start/end attributes are opset 15; before that, Shape + Slice.
  std::string r = opset() >= 15
                      ? b.op("Shape", {v}, {Attr::Int("start", axis), Attr::Int("end", axis + 1)})
                      : b.op("Slice", {b.op("Shape", {v}), b.const_i64({axis}),
                                       b.const_i64({axis + 1}), b.const_i64({0})});
  if (!key.empty()) env.cache.emplace(key, r);
  return r;
}

std::string Ctx::unsqueeze(const std::string& v, const std::vector<int64_t>& axes) {
  return b.op("Unsqueeze", {v, b.const_i64(axes)});
}

std::string Ctx::squeeze(const std::string& v, const std::vector<int64_t>& axes) {
  return b.op("Squeeze", {v, b.const_i64(axes)});
}

std::string Ctx::transpose(const std::string& v, const std::vector<int64_t>& perm) {
  bool identity = true;
  for (size_t k = 0; k < perm.size(); ++k) identity &= perm[k] == static_cast<int64_t>(k);
  if (identity) return v;
  return b.op("Transpose", {v}, {Attr::Ints("perm", perm)});
}

std::string Ctx::reshape(const std::string& v, const std::string& shape) {
  return b.op("Reshape", {v, shape});
}

std::pair<int64_t, int64_t> Ctx::static_matrix_dims(const std::string& a, const char* what) {
  const Shape& s = *type(a).shape;
  if (s.size() < 2 || !s[s.size() - 2].is_static() || !s.back().is_static())
    fail(std::string(what) + " is unrolled per element: the matrix dims must be static");
  return {s[s.size() - 2].value, s.back().value};
}

bool Ctx::emit_known_symint() {
  auto it = prog.graph.sym_int_values.find(out_name(0));
  if (it == prog.graph.sym_int_values.end()) return false;
  std::optional<int64_t> v = it->second.value;
  if (!v && it->second.expr && it->second.expr->is_integer()) v = it->second.expr->eval({});
  if (!v) return false;
  set_output(0, b.const_i64({*v}));
  return true;
}

std::string Ctx::eye(int64_t rows, int64_t cols, DType t) {
  std::vector<double> v(static_cast<size_t>(rows * cols), 0);
  for (int64_t i = 0; i < std::min(rows, cols); ++i) v[static_cast<size_t>(i * cols + i)] = 1;
  return cast(b.constant(TensorData::from_vector(DType::Double, {rows, cols}, v)), t);
}

std::string Ctx::reduce(const std::string& op, const std::string& v,
                        const std::vector<int64_t>& axes, bool keepdims) {
  // Axes became an input: ReduceSum at opset 13, the other Reduce ops at 18.
  bool axes_input = op == "ReduceSum" ? opset() >= 13 : opset() >= 18;
  std::vector<Attr> attrs{Attr::Int("keepdims", keepdims ? 1 : 0)};
  if (axes.empty()) return b.op(op, {v}, attrs);
  if (axes_input) return b.op(op, {v, b.const_i64(axes)}, attrs);
  attrs.push_back(Attr::Ints("axes", axes));
  return b.op(op, {v}, attrs);
}

}  // namespace pt2onnx
