// Losses and distances: nll / cross entropy (class indices with weight,
// ignore_index and label smoothing; probability targets), binary cross
// entropy (with logits), l1 / mse / huber / smooth_l1, kl_div, margin losses,
// poisson nll, soft margin, cosine / hinge embedding, triplet margin;
// cosine_similarity, pairwise_distance, cdist, pdist, dist.
// Everything is decomposed into plain ONNX arithmetic so that every opset
// from 13 and every float type works; half types compute in float32.
#include <cmath>

#include "convert/context.h"
#include "convert/expr.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

enum Reduction : int64_t { kNone = 0, kMean = 1, kSum = 2 };

// Emission helpers for one node computing in type `t`.
struct E : Expr {
  explicit E(Ctx& ctx) : Expr{ctx, opmath(ctx.out_dtype())} {}
  std::string in(std::string_view name) { return c.cast(c.tensor(name), t); }
  std::string max0(const std::string& a) { return op("Max", {a, k(0.0)}); }
  std::string all_axes(const char* o, const std::string& v) {
    size_t r = c.rank(v);
    if (r == 0) return v;
    std::vector<int64_t> axes;
    for (size_t i = 0; i < r; ++i) axes.push_back(static_cast<int64_t>(i));
    return c.reduce(o, v, axes, false);
  }
  std::string sum(const std::string& v) { return all_axes("ReduceSum", v); }
  std::string reduced(const std::string& v, int64_t reduction) {
    if (reduction == kMean) return all_axes("ReduceMean", v);
    if (reduction == kSum) return sum(v);
    return v;
  }
  void done(const std::string& y, size_t i = 0) { c.set_output(i, c.cast(y, c.out_dtype(i))); }
  // Output i of rank 0 where the computation kept a leading axis of 1.
  void done_like_meta(std::string y, size_t i = 0) {
    if (c.out_meta(i).sizes.empty() && c.rank(y) == 1) y = c.squeeze(y, {0});
    done(y, i);
  }
};

int64_t reduction_of(Ctx& c) { return c.i("reduction", kMean); }

std::string gather_elements(Ctx& c, const std::string& data, const std::string& idx, int64_t axis) {
  ValueType vt{c.dtype(data), c.type(idx).shape};
  return c.b.op("GatherElements", {data, idx}, {Attr::Int("axis", axis)}, vt);
}

// 0 .. n-1 (int64) for dim `axis` of `v`.
std::string arange_dim(Ctx& c, const std::string& v, int64_t axis) {
  const Dim& d = c.shape(v)[static_cast<size_t>(Ctx::norm_axis(axis, c.rank(v)))];
  if (d.is_static()) {
    std::vector<int64_t> r;
    for (int64_t i = 0; i < d.value; ++i) r.push_back(i);
    return c.b.const_i64(r);
  }
  std::string n = c.squeeze(c.dim_value(v, axis), {0});
  return c.b.op("Range", {c.b.scalar_i64(0), n, c.b.scalar_i64(1)});
}

// Dim `axis` of `v` as a 0-D value of type t.
std::string dim_as(E& e, const std::string& v, int64_t axis) {
  const Dim& d = (*e.c.type(v).shape)[static_cast<size_t>(Ctx::norm_axis(axis, e.c.rank(v)))];
  if (d.is_static()) return e.k(static_cast<double>(d.value));
  return e.c.cast(e.c.squeeze(e.c.dim_value(v, axis), {0}), e.t);
}

// The common broadcast shape of a and b, both expanded to it.
std::pair<std::string, std::string> expand_both(Ctx& c, const std::string& a,
                                                const std::string& b) {
  std::optional<Shape> s = broadcast_shapes(c.type(a).shape, c.type(b).shape);
  auto same = [&](const std::string& v) {
    return c.type(v).shape && s && same_shape(c.shape(v), *s);
  };
  if (same(a) && same(b)) return {a, b};
  bool fixed = s.has_value();
  std::vector<int64_t> dims;
  if (s)
    for (auto& d : *s) {
      if (!d.is_static()) fixed = false;
      dims.push_back(d.value);
    }
  std::string shape;
  if (fixed) {
    shape = c.b.const_i64(dims);
  } else {
    std::string ab = c.b.op("Expand", {a, c.b.op("Shape", {b})}, {}, ValueType{c.dtype(a), s});
    shape = c.b.op("Shape", {ab});
  }
  auto ex = [&](const std::string& v) {
    return same(v) ? v : c.b.op("Expand", {v, shape}, {}, ValueType{c.dtype(v), s});
  };
  return {ex(a), ex(b)};
}

// ||d||_p over `axes` (torch.norm semantics for p = 0, 1, 2, inf, -inf, other).
std::string pnorm(E& e, std::string d, std::vector<int64_t> axes, double p, bool keepdim) {
  Ctx& c = e.c;
  if (c.rank(d) == 0) {
    d = c.unsqueeze(d, {0});
    axes = {0};
    keepdim = false;
  }
  if (axes.empty())
    for (size_t i = 0; i < c.rank(d); ++i) axes.push_back(static_cast<int64_t>(i));
  if (p == 2.0) return e.op("Sqrt", {c.reduce("ReduceSum", e.mul(d, d), axes, keepdim)});
  if (p == 1.0) return c.reduce("ReduceSum", e.abs(d), axes, keepdim);
  if (std::isinf(p)) return c.reduce(p > 0 ? "ReduceMax" : "ReduceMin", e.abs(d), axes, keepdim);
  if (p == 0.0) {
    std::string nz = c.cast(c.b.op("Not", {c.b.op("Equal", {d, e.k(0.0)})}), e.t);
    return c.reduce("ReduceSum", nz, axes, keepdim);
  }
  std::string s = c.reduce("ReduceSum", e.op("Pow", {e.abs(d), e.k(p)}), axes, keepdim);
  return e.op("Pow", {s, e.k(1.0 / p)});
}

// ---- elementwise losses

void l1_loss(Ctx& c) {
  E e(c);
  e.done(e.reduced(e.abs(e.sub(e.in("self"), e.in("target"))), reduction_of(c)));
}

void mse_loss(Ctx& c) {
  E e(c);
  std::string d = e.sub(e.in("self"), e.in("target"));
  e.done(e.reduced(e.mul(d, d), reduction_of(c)));
}

// |d| < delta ? 0.5 d^2 : delta (|d| - 0.5 delta)
void huber_loss(Ctx& c) {
  E e(c);
  double delta = c.f("delta", 1.0);
  std::string z = e.abs(e.sub(e.in("self"), e.in("target")));
  std::string sq = e.mul(e.mul(z, z), e.k(0.5));
  std::string lin = e.mul(e.sub(z, e.k(0.5 * delta)), e.k(delta));
  e.done(e.reduced(e.where(e.op("Less", {z, e.k(delta)}), sq, lin), reduction_of(c)));
}

// |d| < beta ? 0.5 d^2 / beta : |d| - 0.5 beta (beta 0: l1)
void smooth_l1_loss(Ctx& c) {
  E e(c);
  double beta = c.f("beta", 1.0);
  std::string z = e.abs(e.sub(e.in("self"), e.in("target")));
  std::string y = z;
  if (beta != 0.0) {
    std::string sq = e.mul(e.mul(z, z), e.k(0.5 / beta));
    y = e.where(e.op("Less", {z, e.k(beta)}), sq, e.sub(z, e.k(0.5 * beta)));
  }
  e.done(e.reduced(y, reduction_of(c)));
}

// log_target: exp(t) (t - x); else xlogy(t, t) - t x
void kl_div(Ctx& c) {
  E e(c);
  std::string x = e.in("self"), t = e.in("target");
  std::string y;
  if (c.flag("log_target", false)) {
    y = e.mul(e.exp(t), e.sub(t, x));
  } else {
    std::string xlogy = e.where(e.op("Equal", {t, e.k(0.0)}), e.k(0.0), e.mul(t, e.log(t)));
    y = e.sub(xlogy, e.mul(t, x));
  }
  e.done(e.reduced(y, reduction_of(c)));
}

// log1p(exp(-x t))
void soft_margin_loss(Ctx& c) {
  E e(c);
  std::string z = e.exp(e.neg(e.mul(e.in("self"), e.in("target"))));
  e.done(e.reduced(e.log(e.add(z, e.k(1.0))), reduction_of(c)));
}

// max(0, -t (x1 - x2) + margin)
void margin_ranking_loss(Ctx& c) {
  E e(c);
  std::string d = e.sub(e.in("input1"), e.in("input2"));
  std::string z = e.add(e.neg(e.mul(e.in("target"), d)), e.k(c.f("margin", 0.0)));
  e.done(e.reduced(e.max0(z), reduction_of(c)));
}

// where(t != 1, max(margin - x, 0), 0) + where(t != -1, x, 0)
void hinge_embedding_loss(Ctx& c) {
  E e(c);
  std::string x = e.in("self"), t = e.in("target");
  std::string m = e.max0(e.sub(e.k(c.f("margin", 1.0)), x));
  std::string not1 = c.b.op("Not", {e.op("Equal", {t, e.k(1.0)})});
  std::string notm1 = c.b.op("Not", {e.op("Equal", {t, e.k(-1.0)})});
  std::string y = e.add(e.where(not1, m, e.k(0.0)), e.where(notm1, x, e.k(0.0)));
  e.done(e.reduced(y, reduction_of(c)));
}

// -w (t max(log x, -100) + (1 - t) max(log(1 - x), -100))
void binary_cross_entropy(Ctx& c) {
  E e(c);
  std::string x = e.in("self"), t = e.in("target");
  std::string lx = e.op("Max", {e.log(x), e.k(-100.0)});
  std::string l1x = e.op("Max", {e.log(e.sub(e.k(1.0), x)), e.k(-100.0)});
  std::string y = e.sub(e.mul(e.sub(t, e.k(1.0)), l1x), e.mul(t, lx));
  if (c.has("weight")) y = e.mul(y, e.in("weight"));
  e.done(e.reduced(y, reduction_of(c)));
}

// (1 - t) x + (1 + (pw - 1) t) (log1p(exp(-|x|)) + max(-x, 0)), times weight
void bce_with_logits(Ctx& c) {
  E e(c);
  std::string x = e.in("self"), t = e.in("target");
  std::string sp = e.add(e.log(e.add(e.exp(e.neg(e.abs(x))), e.k(1.0))), e.max0(e.neg(x)));
  if (c.has("pos_weight")) {
    std::string lw = e.add(e.mul(e.sub(e.in("pos_weight"), e.k(1.0)), t), e.k(1.0));
    sp = e.mul(lw, sp);
  }
  std::string y = e.add(e.mul(e.sub(e.k(1.0), t), x), sp);
  if (c.has("weight")) y = e.mul(y, e.in("weight"));
  e.done(e.reduced(y, reduction_of(c)));
}

// log_input: exp(x) - t x; else x - t log(x + eps); full adds Stirling's term for t > 1.
void poisson_nll_loss(Ctx& c) {
  E e(c);
  std::string x = e.in("input"), t = e.in("target");
  std::string y;
  if (c.flag("log_input", true))
    y = e.sub(e.exp(x), e.mul(t, x));
  else
    y = e.sub(x, e.mul(t, e.log(e.add(x, e.k(c.f("eps", 1e-8))))));
  if (c.flag("full", false)) {
    std::string st =
        e.add(e.sub(e.mul(t, e.log(t)), t), e.mul(e.k(0.5), e.log(e.mul(e.k(2.0 * M_PI), t))));
    y = e.add(y, e.where(e.op("LessOrEqual", {t, e.k(1.0)}), e.k(0.0), st));
  }
  e.done(e.reduced(y, reduction_of(c)));
}

// cos = <x1, x2> / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12)) over the last dim;
// t == 1: 1 - cos; t == -1: max(cos - margin, 0)
void cosine_embedding_loss(Ctx& c) {
  E e(c);
  std::string a = e.in("input1"), b = e.in("input2"), t = e.in("target");
  int64_t ax = static_cast<int64_t>(std::max(c.rank(a), c.rank(b))) - 1;
  auto s = [&](const std::string& v) { return c.reduce("ReduceSum", v, {ax}, false); };
  std::string prod = s(e.mul(a, b));
  std::string m1 = e.add(s(e.mul(a, a)), e.k(1e-12)), m2 = e.add(s(e.mul(b, b)), e.k(1e-12));
  std::string cos = e.div(prod, e.op("Sqrt", {e.mul(m1, m2)}));
  std::string pos = e.sub(e.k(1.0), cos);
  std::string negv = e.max0(e.sub(cos, e.k(c.f("margin", 0.0))));
  std::string y = e.add(e.where(e.op("Equal", {t, e.k(1.0)}), pos, e.k(0.0)),
                        e.where(e.op("Equal", {t, e.k(-1.0)}), negv, e.k(0.0)));
  e.done(e.reduced(y, reduction_of(c)));
}

// ---- class-index losses

struct Nll {
  std::string loss;  // per element, 0 where ignored
  std::string wt;    // weight of each element's target, 0 where ignored
  std::string valid;
};

// logp [N, C, d...] and target [N, d...] (int64).
Nll nll_core(E& e, const std::string& logp, std::string target,
             const std::optional<std::string>& weight, int64_t ignore_index) {
  Ctx& c = e.c;
  target = c.cast(target, DType::Int64);
  Nll n;
  n.valid = c.b.op("Not", {c.b.op("Equal", {target, c.b.scalar_i64(ignore_index)})});
  std::string ts = c.b.op("Where", {n.valid, target, c.b.scalar_i64(0)});
  std::string picked = c.squeeze(gather_elements(c, logp, c.unsqueeze(ts, {1}), 1), {1});
  if (weight)
    n.wt = e.where(n.valid, c.b.op("Gather", {c.cast(*weight, e.t), ts}), e.k(0.0));
  else
    n.wt = c.cast(n.valid, e.t);
  n.loss = e.where(n.valid, e.mul(e.neg(picked), n.wt), e.k(0.0));
  return n;
}

std::string nll_reduce(E& e, const Nll& n, int64_t reduction) {
  if (reduction == kSum) return e.sum(n.loss);
  if (reduction == kMean) return e.div(e.sum(n.loss), e.sum(n.wt));
  return n.loss;
}

// nll_loss, nll_loss_nd, nll_loss2d and the *_forward forms (second output:
// total weight, 0 for reduction none).
void nll_loss(Ctx& c) {
  E e(c);
  std::string x = e.in("self"), target = c.tensor("target");
  bool unbatched = c.rank(x) == 1;
  if (unbatched) x = c.unsqueeze(x, {0}), target = c.unsqueeze(target, {0});
  int64_t red = reduction_of(c);
  Nll n = nll_core(e, x, target, c.opt_tensor("weight"), c.i("ignore_index", -100));
  std::string y = nll_reduce(e, n, red);
  e.done_like_meta(y);
  if (c.n_outputs() > 1) e.done(red == kNone ? e.k(0.0) : e.sum(n.wt), 1);
}

// weight [C] shaped to broadcast along dim `class_dim` of a rank-r value.
std::string weight_along(E& e, const std::string& w, size_t r, size_t class_dim) {
  if (r <= 1) return w;
  std::vector<int64_t> shape(r, 1);
  shape[class_dim] = -1;
  return e.c.reshape(w, e.c.b.const_i64(shape));
}

void cross_entropy_loss(Ctx& c) {
  E e(c);
  std::string x = e.in("self"), target = c.tensor("target");
  size_t r = c.rank(x);
  int64_t cd = r == 1 ? 0 : 1;
  int64_t red = reduction_of(c);
  double ls = c.f("label_smoothing", 0.0);
  std::optional<std::string> w = c.opt_tensor("weight");
  if (w) w = c.cast(*w, e.t);
  std::string logp = c.b.op("LogSoftmax", {x}, {Attr::Int("axis", cd)});
  std::string n_classes = dim_as(e, x, cd);

  if (is_floating(c.dtype(target))) {  // class probabilities
    std::string t = c.cast(target, e.t);
    if (ls > 0) t = e.add(e.mul(t, e.k(1.0 - ls)), e.div(e.k(ls), n_classes));
    std::string prod = e.mul(logp, t);
    if (w) prod = e.mul(prod, weight_along(e, *w, r, static_cast<size_t>(cd)));
    std::string y;
    if (red == kNone) {
      y = e.neg(c.reduce("ReduceSum", prod, {cd}, false));
    } else {
      y = e.neg(e.sum(prod));
      if (red == kMean) {
        std::string numel;
        if (c.type(x).has_static_shape()) {
          int64_t m = 1;
          for (auto& d : c.shape(x)) m *= d.value;
          numel = e.k(static_cast<double>(m));
        } else {
          std::string sh = c.b.op("Shape", {x});
          numel = c.cast(c.reduce("ReduceProd", sh, {0}, false), e.t);
        }
        y = e.div(y, e.div(numel, n_classes));
      }
    }
    return e.done(y);
  }

  if (r == 1) logp = c.unsqueeze(logp, {0}), target = c.unsqueeze(target, {0});
  Nll n = nll_core(e, logp, target, w, c.i("ignore_index", -100));
  std::string y = nll_reduce(e, n, red);
  if (ls > 0) {
    std::string lw = logp;
    if (w) lw = e.mul(lw, weight_along(e, *w, c.rank(logp), 1));
    std::string smooth = e.neg(c.reduce("ReduceSum", lw, {1}, false));
    smooth = e.where(n.valid, smooth, e.k(0.0));
    if (red == kSum)
      smooth = e.sum(smooth);
    else if (red == kMean)
      smooth = e.div(e.sum(smooth), e.sum(n.wt));
    y = e.add(e.mul(y, e.k(1.0 - ls)), e.mul(smooth, e.div(e.k(ls), n_classes)));
  }
  e.done_like_meta(y);
}

// sum_{i != y} max(0, margin - x[y] + x[i])^p * w[y] / C
void multi_margin_loss(Ctx& c) {
  E e(c);
  std::string x = e.in("self"), target = c.cast(c.tensor("target"), DType::Int64);
  if (c.rank(x) < 2) x = c.reshape(x, c.b.const_i64({1, -1}));
  if (c.rank(target) == 0) target = c.unsqueeze(target, {0});
  int64_t p = c.i("p", 1);
  if (p != 1 && p != 2) c.fail("multi_margin_loss: p must be 1 or 2");
  double margin = c.f("margin", 1.0);
  std::string tu = c.unsqueeze(target, {1});
  std::string xy = gather_elements(c, x, tu, 1);
  std::string h = e.max0(e.add(e.sub(e.k(margin), xy), x));
  if (p == 2) h = e.mul(h, h);
  if (c.has("weight")) h = e.mul(h, c.unsqueeze(c.b.op("Gather", {e.in("weight"), target}), {1}));
  h = e.where(c.b.op("Equal", {arange_dim(c, x, 1), tu}), e.k(0.0), h);
  std::string y = e.div(c.reduce("ReduceSum", h, {1}, false), dim_as(e, x, 1));
  e.done_like_meta(e.reduced(y, reduction_of(c)));
}

// Targets are the labels before the first negative one; for each target j and
// each non-target i: max(0, 1 - (x[j] - x[i])), summed, / C. The forward's
// second output marks the target classes.
void multilabel_margin_loss(Ctx& c) {
  E e(c);
  std::string x = e.in("self"), t = c.cast(c.tensor("target"), DType::Int64);
  size_t in_rank = c.rank(x);
  if (in_rank < 2)
    x = c.reshape(x, c.b.const_i64({1, -1})), t = c.reshape(t, c.b.const_i64({1, -1}));
  std::string neg = c.cast(c.b.op("Less", {t, c.b.scalar_i64(0)}), DType::Int64);
  std::string cum = c.b.op("CumSum", {neg, c.b.scalar_i64(1)}, {}, c.type(neg));
  std::string valid = c.b.op("Equal", {cum, c.b.scalar_i64(0)});
  std::string ts = c.b.op("Where", {valid, t, c.b.scalar_i64(0)});
  std::string xk = gather_elements(c, x, ts, 1);  // [N, K]
  std::string hit = c.b.op("Equal", {c.unsqueeze(ts, {2}), arange_dim(c, x, 1)});
  hit = c.b.op("And", {hit, c.unsqueeze(valid, {2})});  // [N, K, C]
  std::string is_target =
      c.cast(c.reduce("ReduceMax", c.cast(hit, DType::Int32), {1}, false), DType::Bool);
  std::string z = e.max0(e.add(e.sub(e.k(1.0), c.unsqueeze(xk, {2})), c.unsqueeze(x, {1})));
  std::string mask =
      c.b.op("And", {c.unsqueeze(valid, {2}), c.b.op("Not", {c.unsqueeze(is_target, {1})})});
  z = e.where(mask, z, e.k(0.0));
  std::string y = e.div(c.reduce("ReduceSum", z, {1, 2}, false), dim_as(e, x, 1));
  // A 1-D (or 0-d) input is one sample: its loss is 0-d, not [1].
  if (in_rank < 2) y = c.reshape(y, c.b.const_i64(std::vector<int64_t>{}));
  e.done_like_meta(e.reduced(y, reduction_of(c)));
  if (c.n_outputs() > 1) {
    std::string it = c.cast(is_target, e.t);
    if (in_rank < 2)
      it = c.reshape(
          it, c.b.const_i64(in_rank == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{-1}));
    e.done(it, 1);
  }
}

// ---- distances

// norm(x1 - x2 + eps, p, last dim)
std::string pairwise(E& e, const std::string& a, const std::string& b, double p, double eps,
                     bool keepdim) {
  std::string d = e.add(e.sub(a, b), e.k(eps));
  size_t r = e.c.rank(d);
  if (r == 0) return pnorm(e, d, {}, p, false);
  return pnorm(e, d, {static_cast<int64_t>(r) - 1}, p, keepdim);
}

void pairwise_distance(Ctx& c) {
  E e(c);
  e.done(pairwise(e, e.in("x1"), e.in("x2"), c.f("p", 2.0), c.f("eps", 1e-6),
                  c.flag("keepdim", false)));
}

void triplet_margin_loss(Ctx& c) {
  E e(c);
  std::string a = e.in("anchor"), pos = e.in("positive"), ng = e.in("negative");
  double p = c.f("p", 2.0), eps = c.f("eps", 1e-6);
  std::string dp = pairwise(e, a, pos, p, eps, false);
  std::string dn = pairwise(e, a, ng, p, eps, false);
  if (c.flag("swap", false)) dn = e.op("Min", {dn, pairwise(e, pos, ng, p, eps, false)});
  std::string y = e.max0(e.sub(e.add(e.k(c.f("margin", 1.0)), dp), dn));
  e.done(e.reduced(y, reduction_of(c)));
}

// sum over dim of (x1 / max(|x1|, eps)) * (x2 / max(|x2|, eps)), after broadcasting.
void cosine_similarity(Ctx& c) {
  E e(c);
  auto [a, b] = expand_both(c, e.in("x1"), e.in("x2"));
  size_t r = c.rank(a);
  std::string eps = e.k(c.f("eps", 1e-8));
  if (r == 0) {
    a = c.unsqueeze(a, {0}), b = c.unsqueeze(b, {0});
    r = 1;
  }
  int64_t dim = Ctx::norm_axis(c.i("dim", 1), r);
  std::string na = e.op("Max", {pnorm(e, a, {dim}, 2.0, true), eps});
  std::string nb = e.op("Max", {pnorm(e, b, {dim}, 2.0, true), eps});
  std::string y = c.reduce("ReduceSum", e.mul(e.div(a, na), e.div(b, nb)), {dim}, false);
  e.done(y);
}

// [..., P, M] x [..., R, M] -> [..., P, R]
std::string cdist_of(E& e, const std::string& a, const std::string& b, double p) {
  Ctx& c = e.c;
  std::string ua = c.unsqueeze(a, {static_cast<int64_t>(c.rank(a)) - 1});  // [..., P, 1, M]
  std::string ub = c.unsqueeze(b, {static_cast<int64_t>(c.rank(b)) - 2});  // [..., 1, R, M]
  std::string d = e.sub(ua, ub);
  return pnorm(e, d, {static_cast<int64_t>(c.rank(d)) - 1}, p, false);
}

void cdist(Ctx& c) {
  E e(c);
  e.done(cdist_of(e, e.in("x1"), e.in("x2"), c.f("p", 2.0)));
}

// The upper triangle (i < j, row-major) of the [N, N] distance matrix.
void pdist(Ctx& c) {
  E e(c);
  std::string x = e.in("self");
  const Dim& nd = c.shape(x)[0];
  if (!nd.is_static()) c.fail("pdist: the number of rows must be static");
  int64_t n = nd.value;
  std::string full = cdist_of(e, x, x, c.f("p", 2.0));
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) idx.push_back(i * n + j);
  std::string flat = c.reshape(full, c.b.const_i64({-1}));
  e.done(c.b.op("Gather", {flat, c.b.const_i64(idx)}, {Attr::Int("axis", 0)}));
}

// norm(self - other, p) over all elements
void dist(Ctx& c) {
  E e(c);
  std::string d = e.sub(e.in("self"), e.in("other"));
  e.done(pnorm(e, d, {}, c.f("p", 2.0), false));
}

}  // namespace

void register_loss(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "l1_loss.default", l1_loss);
  r.add(p + "mse_loss.default", mse_loss);
  r.add(p + "huber_loss.default", huber_loss);
  r.add(p + "smooth_l1_loss.default", smooth_l1_loss);
  r.add(p + "kl_div.default", kl_div);
  r.add(p + "soft_margin_loss.default", soft_margin_loss);
  r.add(p + "margin_ranking_loss.default", margin_ranking_loss);
  r.add(p + "hinge_embedding_loss.default", hinge_embedding_loss);
  r.add(p + "binary_cross_entropy.default", binary_cross_entropy);
  r.add(p + "binary_cross_entropy_with_logits.default", bce_with_logits);
  r.add(p + "poisson_nll_loss.default", poisson_nll_loss);
  r.add(p + "cosine_embedding_loss.default", cosine_embedding_loss);
  for (const char* o : {"nll_loss.default", "nll_loss_nd.default", "nll_loss2d.default",
                        "nll_loss_forward.default", "nll_loss2d_forward.default"})
    r.add(p + o, nll_loss);
  r.add(p + "cross_entropy_loss.default", cross_entropy_loss);
  r.add(p + "multi_margin_loss.default", multi_margin_loss);
  for (const char* o : {"multilabel_margin_loss.default", "multilabel_margin_loss_forward.default"})
    r.add(p + o, multilabel_margin_loss);
  r.add(p + "pairwise_distance.default", pairwise_distance);
  r.add(p + "triplet_margin_loss.default", triplet_margin_loss);
  r.add(p + "cosine_similarity.default", cosine_similarity);
  for (const char* o : {"cdist.default", "_cdist_forward.default"}) r.add(p + o, cdist);
  for (const char* o : {"pdist.default", "_pdist_forward.default"}) r.add(p + o, pdist);
  r.add(p + "dist.default", dist);
}

}  // namespace pt2onnx
