// Resampling: upsample_nearest{1,2,3}d, _upsample_nearest_exact{1,2,3}d,
// upsample_linear1d, upsample_bilinear2d, upsample_trilinear3d,
// upsample_bicubic2d (.vec and .default), _upsample_bilinear2d_aa (Resize
// antialias, opset 18), grid_sampler / grid_sampler_2d (GridSample, opset 16)
// and grid_sampler_3d (opset 20).
//
// torch's source coordinate per mode, and the Resize form that matches it:
//   nearest        floor(dst * in/out)             asymmetric + floor
//   nearest-exact  floor((dst + 0.5) * in/out)     half_pixel + round_prefer_ceil
//   linear/cubic   align_corners: dst*(in-1)/(out-1)  align_corners
//                  else (dst + 0.5) * in/out - 0.5    half_pixel
// where in/out is 1/scale when torch was given a scale factor (then Resize
// gets that scale, not sizes, so that it uses the same ratio); cubic uses
// A = -0.75 with border-clamped taps.
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
void linear_aa(Ctx& c) { emit_resize(c, Mode::Linear, true); }

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
    r.add(p + "_upsample_bilinear2d_aa" + o, linear_aa, 18);
  }
  r.add(p + "grid_sampler.default", grid_sample, 16);
  r.add(p + "grid_sampler_2d.default", grid_sample, 16);
  r.add(p + "grid_sampler_3d.default", grid_sample, 20);
}

}  // namespace pt2onnx
