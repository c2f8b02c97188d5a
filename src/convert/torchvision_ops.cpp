// torchvision's compiled detection ops (torch.ops.torchvision.*): nms,
// roi_align, roi_pool, ps_roi_align. batched_nms is Python in torchvision and
// reaches the graph as nms on offset boxes (python/pt2onnx/_capture_rules.py).
//
// nms -> NonMaxSuppression. torchvision keeps boxes in decreasing score order,
// equal scores by index (its CPU kernel sorts the scores stably); onnxruntime
// pops candidates from a heap keyed on the score alone, so equal scores come
// out in no defined order. The boxes are therefore sorted here (TopK, which
// puts the lower index first on ties) and NonMaxSuppression sees them with
// the strictly decreasing scores N, N-1, ..., 1: its selection order is then
// the sorted order, and the kept positions map back through the sort. Both
// suppress a box when IoU > threshold, IoU = inter / (area_i + area_j -
// inter) in float32; the threshold (a double in torchvision, compared with a
// float IoU) is passed as the largest float32 not above it, which keeps
// `iou > threshold` the same for every float32 IoU. onnxruntime normalizes
// each box's corners (min / max), torchvision does not: boxes with x2 < x1 or
// y2 < y1 (outside torchvision's contract) may be suppressed differently.
//
// roi_align -> RoiAlign (rois [K, 5] split into batch indices and boxes).
// aligned=True is coordinate_transformation_mode "half_pixel" (opset 16);
// aligned=False is "output_half_pixel" (opset 16) or RoiAlign-10's only mode:
// no half-pixel shift and rois smaller than one cell grown to 1 x 1, as in
// torchvision. sampling_ratio <= 0 is adaptive in both (0 in ONNX).
//
// roi_pool -> MaxRoiPool (same rois layout, same rounding of the roi corners,
// empty bins 0). Its argmax output (for the backward) is not converted.
//
// ps_roi_align has no ONNX op. torchvision samples bin (i, j) of output
// channel c from input channel c * ph * pw + i * pw + j, with the half-pixel
// shift and no minimum roi size: that is RoiAlign "half_pixel" (opset 16) over
// all input channels followed by a gather of each bin's channel (ph * pw times
// the sampling work of the op itself, the arithmetic of each kept bin
// unchanged). One difference handled: torchvision divides by grid_h * grid_w
// without RoiAlign's floor of 1, so an adaptive grid of 0 samples (a roi of
// height or width <= 0) gives NaN there; the same NaN is produced here.
#include <cmath>
#include <cstring>
#include <limits>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

// The pooled output size argument (an int, or a SymInt torch knows).
int64_t static_size(Ctx& c, const char* name) {
  auto v = c.symints(name);
  if (v.size() != 1) c.fail(std::string("argument '") + name + "' should be one int");
  auto k = c.symint_const(v[0]);
  if (!k) c.fail(std::string("torchvision op with a symbolic '") + name + "': needs a constant");
  return *k;
}

// Whether output i is read by a later node or is a graph output (the
// serializer names an unused output of a custom op like a used one).
bool used(Ctx& c, size_t i) {
  if (c.n_outputs() <= i) return false;
  const std::string& name = c.out_name(i);
  if (name.find("_unused_") != std::string::npos) return false;
  auto reads = [&](const schema::Argument& a) {
    if (a.name == name) return true;
    for (auto& n : a.names)
      if (n == name) return true;
    return false;
  };
  for (auto& o : c.prog.graph.outputs)
    if (reads(o)) return true;
  for (auto& n : c.prog.graph.nodes)
    for (auto& in : n.inputs)
      if (reads(in.arg)) return true;
  return false;
}

// Type RoiAlign runs in (onnxruntime: float and double kernels).
DType roi_type(DType t) { return t == DType::Double ? DType::Double : DType::Float; }

// rois [K, 5] -> (boxes [K, 4] of type t, batch indices [K] int64). torchvision
// reads the batch index by truncating the float, as Cast does.
std::pair<std::string, std::string> split_rois(Ctx& c, const std::string& rois, DType t) {
  std::string r = c.cast(rois, t);
  ValueType bt = c.type(rois);
  bt.dtype = t;
  if (bt.shape && bt.shape->size() == 2) (*bt.shape)[1] = Dim::of(4);
  std::string boxes =
      c.b.op("Slice", {r, c.b.const_i64({1}), c.b.const_i64({5}), c.b.const_i64({1})}, {}, bt);
  ValueType it{DType::Int64, std::nullopt};
  if (c.type(rois).shape) it.shape = Shape{c.shape(rois)[0]};
  std::string first = c.b.op("Gather", {rois, c.b.scalar_i64(0)}, {Attr::Int("axis", 1)});
  std::string idx =
      c.b.op("Cast", {first}, {Attr::Int("to", static_cast<int64_t>(DType::Int64))}, it);
  return {boxes, idx};
}

// ---- nms

// The largest float32 not above d.
float float_at_most(double d) {
  auto f = static_cast<float>(d);
  if (static_cast<double>(f) > d) f = std::nextafter(f, -std::numeric_limits<float>::infinity());
  return f;
}

void nms(Ctx& c) {
  std::string boxes = c.tensor("dets"), scores = c.tensor("scores");
  double thr = c.f("iou_threshold", 0);
  // ONNX checks the threshold at run time ([0, 1]); torchvision accepts any.
  if (!(thr >= 0 && thr <= 1))
    c.fail("torchvision.nms with iou_threshold " + std::to_string(thr) +
           ": ONNX NonMaxSuppression takes a threshold in [0, 1]");
  DType st = c.dtype(scores);
  DType kt = (st == DType::Double) ? DType::Double : DType::Float;
  std::string key = c.cast(scores, kt);
  // torch's descending sort puts NaN first.
  std::string nan = c.b.op("IsNaN", {key});
  key = c.b.op("Where", {nan, c.b.scalar(kt, std::numeric_limits<double>::infinity()), key});
  std::string n = c.dim_value(scores, 0);  // [1] int64
  ValueType order_t{DType::Int64, c.type(scores).shape};
  ValueType key_t{kt, c.type(scores).shape};
  auto topk = c.b.add_node("TopK", {key, n}, 2,
                           {Attr::Int("axis", 0), Attr::Int("largest", 1), Attr::Int("sorted", 1)},
                           {key_t, order_t});
  std::string order = topk[1];
  std::string sorted =
      c.b.op("Gather", {c.cast(boxes, DType::Float), order}, {Attr::Int("axis", 0)});
  std::string boxes3 = c.unsqueeze(sorted, {0});  // [1, N, 4]
  // Scores N, N-1, ..., 1 (exact in float32 below 2^24 boxes).
  std::string nf = c.cast(c.squeeze(n, {0}), DType::Float);
  std::string rank =
      c.b.op("Range", {nf, c.b.scalar(DType::Float, 0), c.b.scalar(DType::Float, -1)});
  std::string scores3 = c.unsqueeze(rank, {0, 1});  // [1, 1, N]
  std::string max_out = c.squeeze(n, {0});
  std::string iou = c.b.scalar(DType::Float, static_cast<double>(float_at_most(thr)));
  std::string sel = c.b.op("NonMaxSuppression", {boxes3, scores3, max_out, iou}, {},
                           ValueType{DType::Int64, Shape{Dim::unknown(), Dim::of(3)}});
  std::string pos = c.b.op("Gather", {sel, c.b.scalar_i64(2)}, {Attr::Int("axis", 1)},
                           ValueType{DType::Int64, Shape{Dim::unknown()}});
  c.set_output(0, c.b.op("Gather", {order, pos}, {Attr::Int("axis", 0)}, c.out_type()));
}

// ---- roi_align

std::string roi_align_node(Ctx& c, const std::string& x, const std::string& boxes,
                           const std::string& idx, double scale, int64_t ph, int64_t pw,
                           int64_t sampling, bool half_pixel, ValueType out) {
  std::vector<Attr> attrs = {Attr::Str("mode", "avg"), Attr::Int("output_height", ph),
                             Attr::Int("output_width", pw),
                             Attr::Int("sampling_ratio", sampling > 0 ? sampling : 0),
                             Attr::Float("spatial_scale", static_cast<float>(scale))};
  if (c.opset() >= 16)
    attrs.push_back(Attr::Str("coordinate_transformation_mode",
                              half_pixel ? "half_pixel" : "output_half_pixel"));
  return c.b.op("RoiAlign", {x, boxes, idx}, std::move(attrs), std::move(out));
}

void roi_align(Ctx& c) {
  std::string x = c.tensor("input"), rois = c.tensor("rois");
  double scale = c.f("spatial_scale", 1.0);
  int64_t ph = static_size(c, "pooled_height"), pw = static_size(c, "pooled_width");
  int64_t sampling = c.i("sampling_ratio", -1);
  bool aligned = c.flag("aligned", false);
  // RoiAlign-10 has no half-pixel mode, and shifting the rois by half a cell
  // would still grow rois under one cell to 1 x 1 (aligned=True does not).
  if (aligned && c.opset() < 16)
    c.fail(
        "torchvision.roi_align with aligned=True needs opset >= 16 (ONNX RoiAlign's "
        "coordinate_transformation_mode=\"half_pixel\"); export with opset=16 or higher");
  DType t = c.dtype(x), kt = roi_type(t);
  auto [boxes, idx] = split_rois(c, rois, kt);
  ValueType out = c.out_type();
  out.dtype = kt;
  std::string y =
      roi_align_node(c, c.cast(x, kt), boxes, idx, scale, ph, pw, sampling, aligned, out);
  c.set_output(0, c.b.op("Identity", {c.cast(y, t)}, {}, c.out_type()));
}

// ---- roi_pool

void roi_pool(Ctx& c) {
  if (used(c, 1))
    c.fail(
        "torchvision.roi_pool's second output (argmax, for the backward) has no ONNX form; "
        "only the pooled values convert");
  std::string x = c.tensor("input"), rois = c.tensor("rois");
  double scale = c.f("spatial_scale", 1.0);
  int64_t ph = static_size(c, "pooled_height"), pw = static_size(c, "pooled_width");
  DType t = c.dtype(x);
  ValueType out = c.out_type();
  out.dtype = DType::Float;
  std::string y = c.b.op("MaxRoiPool", {c.cast(x, DType::Float), c.cast(rois, DType::Float)},
                         {Attr::Ints("pooled_shape", {ph, pw}),
                          Attr::Float("spatial_scale", static_cast<float>(scale))},
                         out);
  c.set_output(0, c.b.op("Identity", {c.cast(y, t)}, {}, c.out_type()));
  // Nothing reads the argmax: a value of its type and shape, removed as dead code.
  if (c.n_outputs() > 1) c.set_output(1, c.cast(y, c.out_dtype(1)));
}

// ---- ps_roi_align

void ps_roi_align(Ctx& c) {
  std::string x = c.tensor("input"), rois = c.tensor("rois");
  double scale = c.f("spatial_scale", 1.0);
  int64_t ph = static_size(c, "pooled_height"), pw = static_size(c, "pooled_width");
  int64_t sampling = c.i("sampling_ratio", -1);
  if (c.opset() < 16)
    c.fail(
        "torchvision.ps_roi_align needs opset >= 16 (ONNX RoiAlign's "
        "coordinate_transformation_mode=\"half_pixel\"); export with opset=16 or higher");
  const ValueType& xt = c.type(x);
  if (!xt.shape || xt.shape->size() != 4 || !(*xt.shape)[1].is_static())
    c.fail("torchvision.ps_roi_align needs an input [N, C, H, W] with a static C");
  int64_t channels = (*xt.shape)[1].value, bins = ph * pw;
  if (bins <= 0 || channels % bins != 0)
    c.fail("torchvision.ps_roi_align: input channels (" + std::to_string(channels) +
           ") must be a multiple of pooled_height * pooled_width (" + std::to_string(bins) + ")");
  int64_t c_out = channels / bins;
  DType t = c.dtype(x), kt = roi_type(t);
  auto [boxes, idx] = split_rois(c, rois, kt);
  const ValueType& ot = c.out_type();
  Dim k = ot.shape ? (*ot.shape)[0] : Dim::unknown();
  std::string all =
      roi_align_node(c, c.cast(x, kt), boxes, idx, scale, ph, pw, sampling, true,
                     ValueType{kt, Shape{k, Dim::of(channels), Dim::of(ph), Dim::of(pw)}});
  // [K, C_out, P (channel within the group), P (bin)] -> the diagonal.
  std::string flat = c.b.op("Reshape", {all, c.b.const_i64({-1, c_out, bins * bins})}, {},
                            ValueType{kt, Shape{k, Dim::of(c_out), Dim::of(bins * bins)}});
  std::vector<int64_t> diag;
  for (int64_t b = 0; b < bins; ++b) diag.push_back(b * (bins + 1));
  std::string picked = c.b.op("Gather", {flat, c.b.const_i64(diag)}, {Attr::Int("axis", 2)},
                              ValueType{kt, Shape{k, Dim::of(c_out), Dim::of(bins)}});
  std::string y = c.b.op("Reshape", {picked, c.b.const_i64({-1, c_out, ph, pw})}, {},
                         ValueType{kt, Shape{k, Dim::of(c_out), Dim::of(ph), Dim::of(pw)}});
  if (sampling <= 0) {
    // NaN where the adaptive grid ceil(roi_size / pooled) is 0 along either axis,
    // roi_size computed as torchvision does: (x2 * s - 0.5) - (x1 * s - 0.5).
    std::string s = c.b.scalar(kt, static_cast<double>(static_cast<float>(scale)));
    if (kt == DType::Double) s = c.b.scalar(kt, scale);
    std::string half = c.b.scalar(kt, 0.5);
    // Init-capture: clang 14 (the fuzz build) cannot capture a structured binding.
    auto coord = [&, bx = boxes](int64_t col) {
      std::string v = c.b.op("Gather", {bx, c.b.const_i64({col})}, {Attr::Int("axis", 1)});
      return c.b.op("Sub", {c.b.op("Mul", {v, s}), half});  // [K, 1]
    };
    auto empty_grid = [&](int64_t lo, int64_t hi, int64_t pooled) {
      std::string size = c.b.op("Sub", {coord(hi), coord(lo)});
      std::string grid =
          c.b.op("Ceil", {c.b.op("Div", {size, c.b.scalar(kt, static_cast<double>(pooled))})});
      return c.b.op("Equal", {grid, c.b.scalar(kt, 0)});
    };
    std::string none = c.b.op("Or", {empty_grid(1, 3, ph), empty_grid(0, 2, pw)});  // [K, 1]
    none = c.unsqueeze(none, {2, 3});                                               // [K,1,1,1]
    y = c.b.op("Where", {none, c.b.scalar(kt, std::numeric_limits<double>::quiet_NaN()), y});
  }
  c.set_output(0, c.b.op("Identity", {c.cast(y, t)}, {}, c.out_type()));
  if (c.n_outputs() > 1) {
    // channel_mapping: the input channel of each output element (int32).
    std::vector<int32_t> map(static_cast<size_t>(channels));
    for (int64_t i = 0; i < channels; ++i) map[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::string pattern =
        c.b.constant(TensorData::from_vector(DType::Int32, {1, c_out, ph, pw}, map));
    std::string shape = c.b.op("Concat", {c.dim_value(rois, 0), c.b.const_i64({c_out, ph, pw})},
                               {Attr::Int("axis", 0)});
    c.set_output(1, c.b.op("Expand", {pattern, shape}, {}, c.out_type(1)));
  }
}

}  // namespace

void register_torchvision_ops(Registry& r) {
  const std::string p = "torch.ops.torchvision.";
  r.add(p + "nms.default", nms);
  r.add(p + "roi_align.default", roi_align);
  r.add(p + "roi_pool.default", roi_pool);
  r.add(p + "ps_roi_align.default", ps_roi_align);
}

}  // namespace pt2onnx
