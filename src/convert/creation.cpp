// Tensor creation: arange, full/zeros/ones/empty, *_like, new_*, scalar_tensor,
// eye. Static results stay small in the file: ConstantOfShape, not a filled
// initializer.
#include <cmath>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

// A tensor of shape `shape` (1-D int64 value) filled with `value`.
std::string fill(Ctx& c, const std::string& shape, DType t, const std::string& value_arg,
                 std::optional<double> value) {
  ValueType out = c.out_type();
  if (value) {
    if (auto one = TensorData::scalar(t, *value, {1}))  // ConstantOfShape's value
      return c.b.op("ConstantOfShape", {shape}, {Attr::Tensor("value", *one)}, out);
    return c.b.op("Expand", {c.b.scalar(t, *value), shape}, {}, out);
  }
  // A tensor / symbolic fill value.
  return c.b.op("Expand", {c.operand(value_arg, t), shape}, {}, out);
}

std::string shape_of_like(Ctx& c, const std::string& x) {
  if (auto d = c.type(x).static_dims()) return c.b.const_i64(*d);
  return c.b.op("Shape", {x});
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
  std::string shape = shape_of_like(c, c.tensor("self"));
  c.set_output(0, fill(c, shape, c.out_dtype(), "fill_value", c.scalar_value("fill_value")));
}
void zeros_like(Ctx& c) {
  c.set_output(0, fill(c, shape_of_like(c, c.tensor("self")), c.out_dtype(), "", 0.0));
}
void ones_like(Ctx& c) {
  c.set_output(0, fill(c, shape_of_like(c, c.tensor("self")), c.out_dtype(), "", 1.0));
}
void new_full(Ctx& c) {
  std::string shape = c.shape_tensor(c.symints("size"));
  c.set_output(0, fill(c, shape, c.out_dtype(), "fill_value", c.scalar_value("fill_value")));
}
void new_zeros(Ctx& c) { zeros(c); }
void new_ones(Ctx& c) { ones(c); }

void scalar_tensor(Ctx& c) {
  auto v = c.scalar_value("s");
  if (!v) c.fail("scalar_tensor of a symbolic value is not converted");
  c.set_output(0, c.b.scalar(c.out_dtype(), *v));
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
    // Static: a constant of the exact values torch computes.
    if (*step == 0) c.fail("arange step is zero");
    int64_t n = static_cast<int64_t>(std::ceil((*end - *start) / *step));
    if (n < 0) n = 0;
    if (n <= 4096 &&
        (t == DType::Int64 || t == DType::Float || t == DType::Int32 || t == DType::Double)) {
      std::vector<double> v(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k)
        v[static_cast<size_t>(k)] = *start + static_cast<double>(k) * *step;
      TensorData d;
      if (t == DType::Int64) {
        std::vector<int64_t> iv(v.begin(), v.end());
        d = TensorData::from_vector(t, {n}, iv);
      } else if (t == DType::Int32) {
        std::vector<int32_t> iv(v.begin(), v.end());
        d = TensorData::from_vector(t, {n}, iv);
      } else if (t == DType::Float) {
        std::vector<float> fv(v.begin(), v.end());
        d = TensorData::from_vector(t, {n}, fv);
      } else {
        d = TensorData::from_vector(t, {n}, v);
      }
      c.set_output(0, c.b.constant(std::move(d)));
      return;
    }
  }
  // Range computes in the output type (it supports int and float types).
  auto scalar_of = [&](const char* name, double def) {
    if (!c.arg(name)) return c.b.scalar(t, def);
    return c.operand(name, t);
  };
  std::string s = has_start ? scalar_of("start", 0) : c.b.scalar(t, 0);
  std::string e = scalar_of("end", 0);
  std::string st = scalar_of("step", 1);
  c.set_output(0, c.b.op("Range", {s, e, st}, {}, c.out_type()));
}

void eye(Ctx& c) {
  int64_t n = c.i("n");
  int64_t m = c.i("m", n);
  DType t = c.out_dtype();
  std::string zeros_v = fill(c, c.b.const_i64({n, m}), t, "", 0.0);
  c.set_output(0, c.b.op("EyeLike", {zeros_v}, {}, c.out_type()));
}

}  // namespace

void register_creation(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "full.default", full);
  for (const char* o : {"zeros.default", "empty.memory_format"}) r.add(p + o, zeros);
  r.add(p + "ones.default", ones);
  r.add(p + "full_like.default", full_like);
  for (const char* o : {"zeros_like.default", "empty_like.default"}) r.add(p + o, zeros_like);
  r.add(p + "ones_like.default", ones_like);
  r.add(p + "new_full.default", new_full);
  for (const char* o : {"new_zeros.default", "new_empty.default"}) r.add(p + o, new_zeros);
  r.add(p + "new_ones.default", new_ones);
  r.add(p + "scalar_tensor.default", scalar_tensor);
  for (const char* o : {"arange.default", "arange.start", "arange.start_step"})
    r.add(p + o, arange);
  for (const char* o : {"eye.default", "eye.m"}) r.add(p + o, eye);
}

}  // namespace pt2onnx
