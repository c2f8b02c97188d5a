// Random numbers: rand / randn / randint (and their _like forms), normal,
// uniform, bernoulli, exponential, cauchy, geometric, log_normal, random_,
// multinomial, and dropout in training mode (ONNX Dropout for the plain
// forms). Every other sample is drawn at run time
// from ONNX's RandomUniformLike / RandomNormalLike (unseeded: each run draws
// anew, as torch does without a fixed seed) over a template tensor of the
// result's shape, in float32 (float64 for float64 results), then transformed
// and cast to torch's result type. The draws do not reproduce torch's
// generator; shapes, dtypes and distributions do.
#include <cmath>
#include <numbers>

#include "convert/complex.h"
#include "convert/context.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

DType gen_type(DType out) { return out == DType::Double ? DType::Double : DType::Float; }

// A tensor of the shape (1-D int64 value) to draw over.
std::string template_of_shape(Ctx& c, const std::string& shape) {
  auto one = TensorData::scalar(DType::Float, 0.0, {1});
  return c.b.op("ConstantOfShape", {shape}, {Attr::Tensor("value", *one)});
}

// A template of the node's output shape: static from torch's metadata, else
// `dynamic()`.
template <typename F>
std::string out_template(Ctx& c, F dynamic) {
  const schema::TensorMeta& m = c.out_meta();
  std::vector<int64_t> dims;
  for (auto& d : m.sizes) {
    Dim x = c.meta_dim(d);
    if (!x.is_static()) return dynamic();
    dims.push_back(x.value);
  }
  return template_of_shape(c, c.b.const_i64(dims));
}

// Template for ops whose result has self's shape.
std::string like_self(Ctx& c, const char* name = "self") {
  return out_template(c, [&] { return c.tensor(name); });
}
std::string of_size(Ctx& c) {
  return out_template(c, [&] { return template_of_shape(c, c.shape_tensor(c.symints("size"))); });
}

// The template as a floating tensor (onnxruntime's *RandomLike kernels take
// floating inputs).
std::string float_like(Ctx& c, const std::string& like) {
  DType t = c.dtype(like);
  if (t == DType::Float || t == DType::Double || t == DType::Float16) return like;
  return c.cast(like, DType::Float);
}

// U[0, 1) and N(0, 1) of `like`'s shape, in type t (Float or Double).
std::string uniform01(Ctx& c, const std::string& like, DType t) {
  return c.b.op("RandomUniformLike", {float_like(c, like)},
                {Attr::Int("dtype", static_cast<int64_t>(t)), Attr::Float("low", 0.0f),
                 Attr::Float("high", 1.0f)});
}
std::string normal01(Ctx& c, const std::string& like, DType t) {
  return c.b.op("RandomNormalLike", {float_like(c, like)},
                {Attr::Int("dtype", static_cast<int64_t>(t)), Attr::Float("mean", 0.0f),
                 Attr::Float("scale", 1.0f)});
}

std::string affine(Ctx& c, const std::string& x, const std::string& scale,
                   const std::string& shift) {
  return c.b.op("Add", {c.b.op("Mul", {x, scale}), shift});
}

void rand(Ctx& c) {
  DType t = c.out_dtype();
  c.set_output(0, c.cast(uniform01(c, of_size(c), gen_type(t)), t));
}
void randn(Ctx& c) {
  DType t = c.out_dtype();
  c.set_output(0, c.cast(normal01(c, of_size(c), gen_type(t)), t));
}
void rand_like(Ctx& c) {
  DType t = c.out_dtype();
  c.set_output(0, c.cast(uniform01(c, like_self(c), gen_type(t)), t));
}
void randn_like(Ctx& c) {
  DType t = c.out_dtype();
  c.set_output(0, c.cast(normal01(c, like_self(c), gen_type(t)), t));
}

// Integers uniform in [low, high): floor(low + U * (high - low)), drawn in
// double, clamped below high against rounding.
std::string randint_from(Ctx& c, const std::string& like, const std::string& low,
                         const std::string& high) {
  std::string u = uniform01(c, like, DType::Double);
  std::string v = c.b.op("Floor", {affine(c, u, c.b.op("Sub", {high, low}), low)});
  v = c.b.op("Min", {v, c.b.op("Sub", {high, c.b.scalar(DType::Double, 1)})});
  return c.cast(v, c.out_dtype());
}
std::string bound(Ctx& c, const char* name, double def) {
  if (!c.has(name)) return c.b.scalar(DType::Double, def);
  return c.operand(name, DType::Double);
}
void randint(Ctx& c) {
  c.set_output(0, randint_from(c, of_size(c), bound(c, "low", 0), bound(c, "high", 0)));
}
void randint_like(Ctx& c) {
  c.set_output(0, randint_from(c, like_self(c), bound(c, "low", 0), bound(c, "high", 0)));
}

// random_: [from, to), to defaulting to 2^mantissa digits for floating types
// (torch's range) and the largest exactly drawable integer otherwise.
void random(Ctx& c) {
  DType t = c.out_dtype();
  double top = 9007199254740992.0;  // 2^53
  if (t == DType::Float) top = 16777216.0;
  if (t == DType::Float16) top = 2048.0;
  if (t == DType::BFloat16) top = 256.0;
  if (t == DType::Bool) top = 2.0;
  if (t == DType::UInt8) top = 256.0;
  if (t == DType::Int8) top = 128.0;
  if (t == DType::Int16) top = 32768.0;
  if (t == DType::Int32) top = 2147483648.0;
  std::string hi = c.has("to") ? bound(c, "to", 0) : c.b.scalar(DType::Double, top);
  // Floating types include the top value itself: [0, 2^digits].
  if (!c.has("to") && is_floating(t)) hi = c.b.op("Add", {hi, c.b.scalar(DType::Double, 1)});
  c.set_output(0, randint_from(c, like_self(c), bound(c, "from", 0), hi));
}

// normal: mean + std * N(0, 1), all overloads.
void normal(Ctx& c) {
  DType t = c.out_dtype(), g = gen_type(t);
  bool size = c.arg("size") != nullptr;
  bool self = c.arg("self") != nullptr;  // normal_ / normal_functional
  std::string mean = c.has("mean") ? c.operand("mean", g) : c.b.scalar(g, 0);
  std::string std_ = c.has("std") ? c.operand("std", g) : c.b.scalar(g, 1);
  std::string like;
  if (size)
    like = of_size(c);
  else if (self)
    like = like_self(c);
  else
    like = out_template(c, [&] { return c.b.op("Add", {mean, std_}); });
  c.set_output(0, c.cast(affine(c, normal01(c, like, g), std_, mean), t));
}

void uniform(Ctx& c) {
  DType t = c.out_dtype(), g = gen_type(t);
  double lo = c.f("from", 0.0), hi = c.f("to", 1.0);
  std::string u = uniform01(c, like_self(c), g);
  c.set_output(0, c.cast(affine(c, u, c.b.scalar(g, hi - lo), c.b.scalar(g, lo)), t));
}

void exponential(Ctx& c) {
  DType t = c.out_dtype(), g = gen_type(t);
  double lambd = c.f("lambd", 1.0);
  // -log(1 - U) / lambd (1 - U lies in (0, 1]).
  std::string u = uniform01(c, like_self(c), g);
  std::string l = c.b.op("Log", {c.b.op("Sub", {c.b.scalar(g, 1), u})});
  c.set_output(0, c.cast(c.b.op("Mul", {l, c.b.scalar(g, -1.0 / lambd)}), t));
}

void cauchy(Ctx& c) {
  DType t = c.out_dtype(), g = gen_type(t);
  double median = c.f("median", 0.0), sigma = c.f("sigma", 1.0);
  // median + sigma * tan(pi * (U - 1/2)).
  std::string u = uniform01(c, like_self(c), g);
  std::string a =
      c.b.op("Mul", {c.b.op("Sub", {u, c.b.scalar(g, 0.5)}), c.b.scalar(g, std::numbers::pi)});
  c.set_output(
      0, c.cast(affine(c, c.b.op("Tan", {a}), c.b.scalar(g, sigma), c.b.scalar(g, median)), t));
}

void geometric(Ctx& c) {
  DType t = c.out_dtype(), g = gen_type(t);
  double p = c.f("p", 0.5);
  // Trials until the first success: ceil(log(1 - U) / log(1 - p)), at least 1.
  std::string u = uniform01(c, like_self(c), g);
  std::string l = c.b.op("Log", {c.b.op("Sub", {c.b.scalar(g, 1), u})});
  std::string k = c.b.op("Ceil", {c.b.op("Div", {l, c.b.scalar(g, std::log1p(-p))})});
  c.set_output(0, c.cast(c.b.op("Max", {k, c.b.scalar(g, 1)}), t));
}

void log_normal(Ctx& c) {
  DType t = c.out_dtype(), g = gen_type(t);
  double mean = c.f("mean", 1.0), std_ = c.f("std", 2.0);
  std::string n = normal01(c, like_self(c), g);
  c.set_output(0,
               c.cast(c.b.op("Exp", {affine(c, n, c.b.scalar(g, std_), c.b.scalar(g, mean))}), t));
}

// bernoulli: 1 with probability p (self's values, or the p argument).
void bernoulli(Ctx& c) {
  DType t = c.out_dtype(), g = gen_type(t);
  std::string p = c.has("p") ? c.operand("p", g) : c.operand("self", g);
  std::string u = uniform01(c, like_self(c), g);
  c.set_output(0, c.cast(c.b.op("Less", {u, p}), t));
}

// multinomial: with replacement, ONNX Multinomial over log-probabilities;
// without, the Gumbel top-k draw (keys log p + Gumbel noise, the k largest),
// which samples without replacement in proportion to p.
void multinomial(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t k = c.i("num_samples");
  bool replacement = c.flag("replacement", false);
  size_t rank = c.rank(x);
  DType t = c.out_dtype();
  std::string p = c.cast(x, DType::Float);
  std::string logp = c.b.op("Log", {p});
  if (replacement) {
    std::string lp2 = rank == 1 ? c.unsqueeze(logp, {0}) : logp;
    std::string s = c.b.op(
        "Multinomial", {lp2},
        {Attr::Int("dtype", static_cast<int64_t>(DType::Int64)), Attr::Int("sample_size", k)});
    if (rank == 1) s = c.squeeze(s, {0});
    c.set_output(0, c.cast(s, t));
    return;
  }
  std::string u = uniform01(c, x, DType::Float);
  // Gumbel noise -log(-log(U)); U = 0 gives +inf... keep U in (0, 1).
  u = c.b.op("Max", {u, c.b.scalar(DType::Float, 1e-20)});
  std::string gumbel = c.b.op("Neg", {c.b.op("Log", {c.b.op("Neg", {c.b.op("Log", {u})})})});
  std::string keys = c.b.op("Add", {logp, gumbel});
  auto outs =
      c.b.add_node("TopK", {keys, c.b.const_i64({k})}, 2,
                   {Attr::Int("axis", -1), Attr::Int("largest", 1), Attr::Int("sorted", 1)});
  c.set_output(0, c.cast(outs[1], t));
}

// Dropout in training mode: keep each element with probability 1 - p and
// scale the kept ones by 1 / (1 - p). `noise_like` gives the mask's shape
// (the input's, or [N, C, 1, ...] for the feature forms).
std::string keep_mask(Ctx& c, const std::string& noise_like, double p) {
  std::string u = uniform01(c, noise_like, DType::Float);
  return c.b.op("GreaterOrEqual", {u, c.b.scalar(DType::Float, p)});
}

// [N, C, 1, ..., 1] template for feature dropout.
std::string feature_template(Ctx& c, const std::string& x) {
  size_t r = c.rank(x);
  if (r < 2) return x;
  std::vector<std::string> parts{c.dim_value(x, 0), c.dim_value(x, 1)};
  if (r > 2) parts.push_back(c.b.const_i64(std::vector<int64_t>(r - 2, 1)));
  std::string shape = c.b.op("Concat", parts, {Attr::Int("axis", 0)});
  return template_of_shape(c, shape);
}

bool training(Ctx& c, double p) { return c.flag("train", false) && p != 0.0; }

// Dropout in training mode as ONNX Dropout with its training_mode input true
// (ratio and training_mode inputs: the opset-12 form): the output and the
// keep mask. p = 1 (all dropped, which Dropout's [0, 1) ratio excludes) stays
// a Where over a mask that keeps nothing.
std::vector<std::string> onnx_dropout(Ctx& c, const std::string& x, double p) {
  ValueType mask_t = c.b.type(x);
  mask_t.dtype = DType::Bool;
  return c.b.add_node("Dropout", {x, c.b.scalar(DType::Float, p), c.b.scalar(DType::Bool, 1)}, 2,
                      {}, {c.b.type(x), mask_t});
}

void dropout_impl(Ctx& c, bool feature, bool alpha) {
  std::string x = c.tensor(c.arg("input") ? "input" : "self");  // self: the in-place forms
  double p = c.f("p", 0.5);
  if (!training(c, p)) return c.set_output(0, x);
  DType t = c.out_dtype();
  if (!feature && !alpha && p < 1.0) return c.set_output(0, onnx_dropout(c, x, p)[0]);
  std::string like = feature ? feature_template(c, x) : x;
  std::string keep = keep_mask(c, like, p);
  if (!alpha) {
    std::string kept = p < 1.0 ? c.b.op("Mul", {x, c.b.scalar(t, 1.0 / (1.0 - p))}) : x;
    std::string zero = c.b.scalar(t, 0);
    c.set_output(0, c.b.op("Where", {keep, kept, zero}));
    return;
  }
  // alpha_dropout: dropped elements go to the SELU saturation value and the
  // result is renormalized: x * a * keep + (keep - 1) * alpha' * a + alpha' * a * p.
  if (p >= 1.0) return c.set_output(0, c.b.op("Mul", {x, c.b.scalar(t, 0)}));
  const double alpha_p = 1.7580993408473766;
  double a = 1.0 / std::sqrt((alpha_p * alpha_p * p + 1) * (1 - p));
  std::string k = c.cast(keep, t);
  std::string b = c.b.op(
      "Add", {c.b.op("Mul", {c.b.op("Sub", {k, c.b.scalar(t, 1)}), c.b.scalar(t, alpha_p * a)}),
              c.b.scalar(t, alpha_p * a * p)});
  std::string noise = c.b.op("Mul", {k, c.b.scalar(t, a)});
  c.set_output(0, c.b.op("Add", {c.b.op("Mul", {x, noise}), b}));
}
void dropout(Ctx& c) { dropout_impl(c, false, false); }
void feature_dropout(Ctx& c) { dropout_impl(c, true, false); }
void alpha_dropout(Ctx& c) { dropout_impl(c, false, true); }
void feature_alpha_dropout(Ctx& c) { dropout_impl(c, true, true); }

// native_dropout(input, p, train) -> (output, mask).
void native_dropout(Ctx& c) {
  std::string x = c.tensor("input");
  double p = c.f("p", 0.5);
  DType t = c.out_dtype();
  bool train = c.flag("train", true);
  if (!train || p == 0.0) {
    c.set_output(0, x);
    if (c.n_outputs() > 1) {
      auto one = TensorData::scalar(DType::Bool, 1.0, {1});
      std::string shape = c.b.op("Shape", {x});
      c.set_output(1, c.b.op("ConstantOfShape", {shape}, {Attr::Tensor("value", *one)}));
    }
    return;
  }
  if (p < 1.0) {
    auto outs = onnx_dropout(c, x, p);
    c.set_output(0, outs[0]);
    if (c.n_outputs() > 1) c.set_output(1, outs[1]);
    return;
  }
  std::string keep = keep_mask(c, x, p);
  c.set_output(0, c.b.op("Where", {keep, x, c.b.scalar(t, 0)}));
  if (c.n_outputs() > 1) c.set_output(1, keep);
}

}  // namespace

void register_random(Registry& r) {
  const std::string p = "torch.ops.aten.";
  for (const char* o : {"rand.default", "rand.generator"}) r.add(p + o, rand);
  for (const char* o : {"randn.default", "randn.generator"}) r.add(p + o, randn);
  for (const char* o : {"rand_like.default", "rand_like.generator"}) r.add(p + o, rand_like);
  for (const char* o : {"randn_like.default", "randn_like.generator"}) r.add(p + o, randn_like);
  for (const char* o :
       {"randint.default", "randint.generator", "randint.low", "randint.low_generator"})
    r.add(p + o, randint);
  for (const char* o : {"randint_like.default", "randint_like.Tensor", "randint_like.low_dtype",
                        "randint_like.generator", "randint_like.Tensor_generator",
                        "randint_like.low_generator_dtype"})
    r.add(p + o, randint_like);
  for (const char* o : {"random.default", "random.from", "random.to", "random_.default",
                        "random_.from", "random_.to"})
    r.add(p + o, random);
  for (const char* o : {"normal.Tensor_Tensor", "normal.Tensor_float", "normal.float_Tensor",
                        "normal.float_float", "normal.float_float_generator", "normal_.default",
                        "normal_functional.default", "normal.default"})
    r.add(p + o, normal);
  for (const char* o : {"uniform.default", "uniform_.default"}) r.add(p + o, uniform);
  for (const char* o : {"exponential.default", "exponential_.default"}) r.add(p + o, exponential);
  for (const char* o : {"cauchy.default", "cauchy_.default"}) r.add(p + o, cauchy);
  for (const char* o : {"geometric.default", "geometric_.default"}) r.add(p + o, geometric);
  for (const char* o : {"log_normal.default", "log_normal_.default"}) r.add(p + o, log_normal);
  for (const char* o : {"bernoulli.default", "bernoulli.p", "bernoulli.Tensor", "bernoulli_.float",
                        "bernoulli_.Tensor", "bernoulli.float", "bernoulli.Tensor_functional"})
    r.add(p + o, bernoulli);
  r.add(p + "multinomial.default", multinomial);
  for (const char* o : {"dropout.default", "dropout_.default"}) r.add(p + o, dropout);
  for (const char* o : {"feature_dropout.default", "feature_dropout_.default"})
    r.add(p + o, feature_dropout);
  for (const char* o : {"alpha_dropout.default", "alpha_dropout_.default"})
    r.add(p + o, alpha_dropout);
  for (const char* o : {"feature_alpha_dropout.default", "feature_alpha_dropout_.default"})
    r.add(p + o, feature_alpha_dropout);
  r.add(p + "native_dropout.default", native_dropout);
}

}  // namespace pt2onnx
