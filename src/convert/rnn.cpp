// Recurrent networks: lstm, gru, rnn_tanh, rnn_relu (the `.input` forms
// nn.LSTM / nn.GRU / nn.RNN record) and the cells lstm_cell, gru_cell,
// rnn_tanh_cell, rnn_relu_cell.
//
// Each layer becomes one ONNX LSTM / GRU / RNN node (direction
// "bidirectional" for both directions), on a sequence-major input (batch_first
// is a Transpose: layout=1 is not implemented by every runtime). torch's
// weights are re-laid out into ONNX's W [dirs, G*H, in], R [dirs, G*H, H],
// B [dirs, 2*G*H] with the gates reordered (LSTM i,f,g,o -> i,o,f,c; GRU
// r,z,n -> z,r,h with linear_before_reset=1, which is torch's GRU).
//
// Re-layout: when the weights are initializers (parameters, always the case
// for nn modules) the re-laid-out tensors are made here, at conversion time,
// as new owned initializers, once per layer and parameter set (the originals
// then have no reader: the optimizer drops them; with optimize=False both are
// written). That costs one copy of the recurrent weights during export, and
// gives a graph with no re-layout nodes, which no pass would fold (weights are
// never folded) and every runtime would redo at load. Weights that are graph
// inputs are re-laid out with Split / Concat / Unsqueeze / MatMul nodes.
//
// Types: onnxruntime's CPU LSTM / GRU / RNN are float32 only, so every
// recurrent layer computes in float32 (float64 and half types cast around
// it); cells compute in float32 or float64.
//
// Capture: torch.export computes these ops' output shapes by running their
// decomposition, which loops over time and fixes the sequence length;
// pt2onnx.export captures under capture_rules() (python/pt2onnx/
// _capture_rules.py), which gives the shapes directly.
//
// LSTM with proj_size: ONNX's LSTM has no projection, but the recurrence only
// reads the projected state through R: W_hh (W_hr h') = (W_hh W_hr) h'. So the
// ONNX LSTM runs on the unprojected state h' = o * tanh(c) with
// R = W_hh W_hr [4H, H], and the outputs are projected afterwards (Y W_hr^T,
// Y_h W_hr^T): any sequence length, dynamic included. A non-zero initial state
// h0 [P] is lifted to h'0 = h0 M with M = (W_hr W_hr^T)^-1 W_hr (then
// W_hr h'0 = h0), computed in float64 at conversion time; that needs W_hr to
// be an initializer of full row rank (float or double), otherwise only a
// zero initial state (none given) converts.
//
// Cells have no ONNX op: Gemm + activations.
#include <cmath>
#include <cstring>

#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

// ---- weights: bytes when known (re-laid out here), else ONNX values

struct Weight {
  std::string value;               // the ONNX value, if one exists
  std::optional<TensorData> data;  // contiguous bytes, when known
};

Weight weight(Ctx& c, const std::string& v) {
  const TensorData* t = c.b.constant_value(v);
  if (!t || (t->numel() > 0 && !t->bytes())) return {v, std::nullopt};
  if (t->is_contiguous()) {
    TensorData d;
    d.dtype = t->dtype;
    d.dims = t->dims;
    d.data = t->bytes();
    d.owned = t->owned;
    return {v, d};
  }
  return {v, TensorData::from_bytes(t->dtype, t->dims, t->contiguous_copy())};
}

Weight made(TensorData d) { return {std::string(), std::move(d)}; }

// The ONNX value of `w`: a new initializer named `name` for bytes made here.
std::string value(Ctx& c, const Weight& w, const std::string& name) {
  if (!w.value.empty()) return w.value;
  return name.empty() ? c.b.constant(*w.data) : c.b.initializer(name, *w.data);
}

bool all_known(const std::vector<Weight>& ws) {
  for (auto& w : ws)
    if (!w.data) return false;
  return true;
}

// Rows of `w` ([G*H, ...] or [G*H]) in gate blocks: block g of the result is
// block order[g] of `w`.
Weight reorder_gates(Ctx& c, const Weight& w, const std::vector<int64_t>& order) {
  int64_t g = static_cast<int64_t>(order.size());
  bool identity = true;
  for (int64_t k = 0; k < g; ++k) identity &= order[static_cast<size_t>(k)] == k;
  if (identity) return w;
  if (w.data) {
    const TensorData& d = *w.data;
    size_t block = d.nbytes() / static_cast<size_t>(g);
    std::vector<uint8_t> out(d.nbytes());
    for (size_t k = 0; k < order.size(); ++k)
      if (block) std::memcpy(out.data() + k * block, d.bytes() + order[k] * block, block);
    return made(TensorData::from_bytes(d.dtype, d.dims, std::move(out)));
  }
  const Shape& s = c.shape(w.value);
  if (!s[0].is_static()) c.fail("recurrent weight with a dynamic first dimension");
  int64_t h = s[0].value / g;
  std::vector<Attr> axis0 = {Attr::Int("axis", 0)};
  auto parts =
      c.b.add_node("Split", {w.value, c.b.const_i64(std::vector<int64_t>(order.size(), h))},
                   order.size(), axis0);
  std::vector<std::string> in;
  for (auto k : order) in.push_back(parts[static_cast<size_t>(k)]);
  return {c.b.op("Concat", in, axis0), std::nullopt};
}

// Concatenation along axis 0, or stacking on a new axis 0.
Weight cat0(Ctx& c, const std::vector<Weight>& ws, bool stack) {
  if (ws.size() == 1 && !stack) return ws[0];
  if (all_known(ws)) {
    std::vector<uint8_t> out;
    for (auto& w : ws) out.insert(out.end(), w.data->bytes(), w.data->bytes() + w.data->nbytes());
    std::vector<int64_t> dims = ws[0].data->dims;
    if (stack) {
      dims.insert(dims.begin(), static_cast<int64_t>(ws.size()));
    } else {
      dims[0] = 0;
      for (auto& w : ws) dims[0] += w.data->dims[0];
    }
    return made(TensorData::from_bytes(ws[0].data->dtype, dims, std::move(out)));
  }
  std::vector<std::string> in;
  for (auto& w : ws) {
    std::string v = value(c, w, "");
    in.push_back(stack ? c.unsqueeze(v, {0}) : v);
  }
  return {c.b.op("Concat", in, {Attr::Int("axis", 0)}), std::nullopt};
}

bool arithmetic_ok(const Weight& w) {
  return w.data && (w.data->dtype == DType::Float || w.data->dtype == DType::Double);
}

TensorData from_doubles(DType t, std::vector<int64_t> dims, const std::vector<double>& v) {
  if (t == DType::Double) return TensorData::from_vector(t, std::move(dims), v);
  std::vector<float> f(v.begin(), v.end());
  return TensorData::from_vector(t, std::move(dims), f);
}

// a [m, k] @ b [k, n], in float64 when both are known.
Weight matmul(Ctx& c, const Weight& a, const Weight& b) {
  if (arithmetic_ok(a) && arithmetic_ok(b) && a.data->dtype == b.data->dtype) {
    size_t m = static_cast<size_t>(a.data->dims[0]), k = static_cast<size_t>(a.data->dims[1]),
           n = static_cast<size_t>(b.data->dims[1]);
    std::vector<double> x = *to_doubles(*a.data), y = *to_doubles(*b.data), r(m * n, 0.0);
    for (size_t i = 0; i < m; ++i)
      for (size_t l = 0; l < k; ++l)
        for (size_t j = 0; j < n; ++j) r[i * n + j] += x[i * k + l] * y[l * n + j];
    return made(from_doubles(a.data->dtype, {static_cast<int64_t>(m), static_cast<int64_t>(n)}, r));
  }
  return {c.b.op("MatMul", {value(c, a, ""), value(c, b, "")}), std::nullopt};
}

// The transpose of a 2-D weight.
Weight transpose2(Ctx& c, const Weight& w) {
  if (w.data) {
    const TensorData& d = *w.data;
    size_t rows = static_cast<size_t>(d.dims[0]), cols = static_cast<size_t>(d.dims[1]);
    size_t es = dtype_size(d.dtype);
    std::vector<uint8_t> out(d.nbytes());
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < cols; ++j)
        std::memcpy(out.data() + (j * rows + i) * es, d.bytes() + (i * cols + j) * es, es);
    return made(TensorData::from_bytes(d.dtype, {d.dims[1], d.dims[0]}, std::move(out)));
  }
  return {c.transpose(w.value, {1, 0}), std::nullopt};
}

// M = (A A^T)^-1 A for A [p, h] of full row rank p (then A M^T = I, so
// h' = h0 M satisfies A h' = h0), by Cholesky in float64; nullopt when A is
// not known or (numerically) rank-deficient.
std::optional<Weight> right_inverse_t(const Weight& a) {
  if (!arithmetic_ok(a)) return std::nullopt;
  size_t p = static_cast<size_t>(a.data->dims[0]), h = static_cast<size_t>(a.data->dims[1]);
  std::vector<double> x = *to_doubles(*a.data), g(p * p, 0.0);
  for (size_t i = 0; i < p; ++i)
    for (size_t j = 0; j < p; ++j)
      for (size_t l = 0; l < h; ++l) g[i * p + j] += x[i * h + l] * x[j * h + l];
  double scale = 0;
  for (size_t i = 0; i < p; ++i) scale = std::max(scale, g[i * p + i]);
  // g = L L^T in place (lower triangle).
  for (size_t j = 0; j < p; ++j) {
    double d = g[j * p + j];
    for (size_t l = 0; l < j; ++l) d -= g[j * p + l] * g[j * p + l];
    if (!(d > 1e-12 * scale)) return std::nullopt;
    g[j * p + j] = std::sqrt(d);
    for (size_t i = j + 1; i < p; ++i) {
      double s = g[i * p + j];
      for (size_t l = 0; l < j; ++l) s -= g[i * p + l] * g[j * p + l];
      g[i * p + j] = s / g[j * p + j];
    }
  }
  // Solve L L^T M = A, column by column of A.
  std::vector<double> m(p * h), y(p);
  for (size_t col = 0; col < h; ++col) {
    for (size_t i = 0; i < p; ++i) {
      double s = x[i * h + col];
      for (size_t l = 0; l < i; ++l) s -= g[i * p + l] * y[l];
      y[i] = s / g[i * p + i];
    }
    for (size_t i = p; i-- > 0;) {
      double s = y[i];
      for (size_t l = i + 1; l < p; ++l) s -= g[l * p + i] * m[l * h + col];
      m[i * h + col] = s / g[i * p + i];
    }
  }
  return made(from_doubles(a.data->dtype, a.data->dims, m));
}

// ---- states

bool all_zero_bytes(const TensorData& d) {
  const uint8_t* p = d.bytes();
  if (!p) return false;
  for (size_t k = 0; k < d.nbytes(); ++k)
    if (p[k]) return false;
  return true;
}

// True when `v` is zeros by construction (torch.export records the default
// initial state as aten.zeros: a ConstantOfShape here).
bool known_zero(Ctx& c, const std::string& v) {
  if (const TensorData* t = c.b.constant_value(v)) return all_zero_bytes(*t);
  const auto& nodes = c.b.graph().nodes;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    bool produces = false;
    for (auto& o : it->outputs) produces |= o == v;
    if (!produces) continue;
    if (it->op_type == "ConstantOfShape") {
      const Attr* a = it->attr("value");
      return !a || (a->t && all_zero_bytes(*a->t));
    }
    if (it->op_type == "Expand" || it->op_type == "Cast" || it->op_type == "Identity")
      return known_zero(c, it->inputs[0]);
    return false;
  }
  return false;
}

// Compute types. Cells (Gemm, activations): float or double. onnxruntime's
// CPU LSTM / GRU / RNN kernels take float only (ONNX allows double; ORT
// refuses it at run time), so float64 recurrent layers run in float32 with
// float64 inputs and outputs (precision of float32 inside the layer); half
// types compute in float32 as elsewhere.
DType cell_type(DType t) { return t == DType::Double ? t : DType::Float; }
constexpr DType kRecurrentType = DType::Float;

Attr strings(const std::string& name, std::vector<std::string> v) {
  Attr a;
  a.name = name;
  a.kind = Attr::Kind::Strings;
  a.strings = std::move(v);
  return a;
}

// ---- lstm / gru / rnn

enum class Kind { Lstm, Gru, RnnTanh, RnnRelu };

// Initializer names: next to the module's parameters ("rnn.weight_ih_l0" ->
// "rnn.onnx_W_l0").
std::string init_name(const std::string& param, const char* what, int64_t layer) {
  size_t dot = param.rfind('.');
  std::string prefix = dot == std::string::npos ? std::string() : param.substr(0, dot + 1);
  return prefix + "onnx_" + what + "_l" + std::to_string(layer);
}

void recurrent(Ctx& c, Kind kind) {
  const bool lstm = kind == Kind::Lstm;
  std::string x = c.tensor("input");
  std::vector<std::string> hx = lstm ? c.tensors("hx") : std::vector<std::string>{c.tensor("hx")};
  std::vector<std::string> params = c.tensors("params");
  const bool has_b = c.flag("has_biases", true), bidir = c.flag("bidirectional", false);
  const bool batch_first = c.flag("batch_first", false), train = c.flag("train", false);
  const int64_t layers = c.i("num_layers");
  const double dropout = c.f("dropout", 0.0);
  if (train && dropout > 0 && layers > 1)
    c.fail("recurrent dropout between layers in training mode (dropout=" + std::to_string(dropout) +
           ", train=True) is random; export the model in eval() mode");
  if (c.rank(x) != 3) c.fail("recurrent input must be 3-D, got rank " + std::to_string(c.rank(x)));
  if (hx.size() != (lstm ? 2u : 1u)) c.fail("unexpected number of initial states");
  const int64_t dirs = bidir ? 2 : 1;
  const size_t per = has_b ? 4 : 2;
  const size_t groups = static_cast<size_t>(layers * dirs);
  const bool proj = lstm && params.size() == groups * (per + 1);
  if (!proj && params.size() != groups * per)
    c.fail("unexpected number of recurrent parameters: " + std::to_string(params.size()));
  for (auto& p : params)
    if (p.empty()) c.fail("recurrent parameter is None");

  const char* op = lstm ? "LSTM" : kind == Kind::Gru ? "GRU" : "RNN";
  const std::vector<int64_t> order = lstm                ? std::vector<int64_t>{0, 3, 1, 2}
                                     : kind == Kind::Gru ? std::vector<int64_t>{1, 0, 2}
                                                         : std::vector<int64_t>{0};
  const DType t = c.dtype(x), kt = kRecurrentType;

  // Sequence-major input in the compute type.
  std::string seq = c.cast(batch_first ? c.transpose(x, {1, 0, 2}) : x, kt);
  const bool zero_h = known_zero(c, hx[0]), zero_c = lstm && known_zero(c, hx[1]);
  auto layer_state = [&](const std::string& s, int64_t l) {
    std::string v = c.cast(s, kt);
    if (layers == 1) return v;
    return c.b.op("Slice", {v, c.b.const_i64({l * dirs}), c.b.const_i64({(l + 1) * dirs}),
                            c.b.const_i64({0})});
  };

  const size_t stride = per + (proj ? 1 : 0);  // parameters per layer and direction
  std::vector<std::string> h_n, c_n;
  for (int64_t l = 0; l < layers; ++l) {
    const size_t first = static_cast<size_t>(l * dirs) * stride;
    // One re-laid-out tensor per layer and kind (W, R, B, P, M), made once
    // for all nodes that use the same parameters (a module called twice).
    std::string key = std::string("rnn|") + op;
    for (size_t k = first; k < first + stride * static_cast<size_t>(dirs); ++k)
      key += "|" + params[k];
    using PerDir = Weight (*)(Ctx&, const std::vector<Weight>&, const std::vector<int64_t>&);
    auto init = [&](const char* what, PerDir make) {
      std::string k = key + "|" + what;
      if (auto it = c.env.cache.find(k); it != c.env.cache.end()) return it->second;
      std::vector<Weight> per_dir;
      for (int64_t d = 0; d < dirs; ++d) {
        std::vector<Weight> p;
        size_t base = first + static_cast<size_t>(d) * stride;
        for (size_t j = 0; j < stride; ++j) p.push_back(weight(c, params[base + j]));
        per_dir.push_back(make(c, p, order));
      }
      std::string v =
          c.cast(value(c, cat0(c, per_dir, true), init_name(params[first], what, l)), kt);
      c.env.cache.emplace(k, v);
      return v;
    };
    // p: w_ih, w_hh, [b_ih, b_hh], [w_hr].
    std::string w =
        init("W", [](Ctx& cx, const std::vector<Weight>& p, const std::vector<int64_t>& o) {
          return reorder_gates(cx, p[0], o);
        });
    std::string r =
        init("R", [](Ctx& cx, const std::vector<Weight>& p, const std::vector<int64_t>& o) {
          Weight hh = reorder_gates(cx, p[1], o);
          // Projected LSTM (an odd count: w_hr last): the recurrence reads
          // W_hh (W_hr h') = (W_hh W_hr) h'.
          return p.size() % 2 == 1 ? matmul(cx, hh, p.back()) : hh;
        });
    std::string bias;
    if (has_b)
      bias = init("B", [](Ctx& cx, const std::vector<Weight>& p, const std::vector<int64_t>& o) {
        return cat0(cx, {reorder_gates(cx, p[2], o), reorder_gates(cx, p[3], o)}, false);
      });
    const Shape& ws_shape = c.shape(w);
    const Shape& rs_shape = c.shape(r);
    if (!ws_shape[1].is_static() || !rs_shape[2].is_static())
      c.fail("recurrent weights with dynamic sizes");
    const int64_t hidden = rs_shape[2].value;

    std::string h0, c0;
    if (!zero_h) {
      h0 = layer_state(hx[0], l);
      if (proj) {
        for (int64_t d = 0; d < dirs; ++d)
          if (!right_inverse_t(weight(c, params[first + static_cast<size_t>(d) * stride + per])))
            c.fail(
                "LSTM with proj_size and a non-zero initial state h0 needs weight_hr as a float "
                "or double initializer of full row rank (the initial state is lifted through its "
                "pseudo-inverse); export without h0 or with float weights");
        h0 = c.b.op(
            "MatMul",
            {h0, init("M", [](Ctx&, const std::vector<Weight>& p, const std::vector<int64_t>&) {
               return *right_inverse_t(p.back());
             })});
      }
    }
    if (lstm && !zero_c) c0 = layer_state(hx[1], l);

    std::vector<std::string> in = {seq, w, r, bias, "", h0};
    if (lstm) in.push_back(c0);
    while (!in.empty() && in.back().empty()) in.pop_back();
    std::vector<Attr> attrs = {Attr::Int("hidden_size", hidden)};
    if (bidir) attrs.push_back(Attr::Str("direction", "bidirectional"));
    if (kind == Kind::Gru) attrs.push_back(Attr::Int("linear_before_reset", 1));
    if (kind == Kind::RnnTanh || kind == Kind::RnnRelu)
      attrs.push_back(strings("activations",
                              std::vector<std::string>(static_cast<size_t>(dirs),
                                                       kind == Kind::RnnTanh ? "Tanh" : "Relu")));
    const Shape& xs = c.shape(seq);
    ValueType y{kt, Shape{xs[0], Dim::of(dirs), xs[1], Dim::of(hidden)}};
    ValueType yh{kt, Shape{Dim::of(dirs), xs[1], Dim::of(hidden)}};
    std::vector<ValueType> outs = {y, yh};
    if (lstm) outs.push_back(yh);
    auto o = c.b.add_node(op, in, outs.size(), attrs, outs);
    std::string ys = o[0], yhs = o[1];
    if (proj) {
      std::string projection =
          init("P", [](Ctx& cx, const std::vector<Weight>& p, const std::vector<int64_t>&) {
            return transpose2(cx, p.back());  // [dirs, H, proj] once stacked
          });
      ys = c.b.op("MatMul", {ys, projection});
      yhs = c.b.op("MatMul", {yhs, projection});
    }
    // [seq, dirs, batch, out] -> [seq, batch, dirs * out]
    if (dirs == 1) {
      seq = c.squeeze(ys, {1});
    } else {
      int64_t out = c.shape(ys)[3].value;
      seq = c.reshape(c.transpose(ys, {0, 2, 1, 3}), c.b.const_i64({0, 0, dirs * out}));
    }
    h_n.push_back(yhs);
    if (lstm) c_n.push_back(o[2]);
  }
  auto cat = [&](const std::vector<std::string>& v) {
    return v.size() == 1 ? v[0] : c.b.op("Concat", v, {Attr::Int("axis", 0)});
  };
  c.set_output(0, c.cast(batch_first ? c.transpose(seq, {1, 0, 2}) : seq, t));
  c.set_output(1, c.cast(cat(h_n), t));
  if (lstm) c.set_output(2, c.cast(cat(c_n), t));
}

void lstm(Ctx& c) { recurrent(c, Kind::Lstm); }
void gru(Ctx& c) { recurrent(c, Kind::Gru); }
void rnn_tanh(Ctx& c) { recurrent(c, Kind::RnnTanh); }
void rnn_relu(Ctx& c) { recurrent(c, Kind::RnnRelu); }

// ---- cells

// x @ w^T + b in type kt.
std::string linear(Ctx& c, const std::string& x, const std::string& w,
                   const std::optional<std::string>& b, DType kt) {
  std::string xv = c.cast(x, kt), wv = c.cast(w, kt);
  if (c.rank(xv) == 2) {
    std::vector<std::string> in = {xv, wv};
    if (b) in.push_back(c.cast(*b, kt));
    return c.b.op("Gemm", in, {Attr::Int("transB", 1)});
  }
  std::string y = c.b.op("MatMul", {xv, c.transpose(wv, {1, 0})});
  return b ? c.b.op("Add", {y, c.cast(*b, kt)}) : y;
}

// Gates of x and h ([..., G*H] each, biases included), split in G.
std::vector<std::string> split_gates(Ctx& c, const std::string& v, int64_t g) {
  const Shape& s = c.shape(v);
  if (!s.back().is_static()) c.fail("cell weights with dynamic sizes");
  int64_t h = s.back().value / g;
  return c.b.add_node("Split", {v, c.b.const_i64(std::vector<int64_t>(static_cast<size_t>(g), h))},
                      static_cast<size_t>(g), {Attr::Int("axis", -1)});
}

struct CellIn {
  std::string x_gates, h_gates, h;
  DType t, kt;
};

CellIn cell_inputs(Ctx& c, const std::string& h) {
  std::string x = c.tensor("input");
  CellIn r;
  r.t = c.dtype(x);
  r.kt = cell_type(r.t);
  r.x_gates = linear(c, x, c.tensor("w_ih"), c.opt_tensor("b_ih"), r.kt);
  r.h_gates = linear(c, h, c.tensor("w_hh"), c.opt_tensor("b_hh"), r.kt);
  r.h = c.cast(h, r.kt);
  return r;
}

void lstm_cell(Ctx& c) {
  std::vector<std::string> hx = c.tensors("hx");
  if (hx.size() != 2) c.fail("lstm_cell expects hx = (h, c)");
  CellIn in = cell_inputs(c, hx[0]);
  auto g = split_gates(c, c.b.op("Add", {in.x_gates, in.h_gates}), 4);
  std::string i = c.b.op("Sigmoid", {g[0]}), f = c.b.op("Sigmoid", {g[1]});
  std::string cand = c.b.op("Tanh", {g[2]}), o = c.b.op("Sigmoid", {g[3]});
  std::string cy =
      c.b.op("Add", {c.b.op("Mul", {f, c.cast(hx[1], in.kt)}), c.b.op("Mul", {i, cand})});
  std::string hy = c.b.op("Mul", {o, c.b.op("Tanh", {cy})});
  c.set_output(0, c.cast(hy, in.t));
  c.set_output(1, c.cast(cy, in.t));
}

void gru_cell(Ctx& c) {
  CellIn in = cell_inputs(c, c.tensor("hx"));
  auto gx = split_gates(c, in.x_gates, 3), gh = split_gates(c, in.h_gates, 3);
  std::string r = c.b.op("Sigmoid", {c.b.op("Add", {gx[0], gh[0]})});
  std::string z = c.b.op("Sigmoid", {c.b.op("Add", {gx[1], gh[1]})});
  std::string n = c.b.op("Tanh", {c.b.op("Add", {gx[2], c.b.op("Mul", {r, gh[2]})})});
  // (1 - z) * n + z * h = n + z * (h - n)
  std::string hy = c.b.op("Add", {n, c.b.op("Mul", {z, c.b.op("Sub", {in.h, n})})});
  c.set_output(0, c.cast(hy, in.t));
}

void rnn_cell(Ctx& c, const char* act) {
  CellIn in = cell_inputs(c, c.tensor("hx"));
  std::string hy = c.b.op(act, {c.b.op("Add", {in.x_gates, in.h_gates})});
  c.set_output(0, c.cast(hy, in.t));
}

void rnn_tanh_cell(Ctx& c) { rnn_cell(c, "Tanh"); }
void rnn_relu_cell(Ctx& c) { rnn_cell(c, "Relu"); }

}  // namespace

void register_rnn(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "lstm.input", lstm);
  r.add(p + "gru.input", gru);
  r.add(p + "rnn_tanh.input", rnn_tanh);
  r.add(p + "rnn_relu.input", rnn_relu);
  r.add(p + "lstm_cell.default", lstm_cell);
  r.add(p + "gru_cell.default", gru_cell);
  r.add(p + "rnn_tanh_cell.default", rnn_tanh_cell);
  r.add(p + "rnn_relu_cell.default", rnn_relu_cell);
}

}  // namespace pt2onnx
