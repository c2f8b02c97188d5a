// Tensor creation: arange, linspace / logspace, full/zeros/ones/empty (and the
// strided / permuted empties), fill / zero, *_like, new_*, scalar_tensor
// (and the promote_types torch.tensor of SymInts traces),
// eye, tril / triu_indices, dtype conversions (to / _to_copy / type_as) and
// the storage queries (sym_storage_offset / sym_stride). Static results stay
// small in the file: ConstantOfShape, not a filled initializer. Complex
// results use the [..., 2] form of complex.cpp.
#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "convert/complex.h"
#include "convert/context.h"
#include "convert/convert_graph.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

// A tensor of shape `shape` (1-D int64 value) filled with `value`, of torch
// type `t` (complex: real part `value`, imaginary part 0). `out` is the type
// of the result when it is the node's output.
std::string fill_shape(Ctx& c, const std::string& shape, DType t, const std::string& value_arg,
                       std::optional<double> value, std::optional<ValueType> out) {
  if (is_complex(t)) {
    DType rt = complex_component(t);
    return complex_from_real(c, fill_shape(c, shape, rt, value_arg, value, std::nullopt));
  }
  if (value) {
    if (auto one = TensorData::scalar(t, *value, {1}))  // ConstantOfShape's value
      return c.b.op("ConstantOfShape", {shape}, {Attr::Tensor("value", *one)}, out);
    return c.b.op("Expand", {c.b.scalar(t, *value), shape}, {}, out);
  }
  // A tensor / symbolic fill value.
  return c.b.op("Expand", {c.operand(value_arg, t), shape}, {}, out);
}

std::string fill(Ctx& c, const std::string& shape, DType t, const std::string& value_arg,
                 std::optional<double> value) {
  ValueType out = c.out_type();  // torch's shape; the type asked for (it may differ)
  out.dtype = t;
  return fill_shape(c, shape, t, value_arg, value, out);
}

// The torch shape of `x` (argument `name`) as a 1-D int64 value: complex
// values drop their trailing component dim.
std::string shape_of_like(Ctx& c, const std::string& x, bool complex = false) {
  if (auto d = c.type(x).static_dims()) {
    if (complex) d->pop_back();
    return c.b.const_i64(*d);
  }
  if (complex) {
    std::string full = c.b.op("Shape", {x});
    return c.b.op("Slice", {full, c.b.const_i64({0}), c.b.const_i64({-1})});
  }
  return c.b.op("Shape", {x});
}

std::string self_shape(Ctx& c) {
  return shape_of_like(c, c.tensor("self"), is_complex_arg(c, "self"));
}

void full(Ctx& c) {
  std::string shape = c.shape_tensor(c.symints("size"));
  c.set_output(0, fill(c, shape, c.out_dtype(), "fill_value", c.scalar_value("fill_value")));
}
void zeros(Ctx& c) {
  c.set_output(0, fill(c, c.shape_tensor(c.symints("size")), c.out_dtype(), "", 0.0));
}
void ones(Ctx& c) {
  c.set_output(0, fill(c, c.shape_tensor(c.symints("size")), c.out_dtype(), "", 1.0));
}

void full_like(Ctx& c) {
  c.set_output(0,
               fill(c, self_shape(c), c.out_dtype(), "fill_value", c.scalar_value("fill_value")));
}
void zeros_like(Ctx& c) { c.set_output(0, fill(c, self_shape(c), c.out_dtype(), "", 0.0)); }
void ones_like(Ctx& c) { c.set_output(0, fill(c, self_shape(c), c.out_dtype(), "", 1.0)); }
// fill.Scalar / fill.Tensor: self's shape, `value` (cast to self's type).
void fill_value(Ctx& c) {
  c.set_output(0, fill(c, self_shape(c), c.out_dtype(), "value", c.scalar_value("value")));
}
void new_full(Ctx& c) {
  std::string shape = c.shape_tensor(c.symints("size"));
  c.set_output(0, fill(c, shape, c.out_dtype(), "fill_value", c.scalar_value("fill_value")));
}
void new_zeros(Ctx& c) { zeros(c); }
void new_ones(Ctx& c) { ones(c); }

// torch.tensor([a, b]) of SymInts traces promote_types of the elements' dtypes
// and then uses its own: torch's serializer writes the node with no output
// (a dtype is no value of the graph), so there is nothing to compute.
void promote_types(Ctx& c) {
  for (auto& o : c.node.outputs)
    if (o.kind != schema::ArgKind::None)
      c.fail("promote_types' result (a dtype) used as a value: ONNX graphs hold no dtype values");
}

void scalar_tensor(Ctx& c) {
  DType t = c.out_dtype();
  if (auto v = c.scalar_value("s")) {
    if (is_complex(t)) {
      c.set_output(0, complex_from_real(c, c.b.scalar(complex_component(t), *v)));
      return;
    }
    c.set_output(0, c.b.scalar(t, *v));
    return;
  }
  // A symbolic value (SymInt / SymFloat / SymBool).
  c.set_output(0, c.operand("s", t));
}

// Values computed in double, stored as type t (integer types truncate as
// torch's casts do); nullopt for types without an exact C++ representation.
std::optional<TensorData> values_of(DType t, const std::vector<double>& v) {
  auto n = static_cast<int64_t>(v.size());
  switch (t) {
    case DType::Int64:
      return TensorData::from_vector(t, {n}, std::vector<int64_t>(v.begin(), v.end()));
    case DType::Int32:
      return TensorData::from_vector(t, {n}, std::vector<int32_t>(v.begin(), v.end()));
    case DType::Int16:
      return TensorData::from_vector(t, {n}, std::vector<int16_t>(v.begin(), v.end()));
    case DType::Int8:
      return TensorData::from_vector(t, {n}, std::vector<int8_t>(v.begin(), v.end()));
    case DType::UInt8:
      return TensorData::from_vector(t, {n}, std::vector<uint8_t>(v.begin(), v.end()));
    case DType::Float:
      return TensorData::from_vector(t, {n}, std::vector<float>(v.begin(), v.end()));
    case DType::Double:
      return TensorData::from_vector(t, {n}, v);
    default:
      return std::nullopt;
  }
}

// A constant of the values, cast at run time for types values_of lacks.
std::string constant_values(Ctx& c, DType t, const std::vector<double>& v) {
  if (auto d = values_of(t, v)) return c.b.constant(std::move(*d));
  return c.cast(c.b.constant(*values_of(DType::Double, v)), t);
}

void arange(Ctx& c) {
  DType t = c.out_dtype();
  bool has_start = c.arg("start") != nullptr;
  auto num = [&](const char* name, double def) -> std::optional<double> {
    if (!c.arg(name)) return def;
    return c.scalar_value(name);
  };
  auto start = has_start ? num("start", 0) : std::optional<double>(0.0);
  auto end = num("end", 0);
  auto step = num("step", 1);
  if (start && end && step) {
    // Static: a constant of the exact values torch computes (the count is
    // ceil((end - start) / step), computed in double as torch does).
    if (*step == 0) c.fail("arange step is zero");
    double count = std::ceil((*end - *start) / *step);
    int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
    if (n <= 4096) {
      std::vector<double> v(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k)
        v[static_cast<size_t>(k)] = *start + static_cast<double>(k) * *step;
      c.set_output(0, constant_values(c, t, v));
      return;
    }
  }
  // Range computes in one type: the output type where onnxruntime has a
  // kernel (int32/int64/float/double), else double then a cast.
  bool native = t == DType::Int64 || t == DType::Int32 || t == DType::Float || t == DType::Double;
  DType rt = native ? t : (is_integral(t) ? DType::Int64 : DType::Double);
  auto scalar_of = [&](const char* name, double def) {
    if (!c.arg(name)) return c.b.scalar(rt, def);
    return c.operand(name, rt);
  };
  std::string s = has_start ? scalar_of("start", 0) : c.b.scalar(rt, 0);
  std::string e = scalar_of("end", 0);
  std::string st = scalar_of("step", 1);
  if (native) {
    c.set_output(0, c.b.op("Range", {s, e, st}, {}, c.out_type()));
    return;
  }
  c.set_output(0, c.cast(c.b.op("Range", {s, e, st}), t));
}

// linspace values as torch computes them: step = (end - start) / (steps - 1);
// the first half counts up from start, the second half down from end.
std::vector<double> linspace_values(double start, double end, int64_t steps) {
  std::vector<double> v(static_cast<size_t>(std::max<int64_t>(steps, 0)));
  if (steps == 1) v[0] = start;
  if (steps <= 1) return v;
  double step = (end - start) / static_cast<double>(steps - 1);
  int64_t half = steps / 2;
  for (int64_t k = 0; k < steps; ++k)
    v[static_cast<size_t>(k)] = k < half ? start + step * static_cast<double>(k)
                                         : end - step * static_cast<double>(steps - k - 1);
  return v;
}

// The same at run time, for tensor start / end (0-dim), computed in `ct`.
std::string linspace_runtime(Ctx& c, const std::string& start, const std::string& end,
                             int64_t steps, DType ct) {
  if (steps == 1) return c.unsqueeze(start, {0});
  if (steps <= 0) return c.b.constant(*values_of(ct, {}));
  std::string idx =
      c.b.constant(*values_of(ct, linspace_values(0, static_cast<double>(steps - 1), steps)));
  std::string step =
      c.b.op("Div", {c.b.op("Sub", {end, start}), c.b.scalar(ct, static_cast<double>(steps - 1))});
  std::string up = c.b.op("Add", {start, c.b.op("Mul", {step, idx})});
  std::string rev = c.b.op("Sub", {c.b.scalar(ct, static_cast<double>(steps - 1)), idx});
  std::string down = c.b.op("Sub", {end, c.b.op("Mul", {step, rev})});
  std::vector<uint8_t> first(static_cast<size_t>(steps));
  for (int64_t k = 0; k < steps; ++k) first[static_cast<size_t>(k)] = k < steps / 2;
  std::string mask = c.b.constant(TensorData::from_bytes(DType::Bool, {steps}, first));
  return c.b.op("Where", {mask, up, down});
}

// linspace / logspace (base given): all overloads (Scalar or 0-dim Tensor
// start / end).
void spaced(Ctx& c, std::optional<double> base) {
  DType t = c.out_dtype();
  int64_t steps = c.i("steps");
  auto s = c.scalar_value("start"), e = c.scalar_value("end");
  // Integer results are computed in double (torch's step type for them).
  DType ct = is_floating(t) && t != DType::Float16 && t != DType::BFloat16 ? t : DType::Double;
  if (is_complex(t)) c.fail("complex linspace / logspace is not converted");
  if (s && e) {
    std::vector<double> v = linspace_values(*s, *e, steps);
    if (base)
      for (auto& x : v) x = std::pow(*base, x);
    c.set_output(0, constant_values(c, t, v));
    return;
  }
  std::string r = linspace_runtime(c, c.operand("start", ct), c.operand("end", ct), steps, ct);
  if (base) r = c.b.op("Pow", {c.b.scalar(ct, *base), r});
  c.set_output(0, c.cast(r, t));
}
void linspace(Ctx& c) { spaced(c, std::nullopt); }
void logspace(Ctx& c) { spaced(c, c.f("base", 10.0)); }

// eye(n) / eye(n, m), sizes constant or symbolic: EyeLike of a zero [n, m].
void eye(Ctx& c) {
  std::vector<schema::SymIntArg> dims = c.symints("n");
  if (dims.size() != 1) c.fail("eye: 'n' is not one int");
  if (c.has("m")) {
    auto m = c.symints("m");
    if (m.size() != 1) c.fail("eye: 'm' is not one int");
    dims.push_back(m[0]);
  } else {
    dims.push_back(dims[0]);
  }
  std::string shape = c.shape_tensor(dims);
  DType t = c.out_dtype();
  if (is_complex(t)) {
    DType rt = complex_component(t);
    std::string z = fill_shape(c, shape, rt, "", 0.0, std::nullopt);
    ValueType et = c.out_type();  // the carried [n, m, 2]
    et.dtype = rt;
    if (et.shape && et.shape->size() == 3) et.shape->pop_back();
    c.set_output(0, complex_from_real(c, c.b.op("EyeLike", {z}, {}, et)));
    return;
  }
  DType kt = c.kernel_type("EyeLike", t);
  std::string zeros_v = fill(c, shape, kt, "", 0.0);
  ValueType et = c.out_type();
  et.dtype = kt;
  c.set_output(0, c.cast(c.b.op("EyeLike", {zeros_v}, {}, et), t));
}

// tril_indices / triu_indices: a constant [2, N] of (row, col) pairs in
// row-major order.
void tri_indices(Ctx& c, bool lower) {
  int64_t rows = c.i("row"), cols = c.i("col"), offset = c.i("offset", 0);
  std::vector<double> r, k;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      if (lower ? j - i <= offset : j - i >= offset) {
        r.push_back(static_cast<double>(i));
        k.push_back(static_cast<double>(j));
      }
  std::vector<double> all = r;
  all.insert(all.end(), k.begin(), k.end());
  // Built as [2, N] directly (a Reshape to [2, 0] would read 0 as "keep").
  std::optional<TensorData> d = values_of(c.out_dtype(), all);
  if (!d) c.fail("tril / triu_indices of type " + std::string(dtype_name(c.out_dtype())));
  d->dims = {2, static_cast<int64_t>(r.size())};
  c.set_output(0, c.b.constant(std::move(*d)));
}
void tril_indices(Ctx& c) { tri_indices(c, true); }
void triu_indices(Ctx& c) { tri_indices(c, false); }

// to / _to_copy / type_as / the dtype conversions: torch's recorded result
// type, complex on either side included.
void to_dtype(Ctx& c) { c.set_output(0, convert_dtype(c, "self", c.out_dtype())); }

// hash_tensor (mode 0): every element widened to 64 bits, read as uint64,
// and the bits xor-reduced over `dim` (all dims when empty). Integers and
// bools widen with Cast (two's complement keeps the bits); floating values
// need their float64 bits, which only BitCast (opset 26) reads. The xor
// reduction is a halving tree of BitwiseXor (opset 18) over static sizes.
void hash_tensor(Ctx& c) {
  if (c.i("mode", 0) != 0) c.fail("hash_tensor mode " + std::to_string(c.i("mode", 0)));
  std::string x = c.tensor("self");
  DType in = c.dtype(x);
  if (is_complex_arg(c, "self")) c.fail("hash_tensor of a complex tensor is not converted");
  std::string bits;
  if (is_integral(in) || in == DType::Bool) {
    bits = c.cast(c.cast(x, DType::Int64), DType::UInt64);
  } else if (c.opset() >= 26) {
    bits = c.b.op("BitCast", {c.cast(x, DType::Double)},
                  {Attr::Int("to", static_cast<int64_t>(DType::UInt64))});
  } else {
    c.fail(
        "hash_tensor of a floating tensor reads its float64 bits, which needs BitCast "
        "(ONNX opset 26)");
  }
  auto dims = c.type(x).static_dims();
  if (!dims) c.fail("hash_tensor needs static sizes (the xor reduction is unrolled)");
  auto rank = static_cast<int64_t>(dims->size());
  if (rank == 0) {
    // One element: its bits (dim 0 / -1 of a 0-dim tensor is the tensor).
    c.set_output(0, c.b.op("Identity", {bits}, {}, c.out_type()));
    return;
  }
  std::vector<int64_t> axes = c.ints("dim", {});
  for (auto a : axes)
    if (a < -rank || a >= rank) c.fail("hash_tensor dim " + std::to_string(a) + " out of range");
  if (axes.empty())
    for (int64_t k = 0; k < rank; ++k) axes.push_back(k);
  std::vector<bool> reduced(static_cast<size_t>(rank));
  for (auto a : axes)
    reduced[static_cast<size_t>(Ctx::norm_axis(a, static_cast<size_t>(rank)))] = true;
  // Kept dims first, reduced dims flattened into the last one.
  std::vector<int64_t> perm, kept;
  int64_t k = 1;
  for (int64_t a = 0; a < rank; ++a)
    if (!reduced[static_cast<size_t>(a)])
      perm.push_back(a), kept.push_back((*dims)[static_cast<size_t>(a)]);
  for (int64_t a = 0; a < rank; ++a)
    if (reduced[static_cast<size_t>(a)]) perm.push_back(a), k *= (*dims)[static_cast<size_t>(a)];
  std::vector<int64_t> flat = kept;
  flat.push_back(k);
  std::string v = c.reshape(c.transpose(bits, perm), c.b.const_i64(flat));
  auto slice = [&](int64_t from, int64_t to) {
    return c.b.op("Slice", {v, c.b.const_i64({from}), c.b.const_i64({to}), c.b.const_i64({-1})});
  };
  if (k == 0) {
    // xor over nothing: 0.
    std::vector<int64_t> z = kept;
    z.push_back(1);
    auto zero = TensorData::scalar(DType::UInt64, 0.0, {1});
    v = c.b.op("ConstantOfShape", {c.b.const_i64(z)}, {Attr::Tensor("value", *zero)});
    k = 1;
  }
  while (k > 1) {
    int64_t h = k / 2;
    std::string folded = c.b.op("BitwiseXor", {slice(0, h), slice(h, 2 * h)});
    v = k % 2 ? c.b.op("Concat", {folded, slice(2 * h, k)}, {Attr::Int("axis", -1)}) : folded;
    k = h + k % 2;
  }
  // v is [kept..., 1]: the reduced dims back as 1s (keepdim) or dropped.
  std::vector<int64_t> out;
  size_t ki = 0;
  bool keepdim = c.flag("keepdim", false);
  for (int64_t a = 0; a < rank; ++a) {
    if (!reduced[static_cast<size_t>(a)])
      out.push_back(kept[ki++]);
    else if (keepdim)
      out.push_back(1);
  }
  c.set_output(0, c.b.op("Reshape", {v, c.b.const_i64(out)}, {}, c.out_type()));
}

// True when FX value `name` only feeds runtime assertions (directly or through
// the symbolic arithmetic and comparisons that build them), or nothing.
bool only_feeds_asserts(const schema::Program& prog, const std::string& name, int depth = 0) {
  if (depth > 8) return false;
  for (auto& n : prog.graph.nodes) {
    bool uses = false;
    for (auto& in : n.inputs) {
      const schema::Argument& a = in.arg;
      uses |= a.name == name;
      for (auto& x : a.names) uses |= x == name;
      for (auto& s : a.symints) uses |= s.name == name;
    }
    if (!uses) continue;
    if (is_ignored_target(n.target)) continue;
    if (n.target.rfind("_operator.", 0) != 0 && n.target.rfind("torch.sym_", 0) != 0) return false;
    for (auto& o : n.outputs) {
      std::string out = !o.name.empty() ? o.name : (o.symints.empty() ? "" : o.symints[0].name);
      if (!out.empty() && !only_feeds_asserts(prog, out, depth + 1)) return false;
    }
  }
  for (auto& o : prog.graph.outputs)
    if (o.name == name || (!o.symints.empty() && o.symints[0].name == name)) return false;
  return true;
}

// Storage offsets and strides describe torch's memory layout, which ONNX
// tensors do not have: converted where torch knows them as constants, or
// where the value only feeds runtime assertions (then any value will do).
void storage_query(Ctx& c, const char* what) {
  if (c.emit_known_symint()) return;
  if (only_feeds_asserts(c.prog, c.out_name(0))) {
    c.set_output(0, c.b.const_i64({0}));
    return;
  }
  c.fail(std::string("the ") + what +
         " of a tensor is a memory-layout property that ONNX tensors do not have; it is "
         "converted only when torch knows it as a constant");
}
void sym_storage_offset(Ctx& c) { storage_query(c, "storage offset"); }
void sym_stride(Ctx& c) { storage_query(c, "stride"); }

}  // namespace

void register_creation(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "full.default", full);
  for (const char* o : {"zeros.default", "empty.memory_format", "empty.default",
                        "empty_strided.default", "empty_permuted.default"})
    r.add(p + o, zeros);
  r.add(p + "ones.default", ones);
  r.add(p + "full_like.default", full_like);
  for (const char* o :
       {"zeros_like.default", "empty_like.default", "zero.default", "zero_.default"})
    r.add(p + o, zeros_like);
  r.add(p + "ones_like.default", ones_like);
  for (const char* o : {"fill.Scalar", "fill.Tensor", "fill_.Scalar", "fill_.Tensor"})
    r.add(p + o, fill_value);
  r.add(p + "new_full.default", new_full);
  for (const char* o : {"new_zeros.default", "new_empty.default", "new_empty_strided.default"})
    r.add(p + o, new_zeros);
  r.add(p + "new_ones.default", new_ones);
  r.add(p + "scalar_tensor.default", scalar_tensor);
  r.add(p + "promote_types.default", promote_types);
  for (const char* o : {"arange.default", "arange.start", "arange.start_step"})
    r.add(p + o, arange);
  for (const char* o : {"linspace.default", "linspace.Tensor_Tensor", "linspace.Tensor_Scalar",
                        "linspace.Scalar_Tensor"})
    r.add(p + o, linspace);
  for (const char* o : {"logspace.default", "logspace.Tensor_Tensor", "logspace.Tensor_Scalar",
                        "logspace.Scalar_Tensor"})
    r.add(p + o, logspace);
  for (const char* o : {"eye.default", "eye.m"}) r.add(p + o, eye);
  r.add(p + "tril_indices.default", tril_indices);
  r.add(p + "triu_indices.default", triu_indices);
  for (const char* o : {"to.dtype", "to.dtype_layout", "to.device", "_to_copy.default", "to.other",
                        "type_as.default", "_to_dim_order_copy.default", "chalf.default"})
    r.add(p + o, to_dtype);
  r.add(p + "hash_tensor.default", hash_tensor, 18);
  r.add(p + "sym_storage_offset.default", sym_storage_offset);
  r.add(p + "sym_stride.int", sym_stride);
}

}  // namespace pt2onnx
