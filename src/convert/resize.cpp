// Resampling: upsample_nearest{1,2,3}d, _upsample_nearest_exact{1,2,3}d,
// upsample_linear1d, upsample_bilinear2d, upsample_trilinear3d,
// upsample_bicubic2d (.vec and .default), _upsample_bilinear2d_aa (Resize
// antialias from opset 18, constant filter matrices before), grid_sampler /
// grid_sampler_2d (GridSample, opset 16) and grid_sampler_3d (opset 20).
//
// torch's source coordinate per mode, and the Resize form that matches it:
//   nearest        floor(dst * in/out)             asymmetric + floor
//   nearest-exact  floor((dst + 0.5) * in/out)     half_pixel + round_prefer_ceil
//   linear/cubic   align_corners: dst*(in-1)/(out-1)  align_corners
//                  else (dst + 0.5) * in/out - 0.5    half_pixel
// where in/out is 1/scale when torch was given a scale factor (then Resize
// gets that scale, not sizes, so that it uses the same ratio); cubic uses
// A = -0.75 with border-clamped taps.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

std::string const_f32(Ctx& c, const std::vector<float>& v) {
  return c.b.constant(TensorData::from_vector(DType::Float, {static_cast<int64_t>(v.size())}, v));
}

// Spatial scale factors torch used, if it was given some (.vec scale_factors
// or the .default scales_* arguments); empty when it computed in/out.
std::vector<double> scale_factors(Ctx& c, size_t n) {
  std::vector<double> s;
  const schema::Argument* a = c.arg("scale_factors");
  if (a && a->kind != schema::ArgKind::None) {
    if (a->kind == schema::ArgKind::Floats) {
      s.assign(a->floats.begin(), a->floats.end());
    } else {
      c.fail("scale_factors must be a list of floats");
    }
    if (s.size() == 1 && n > 1) s.assign(n, s[0]);
    return s;
  }
  static const char* one[] = {"scales"};
  static const char* two[] = {"scales_h", "scales_w"};
  static const char* three[] = {"scales_d", "scales_h", "scales_w"};
  const char** names = n == 1 ? one : n == 2 ? two : three;
  bool any = false;
  for (size_t k = 0; k < n; ++k) any |= c.has(names[k]);
  if (!any) return s;
  for (size_t k = 0; k < n; ++k) {
    if (!c.has(names[k])) return {};  // mixed: torch uses in/out for the missing ones
    s.push_back(c.f(names[k], 0.0));
  }
  return s;
}

// Full output sizes (N, C, spatial...) as a 1-D int64.
std::string out_sizes(Ctx& c, const std::string& x) {
  ValueType ot = c.out_type();
  if (auto d = ot.static_dims()) return c.b.const_i64(*d);
  std::vector<std::string> parts{c.b.op("Shape", {x}, {Attr::Int("end", 2)})};
  for (size_t k = 2; k < ot.shape->size(); ++k) {
    const Dim& d = (*ot.shape)[k];
    if (!d.is_static()) {
      const schema::Argument* a = c.arg("output_size");
      if (a && a->kind != schema::ArgKind::None) {
        auto sz = c.symints("output_size");
        return c.b.op("Concat", {parts[0], c.shape_tensor(sz)}, {Attr::Int("axis", 0)});
      }
      // Given scale factors only (align_corners keeps them for the size): torch's
      // floor(in * scale) in double, from the input's runtime sizes.
      size_t n = ot.shape->size() - 2;
      std::vector<double> sf = scale_factors(c, n);
      if (sf.size() != n) c.fail("a symbolic output size needs output_size or scale factors");
      std::string in = c.cast(c.b.op("Shape", {x}, {Attr::Int("start", 2)}), DType::Double);
      std::string scaled = c.b.op("Mul", {in, c.b.constant(TensorData::from_vector(
                                                  DType::Double, {static_cast<int64_t>(n)}, sf))});
      return c.b.op("Concat", {parts[0], c.cast(c.b.op("Floor", {scaled}), DType::Int64)},
                    {Attr::Int("axis", 0)});
    }
    parts.push_back(c.b.const_i64({d.value}));
  }
  return c.b.op("Concat", parts, {Attr::Int("axis", 0)});
}

enum class Mode { Nearest, NearestExact, Linear, Cubic };

// ---- torch's own source coordinates, where Resize's differ
//
// Resize divides by its scale, out/in as a float (x_original = (x + 0.5) /
// scale - 0.5); torch multiplies by in/out as a float (or by 1 / its scale
// factor). Unless the ratio is a power of two these round differently:
// measured, nearest picks another input pixel for about 4% of (in, out) size
// pairs up to 120 x 400, and bilinear 200 -> 320 differs by 1.5e-5 (which
// SSDlite's scores carry as 1e-4). There the source indices and weights are
// computed as torch does, in its types, and applied with Gather: constants
// when the sizes are static, a few ops on the sizes when not.

bool power_of_two(double r) {
  int e = 0;
  return r > 0 && std::frexp(r, &e) == 0.5;
}

// Whether Resize's coordinates equal torch's along one axis: the ratio torch
// multiplies by (in / out, (in - 1) / (out - 1) with align_corners, or 1 /
// scale_factor) is a power of two, so dividing by its inverse is exact.
bool resize_matches(const Dim& in, const Dim& out, const std::vector<double>& sf, size_t k,
                    bool align) {
  if (!sf.empty()) return power_of_two(sf[k]);
  if (in.is_static() && out.is_static()) {
    int64_t i = in.value - (align ? 1 : 0), o = out.value - (align ? 1 : 0);
    if (in.value == out.value || in.value == 0 || out.value == 0) return true;
    return i > 0 && o > 0 && power_of_two(static_cast<double>(i) / static_cast<double>(o));
  }
  // Symbolic: the same size, or (half-pixel modes) twice it, as torch.export
  // writes it.
  return !in.sym.empty() && (out.sym == in.sym || (!align && out.sym == "2*" + in.sym));
}

// torch's source coordinate for output index d (area_pixel_compute_source_index):
// scale * d with align_corners, else scale * (d + 0.5) - 0.5, clamped at 0
// except for cubic. Its kernels are built with FMA, and the result is
// measured to equal the fused form (1.5e-6 off unfused on 97 -> 320).
template <typename T>
T source_coordinate(T scale, int64_t d, bool align, bool cubic) {
  if (align) return scale * static_cast<T>(d);
  T src = std::fma(scale, static_cast<T>(d) + static_cast<T>(0.5), static_cast<T>(-0.5));
  return !cubic && src < 0 ? static_cast<T>(0) : src;
}

// Keys' cubic convolution weights with torch's A = -0.75 for the taps at
// floor(src) - 1 .. floor(src) + 2 (get_cubic_upsample_coefficients).
template <typename T>
std::array<T, 4> cubic_weights(T t) {
  const T A = static_cast<T>(-0.75);
  auto near = [&](T x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
  auto far = [&](T x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
  return {far(t + 1), near(t), near(1 - t), far(2 - t)};
}

// The taps of one axis: input indices per output index, and their weights
// (none for nearest). Static sizes: computed here in torch's arithmetic (its
// generic N-d kernel: area_pixel_compute_scale, guard_index_and_lambda).
template <typename T>
struct Taps {
  std::vector<std::vector<int64_t>> index;
  std::vector<std::vector<T>> weight;
};

template <typename T>
Taps<T> static_taps(Mode mode, int64_t in, int64_t out, std::optional<double> sf, bool align) {
  size_t n = mode == Mode::Linear ? 2 : mode == Mode::Cubic ? 4 : 1;
  Taps<T> r{std::vector<std::vector<int64_t>>(n), std::vector<std::vector<T>>(n > 1 ? n : 0)};
  bool interp = n > 1;
  for (int64_t d = 0; d < out; ++d) {
    if (!interp) {
      float scale =
          sf ? static_cast<float>(1.0 / *sf) : static_cast<float>(in) / static_cast<float>(out);
      float src = mode == Mode::NearestExact
                      ? static_cast<float>(
                            static_cast<double>(source_coordinate(scale, d, false, false)) + 0.5)
                      : scale * static_cast<float>(d);
      r.index[0].push_back(std::min(static_cast<int64_t>(std::floor(src)), in - 1));
      continue;
    }
    T scale = align ? (out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0))
              : sf  ? static_cast<T>(1.0 / *sf)
                    : static_cast<T>(in) / static_cast<T>(out);
    T src = source_coordinate(scale, d, align, mode == Mode::Cubic);
    int64_t a = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
    T t = std::min(std::max(src - static_cast<T>(a), T(0)), T(1));
    if (mode == Mode::Linear) {
      if (in == out) a = d, t = 0;  // torch copies
      r.index[0].push_back(a);
      r.index[1].push_back(std::min(a + 1, in - 1));
      r.weight[0].push_back(1 - t);
      r.weight[1].push_back(t);
    } else {
      std::array<T, 4> w = cubic_weights(t);
      for (size_t j = 0; j < 4; ++j) {
        int64_t at = a + static_cast<int64_t>(j) - 1;
        r.index[j].push_back(std::max<int64_t>(std::min(at, in - 1), 0));
        r.weight[j].push_back(w[j]);
      }
    }
  }
  return r;
}

// Static taps as constants (weights of dims [out, 1, ...]: broadcast over
// the later axes).
template <typename T>
void const_taps(Ctx& c, const Taps<T>& taps, DType ct, const std::vector<int64_t>& wdims,
                std::vector<std::string>& idx, std::vector<std::string>& w) {
  for (auto& i : taps.index) idx.push_back(c.b.const_i64(i));
  for (auto& v : taps.weight) w.push_back(c.b.constant(TensorData::from_vector(ct, wdims, v)));
}

// The same taps computed in the graph from the runtime sizes, in torch's
// types: the half-pixel coordinate as one rounding (the float product is
// exact in double, as in torch's FMA; double inputs: unfused, 1 ulp at most).
void runtime_taps(Ctx& c, Mode mode, const std::string& x0, int64_t axis, const Dim& dout,
                  std::optional<double> s, bool align, DType ct, std::vector<std::string>& idx,
                  std::vector<std::string>& w) {
  bool interp = mode == Mode::Linear || mode == Mode::Cubic;
  std::string in = c.dim_value(x0, axis);
  std::string out;
  if (dout.is_static()) {
    out = c.b.const_i64({dout.value});
  } else {
    // out_sizes: output_size where given (the .default variants pass it beside scales_*, and
    // it is torch's size there), else torch's floor(in * scale_factor).
    out = c.b.op("Gather", {out_sizes(c, x0), c.b.const_i64({axis})}, {Attr::Int("axis", 0)});
  }
  std::string one = c.b.const_i64({1});
  std::string last = c.b.op("Sub", {in, one});
  std::string dst = c.b.op("Range", {c.b.scalar_i64(0), c.squeeze(out, {0}), c.b.scalar_i64(1)});
  DType st = interp ? ct : DType::Float;
  std::string scale;
  if (align) {  // (in - 1) / (out - 1), 0 for one output
    std::string o1 = c.b.op("Max", {c.b.op("Sub", {out, one}), one});
    scale = c.b.op("Div", {c.cast(last, st), c.cast(o1, st)});
    scale = c.b.op("Where", {c.b.op("Greater", {out, one}), scale, c.b.scalar(st, 0.0)});
  } else if (s) {
    double v = 1.0 / *s;
    scale = c.b.scalar(st, st == DType::Float ? static_cast<double>(static_cast<float>(v)) : v);
  } else {
    scale = c.b.op("Div", {c.cast(in, st), c.cast(out, st)});
  }
  auto floor_idx = [&](const std::string& v) {
    return c.b.op("Min", {c.cast(c.b.op("Floor", {v}), DType::Int64), last});
  };
  auto half_pixel = [&](bool clamp) {
    DType wide = DType::Double;
    std::string d5 = c.b.op("Add", {c.cast(dst, wide), c.b.scalar(wide, 0.5)});
    std::string v = c.cast(
        c.b.op("Sub", {c.b.op("Mul", {c.cast(scale, wide), d5}), c.b.scalar(wide, 0.5)}), st);
    return clamp ? c.b.op("Max", {v, c.b.scalar(st, 0.0)}) : v;
  };
  if (!interp) {
    std::string src = mode == Mode::NearestExact
                          ? c.cast(c.b.op("Add", {c.cast(half_pixel(true), DType::Double),
                                                  c.b.scalar(DType::Double, 0.5)}),
                                   DType::Float)
                          : c.b.op("Mul", {c.cast(dst, DType::Float), scale});
    idx.push_back(floor_idx(src));
    return;
  }
  std::string src =
      align ? c.b.op("Mul", {scale, c.cast(dst, ct)}) : half_pixel(mode == Mode::Linear);
  std::string a = floor_idx(src);
  std::string t =
      c.b.op("Min", {c.b.op("Max", {c.b.op("Sub", {src, c.cast(a, ct)}), c.b.scalar(ct, 0.0)}),
                     c.b.scalar(ct, 1.0)});
  std::string zero = c.b.const_i64({0});
  if (mode == Mode::Linear) {
    // torch copies where the sizes are equal.
    std::string same = c.b.op("Equal", {out, in});
    a = c.b.op("Where", {same, dst, a});
    t = c.b.op("Where", {same, c.b.scalar(ct, 0.0), t});
    idx = {a, c.b.op("Min", {c.b.op("Add", {a, one}), last})};
    w = {c.b.op("Sub", {c.b.scalar(ct, 1.0), t}), t};
    return;
  }
  // Cubic: Keys' weights with A = -0.75 (get_cubic_upsample_coefficients).
  auto k = [&](double v) { return c.b.scalar(ct, v); };
  auto near = [&](const std::string& x) {  // ((A + 2) x - (A + 3)) x x + 1
    std::string p = c.b.op("Sub", {c.b.op("Mul", {k(1.25), x}), k(2.25)});
    return c.b.op("Add", {c.b.op("Mul", {c.b.op("Mul", {p, x}), x}), k(1.0)});
  };
  auto far = [&](const std::string& x) {  // ((A x - 5A) x + 8A) x - 4A
    std::string p = c.b.op("Sub", {c.b.op("Mul", {k(-0.75), x}), k(-3.75)});
    p = c.b.op("Add", {c.b.op("Mul", {p, x}), k(-6.0)});
    return c.b.op("Sub", {c.b.op("Mul", {p, x}), k(-3.0)});
  };
  w = {far(c.b.op("Add", {t, k(1.0)})), near(t), near(c.b.op("Sub", {k(1.0), t})),
       far(c.b.op("Sub", {k(2.0), t}))};
  for (int64_t j = -1; j <= 2; ++j)
    idx.push_back(
        c.b.op("Max", {c.b.op("Min", {c.b.op("Add", {a, c.b.const_i64({j})}), last}), zero}));
}

// Resampling along the spatial axes with torch's coordinates, last axis first
// (torch's separable kernel: the innermost axis is interpolated first, and the
// taps are summed in order); float16 / bfloat16 computed in float as torch does.
std::string exact_resample(Ctx& c, Mode mode, const std::string& x0, const std::vector<double>& sf,
                           bool align) {
  ValueType ot = c.out_type();
  const Shape& in_shape = c.shape(x0);
  size_t n = in_shape.size() - 2;
  DType t = c.dtype(x0);
  bool interp = mode == Mode::Linear || mode == Mode::Cubic;
  DType ct = t == DType::Double ? DType::Double : DType::Float;  // torch's opmath type
  std::string x = interp ? c.cast(x0, ct) : x0;
  for (size_t kk = n; kk-- > 0;) {
    int64_t axis = static_cast<int64_t>(kk) + 2;
    const Dim& din = in_shape[static_cast<size_t>(axis)];
    const Dim& dout = (*ot.shape)[static_cast<size_t>(axis)];
    if (din == dout && !din.is_unknown() && sf.empty() && mode != Mode::Cubic) continue;
    std::optional<double> s;
    if (!sf.empty()) s = sf[kk];
    // Weights broadcast over the axes after this one.
    std::vector<int64_t> wshape{-1};
    for (size_t r = kk + 1; r < n; ++r) wshape.push_back(1);
    std::vector<std::string> idx, w;
    if (din.is_static() && dout.is_static()) {
      std::vector<int64_t> wdims = wshape;
      wdims[0] = dout.value;
      if (ct == DType::Double)
        const_taps(c, static_taps<double>(mode, din.value, dout.value, s, align), ct, wdims, idx,
                   w);
      else
        const_taps(c, static_taps<float>(mode, din.value, dout.value, s, align), ct, wdims, idx, w);
    } else {
      runtime_taps(c, mode, x0, axis, dout, s, align, ct, idx, w);
      for (auto& v : w) v = c.reshape(v, c.b.const_i64(wshape));
    }
    if (w.empty()) {
      x = c.b.op("Gather", {x, idx[0]}, {Attr::Int("axis", axis)});
      continue;
    }
    std::string acc;
    for (size_t j = 0; j < idx.size(); ++j) {
      std::string term =
          c.b.op("Mul", {c.b.op("Gather", {x, idx[j]}, {Attr::Int("axis", axis)}), w[j]});
      acc = j == 0 ? term : c.b.op("Add", {acc, term});
    }
    x = acc;
  }
  return c.cast(x, t);
}

void emit_resize(Ctx& c, Mode mode, bool antialias) {
  const char* xa = c.arg("input") ? "input" : "self";
  std::string x = c.tensor(xa);
  size_t n = c.rank(x) - 2;
  bool align = (mode == Mode::Linear || mode == Mode::Cubic) && c.flag("align_corners", false);
  std::vector<double> sf = align ? std::vector<double>{} : scale_factors(c, n);
  ValueType ot = c.out_type();
  bool exact_form =
      !antialias && c.type(x).shape && ot.shape &&
      (mode == Mode::Nearest || mode == Mode::NearestExact || is_floating(c.dtype(x)));
  if (exact_form) {
    bool matches = true;
    for (size_t k = 0; k < n; ++k)
      matches &= resize_matches(c.shape(x)[k + 2], (*ot.shape)[k + 2], sf, k, align);
    if (!matches) {
      c.set_output(0, c.b.op("Identity", {exact_resample(c, mode, x, sf, align)}, {}, ot));
      return;
    }
  }
  std::vector<Attr> attrs;
  std::string ctm;
  switch (mode) {
    case Mode::Nearest:
      attrs.push_back(Attr::Str("mode", "nearest"));
      attrs.push_back(Attr::Str("nearest_mode", "floor"));
      ctm = "asymmetric";
      break;
    case Mode::NearestExact:
      attrs.push_back(Attr::Str("mode", "nearest"));
      attrs.push_back(Attr::Str("nearest_mode", "round_prefer_ceil"));
      ctm = "half_pixel";
      break;
    case Mode::Linear:
      attrs.push_back(Attr::Str("mode", "linear"));
      ctm = align ? "align_corners" : "half_pixel";
      break;
    case Mode::Cubic:
      attrs.push_back(Attr::Str("mode", "cubic"));
      attrs.push_back(Attr::Float("cubic_coeff_a", -0.75f));
      ctm = align ? "align_corners" : "half_pixel";
      break;
  }
  attrs.push_back(Attr::Str("coordinate_transformation_mode", ctm));
  // torch's antialiased filter renormalizes the taps inside the input.
  if (antialias)
    attrs.push_back(Attr::Int("antialias", 1)), attrs.push_back(Attr::Int("exclude_outside", 1));
  std::vector<std::string> in{x, ""};
  if (!sf.empty()) {
    std::vector<float> scales{1.0f, 1.0f};
    for (size_t k = 0; k < n; ++k) {
      // Resize's output size is floor(in * scale): where the float scale
      // gives another size than torch's (20 * 0.9f = 17.9999995 -> 17; ONNX's
      // shape inference multiplies in double, onnxruntime in float), the
      // nearest float scale that gives torch's size both ways (the
      // coordinates move by an ulp of the scale).
      auto s = static_cast<float>(sf[k]);
      const Dim& di = c.shape(x)[k + 2];
      const Dim& dout = ot.shape ? (*ot.shape)[k + 2] : Dim::unknown();
      if (di.is_static() && dout.is_static() && di.value > 0) {
        const auto din = static_cast<double>(di.value), dou = static_cast<double>(dout.value);
        for (int step = 0; step < 64 && std::floor(din * s) < dou; ++step)
          s = std::nextafter(s, std::numeric_limits<float>::infinity());
        for (int step = 0; step < 64 && std::floor(din * s) > dou; ++step)
          s = std::nextafter(s, 0.0f);
      }
      scales.push_back(s);
    }
    in.push_back(const_f32(c, scales));
  } else {
    in.push_back("");
    in.push_back(out_sizes(c, x));
  }
  c.set_output(0, c.b.op("Resize", in, attrs, c.out_type()));
}

void nearest(Ctx& c) { emit_resize(c, Mode::Nearest, false); }
void nearest_exact(Ctx& c) { emit_resize(c, Mode::NearestExact, false); }
void linear(Ctx& c) { emit_resize(c, Mode::Linear, false); }
void cubic(Ctx& c) { emit_resize(c, Mode::Cubic, false); }

// torch's antialiased linear filter along one axis as an [out, in] matrix:
// output i is centered at scale * (i + 0.5) in input pixels, the triangle
// filter is widened by the scale when downsampling (support = max(scale,
// 1)), and the taps inside the input are renormalized to sum to 1.
std::vector<double> aa_weights(int64_t in, int64_t out, bool align, double sf) {
  double scale = align
                     ? (out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0)
                 : sf > 0 ? 1.0 / sf
                          : static_cast<double>(in) / static_cast<double>(out);
  double support = scale >= 1.0 ? scale : 1.0, invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  std::vector<double> w(static_cast<size_t>(out * in), 0.0);
  for (int64_t i = 0; i < out; ++i) {
    double center = scale * (static_cast<double>(i) + 0.5);
    int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in);
    double total = 0;
    double* row = w.data() + i * in;
    for (int64_t j = lo; j < hi; ++j) {
      double t = std::abs((static_cast<double>(j) - center + 0.5) * invscale);
      row[j] = t < 1.0 ? 1.0 - t : 0.0;
      total += row[j];
    }
    if (total != 0)
      for (int64_t j = lo; j < hi; ++j) row[j] /= total;
  }
  return w;
}

// Before opset 18 (no Resize antialias): with static spatial sizes the
// filter is two constant matrices, y = Wh @ x @ Ww^T (float16 / bfloat16
// computed in float32).
void linear_aa(Ctx& c) {
  if (c.opset() >= 18) return emit_resize(c, Mode::Linear, true);
  std::string x = c.tensor(c.arg("input") ? "input" : "self");
  std::optional<Shape> in = c.type(x).shape;
  std::optional<Shape> out = c.out_type().shape;
  if (!in || !out || in->size() != 4 || out->size() != 4 || !(*in)[2].is_static() ||
      !(*in)[3].is_static() || !(*out)[2].is_static() || !(*out)[3].is_static())
    c.fail(
        "antialiased bilinear resize needs Resize's antialias (opset 18) unless its input "
        "and output spatial sizes are static");
  bool align = c.flag("align_corners", false);
  std::vector<double> sf = align ? std::vector<double>{} : scale_factors(c, 2);
  DType t = c.out_dtype();
  DType ct = t == DType::Double ? DType::Double : DType::Float;
  auto matrix = [&](int64_t rows, int64_t cols, const std::vector<double>& v) {
    std::vector<uint8_t> bytes(v.size() * dtype_size(ct));
    for (size_t k = 0; k < v.size(); ++k) {
      if (ct == DType::Double) {
        std::memcpy(bytes.data() + k * 8, &v[k], 8);
      } else {
        float f = static_cast<float>(v[k]);
        std::memcpy(bytes.data() + k * 4, &f, 4);
      }
    }
    return c.b.constant(TensorData::from_bytes(ct, {rows, cols}, std::move(bytes)));
  };
  int64_t ih = (*in)[2].value, iw = (*in)[3].value, oh = (*out)[2].value, ow = (*out)[3].value;
  std::vector<double> wh = aa_weights(ih, oh, align, sf.empty() ? 0.0 : sf[0]);
  std::vector<double> ww = aa_weights(iw, ow, align, sf.empty() ? 0.0 : sf[1]);
  std::vector<double> wwt(ww.size());  // [iw, ow]
  for (int64_t i = 0; i < ow; ++i)
    for (int64_t j = 0; j < iw; ++j)
      wwt[static_cast<size_t>(j * ow + i)] = ww[static_cast<size_t>(i * iw + j)];
  std::string y = c.b.op("MatMul", {c.cast(x, ct), matrix(iw, ow, wwt)});
  y = c.b.op("MatMul", {matrix(oh, ih, wh), y});
  c.set_output(0, c.cast(y, t));
}

// ---- grid sampling

void grid_sample(Ctx& c) {
  std::string x = c.tensor("input"), grid = c.tensor("grid");
  int64_t interp = c.i("interpolation_mode"), pad = c.i("padding_mode");
  bool v20 = c.opset() >= 20;
  const char* modes16[] = {"bilinear", "nearest", "bicubic"};
  const char* modes20[] = {"linear", "nearest", "cubic"};
  const char* pads[] = {"zeros", "border", "reflection"};
  if (interp < 0 || interp > 2) c.fail("unknown grid_sampler interpolation mode");
  if (pad < 0 || pad > 2) c.fail("unknown grid_sampler padding mode");
  if (c.rank(x) != 4 && !v20) c.fail("GridSample below opset 20 is 2-D only");
  std::vector<Attr> attrs{Attr::Str("mode", v20 ? modes20[interp] : modes16[interp]),
                          Attr::Str("padding_mode", pads[pad]),
                          Attr::Int("align_corners", c.flag("align_corners", false) ? 1 : 0)};
  DType t = c.dtype(x), kt = c.kernel_type("GridSample", t);
  c.set_output(0, c.cast(c.b.op("GridSample", {c.cast(x, kt), c.cast(grid, kt)}, attrs), t));
}

}  // namespace

void register_resize(Registry& r) {
  const std::string p = "torch.ops.aten.";
  for (const char* d : {"1d", "2d", "3d"}) {
    for (const char* o : {".default", ".vec"}) {
      r.add(p + "upsample_nearest" + d + o, nearest);
      r.add(p + "_upsample_nearest_exact" + d + o, nearest_exact);
    }
  }
  for (const char* o : {".default", ".vec"}) {
    r.add(p + "upsample_linear1d" + o, linear);
    r.add(p + "upsample_bilinear2d" + o, linear);
    r.add(p + "upsample_trilinear3d" + o, linear);
    r.add(p + "upsample_bicubic2d" + o, cubic);
    r.add(p + "_upsample_bilinear2d_aa" + o, linear_aa);
  }
  r.add(p + "grid_sampler.default", grid_sample, 16);
  r.add(p + "grid_sampler_2d.default", grid_sample, 16);
  r.add(p + "grid_sampler_3d.default", grid_sample, 20);
}

}  // namespace pt2onnx
