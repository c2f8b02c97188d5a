// Padding: constant_pad_nd, pad (constant/reflect/replicate/circular),
// _pad_enum, _pad_circular, reflection_pad*d, replication_pad*d. Negative
// pads crop (Slice) before the positive ones are added: ONNX Pad (modes
// constant/reflect/edge) for those, Slice+Concat for circular (any opset).
#include <algorithm>
#include <climits>

#include "convert/complex.h"
#include "convert/context.h"
#include "convert/layout.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

using layout::IE;

enum class Mode { Constant, Reflect, Replicate, Circular };

void emit_pad(Ctx& c, Mode mode, std::optional<double> value) {
  std::string x = c.tensor("self");
  const char* arg = c.arg("pad") ? "pad" : "padding";
  auto pad = c.symints(arg);
  // A complex tensor's carried components (the last axis) are never padded.
  size_t r = c.rank(x), tr = torch_rank(c, "self", x);
  std::vector<IE> lo(r, IE::of(0)), hi(r, IE::of(0));
  for (size_t k = 0; k + 1 < pad.size() && k / 2 < tr; k += 2) {
    size_t a = tr - 1 - k / 2;
    lo[a] = layout::sym(c, pad[k]);
    hi[a] = layout::sym(c, pad[k + 1]);
  }
  // replicate with a negative pad on an axis: out[i] = in[clamp(i - lo, 0, D - 1)]
  // (the edge is the input's, not the cropped tensor's).
  for (size_t a = 0; a < r && mode == Mode::Replicate; ++a) {
    bool neg = (lo[a].k && *lo[a].k < 0) || (hi[a].k && *hi[a].k < 0);
    IE D = layout::dim(c, x, static_cast<int64_t>(a));
    if (!neg || !lo[a].k || !hi[a].k || !D.k || *D.k == 0) continue;
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < *D.k + *lo[a].k + *hi[a].k; ++i)
      idx.push_back(std::clamp<int64_t>(i - *lo[a].k, 0, *D.k - 1));
    if (idx.empty()) {
      x = layout::slice(c, x, static_cast<int64_t>(a), IE::of(0), IE::of(0));
    } else {
      x = c.b.op("Gather", {x, c.b.const_i64(idx)}, {Attr::Int("axis", static_cast<int64_t>(a))});
    }
    lo[a] = hi[a] = IE::of(0);
  }
  // Crop the negative pads first.
  for (size_t a = 0; a < r; ++a) {
    bool neg_lo = lo[a].k && *lo[a].k < 0, neg_hi = hi[a].k && *hi[a].k < 0;
    if (!neg_lo && !neg_hi) continue;
    IE s = neg_lo ? IE::of(-*lo[a].k) : IE::of(0);
    IE e = neg_hi ? hi[a] : IE::of(INT64_MAX);
    x = layout::slice(c, x, static_cast<int64_t>(a), s, e);
    if (neg_lo) lo[a] = IE::of(0);
    if (neg_hi) hi[a] = IE::of(0);
  }
  bool any = false;
  for (size_t a = 0; a < r; ++a) any |= !lo[a].is(0) || !hi[a].is(0);
  if (!any) return c.set_output(0, x);
  if (mode == Mode::Circular) {
    for (size_t a = 0; a < r; ++a) {
      if (lo[a].is(0) && hi[a].is(0)) continue;
      int64_t ax = static_cast<int64_t>(a);
      IE d = layout::dim(c, x, ax);
      std::vector<std::string> parts;
      if (!lo[a].is(0))
        parts.push_back(
            layout::slice(c, x, ax, layout::bin(c, "Sub", d, lo[a]), IE::of(INT64_MAX)));
      parts.push_back(x);
      if (!hi[a].is(0)) parts.push_back(layout::slice(c, x, ax, IE::of(0), hi[a]));
      x = c.b.op("Concat", parts, {Attr::Int("axis", ax)});
    }
    return c.set_output(0, x);
  }
  std::vector<IE> pads = lo;
  pads.insert(pads.end(), hi.begin(), hi.end());
  const char* m = mode == Mode::Constant ? "constant" : mode == Mode::Reflect ? "reflect" : "edge";
  c.set_output(0, layout::pad(c, x, pads, m, value));
}

std::optional<double> opt_value(Ctx& c) {
  if (!c.has("value")) return std::nullopt;
  return c.f("value", 0.0);
}

void constant_pad_nd(Ctx& c) { emit_pad(c, Mode::Constant, c.scalar_value("value")); }

void pad(Ctx& c) {
  std::string m = c.str("mode").value_or("constant");
  Mode mode = m == "reflect"     ? Mode::Reflect
              : m == "replicate" ? Mode::Replicate
              : m == "circular"  ? Mode::Circular
              : m == "constant"  ? Mode::Constant
                                : (c.fail("pad mode '" + m + "' is not converted"), Mode::Constant);
  emit_pad(c, mode, opt_value(c));
}

void pad_enum(Ctx& c) {
  int64_t m = c.i("mode");
  if (m < 0 || m > 3) c.fail("pad mode enum " + std::to_string(m) + " is not converted");
  emit_pad(c, static_cast<Mode>(m), opt_value(c));
}

void circular(Ctx& c) { emit_pad(c, Mode::Circular, std::nullopt); }
void reflect(Ctx& c) { emit_pad(c, Mode::Reflect, std::nullopt); }
void replicate(Ctx& c) { emit_pad(c, Mode::Replicate, std::nullopt); }

}  // namespace

void register_pad(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "constant_pad_nd.default", constant_pad_nd);
  r.add(p + "pad.default", pad);
  r.add(p + "_pad_enum.default", pad_enum);
  r.add(p + "_pad_circular.default", circular);
  for (const char* o :
       {"reflection_pad1d.default", "reflection_pad2d.default", "reflection_pad3d.default"})
    r.add(p + o, reflect);
  for (const char* o :
       {"replication_pad1d.default", "replication_pad2d.default", "replication_pad3d.default"})
    r.add(p + o, replicate);
}

}  // namespace pt2onnx
