// Spectral ops: fft_{fft,ifft,rfft,irfft,hfft,ihfft} and their 2-D / n-D
// forms (ONNX DFT from opset 17, its axis an input from 20; below 17 products
// with cos / sin matrices), fftshift and ifftshift. From opset 17 a
// transformed dim may be symbolic (DFT reads its length; the normalization
// scales by the runtime size) unless a length is requested for it or it is
// the Hermitian (C2R) output dim. Complex tensors are real tensors with a
// trailing (re, im) axis of 2 (see Ctx::meta_type); a real input enters DFT
// as [..., 1].
#include <cmath>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

int64_t static_dim(Ctx& c, const std::string& v, int64_t axis) {
  const Dim& d = c.shape(v)[static_cast<size_t>(axis)];
  if (!d.is_static()) c.fail("FFT needs static sizes along the transformed dims");
  return d.value;
}

// N, the product of the signal lengths, for the normalization: a constant
// part and the runtime sizes of symbolic dims.
struct Total {
  double known = 1.0;
  std::vector<std::string> runtime;  // int64 scalars

  void add(double n) { known *= n; }
  // The length of `axis` of v as it is now.
  void add_dim(Ctx& c, const std::string& v, int64_t axis) {
    const Dim& d = c.shape(v)[static_cast<size_t>(axis)];
    if (d.is_static()) return add(static_cast<double>(d.value));
    runtime.push_back(
        c.b.op("Gather", {c.b.op("Shape", {v}), c.b.scalar_i64(axis)}, {Attr::Int("axis", 0)}));
  }
};

// v scaled by N^p (p in {-1, -1/2, 1/2, 1}; 0: unchanged).
std::string scale_by(Ctx& c, const std::string& v, const Total& n, double p) {
  if (p == 0.0) return v;
  DType t = c.dtype(v);
  if (n.runtime.empty()) {
    double f = std::pow(n.known, p);
    if (std::abs(f - 1.0) <= 1e-15) return v;
    return c.b.op("Mul", {v, c.b.scalar(t, f)});
  }
  std::string total = c.cast(n.runtime[0], t);
  for (size_t k = 1; k < n.runtime.size(); ++k)
    total = c.b.op("Mul", {total, c.cast(n.runtime[k], t)});
  if (n.known != 1.0) total = c.b.op("Mul", {total, c.b.scalar(t, n.known)});
  std::string f = p == 1.0    ? total
                  : p == -1.0 ? c.b.op("Reciprocal", {total})
                  : p == 0.5  ? c.b.op("Sqrt", {total})
                              : c.b.op("Reciprocal", {c.b.op("Sqrt", {total})});
  return c.b.op("Mul", {v, f});
}

// Trims or zero-pads axis `axis` of v to `len`.
std::string fit(Ctx& c, const std::string& v, int64_t axis, int64_t len) {
  int64_t cur = static_dim(c, v, axis);
  if (cur == len) return v;
  if (cur > len)
    return c.b.op("Slice", {v, c.b.const_i64({0}), c.b.const_i64({len}), c.b.const_i64({axis})});
  std::vector<int64_t> pads(2 * c.rank(v), 0);
  pads[c.rank(v) + static_cast<size_t>(axis)] = len - cur;
  Shape s = c.shape(v);
  s[static_cast<size_t>(axis)] = Dim::of(len);
  return c.b.op("Pad", {v, c.b.const_i64(pads)}, {}, ValueType{c.dtype(v), s});
}

// Below opset 17 (no DFT operator): the DFT as products with constant
// cos / sin matrices, C[j][k] = cos(2 pi jk / n), S[j][k] = sin(2 pi jk / n)
// (angles reduced exactly, jk mod n, then evaluated in double):
// forward X = (re C + im S, im C - re S); inverse as ONNX's DFT, with +i and
// the 1/n factor. The transformed axis moves next to the trailing one.
std::string dft_matmul(Ctx& c, const std::string& v, int64_t axis, bool inverse, bool onesided) {
  int64_t n = static_dim(c, v, axis);
  int64_t m = onesided ? n / 2 + 1 : n;
  size_t r = c.rank(v);
  DType t = c.dtype(v);
  std::vector<int64_t> perm;
  for (size_t k = 0; k + 1 < r; ++k)
    if (static_cast<int64_t>(k) != axis) perm.push_back(static_cast<int64_t>(k));
  perm.push_back(axis);
  perm.push_back(static_cast<int64_t>(r - 1));
  std::vector<int64_t> back(r);
  for (size_t k = 0; k < r; ++k) back[static_cast<size_t>(perm[k])] = static_cast<int64_t>(k);
  std::string x = c.transpose(v, perm);  // [..., n, 1 or 2]
  bool cplx = static_dim(c, x, static_cast<int64_t>(r - 1)) == 2;
  auto part = [&](int64_t i) {
    return c.b.op("Gather", {x, c.b.scalar_i64(i)}, {Attr::Int("axis", -1)});
  };
  std::vector<double> cs(static_cast<size_t>(n * m)), sn(static_cast<size_t>(n * m));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t k = 0; k < m; ++k) {
      double a = 2 * M_PI * static_cast<double>((j * k) % n) / static_cast<double>(n);
      cs[static_cast<size_t>(j * m + k)] = std::cos(a);
      sn[static_cast<size_t>(j * m + k)] = std::sin(a);
    }
  std::string cm = c.cast(c.b.constant(TensorData::from_vector(DType::Double, {n, m}, cs)), t);
  std::string sm = c.cast(c.b.constant(TensorData::from_vector(DType::Double, {n, m}, sn)), t);
  // (re + i im)(C + i s S), s = -1 forward, +1 inverse:
  // re C - s im S + i (im C + s re S).
  std::string re = part(0);
  std::string out_re = c.b.op("MatMul", {re, cm}), re_s = c.b.op("MatMul", {re, sm});
  std::string out_im = inverse ? re_s : c.b.op("Neg", {re_s});
  if (cplx) {
    std::string im = part(1);
    std::string im_s = c.b.op("MatMul", {im, sm});
    out_re = c.b.op(inverse ? "Sub" : "Add", {out_re, im_s});
    out_im = c.b.op("Add", {out_im, c.b.op("MatMul", {im, cm})});
  }
  if (inverse) {
    std::string scale = c.b.scalar(t, 1.0 / static_cast<double>(n));
    out_re = c.b.op("Mul", {out_re, scale});
    out_im = c.b.op("Mul", {out_im, scale});
  }
  std::string y = c.b.op("Concat", {c.unsqueeze(out_re, {-1}), c.unsqueeze(out_im, {-1})},
                         {Attr::Int("axis", -1)});
  return c.transpose(y, back);
}

// One DFT along `axis` (an axis of the complex form, not the trailing one).
// From opset 17 the length may be symbolic (DFT reads it from the input).
std::string dft(Ctx& c, const std::string& v, int64_t axis, bool inverse, bool onesided) {
  if (c.opset() < 17) return dft_matmul(c, v, axis, inverse, onesided);
  Shape s = c.shape(v);
  Dim& d = s[static_cast<size_t>(axis)];
  if (d.is_static())
    d = Dim::of(onesided ? d.value / 2 + 1 : d.value);
  else if (onesided)
    d = Dim::unknown();
  s.back() = Dim::of(2);
  ValueType t{c.dtype(v), s};
  std::vector<Attr> attrs{Attr::Int("inverse", inverse ? 1 : 0),
                          Attr::Int("onesided", onesided ? 1 : 0)};
  if (c.opset() >= 20) return c.b.op("DFT", {v, "", c.b.scalar_i64(axis)}, attrs, t);
  attrs.push_back(Attr::Int("axis", axis));
  return c.b.op("DFT", {v}, attrs, t);
}

std::string conj(Ctx& c, const std::string& v) {
  std::string sign = c.b.const_i64({1, -1});
  return c.b.op("Mul", {v, c.cast(sign, c.dtype(v))});
}

// Complex form of a real or complex input: real x -> [..., 1].
std::string as_signal(Ctx& c, const std::string& x, bool input_complex) {
  return input_complex ? x : c.unsqueeze(x, {-1});
}

// Half spectrum [..., m, .., 2] -> full Hermitian spectrum of length n along axis.
std::string hermitian_full(Ctx& c, std::string v, int64_t axis, int64_t n) {
  v = fit(c, v, axis, n / 2 + 1);
  std::vector<int64_t> idx;
  std::vector<int64_t> sign;
  for (int64_t k = 0; k < n; ++k) {
    idx.push_back(k <= n / 2 ? k : n - k);
    sign.push_back(k <= n / 2 ? 1 : -1);
  }
  std::string full = c.b.op("Gather", {v, c.b.const_i64(idx)}, {Attr::Int("axis", axis)});
  // imag part negated on the mirrored half: sign[k] on [re, im] -> [1, sign[k]]
  size_t r = c.rank(v);
  std::vector<int64_t> ms;
  for (int64_t k = 0; k < n; ++k) ms.push_back(1), ms.push_back(sign[static_cast<size_t>(k)]);
  std::vector<int64_t> shape(r, 1);
  shape[static_cast<size_t>(axis)] = n;
  shape[r - 1] = 2;
  std::string m = c.reshape(c.cast(c.b.const_i64(ms), c.dtype(v)), c.b.const_i64(shape));
  return c.b.op("Mul", {full, m});
}

bool arg_complex(Ctx& c, const char* name) {
  return is_complex(c.prog.graph.tensor_values.at(c.arg(name)->name).dtype);
}

enum class Kind { C2C, R2C, C2R };

struct Plan {
  std::vector<int64_t> dims;               // normalized, in the original rank
  std::vector<std::optional<int64_t>> ns;  // requested lengths
};

void run_fft(Ctx& c, const Plan& plan, Kind kind, bool inverse, bool conj_in, bool conj_out,
             bool inverse_norm) {
  std::string x = c.tensor("self");
  bool input_complex = arg_complex(c, "self");
  DType rt = c.out_type().dtype;  // real type of the output
  std::string v = c.cast(as_signal(c, x, input_complex), rt);
  if (conj_in && input_complex) v = conj(c, v);
  size_t nd = plan.dims.size();
  Total total;
  // A requested length trims / pads (static sizes); none: the dim as it is,
  // symbolic ones included.
  auto sized = [&](size_t k) {
    int64_t a = plan.dims[k];
    if (plan.ns[k]) v = fit(c, v, a, *plan.ns[k]);
    total.add_dim(c, v, a);
    return a;
  };
  if (kind == Kind::C2C) {
    for (size_t k = 0; k < nd; ++k) {
      int64_t a = sized(k);
      v = dft(c, v, a, inverse, false);
    }
  } else if (kind == Kind::R2C) {
    // onesided along the last dim first (DFT wants the real input there)
    int64_t a = sized(nd - 1);
    v = dft(c, v, a, false, true);
    for (size_t k = 0; k + 1 < nd; ++k) {
      int64_t b = sized(k);
      v = dft(c, v, b, false, false);
    }
  } else {  // C2R
    if (!input_complex) {
      // a real half spectrum: imaginary parts are zero
      std::string zero = c.b.op("Mul", {v, c.b.scalar(rt, 0.0)});
      v = c.b.op("Concat", {v, zero}, {Attr::Int("axis", -1)});
    }
    for (size_t k = 0; k + 1 < nd; ++k) {
      int64_t b = sized(k);
      v = dft(c, v, b, true, false);
    }
    int64_t a = plan.dims[nd - 1];
    int64_t n = plan.ns[nd - 1] ? *plan.ns[nd - 1] : 2 * (static_dim(c, v, a) - 1);
    v = dft(c, hermitian_full(c, v, a, n), a, true, false);
    total.add(static_cast<double>(n));
  }
  if (conj_out) v = conj(c, v);
  // torch's norm: "backward" scales the inverse by 1/N, "forward" the forward
  // transform, "ortho" both by 1/sqrt(N). ONNX's inverse DFT divides by each
  // length already; the C2R and conjugated forms keep ONNX inverse DFTs too.
  // As powers of N: torch's scale over the one ONNX applied.
  std::string norm = c.str("norm").value_or("backward");
  double want = norm == "ortho" ? -0.5 : (norm == "backward") == inverse_norm ? -1.0 : 0.0;
  double have = inverse ? -1.0 : 0.0;
  v = scale_by(c, v, total, want - have);
  if (kind == Kind::C2R) {
    v = c.b.op("Slice", {v, c.b.const_i64({0}), c.b.const_i64({1}), c.b.const_i64({-1})});
    v = c.squeeze(v, {-1});
  }
  c.set_output(0, v);
}

// Dims and lengths of the 1-D, 2-D and n-D signatures.
Plan plan_1d(Ctx& c) {
  std::string x = c.tensor("self");
  Plan p;
  p.dims.push_back(Ctx::norm_axis(c.i("dim", -1), c.rank(x)));
  if (c.has("n"))
    p.ns.push_back(c.i("n"));
  else
    p.ns.push_back(std::nullopt);
  return p;
}

Plan plan_nd(Ctx& c, std::vector<int64_t> default_dims) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  Plan p;
  std::vector<int64_t> s = c.has("s") ? c.ints("s", {}) : std::vector<int64_t>{};
  std::vector<int64_t> dims;
  if (c.has("dim")) {
    dims = c.ints("dim", {});
  } else if (!default_dims.empty()) {
    dims = default_dims;
  } else if (!s.empty()) {
    for (size_t k = 0; k < s.size(); ++k) dims.push_back(static_cast<int64_t>(r - s.size() + k));
  } else {
    for (size_t k = 0; k < r; ++k) dims.push_back(static_cast<int64_t>(k));
  }
  for (size_t k = 0; k < dims.size(); ++k) {
    p.dims.push_back(Ctx::norm_axis(dims[k], r));
    if (k < s.size() && s[k] != -1)
      p.ns.push_back(s[k]);
    else
      p.ns.push_back(std::nullopt);
  }
  return p;
}

Plan plan_2d(Ctx& c) { return plan_nd(c, {-2, -1}); }
Plan plan_n(Ctx& c) { return plan_nd(c, {}); }

// kind, inverse DFT, conj in, conj out, torch's inverse normalization
template <Plan (*P)(Ctx&), Kind K, bool Inv, bool CIn, bool COut, bool InvNorm>
void fft_op(Ctx& c) {
  run_fft(c, P(c), K, Inv, CIn, COut, InvNorm);
}

// ---- core ATen forms: _fft_r2c / _fft_c2c / _fft_c2r with normalization
// 0 (none), 1 (1/sqrt(N)) or 2 (1/N), N the product of the signal lengths.

std::string normalized(Ctx& c, std::string v, int64_t mode, const Total& total, bool onnx_inverse) {
  double want = mode == 1 ? -0.5 : mode == 2 ? -1.0 : 0.0;
  return scale_by(c, v, total, want - (onnx_inverse ? -1.0 : 0.0));
}

std::vector<int64_t> core_dims(Ctx& c, size_t r) {
  std::vector<int64_t> d;
  for (auto a : c.ints("dim", {})) d.push_back(Ctx::norm_axis(a, r));
  return d;
}

void fft_r2c(Ctx& c) {
  std::string x = c.tensor("self");
  DType rt = c.out_type().dtype;
  auto dims = core_dims(c, c.rank(x));
  std::string v = c.cast(c.unsqueeze(x, {-1}), rt);
  bool onesided = c.flag("onesided", true);
  Total total;
  for (size_t k = dims.size(); k-- > 0;) {
    total.add_dim(c, v, dims[k]);
    v = dft(c, v, dims[k], false, onesided && k + 1 == dims.size());
  }
  c.set_output(0, normalized(c, v, c.i("normalization", 0), total, false));
}

void fft_c2c(Ctx& c) {
  std::string x = c.tensor("self");
  DType rt = c.out_type().dtype;
  auto dims = core_dims(c, c.rank(x) - 1);
  std::string v = c.cast(x, rt);
  bool forward = c.flag("forward", true);
  Total total;
  for (int64_t a : dims) {
    total.add_dim(c, v, a);
    v = dft(c, v, a, !forward, false);
  }
  c.set_output(0, normalized(c, v, c.i("normalization", 0), total, !forward));
}

void fft_c2r(Ctx& c) {
  std::string x = c.tensor("self");
  DType rt = c.out_type().dtype;
  auto dims = core_dims(c, c.rank(x) - 1);
  std::string v = c.cast(x, rt);
  Total total;
  for (size_t k = 0; k + 1 < dims.size(); ++k) {
    total.add_dim(c, v, dims[k]);
    v = dft(c, v, dims[k], true, false);
  }
  int64_t n = c.i("last_dim_size");
  v = dft(c, hermitian_full(c, v, dims.back(), n), dims.back(), true, false);
  total.add(static_cast<double>(n));
  v = normalized(c, v, c.i("normalization", 0), total, true);
  v = c.b.op("Slice", {v, c.b.const_i64({0}), c.b.const_i64({1}), c.b.const_i64({-1})});
  c.set_output(0, c.squeeze(v, {-1}));
}

// ---- stft (center padding is a separate aten.pad): frames gathered with a
// static index table, windowed, one DFT per frame; [.., bins, frames, 2].
void stft(Ctx& c) {
  std::string x = c.tensor("self");
  if (arg_complex(c, "self")) c.fail("stft of a complex signal is not converted");
  if (c.flag("align_to_window", false)) c.fail("stft with align_to_window is not converted");
  DType rt = c.out_type().dtype;
  size_t r = c.rank(x);
  int64_t n_fft = c.i("n_fft");
  int64_t hop = c.has("hop_length") ? c.i("hop_length") : n_fft / 4;
  int64_t win = c.has("win_length") ? c.i("win_length") : n_fft;
  int64_t len = static_dim(c, x, static_cast<int64_t>(r) - 1);
  int64_t frames = 1 + (len - n_fft) / hop;
  std::vector<int64_t> idx;
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t j = 0; j < n_fft; ++j) idx.push_back(f * hop + j);
  std::string table = c.reshape(c.b.const_i64(idx), c.b.const_i64({frames, n_fft}));
  std::string v = c.b.op("Gather", {c.cast(x, rt), table}, {Attr::Int("axis", -1)});
  if (auto w = c.opt_tensor("window"); w || win < n_fft) {
    std::string wv =
        w ? c.cast(*w, rt) : c.b.op("Expand", {c.b.scalar(rt, 1.0), c.b.const_i64({win})});
    if (win < n_fft) {
      int64_t left = (n_fft - win) / 2;
      wv = c.b.op("Pad", {wv, c.b.const_i64({left, n_fft - win - left})}, {},
                  ValueType{rt, Shape{Dim::of(n_fft)}});
    }
    v = c.b.op("Mul", {v, wv});
  }
  bool onesided = c.flag("onesided", true);
  int64_t ax = static_cast<int64_t>(r);  // frames: [.., F, n_fft, 1]
  v = dft(c, c.unsqueeze(v, {-1}), ax, false, onesided);
  if (c.flag("normalized", false))
    v = c.b.op("Mul", {v, c.b.scalar(rt, 1.0 / std::sqrt(static_cast<double>(n_fft)))});
  std::vector<int64_t> perm;
  for (size_t k = 0; k + 1 < r; ++k) perm.push_back(static_cast<int64_t>(k));
  perm.push_back(static_cast<int64_t>(r));
  perm.push_back(static_cast<int64_t>(r) - 1);
  perm.push_back(static_cast<int64_t>(r) + 1);
  c.set_output(0, c.transpose(v, perm));
}

// ---- fftshift / ifftshift: a roll by n/2 (fftshift) or -(n/2) (ifftshift).

void shift(Ctx& c, bool inverse) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  std::vector<int64_t> dims;
  if (c.has("dim"))
    dims = c.ints("dim", {});
  else
    for (size_t k = 0; k < r; ++k) dims.push_back(static_cast<int64_t>(k));
  std::string v = x;
  for (int64_t d : dims) {
    int64_t a = Ctx::norm_axis(d, r);
    const Dim& dd = c.shape(v)[static_cast<size_t>(a)];
    if (!dd.is_static()) c.fail("fftshift needs static sizes");
    int64_t n = dd.value;
    if (n <= 1) continue;
    // roll right by k: out = concat(x[n-k:], x[:n-k])
    int64_t k = inverse ? n - n / 2 : n / 2;
    int64_t cut = n - k;
    std::string ax = c.b.const_i64({a});
    std::string tail = c.b.op("Slice", {v, c.b.const_i64({cut}), c.b.const_i64({n}), ax});
    std::string head = c.b.op("Slice", {v, c.b.const_i64({0}), c.b.const_i64({cut}), ax});
    v = c.b.op("Concat", {tail, head}, {Attr::Int("axis", a)});
  }
  c.set_output(0, v);
}
void fftshift(Ctx& c) { shift(c, false); }
void ifftshift(Ctx& c) { shift(c, true); }

}  // namespace

void register_signal(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "fft_fftshift.default", fftshift);
  r.add(p + "fft_ifftshift.default", ifftshift);
  r.add(p + "_fft_r2c.default", fft_r2c);
  r.add(p + "_fft_c2c.default", fft_c2c);
  r.add(p + "_fft_c2r.default", fft_c2r);
  r.add(p + "stft.default", stft);
  // C2C: fft (forward), ifft (inverse)
  r.add(p + "fft_fft.default", fft_op<plan_1d, Kind::C2C, false, false, false, false>);
  r.add(p + "fft_fft2.default", fft_op<plan_2d, Kind::C2C, false, false, false, false>);
  r.add(p + "fft_fftn.default", fft_op<plan_n, Kind::C2C, false, false, false, false>);
  r.add(p + "fft_ifft.default", fft_op<plan_1d, Kind::C2C, true, false, false, true>);
  r.add(p + "fft_ifft2.default", fft_op<plan_2d, Kind::C2C, true, false, false, true>);
  r.add(p + "fft_ifftn.default", fft_op<plan_n, Kind::C2C, true, false, false, true>);
  // R2C: rfft; ihfft = conj(rfft) with the inverse normalization
  r.add(p + "fft_rfft.default", fft_op<plan_1d, Kind::R2C, false, false, false, false>);
  r.add(p + "fft_rfft2.default", fft_op<plan_2d, Kind::R2C, false, false, false, false>);
  r.add(p + "fft_rfftn.default", fft_op<plan_n, Kind::R2C, false, false, false, false>);
  r.add(p + "fft_ihfft.default", fft_op<plan_1d, Kind::R2C, false, false, true, true>);
  r.add(p + "fft_ihfft2.default", fft_op<plan_2d, Kind::R2C, false, false, true, true>);
  r.add(p + "fft_ihfftn.default", fft_op<plan_n, Kind::R2C, false, false, true, true>);
  // C2R: irfft; hfft = irfft(conj(x)) with the forward normalization
  r.add(p + "fft_irfft.default", fft_op<plan_1d, Kind::C2R, true, false, false, true>);
  r.add(p + "fft_irfft2.default", fft_op<plan_2d, Kind::C2R, true, false, false, true>);
  r.add(p + "fft_irfftn.default", fft_op<plan_n, Kind::C2R, true, false, false, true>);
  r.add(p + "fft_hfft.default", fft_op<plan_1d, Kind::C2R, true, true, false, false>);
  r.add(p + "fft_hfft2.default", fft_op<plan_2d, Kind::C2R, true, true, false, false>);
  r.add(p + "fft_hfftn.default", fft_op<plan_n, Kind::C2R, true, true, false, false>);
}

}  // namespace pt2onnx
