// Pooling: max_pool{1,2,3}d (values and torch's per-plane indices),
// avg_pool{1,2,3}d (divisor_override too), adaptive_avg_pool{1,2,3}d and
// adaptive_max_pool{1,2,3}d (any input / output sizes: windows
// [floor(i*in/out), ceil((i+1)*in/out)) per dim), max_unpool{2,3}d.
#include <algorithm>
#include <cstring>
#include <functional>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

std::vector<int64_t> expand(std::vector<int64_t> v, size_t n) {
  if (v.size() == 1 && n > 1) v.assign(n, v[0]);
  return v;
}

// Pools that accept an unbatched input (C, spatial...) get a batch axis.
std::string pool(Ctx& c, const std::string& op, std::string x, size_t n, std::vector<Attr> attrs,
                 size_t n_outputs = 1) {
  bool unbatched = c.rank(x) == n + 1;
  ValueType out = c.out_type();  // torch's output shape (pool arithmetic done once, by torch)
  DType t = c.dtype(x), kt = c.kernel_type(op, t);
  x = c.cast(x, kt);
  out.dtype = kt;
  if (unbatched) {
    x = c.unsqueeze(x, {0});
    out.shape->insert(out.shape->begin(), Dim::of(1));
  }
  std::string y = c.b.add_node(op, {x}, n_outputs, std::move(attrs), {out})[0];
  return c.cast(unbatched ? c.squeeze(y, {0}) : y, t);
}

// Static spatial sizes (the last n dims) of x, or a failure naming `what`.
std::vector<int64_t> spatial(Ctx& c, const std::string& x, size_t n, const char* what) {
  const Shape& s = c.shape(x);
  std::vector<int64_t> r;
  for (size_t k = s.size() - n; k < s.size(); ++k) {
    if (!s[k].is_static()) c.fail(std::string(what) + " needs static spatial input sizes");
    r.push_back(s[k].value);
  }
  return r;
}

// Product of the last n dims of x as a 0-D int64 (constant when static).
std::string plane_size(Ctx& c, const std::string& x, size_t n) {
  const Shape& s = c.shape(x);
  int64_t p = 1;
  bool all_static = true;
  for (size_t k = s.size() - n; k < s.size(); ++k) {
    all_static &= s[k].is_static();
    if (s[k].is_static()) p *= s[k].value;
  }
  if (all_static) return c.b.scalar_i64(p);
  auto r = static_cast<int64_t>(s.size());
  std::string dims = c.shape_part(x, r - static_cast<int64_t>(n));
  return c.reduce("ReduceProd", dims, {}, false);
}

std::string const_f32(Ctx& c, const std::vector<float>& v, std::vector<int64_t> dims, DType t) {
  return c.cast(c.b.constant(TensorData::from_vector(DType::Float, std::move(dims), v)), t);
}

// ---- max pool

void max_pool(Ctx& c, size_t n) {
  std::string x = c.tensor("self");
  auto kernel = expand(c.ints("kernel_size", {}), n);
  auto stride = c.ints("stride", {});
  stride = stride.empty() ? kernel : expand(stride, n);
  auto pad = expand(c.ints("padding", {0}), n);
  auto dil = expand(c.ints("dilation", {1}), n);
  std::vector<int64_t> pads = pad;
  pads.insert(pads.end(), pad.begin(), pad.end());
  std::vector<Attr> attrs{Attr::Ints("kernel_shape", kernel), Attr::Ints("strides", stride),
                          Attr::Ints("pads", pads), Attr::Ints("dilations", dil),
                          Attr::Int("ceil_mode", c.flag("ceil_mode", false) ? 1 : 0)};
  bool indices = c.n_outputs() > 1 && c.out_name(1).find("_unused_") == std::string::npos;
  if (!indices) {
    c.set_output(0, pool(c, "MaxPool", x, n, attrs));
    return;
  }
  bool unbatched = c.rank(x) == n + 1;
  ValueType vt = c.out_type(0), it = c.out_type(1);
  DType t = vt.dtype;
  vt.dtype = c.kernel_type("MaxPool", t);
  x = c.cast(x, vt.dtype);
  if (unbatched) {
    x = c.unsqueeze(x, {0});
    vt.shape->insert(vt.shape->begin(), Dim::of(1));
    it.shape->insert(it.shape->begin(), Dim::of(1));
  }
  auto outs = c.b.add_node("MaxPool", {x}, 2, attrs, {vt, it});
  // ONNX indexes the whole (N, C, spatial) tensor, torch each channel plane.
  std::string idx = c.b.op("Mod", {outs[1], plane_size(c, x, n)});
  if (unbatched) outs[0] = c.squeeze(outs[0], {0}), idx = c.squeeze(idx, {0});
  c.set_output(0, c.cast(outs[0], t));
  c.set_output(1, idx);
}
void max_pool1d(Ctx& c) { max_pool(c, 1); }
void max_pool2d(Ctx& c) { max_pool(c, 2); }
void max_pool3d(Ctx& c) { max_pool(c, 3); }

// ---- avg pool

// Sum over each window (a ones-kernel Conv over the planes) / divisor.
void avg_pool_divisor(Ctx& c, std::string x, size_t n, const std::vector<int64_t>& kernel,
                      const std::vector<int64_t>& stride, const std::vector<int64_t>& pad,
                      int64_t divisor) {
  DType ot_dtype = c.dtype(x);
  DType t = c.kernel_type("Conv", ot_dtype);
  x = c.cast(x, t);
  auto in = spatial(c, x, n, "avg_pool with divisor_override");
  ValueType ot = c.out_type();
  size_t r = c.rank(x);
  std::vector<int64_t> pads_end;
  for (size_t k = 0; k < n; ++k) {
    const Dim& od = (*ot.shape)[ot.shape->size() - n + k];
    if (!od.is_static()) c.fail("avg_pool with divisor_override needs static output sizes");
    // ceil_mode: the last window may reach past the padded input.
    int64_t need = (od.value - 1) * stride[k] + kernel[k] - in[k] - pad[k];
    pads_end.push_back(std::max(need, pad[k]));
  }
  std::vector<int64_t> pads = pad;
  pads.insert(pads.end(), pads_end.begin(), pads_end.end());
  // (lead..., spatial) -> (L, 1, spatial)
  std::string lead = c.b.op("Shape", {x}, {Attr::Int("end", static_cast<int64_t>(r - n))});
  std::vector<int64_t> flat{-1, 1};
  flat.insert(flat.end(), in.begin(), in.end());
  std::string xs = c.reshape(x, c.b.const_i64(flat));
  int64_t kn = 1;
  for (auto k : kernel) kn *= k;
  std::vector<int64_t> wdims{1, 1};
  wdims.insert(wdims.end(), kernel.begin(), kernel.end());
  std::string w = const_f32(c, std::vector<float>(static_cast<size_t>(kn), 1.0f), wdims, t);
  std::string s = c.b.op(
      "Conv", {xs, w},
      {Attr::Ints("kernel_shape", kernel), Attr::Ints("strides", stride), Attr::Ints("pads", pads)},
      ValueType{t, std::nullopt});
  s = c.b.op("Div", {s, c.b.scalar(t, static_cast<double>(divisor))});
  std::vector<int64_t> osz;
  for (size_t k = 0; k < n; ++k) osz.push_back((*ot.shape)[ot.shape->size() - n + k].value);
  std::string shape = c.b.op("Concat", {lead, c.b.const_i64(osz)}, {Attr::Int("axis", 0)});
  c.set_output(0, c.cast(c.reshape(s, shape), ot_dtype));
}

void avg_pool(Ctx& c, size_t n) {
  std::string x = c.tensor("self");
  auto kernel = expand(c.ints("kernel_size", {}), n);
  auto stride = c.ints("stride", {});
  stride = stride.empty() ? kernel : expand(stride, n);
  auto pad = expand(c.ints("padding", {0}), n);
  if (c.has("divisor_override")) {
    avg_pool_divisor(c, x, n, kernel, stride, pad, c.i("divisor_override"));
    return;
  }
  std::vector<int64_t> pads = pad;
  pads.insert(pads.end(), pad.begin(), pad.end());
  std::vector<Attr> attrs{
      Attr::Ints("kernel_shape", kernel), Attr::Ints("strides", stride), Attr::Ints("pads", pads),
      Attr::Int("ceil_mode", c.flag("ceil_mode", false) ? 1 : 0),
      Attr::Int("count_include_pad", c.flag("count_include_pad", true) ? 1 : 0)};
  c.set_output(0, pool(c, "AveragePool", x, n, attrs));
}
void avg_pool1d(Ctx& c) { avg_pool(c, 1); }
void avg_pool2d(Ctx& c) { avg_pool(c, 2); }
void avg_pool3d(Ctx& c) { avg_pool(c, 3); }

// ---- adaptive pools

struct Windows {
  std::vector<int64_t> start, end;
  int64_t widest = 0;
};

Windows windows(int64_t in, int64_t out) {
  Windows w;
  for (int64_t i = 0; i < out; ++i) {
    int64_t s = (i * in) / out, e = ((i + 1) * in + out - 1) / out;
    w.start.push_back(s);
    w.end.push_back(e);
    w.widest = std::max(w.widest, e - s);
  }
  return w;
}

// Spatial sizes known only at run time (torch.compile(dynamic=True) of an
// image model): per dim, window o is [floor(o * in / out), ceil((o + 1) * in /
// out)), each averaged with a Slice and a ReduceMean and the results
// concatenated; box averages are separable, so one dim after the other. out
// Slices per dim, computed in float32 for 16-bit floats.
std::string adaptive_avg_pool_dynamic(Ctx& c, const std::string& x,
                                      const std::vector<int64_t>& out) {
  DType t = c.dtype(x);
  DType ct = (t == DType::Float16 || t == DType::BFloat16) ? DType::Float : t;
  std::string y = c.cast(x, ct);
  int64_t r = static_cast<int64_t>(c.rank(x)), n = static_cast<int64_t>(out.size());
  for (int64_t k = 0; k < n; ++k) {
    int64_t axis = r - n + k;
    std::string in = c.dim_value(y, axis);
    std::string o = c.b.const_i64({out[static_cast<size_t>(k)]});
    std::vector<std::string> parts;
    for (int64_t i = 0; i < out[static_cast<size_t>(k)]; ++i) {
      std::string start = c.b.op("Div", {c.b.op("Mul", {c.b.const_i64({i}), in}), o});
      std::string end =
          c.b.op("Div", {c.b.op("Add", {c.b.op("Mul", {c.b.const_i64({i + 1}), in}),
                                        c.b.const_i64({out[static_cast<size_t>(k)] - 1})}),
                         o});
      std::string win = c.b.op("Slice", {y, start, end, c.b.const_i64({axis})});
      parts.push_back(c.reduce("ReduceMean", win, {axis}, true));
    }
    y = parts.size() == 1 ? parts[0] : c.b.op("Concat", parts, {Attr::Int("axis", axis)});
  }
  return c.cast(y, t);
}

void adaptive_avg_pool(Ctx& c) {
  std::string x = c.tensor("self");
  auto out = c.ints("output_size", {});
  size_t n = out.size();
  bool global = true;
  for (auto v : out) global &= v == 1;
  if (global) {
    c.set_output(0, pool(c, "GlobalAveragePool", x, n, {}));
    return;
  }
  const Shape& xs = c.shape(x);
  bool dynamic = false;
  for (size_t k = xs.size() - n; k < xs.size(); ++k) dynamic |= !xs[k].is_static();
  if (dynamic) return c.set_output(0, adaptive_avg_pool_dynamic(c, x, out));
  auto in = spatial(c, x, n, "adaptive_avg_pool");
  bool divisible = true;
  for (size_t k = 0; k < n; ++k) divisible &= in[k] % out[k] == 0;
  if (divisible) {
    std::vector<int64_t> kernel;
    for (size_t k = 0; k < n; ++k) kernel.push_back(in[k] / out[k]);
    c.set_output(0, pool(c, "AveragePool", x, n,
                         {Attr::Ints("kernel_shape", kernel), Attr::Ints("strides", kernel)}));
    return;
  }
  if (auto od = c.out_type().static_dims()) {
    int64_t numel = 1;
    for (auto d : *od) numel *= d;
    if (numel == 0) {  // empty batch: onnxruntime's MatMul rejects the broadcast
      c.set_output(0, c.b.op("Expand", {c.b.scalar(c.dtype(x), 0.0), c.b.const_i64(*od)}));
      return;
    }
  }
  // Box averages are separable: one (out <- in) averaging matrix per dim,
  // applied as M [out, in] @ y [L, in, rest] (L: the dims before).
  DType t = c.dtype(x);
  size_t r = c.rank(x);
  std::string lead = c.b.op("Shape", {x}, {Attr::Int("end", static_cast<int64_t>(r - n))});
  std::vector<int64_t> cur = in;
  std::string y = x;
  for (size_t k = 0; k < n; ++k) {
    if (in[k] == out[k]) continue;
    Windows w = windows(in[k], out[k]);
    std::vector<float> m(static_cast<size_t>(in[k] * out[k]), 0.0f);
    for (int64_t o = 0; o < out[k]; ++o)
      for (int64_t i = w.start[o]; i < w.end[o]; ++i)
        m[static_cast<size_t>(o * in[k] + i)] = 1.0f / static_cast<float>(w.end[o] - w.start[o]);
    int64_t rest = 1;
    for (size_t j = k + 1; j < n; ++j) rest *= cur[j];
    int64_t before = 1;
    for (size_t j = 0; j < k; ++j) before *= cur[j];
    std::string y3 = c.reshape(
        y, c.b.op("Concat", {lead, c.b.const_i64({before, in[k], rest})}, {Attr::Int("axis", 0)}));
    y = c.b.op("MatMul", {const_f32(c, m, {out[k], in[k]}, t), y3});
    cur[k] = out[k];
    std::string shape = c.b.op("Concat", {lead, c.b.const_i64(cur)}, {Attr::Int("axis", 0)});
    y = c.reshape(y, shape);
  }
  c.set_output(0, y);
}

// Max (and torch's per-plane argmax) over each window, one dim at a time from
// the last: the windows of a dim are gathered into a new axis ([.., out, K, ..]
// with indices clamped to the window's end), reduced by ArgMax (first maximum,
// as torch), and the flat in-plane index accumulated.
void adaptive_max_pool(Ctx& c) {
  std::string x = c.tensor("self");
  auto out = c.ints("output_size", {});
  size_t n = out.size();
  auto in = spatial(c, x, n, "adaptive_max_pool");
  size_t r = c.rank(x);
  bool want_idx = c.n_outputs() > 1 && c.out_name(1).find("_unused_") == std::string::npos;
  std::string v = x;
  std::optional<std::string> idx;  // flat in-plane index of v's elements
  int64_t inner = 1;               // plane stride of dim k
  for (size_t kk = n; kk-- > 0;) {
    Windows w = windows(in[kk], out[kk]);
    int64_t axis = static_cast<int64_t>(r - n + kk);
    std::vector<int64_t> table;
    for (int64_t o = 0; o < out[kk]; ++o)
      for (int64_t j = 0; j < w.widest; ++j)
        table.push_back(std::min(w.start[o] + j, w.end[o] - 1));
    std::string tv = c.b.const_i64(table);
    tv = c.reshape(tv, c.b.const_i64({out[kk], w.widest}));
    std::string g = c.b.op("Gather", {v, tv}, {Attr::Int("axis", axis)});
    ValueType at = c.type(g);
    at.dtype = DType::Int64;
    if (at.shape) (*at.shape)[static_cast<size_t>(axis + 1)] = Dim::of(1);
    std::string arg =
        c.b.op("ArgMax", {g}, {Attr::Int("axis", axis + 1), Attr::Int("keepdims", 1)}, at);
    ValueType vt = at;
    vt.dtype = c.dtype(x);
    v = c.squeeze(c.b.op("GatherElements", {g, arg}, {Attr::Int("axis", axis + 1)}, vt),
                  {axis + 1});
    if (want_idx) {
      // position along this dim: start[o] + argmax
      std::vector<int64_t> sshape(r + 1, 1);
      sshape[static_cast<size_t>(axis)] = out[kk];
      std::string starts = c.reshape(c.b.const_i64(w.start), c.b.const_i64(sshape));
      std::string pos = c.squeeze(c.b.op("Add", {starts, arg}), {axis + 1});
      pos = c.b.op("Mul", {pos, c.b.scalar_i64(inner)});
      if (idx) {
        std::string gi = c.b.op("Gather", {*idx, tv}, {Attr::Int("axis", axis)});
        gi = c.squeeze(c.b.op("GatherElements", {gi, arg}, {Attr::Int("axis", axis + 1)}, at),
                       {axis + 1});
        pos = c.b.op("Add", {pos, gi});
      }
      idx = pos;
    }
    inner *= in[kk];
  }
  // Indices unused: a cheap value of the right type.
  if (c.n_outputs() > 1 && !idx)
    idx = c.b.op("Cast", {v}, {Attr::Int("to", static_cast<int64_t>(DType::Int64))});
  c.set_output(0, v);
  if (c.n_outputs() > 1) c.set_output(1, *idx);
}

// ---- max unpool: scatter each plane's values to their flat indices.

void max_unpool(Ctx& c) {
  std::string x = c.tensor("self"), idx = c.tensor("indices");
  auto size = c.symints("output_size");
  size_t n = size.size();
  size_t r = c.rank(x);
  auto lead_dims = static_cast<int64_t>(r - n);
  std::string lead = c.b.op("Shape", {x}, {Attr::Int("end", lead_dims)});
  std::string flat_shape = c.b.op("Concat", {lead, c.b.const_i64({-1})}, {Attr::Int("axis", 0)});
  std::string xf = c.reshape(x, flat_shape);
  std::string id = c.reshape(c.cast(idx, DType::Int64), flat_shape);
  std::string plane = c.shape_tensor(size);
  std::string total = c.reduce("ReduceProd", plane, {0}, true);
  std::string zshape = c.b.op("Concat", {lead, total}, {Attr::Int("axis", 0)});
  std::string zeros = c.b.op("Expand", {c.b.scalar(c.dtype(x), 0.0), zshape});
  ValueType zt{c.dtype(x), std::nullopt};
  std::string y = c.b.op("ScatterElements", {zeros, id, xf}, {Attr::Int("axis", lead_dims)}, zt);
  c.set_output(0, c.reshape(y, c.b.op("Concat", {lead, plane}, {Attr::Int("axis", 0)})));
}

// ---- fractional max pool: windows start at torch's pseudo-random
// intervals, drawn from `random_samples` (N, C, n) in [0, 1): along a dim of
// input size I, output size O and kernel k, with alpha = (I - k) / (O - 1) in
// the input's type, start[i] = int((i + u) * alpha) - int(u * alpha) for
// i < O - 1 and start[O - 1] = I - k. Sample 0 drives W and 1 H (2-D); 0 T,
// 1 H and 2 W (3-D). The max over each window is taken in torch's scan order
// (the first maximum; a NaN wins), with its index in the flattened plane.

void fractional_max_pool(Ctx& c, size_t n) {
  std::string x = c.tensor("self");
  auto kernel = expand(c.ints("kernel_size", {}), n);
  auto out = expand(c.ints("output_size", {}), n);
  bool unbatched = c.rank(x) == n + 1;
  if (unbatched) x = c.unsqueeze(x, {0});
  auto in = spatial(c, x, n, "fractional_max_pool");
  DType t = c.dtype(x);
  std::string u_all = c.cast(c.tensor("random_samples"), t);
  // Unbatched: torch reads only the first row of samples (there may be more).
  if (unbatched) u_all = c.b.op("Gather", {u_all, c.b.const_i64({0})}, {Attr::Int("axis", 0)});
  std::string nc = c.b.op("Shape", {x}, {Attr::Int("end", 2)});
  auto shape_with = [&](std::vector<int64_t> tail) {
    return c.b.op("Concat", {nc, c.b.const_i64(tail)}, {Attr::Int("axis", 0)});
  };
  auto i64 = [&](const std::string& v) {
    return c.b.op("Cast", {v}, {Attr::Int("to", static_cast<int64_t>(DType::Int64))});
  };
  // Window starts per spatial dim, shaped (N, C, 1.., O_d, ..1).
  std::vector<std::string> start(n);
  for (size_t d = 0; d < n; ++d) {
    int64_t sample = n == 2 ? 1 - static_cast<int64_t>(d) : static_cast<int64_t>(d);
    int64_t I = in[d], k = kernel[d], O = out[d];
    if (k < 1 || O < 1 || O + k - 1 > I)
      c.fail("fractional_max_pool: output size " + std::to_string(O) + " and kernel " +
             std::to_string(k) + " do not fit input size " + std::to_string(I));
    std::string last = c.b.op("Expand", {c.b.const_i64({I - k}), shape_with({1})});
    std::string s = last;
    if (O > 1) {
      // alpha rounded as torch rounds it, in the input's type.
      double alpha =
          t == DType::Double
              ? static_cast<double>(I - k) / static_cast<double>(O - 1)
              : static_cast<double>(static_cast<float>(I - k) / static_cast<float>(O - 1));
      std::string u = c.b.op("Gather", {u_all, c.b.const_i64({sample})}, {Attr::Int("axis", 2)});
      std::vector<float> idx;
      for (int64_t i = 0; i + 1 < O; ++i) idx.push_back(static_cast<float>(i));
      std::string iv = const_f32(c, idx, {1, 1, O - 1}, t);
      std::string a = c.b.scalar(t, alpha);
      std::string head = c.b.op(
          "Sub", {i64(c.b.op("Mul", {c.b.op("Add", {iv, u}), a})), i64(c.b.op("Mul", {u, a}))});
      s = c.b.op("Concat", {head, last}, {Attr::Int("axis", 2)});
    }
    std::vector<int64_t> shape;
    for (size_t e = 0; e < n; ++e) shape.push_back(e == d ? O : 1);
    start[d] = c.b.op("Reshape", {s, shape_with(shape)});
  }
  std::vector<int64_t> plane_stride(n, 1);
  for (size_t d = n - 1; d-- > 0;) plane_stride[d] = plane_stride[d + 1] * in[d + 1];
  std::optional<std::string> best, best_idx;
  // Gathers dim d of `v` at every kernel offset (dims before d already gathered).
  std::function<void(size_t, const std::string&, const std::string&)> scan =
      [&](size_t d, const std::string& v, const std::string& flat) {
        if (d == n) {
          if (!best) {
            best = v, best_idx = flat;
            return;
          }
          std::string take = c.b.op("Or", {c.b.op("Greater", {v, *best}), c.b.op("IsNaN", {v})});
          best = c.b.op("Where", {take, v, *best});
          best_idx = c.b.op("Where", {take, flat, *best_idx});
          return;
        }
        std::vector<int64_t> tail;
        for (size_t e = 0; e < n; ++e) tail.push_back(e <= d ? out[e] : in[e]);
        std::string target = shape_with(tail);
        for (int64_t off = 0; off < kernel[d]; ++off) {
          std::string pos = c.b.op("Add", {start[d], c.b.scalar_i64(off)});
          std::string g =
              c.b.op("GatherElements", {v, c.b.op("Expand", {pos, target})},
                     {Attr::Int("axis", static_cast<int64_t>(2 + d))}, ValueType{t, std::nullopt});
          std::string f = c.b.op("Mul", {pos, c.b.scalar_i64(plane_stride[d])});
          scan(d + 1, g, flat.empty() ? f : c.b.op("Add", {flat, f}));
        }
      };
  scan(0, x, "");
  std::string v = *best, idx = *best_idx;
  if (unbatched) v = c.squeeze(v, {0}), idx = c.squeeze(idx, {0});
  c.set_output(0, v);
  if (c.n_outputs() > 1) c.set_output(1, idx);
}
void fractional_max_pool2d(Ctx& c) { fractional_max_pool(c, 2); }
void fractional_max_pool3d(Ctx& c) { fractional_max_pool(c, 3); }

}  // namespace

void register_pool(Registry& r) {
  r.add("torch.ops.aten.fractional_max_pool2d.default", fractional_max_pool2d);
  r.add("torch.ops.aten.fractional_max_pool3d.default", fractional_max_pool3d);
  const std::string p = "torch.ops.aten.";
  for (const char* o : {"max_pool1d.default", "max_pool1d_with_indices.default"})
    r.add(p + o, max_pool1d);
  for (const char* o : {"max_pool2d.default", "max_pool2d_with_indices.default"})
    r.add(p + o, max_pool2d);
  for (const char* o : {"max_pool3d.default", "max_pool3d_with_indices.default"})
    r.add(p + o, max_pool3d);
  r.add(p + "avg_pool1d.default", avg_pool1d);
  r.add(p + "avg_pool2d.default", avg_pool2d);
  r.add(p + "avg_pool3d.default", avg_pool3d);
  for (const char* o :
       {"adaptive_avg_pool1d.default", "adaptive_avg_pool2d.default", "adaptive_avg_pool3d.default",
        "_adaptive_avg_pool2d.default", "_adaptive_avg_pool3d.default"})
    r.add(p + o, adaptive_avg_pool);
  for (const char* o : {"adaptive_max_pool1d.default", "adaptive_max_pool2d.default",
                        "adaptive_max_pool3d.default"})
    r.add(p + o, adaptive_max_pool);
  r.add(p + "max_unpool2d.default", max_unpool);
  r.add(p + "max_unpool3d.default", max_unpool);
}

}  // namespace pt2onnx
