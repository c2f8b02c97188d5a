// Quantization ops: PT2E's quantized_decomposed (quantize / dequantize per
// tensor and per channel, choose_qparams for dynamic quantization), torchao's
// quantize_affine / dequantize_affine / choose_qparams_affine, and the
// fake-quantize ops of quantization-aware training.
//
// Where ONNX has the form (per tensor and per axis at every opset, one
// blocked axis from opset 21) they become QuantizeLinear / DequantizeLinear
// with the program's scales, zero points and element type, so onnxruntime's
// QDQ optimizer can fuse the pairs around a Conv / MatMul into integer
// kernels. A quant_min / quant_max narrower than the type becomes a Clip on
// the integers. Every other form is computed as torch computes it
// (round(x * (1 / scale)) + zero_point, clamped), which is exact.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

struct IntRange {
  int64_t lo, hi;
};

std::optional<IntRange> int_range(DType t) {
  switch (t) {
    case DType::Int8:
      return IntRange{-128, 127};
    case DType::UInt8:
      return IntRange{0, 255};
    case DType::Int16:
      return IntRange{-32768, 32767};
    case DType::UInt16:
      return IntRange{0, 65535};
    case DType::Int32:
      return IntRange{INT32_MIN, INT32_MAX};
    default:
      return std::nullopt;
  }
}

// The type ONNX's QuantizeLinear (or, with `dequantize`, DequantizeLinear)
// has for integers of torch type t at this opset; nullopt: none.
std::optional<DType> qdq_type(DType t, int opset, bool dequantize) {
  if (t == DType::Int8 || t == DType::UInt8) return t;
  if (t == DType::Int32 && dequantize) return t;
  if (opset >= 21 && (t == DType::Int16 || t == DType::UInt16)) return t;
  return std::nullopt;
}

// The narrowest Q/DQ type holding [lo, hi] (fake quantization keeps only the
// range); nullopt when none at this opset.
std::optional<DType> type_for_range(int64_t lo, int64_t hi, int opset) {
  for (DType t : {DType::UInt8, DType::Int8, DType::UInt16, DType::Int16}) {
    if (!qdq_type(t, opset, false)) continue;
    IntRange r = *int_range(t);
    if (lo >= r.lo && hi <= r.hi) return t;
  }
  return std::nullopt;
}

// Element k of a constant of any real type, as double.
double element(const TensorData& d, size_t k) {
  if (auto v = element_as_double(d, k)) return *v;
  throw std::runtime_error("quantization parameter of type " + std::string(dtype_name(d.dtype)));
}

TensorData ints_as(DType t, std::vector<int64_t> dims, const std::vector<int64_t>& v) {
  size_t w = dtype_size(t);
  std::vector<uint8_t> b(v.size() * w);
  for (size_t k = 0; k < v.size(); ++k) {
    int64_t x = v[k];
    switch (t) {
      case DType::Int8: {
        auto y = static_cast<int8_t>(x);
        std::memcpy(&b[k], &y, 1);
        break;
      }
      case DType::UInt8:
        b[k] = static_cast<uint8_t>(x);
        break;
      case DType::Int16: {
        auto y = static_cast<int16_t>(x);
        std::memcpy(&b[2 * k], &y, 2);
        break;
      }
      case DType::UInt16: {
        auto y = static_cast<uint16_t>(x);
        std::memcpy(&b[2 * k], &y, 2);
        break;
      }
      case DType::Int32: {
        auto y = static_cast<int32_t>(x);
        std::memcpy(&b[4 * k], &y, 4);
        break;
      }
      default: {
        std::memcpy(&b[8 * k], &x, 8);
      }
    }
  }
  return TensorData::from_bytes(t, std::move(dims), std::move(b));
}

// `v` (scale or zero point) shaped `dims` ({} = scalar, as a per-tensor
// QuantizeLinear wants it): a constant when it is one, else a Reshape.
std::string shaped(Ctx& c, const std::string& v, const std::vector<int64_t>& dims) {
  if (auto s = c.type(v).static_dims(); s && *s == dims) return v;
  return c.reshape(v, c.b.const_i64(dims));
}

// A zero point of type t shaped `dims`; constants are written in type t
// directly (a zero point is an int64 buffer in torch's programs), other
// values are cast at run time. Rounded first when it is a float.
std::string zero_point_as(Ctx& c, const std::optional<std::string>& zp, DType t,
                          const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  if (!zp) return c.b.constant(ints_as(t, dims, std::vector<int64_t>(static_cast<size_t>(n), 0)));
  if (const TensorData* d = c.b.constant_value(*zp); d && d->numel() == n) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (size_t k = 0; k < v.size(); ++k)
      v[k] = static_cast<int64_t>(std::nearbyint(element(*d, k)));
    return c.b.constant(ints_as(t, dims, v));
  }
  std::string z = *zp;
  if (is_floating(c.dtype(z))) z = c.b.op("Round", {z});
  return shaped(c, c.cast(z, t), dims);
}

std::string clip_ints(Ctx& c, const std::string& q, DType t, int64_t lo, int64_t hi) {
  IntRange r = *int_range(t);
  if (lo <= r.lo && hi >= r.hi) return q;
  return c.b.op("Clip", {q, c.b.constant(ints_as(t, {}, {std::max(lo, r.lo)})),
                         c.b.constant(ints_as(t, {}, {std::min(hi, r.hi)}))});
}

// How a scale maps onto its input (torchao's block_size; per tensor and per
// channel are special cases): `blocks[i]` scale entries along dim i (-1: a
// dynamic dim, one per element).
//   per tensor: axis -1, !general;   per axis: `axis`, block 1;
//   blocked: `axis` holds blocks of `block` (> 1), every other dim one scale
//   per element;   general (anything else): computed as torch does.
struct Layout {
  std::vector<int64_t> blocks;
  int64_t axis = -1;
  int64_t block = 1;
  bool general = false;
};

// QuantizeLinear / DequantizeLinear's (axis, block_size) for `lay`, or
// nullopt when ONNX cannot say it at this opset.
std::optional<std::pair<int64_t, int64_t>> qdq_form(const Layout& lay, int opset) {
  if (lay.general) return std::nullopt;
  if (lay.axis < 0) return std::pair<int64_t, int64_t>{0, 0};  // per tensor
  if (lay.block == 1) return std::pair<int64_t, int64_t>{lay.axis, 0};
  if (opset < 21) return std::nullopt;
  return std::pair<int64_t, int64_t>{lay.axis, lay.block};
}

// Dims of `x` with -1 for a dynamic one; at most one may be (it is the -1 of
// the Reshapes below), and its block must be 1 (per token).
std::vector<int64_t> dims_of(Ctx& c, const std::string& x, const char* what) {
  const auto& s = c.type(x).shape;
  if (!s) c.fail(std::string(what) + " needs the input's rank known when exporting");
  std::vector<int64_t> d;
  int dynamic = 0;
  for (const Dim& k : *s) {
    d.push_back(k.is_static() ? k.value : -1);
    dynamic += !k.is_static();
  }
  if (dynamic > 1) c.fail(std::string(what) + " with more than one dynamic dim has no converter");
  return d;
}

// torchao's _get_reduction_params as a Layout (block == size: one scale
// along the dim; 1: one per element). A dynamic dim (-1) needs block 1.
Layout layout_of(Ctx& c, const std::vector<int64_t>& dims, const std::vector<int64_t>& block) {
  if (block.size() != dims.size()) c.fail("block_size has a different rank than the input");
  Layout lay;
  std::vector<int64_t> size_of_block;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      if (block[i] != 1)
        c.fail("a block along a dynamic dim has no converter (export with it static)");
      lay.blocks.push_back(-1);
      size_of_block.push_back(1);
      continue;
    }
    int64_t b = std::max<int64_t>(block[i] <= 0 ? dims[i] : block[i], 1);
    if (dims[i] % b != 0)
      c.fail("block_size " + std::to_string(b) + " does not divide dim " + std::to_string(dims[i]));
    lay.blocks.push_back(dims[i] / b);
    size_of_block.push_back(dims[i] / b > 1 ? b : dims[i]);
  }
  std::vector<size_t> many, partial;  // dims with several scales; of those, blocks > 1
  for (size_t i = 0; i < dims.size(); ++i) {
    if (lay.blocks[i] == 1) continue;
    many.push_back(i);
    if (size_of_block[i] > 1) partial.push_back(i);
  }
  if (many.empty()) return lay;  // per tensor
  if (many.size() == 1 && partial.empty()) {
    lay.axis = static_cast<int64_t>(many[0]);
    return lay;
  }
  // Blocked: one dim of blocks, every other dim with several scales has one
  // per element, and the dims not in `many` are whole (one scale along
  // them), which ONNX's blocked form cannot say unless they have size 1.
  bool blocked = partial.size() == 1;
  for (size_t i = 0; i < dims.size() && blocked; ++i)
    if (i != partial[0] && size_of_block[i] != 1) blocked = false;
  if (blocked) {
    lay.axis = static_cast<int64_t>(partial[0]);
    lay.block = size_of_block[partial[0]];
  } else {
    lay.general = true;
  }
  return lay;
}

// Per-element view of a blocked scale: x reshaped [.., n_i, b_i, ..] and the
// scale [.., n_i, 1, ..], the shapes torch's arithmetic uses.
struct Split {
  std::vector<int64_t> x_shape, param_shape;
};
Split split_of(const std::vector<int64_t>& dims, const Layout& lay) {
  Split s;
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t n = lay.blocks[i], b = n < 0 ? 1 : dims[i] / std::max<int64_t>(n, 1);
    if (n > 1 && b > 1) {
      s.x_shape.insert(s.x_shape.end(), {n, b});
      s.param_shape.insert(s.param_shape.end(), {n, 1});
    } else {
      s.x_shape.push_back(dims[i]);
      s.param_shape.push_back(n);
    }
  }
  return s;
}

struct QParams {
  std::string scale;
  std::optional<std::string> zero_point;
  Layout layout;
  int64_t lo, hi;
  DType qtype;  // torch's integer type of the quantized values
};

// QuantizeLinear / DequantizeLinear's scale, zero point (of type qt) and
// attributes for `form` (qdq_form's axis and block size) on dims `dims`.
struct QdqOperands {
  std::string scale, zero_point;
  std::vector<Attr> attrs;
};
QdqOperands qdq_operands(Ctx& c, const QParams& p, const std::vector<int64_t>& dims,
                         std::pair<int64_t, int64_t> form, DType qt) {
  std::vector<int64_t> pd;  // {} per tensor; [C] per axis; the blocks' shape blocked
  if (p.layout.axis >= 0)
    pd = form.second == 0 ? std::vector<int64_t>{dims[static_cast<size_t>(form.first)]}
                          : p.layout.blocks;
  QdqOperands o;
  o.scale = shaped(c, c.cast(p.scale, DType::Float), pd);
  o.zero_point = zero_point_as(c, p.zero_point, qt, pd);
  if (p.layout.axis >= 0) o.attrs.push_back(Attr::Int("axis", form.first));
  if (form.second > 0) o.attrs.push_back(Attr::Int("block_size", form.second));
  return o;
}

// torch's arithmetic operands: x (float) and the scale / zero point (float;
// zero point empty when there is none) reshaped so they broadcast per block
// (split_of), or as they are per tensor.
struct ArithOperands {
  std::string x, scale, zero_point;
};
ArithOperands arith_operands(Ctx& c, const std::string& x, const QParams& p,
                             const std::vector<int64_t>& dims) {
  ArithOperands a{x, c.cast(p.scale, DType::Float), {}};
  if (p.zero_point) a.zero_point = c.cast(*p.zero_point, DType::Float);
  if (p.layout.axis >= 0 || p.layout.general) {
    Split sp = split_of(dims, p.layout);
    a.x = c.reshape(x, c.b.const_i64(sp.x_shape));
    a.scale = c.reshape(a.scale, c.b.const_i64(sp.param_shape));
    if (!a.zero_point.empty())
      a.zero_point = c.reshape(a.zero_point, c.b.const_i64(sp.param_shape));
  }
  return a;
}

// x (float) -> integers of p.qtype.
std::string quantize(Ctx& c, const std::string& x_in, const QParams& p, bool exact_arith = false) {
  std::string x = c.cast(x_in, DType::Float);
  std::vector<int64_t> dims;
  if (p.layout.axis >= 0 || p.layout.general)
    dims = dims_of(c, x, "quantization per channel or block");
  auto form = qdq_form(p.layout, c.opset());
  auto qt = qdq_type(p.qtype, c.opset(), false);
  if (form && qt && !exact_arith) {
    QdqOperands o = qdq_operands(c, p, dims, *form, *qt);
    std::string q = c.b.op("QuantizeLinear", {x, o.scale, o.zero_point}, o.attrs);
    return clip_ints(c, q, *qt, p.lo, p.hi);
  }
  // torch's arithmetic: clamp(round(x * (1 / scale)) + zero_point) in float.
  ArithOperands a = arith_operands(c, x, p, dims);
  std::string v = c.b.op("Round", {c.b.op("Mul", {a.x, c.b.op("Reciprocal", {a.scale})})});
  if (!a.zero_point.empty()) v = c.b.op("Add", {v, a.zero_point});
  v = c.b.op("Clip", {v, c.b.scalar(DType::Float, static_cast<double>(p.lo)),
                      c.b.scalar(DType::Float, static_cast<double>(p.hi))});
  if (!dims.empty()) v = c.reshape(v, c.b.op("Shape", {x}));
  return c.cast(v, p.qtype);
}

// Integers q of p.qtype -> floats of type `out`.
std::string dequantize(Ctx& c, const std::string& q, const QParams& p, DType out) {
  std::vector<int64_t> dims;
  if (p.layout.axis >= 0 || p.layout.general)
    dims = dims_of(c, q, "dequantization per channel or block");
  auto form = qdq_form(p.layout, c.opset());
  auto qt = qdq_type(c.dtype(q), c.opset(), true);
  if (form && qt) {
    QdqOperands o = qdq_operands(c, p, dims, *form, *qt);
    return c.cast(c.b.op("DequantizeLinear", {q, o.scale, o.zero_point}, o.attrs), out);
  }
  ArithOperands a = arith_operands(c, c.cast(q, DType::Float), p, dims);
  std::string v = a.x;
  if (!a.zero_point.empty()) v = c.b.op("Sub", {v, a.zero_point});
  v = c.b.op("Mul", {v, a.scale});
  if (!dims.empty()) v = c.reshape(v, c.b.op("Shape", {q}));
  return c.cast(v, out);
}

// A scale / zero point given as a Python number (as type t) or a tensor (as is).
std::string param(Ctx& c, const char* name, DType t) {
  const schema::Argument* a = c.arg(name);
  if (a && a->kind == schema::ArgKind::Tensor) return c.tensor(name);
  return c.operand(name, t);
}

int64_t int_arg(Ctx& c, const char* name, std::optional<int64_t> def) {
  if (c.has(name)) {
    if (auto v = c.scalar_value(name)) return static_cast<int64_t>(*v);
    if (const TensorData* d = c.b.constant_value(c.tensor(name)); d && d->numel() == 1)
      return static_cast<int64_t>(element(*d, 0));
    c.fail(std::string("'") + name + "' must be known when exporting");
  }
  if (!def) c.fail(std::string("missing argument '") + name + "'");
  return *def;
}

DType torch_dtype(Ctx& c, const char* name) {
  auto t = c.scalar_type(name);
  if (!t || !int_range(*t)) c.fail("quantized type must be an integer type of at most 32 bits");
  return *t;
}

// ---- quantized_decomposed (PT2E)

Layout per_tensor() { return Layout{}; }

Layout per_channel(Ctx& c, const std::string& x, int64_t axis) {
  auto dims = dims_of(c, x, "per-channel quantization");
  axis = Ctx::norm_axis(axis, dims.size());
  Layout lay;
  lay.blocks.assign(dims.size(), 1);
  lay.blocks[static_cast<size_t>(axis)] = dims[static_cast<size_t>(axis)];
  lay.axis = axis;
  lay.block = 1;
  return lay;
}

QParams decomposed_params(Ctx& c, Layout lay) {
  QParams p;
  p.qtype = torch_dtype(c, "dtype");
  p.lo = int_arg(c, "quant_min", std::nullopt);
  p.hi = int_arg(c, "quant_max", std::nullopt);
  const char* s = c.arg("scale") ? "scale" : "scales";
  const char* z = c.arg("zero_point") ? "zero_point" : "zero_points";
  p.scale = param(c, s, DType::Float);
  if (c.has(z)) p.zero_point = param(c, z, DType::Int64);
  p.layout = std::move(lay);
  return p;
}

void quantize_per_tensor(Ctx& c) {
  QParams p = decomposed_params(c, per_tensor());
  c.set_output(0, quantize(c, c.tensor("input"), p));
}

void dequantize_per_tensor(Ctx& c) {
  QParams p = decomposed_params(c, per_tensor());
  c.set_output(0, dequantize(c, c.tensor("input"), p, c.out_dtype()));
}

void quantize_per_channel(Ctx& c) {
  std::string x = c.tensor("input");
  QParams p = decomposed_params(c, per_channel(c, x, c.i("axis")));
  c.set_output(0, quantize(c, x, p));
}

void dequantize_per_channel(Ctx& c) {
  std::string x = c.tensor("input");
  QParams p = decomposed_params(c, per_channel(c, x, c.i("axis")));
  c.set_output(0, dequantize(c, x, p, c.out_dtype()));
}

// scale and zero point from the input's range (determine_qparams in
// torch/ao/quantization/utils.py): asymmetric, or symmetric around 0 (128 for uint8).
void choose_qparams(Ctx& c, bool symmetric) {
  std::string x = c.cast(c.tensor("input"), DType::Float);
  int64_t lo = c.i("quant_min"), hi = c.i("quant_max");
  DType qt = torch_dtype(c, "dtype");
  double eps = c.f("eps", 1.1920928955078125e-07);
  std::string zero = c.b.scalar(DType::Float, 0.0);
  std::string mn = c.b.op(
      "Min",
      {c.b.op("ReduceMin", {c.reshape(x, c.b.const_i64({-1}))}, {Attr::Int("keepdims", 0)}), zero});
  std::string mx = c.b.op(
      "Max",
      {c.b.op("ReduceMax", {c.reshape(x, c.b.const_i64({-1}))}, {Attr::Int("keepdims", 0)}), zero});
  std::string e = c.b.scalar(DType::Float, eps), scale, zp;
  if (symmetric) {
    std::string m = c.b.op("Max", {c.b.op("Neg", {mn}), mx});
    scale = c.b.op("Max", {c.b.op("Div", {m, c.b.scalar(DType::Float, double(hi - lo) / 2)}), e});
    zp = c.b.scalar(DType::Float, qt == DType::UInt8 ? 128.0 : 0.0);
  } else {
    scale = c.b.op("Max", {c.b.op("Div", {c.b.op("Sub", {mx, mn}),
                                          c.b.scalar(DType::Float, static_cast<double>(hi - lo))}),
                           e});
    zp = c.b.op("Sub", {c.b.scalar(DType::Float, static_cast<double>(lo)),
                        c.b.op("Round", {c.b.op("Div", {mn, scale})})});
    zp = c.b.op("Clip", {zp, c.b.scalar(DType::Float, static_cast<double>(lo)),
                         c.b.scalar(DType::Float, static_cast<double>(hi))});
  }
  // torch returns both as 1-element tensors.
  c.set_output(0, c.cast(c.unsqueeze(scale, {0}), c.out_dtype(0)));
  c.set_output(1, c.cast(c.unsqueeze(zp, {0}), c.out_dtype(1)));
}

// ---- torchao (quant_primitives.py)

std::pair<int64_t, int64_t> ao_range(Ctx& c, DType t) {
  IntRange r = *int_range(t);
  return {c.has("quant_min") ? int_arg(c, "quant_min", std::nullopt) : r.lo,
          c.has("quant_max") ? int_arg(c, "quant_max", std::nullopt) : r.hi};
}

std::vector<int64_t> block_size(Ctx& c, const std::string& x) {
  std::vector<int64_t> b;
  for (const auto& s : c.symints("block_size")) {
    auto v = c.symint_const(s);
    if (!v) c.fail("block_size must be known when exporting");
    b.push_back(*v);
  }
  (void)x;
  return b;
}

void quantize_affine(Ctx& c) {
  std::string x = c.tensor("input");
  std::vector<int64_t> dims = dims_of(c, x, "quantize_affine");
  QParams p;
  p.qtype = torch_dtype(c, "output_dtype");
  std::tie(p.lo, p.hi) = ao_range(c, p.qtype);
  p.scale = c.tensor("scale");
  p.zero_point = c.opt_tensor("zero_point");
  if (p.zero_point && c.type(*p.zero_point).has_static_shape()) {
    auto zd = *c.type(*p.zero_point).static_dims();
    if (std::find(zd.begin(), zd.end(), 0) != zd.end()) p.zero_point.reset();  // empty: none
  }
  p.layout = layout_of(c, dims, block_size(c, x));
  c.set_output(0, quantize(c, x, p));
}

void dequantize_affine(Ctx& c) {
  std::string x = c.tensor("input");
  std::vector<int64_t> dims = dims_of(c, x, "dequantize_affine");
  QParams p;
  p.qtype = c.dtype(x);
  if (!int_range(p.qtype)) c.fail("dequantize_affine of a non-integer input");
  std::tie(p.lo, p.hi) = ao_range(c, p.qtype);
  p.scale = c.tensor("scale");
  p.zero_point = c.opt_tensor("zero_point");
  p.layout = layout_of(c, dims, block_size(c, x));
  // torchao computes (q - zero_point) * scale in the output type.
  c.set_output(0, dequantize(c, x, p, c.out_dtype()));
}

void choose_qparams_affine(Ctx& c) {
  std::string x = c.cast(c.tensor("input"), DType::Float);
  std::vector<int64_t> dims = dims_of(c, x, "choose_qparams_affine");
  DType qt = torch_dtype(c, "target_dtype");
  auto [lo, hi] = ao_range(c, qt);
  std::string mapping = c.str("mapping_type").value_or("");
  Layout lay = layout_of(c, dims, block_size(c, x));
  Split sp = split_of(dims, lay);
  // Reduce over each block's elements: the dims of x_shape that are not
  // dims of the scale.
  std::vector<int64_t> axes;
  for (size_t i = 0; i < sp.x_shape.size(); ++i)
    if (sp.param_shape[i] == 1 && sp.x_shape[i] != 1) axes.push_back(static_cast<int64_t>(i));
  std::string xs = c.reshape(x, c.b.const_i64(sp.x_shape));
  std::string zero = c.b.scalar(DType::Float, 0.0);
  std::string mn = axes.empty() ? xs : c.reduce("ReduceMin", xs, axes, true);
  std::string mx = axes.empty() ? xs : c.reduce("ReduceMax", xs, axes, true);
  mn = c.b.op("Min", {mn, zero});
  mx = c.b.op("Max", {mx, zero});
  double eps = c.has("eps") ? c.f("eps", 0) : 1.1754943508222875e-38;  // float32's smallest normal
  std::string e = c.b.scalar(DType::Float, eps), scale, zp;
  if (mapping == "SYMMETRIC") {
    std::string m = c.b.op("Max", {c.b.op("Neg", {mn}), mx});
    scale = c.b.op("Div", {m, c.b.scalar(DType::Float, double(hi - lo) / 2)});
    scale = c.b.op("Max", {scale, e});
    zp = c.b.op("Expand", {c.b.scalar(DType::Float, std::trunc(double(hi + lo + 1) / 2)),
                           c.b.op("Shape", {scale})});
  } else if (mapping == "SYMMETRIC_NO_CLIPPING_ERR") {
    std::string smin = c.b.op("Div", {mn, c.b.scalar(DType::Float, static_cast<double>(lo))});
    std::string smax = c.b.op("Div", {mx, c.b.scalar(DType::Float, static_cast<double>(hi))});
    scale = c.b.op("Where", {c.b.op("Greater", {smin, smax}), smin, smax});
    scale = c.b.op("Max", {scale, e});
    zp = c.b.op("Expand", {c.b.scalar(DType::Float, std::trunc(double(hi + lo + 1) / 2)),
                           c.b.op("Shape", {scale})});
  } else if (mapping == "ASYMMETRIC") {
    scale = c.b.op("Div", {c.b.op("Sub", {mx, mn}), c.b.scalar(DType::Float, double(hi - lo))});
    scale = c.b.op("Max", {scale, e});
    zp = c.b.op("Sub", {c.b.scalar(DType::Float, static_cast<double>(lo)),
                        c.b.op("Round", {c.b.op("Div", {mn, scale})})});
    zp = c.b.op("Clip", {zp, c.b.scalar(DType::Float, static_cast<double>(lo)),
                         c.b.scalar(DType::Float, static_cast<double>(hi))});
  } else {
    c.fail("choose_qparams_affine mapping_type '" + mapping + "' has no converter");
  }
  // keepdim: one entry per block along every dim; else the reduced dims go.
  std::vector<int64_t> od;
  if (c.flag("keepdim", false)) {
    od = lay.blocks;
  } else {
    for (size_t i = 0; i < sp.param_shape.size(); ++i)
      if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(i)) == axes.end())
        od.push_back(sp.param_shape[i]);
  }
  for (size_t i = 0; i < 2; ++i) {
    std::string v = i == 0 ? scale : zp;
    c.set_output(i, c.cast(c.reshape(v, c.b.const_i64(od)), c.out_dtype(i)));
  }
}

// ---- fake quantization (QAT)

// Q then DQ in the narrowest type holding [lo, hi]; torch's arithmetic
// (clamp(round(x / scale) + zero_point) - zero_point) * scale where ONNX
// has no such type or the zero point is a float.
std::string fake_quantize(Ctx& c, const std::string& x, std::string scale,
                          std::optional<std::string> zp, Layout lay, int64_t lo, int64_t hi) {
  QParams p;
  p.scale = std::move(scale);
  p.zero_point = std::move(zp);
  p.layout = std::move(lay);
  p.lo = lo;
  p.hi = hi;
  auto t = type_for_range(lo, hi, c.opset());
  bool float_zp = p.zero_point && is_floating(c.dtype(*p.zero_point));
  DType out = c.dtype(x);
  if (t && !float_zp) {
    p.qtype = *t;
    return dequantize(c, quantize(c, x, p), p, out);
  }
  p.qtype = DType::Int32;
  std::string q = quantize(c, x, p, /*exact_arith=*/true);
  return dequantize(c, q, p, out);
}

// Where `enabled` (a 1-element tensor; a buffer in QAT programs) is 0,
// the input passes unchanged.
std::string when_enabled(Ctx& c, const std::string& enabled, const std::string& fq,
                         const std::string& x) {
  if (const TensorData* d = c.b.constant_value(enabled); d && d->numel() == 1)
    return element(*d, 0) != 0 ? fq : x;
  std::string on =
      c.b.op("Not", {c.b.op("Equal", {c.cast(c.reshape(enabled, c.b.const_i64({})), DType::Float),
                                      c.b.scalar(DType::Float, 0.0)})});
  return c.b.op("Where", {on, fq, x});
}

// The mask of cachemask variants: which elements were inside [lo, hi].
std::string in_range_mask(Ctx& c, const std::string& x, const std::string& scale,
                          const std::optional<std::string>& zp, const Layout& lay, int64_t lo,
                          int64_t hi) {
  QParams p;
  p.scale = scale;
  p.zero_point = zp;
  p.layout = lay;
  // Unclamped: the widest range, then compare.
  p.lo = INT32_MIN / 2;
  p.hi = INT32_MAX / 2;
  p.qtype = DType::Int32;
  std::string q = quantize(c, x, p, /*exact_arith=*/true);
  return c.b.op("And",
                {c.b.op("GreaterOrEqual", {q, c.b.constant(ints_as(DType::Int32, {}, {lo}))}),
                 c.b.op("LessOrEqual", {q, c.b.constant(ints_as(DType::Int32, {}, {hi}))})});
}

void fake_quantize_per_tensor(Ctx& c) {
  std::string x = c.tensor("self");
  std::string s = param(c, "scale", DType::Float);
  std::string z = param(c, "zero_point", DType::Int64);
  int64_t lo = c.i("quant_min"), hi = c.i("quant_max");
  std::string y = fake_quantize(c, x, s, z, per_tensor(), lo, hi);
  if (c.arg("fake_quant_enabled")) y = when_enabled(c, c.tensor("fake_quant_enabled"), y, x);
  c.set_output(0, y);
  if (c.n_outputs() > 1) c.set_output(1, in_range_mask(c, x, s, z, per_tensor(), lo, hi));
}

void fake_quantize_per_channel(Ctx& c) {
  std::string x = c.tensor("self");
  Layout lay = per_channel(c, x, c.i("axis"));
  std::string s = c.tensor("scale"), z = c.tensor("zero_point");
  int64_t lo = c.i("quant_min"), hi = c.i("quant_max");
  c.set_output(0, fake_quantize(c, x, s, z, lay, lo, hi));
  if (c.n_outputs() > 1) c.set_output(1, in_range_mask(c, x, s, z, lay, lo, hi));
}

// FusedMovingAvgObsFakeQuantize (torch.ao's QAT default): with its observer
// off it is a fake quantization by the scale / zero point it holds. With the
// observer on, each call would move those by the batch's range: an export
// records inference, so that is refused with what to do.
void fused_moving_avg_obs_fake_quant(Ctx& c) {
  std::string x = c.tensor("self");
  const TensorData* obs = c.b.constant_value(c.tensor("observer_on"));
  if (!obs || obs->numel() != 1 || element(*obs, 0) != 0)
    c.fail(
        "the fake quantizer's observer is on: its scale would follow each batch's range. "
        "Turn observers off before export: model.apply(torch.ao.quantization.disable_observer), "
        "or convert the QAT model (convert_pt2e) first");
  int64_t lo = c.i("quant_min"), hi = c.i("quant_max");
  std::string s = c.tensor("scale"), z = c.tensor("zero_point");
  Layout lay =
      c.flag("per_row_fake_quant", false) ? per_channel(c, x, c.i("ch_axis", 0)) : per_tensor();
  std::string y = fake_quantize(c, x, s, z, lay, lo, hi);
  c.set_output(0, when_enabled(c, c.tensor("fake_quant_on"), y, x));
  if (c.n_outputs() > 1) c.set_output(1, in_range_mask(c, x, s, z, lay, lo, hi));
  // The functional form (a decomposed program) also returns the observer's
  // state, unchanged with the observer off.
  if (c.n_outputs() == 6) {
    const char* state[] = {"running_min", "running_max", "scale", "zero_point"};
    for (size_t i = 0; i < 4; ++i) c.set_output(2 + i, c.tensor(state[i]));
  }
}

}  // namespace

void register_quantize(Registry& r) {
  const std::string q = "torch.ops.quantized_decomposed.";
  for (const char* o : {"default", "tensor", "tensor2"}) {
    r.add(q + "quantize_per_tensor." + o, quantize_per_tensor);
    r.add(q + "dequantize_per_tensor." + o, dequantize_per_tensor);
  }
  r.add(q + "quantize_per_channel.default", quantize_per_channel);
  r.add(q + "dequantize_per_channel.default", dequantize_per_channel);
  r.add(q + "choose_qparams.tensor", [](Ctx& c) { choose_qparams(c, false); });
  r.add(q + "choose_qparams_symmetric.tensor", [](Ctx& c) { choose_qparams(c, true); });

  const std::string ao = "torch.ops.torchao.";
  r.add(ao + "quantize_affine.default", quantize_affine);
  r.add(ao + "dequantize_affine.default", dequantize_affine);
  r.add(ao + "choose_qparams_affine.default", choose_qparams_affine);

  const std::string a = "torch.ops.aten.";
  r.add(a + "fake_quantize_per_tensor_affine.default", fake_quantize_per_tensor);
  r.add(a + "fake_quantize_per_tensor_affine.tensor_qparams", fake_quantize_per_tensor);
  r.add(a + "fake_quantize_per_tensor_affine_cachemask.default", fake_quantize_per_tensor);
  r.add(a + "_fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default",
        fake_quantize_per_tensor);
  r.add(a + "fake_quantize_per_channel_affine.default", fake_quantize_per_channel);
  r.add(a + "fake_quantize_per_channel_affine_cachemask.default", fake_quantize_per_channel);
  r.add(a + "fused_moving_avg_obs_fake_quant.default", fused_moving_avg_obs_fake_quant);
  r.add(a + "_fused_moving_avg_obs_fq_helper.default", fused_moving_avg_obs_fake_quant);
  r.add(a + "_fused_moving_avg_obs_fq_helper_functional.default", fused_moving_avg_obs_fake_quant);
}

}  // namespace pt2onnx
