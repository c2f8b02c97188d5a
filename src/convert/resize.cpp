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
#include <cmath>
#include <cstring>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

std::string const_f32(Ctx& c, const std::vector<float>& v) {
  std::vector<uint8_t> bytes(v.size() * sizeof(float));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return c.b.constant(
      TensorData::from_bytes(DType::Float, {static_cast<int64_t>(v.size())}, std::move(bytes)));
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
      if (!a || a->kind == schema::ArgKind::None)
        c.fail("a symbolic output size needs output_size");
      auto sz = c.symints("output_size");
      return c.b.op("Concat", {parts[0], c.shape_tensor(sz)}, {Attr::Int("axis", 0)});
    }
    parts.push_back(c.b.const_i64({d.value}));
  }
  return c.b.op("Concat", parts, {Attr::Int("axis", 0)});
}

enum class Mode { Nearest, NearestExact, Linear, Cubic };

void emit_resize(Ctx& c, Mode mode, bool antialias) {
  const char* xa = c.arg("input") ? "input" : "self";
  std::string x = c.tensor(xa);
  size_t n = c.rank(x) - 2;
  bool align = (mode == Mode::Linear || mode == Mode::Cubic) && c.flag("align_corners", false);
  std::vector<double> sf = align ? std::vector<double>{} : scale_factors(c, n);
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
    for (double s : sf) scales.push_back(static_cast<float>(s));
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
