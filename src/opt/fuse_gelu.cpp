// GELU written out by hand becomes one operator.
//
// Matches (the last node, a Mul, is replaced):
//   erf form   0.5 * x * (1 + erf(x / sqrt(2)))
//   tanh form  0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
// in the variants models and our own converters write (aten.gelu below opset
// 20, src/convert/activation.cpp): the three factors x, 0.5 (or x / 2) and
// (1 + erf|tanh(...)) multiplied in any grouping and operand order; the erf
// argument as x * 0.7071... or x / 1.4142...; x^3 as Pow(x, 3), x*x*x in
// either grouping; every Add / Mul in either operand order.
// And, onnxruntime target only, x * sigmoid(alpha * x) (alpha * x in either
// order, or plain sigmoid(x): SiLU, alpha 1), the QuickGELU / SiLU of most
// decoder MLPs.
//
// Emits: opset >= 20 on the standard target: Gelu(x, approximate = "none" |
// "tanh"). onnxruntime target (any opset; float / float16 only, the types its
// CPU kernels cover): com.microsoft Gelu(x) for the erf form, FastGelu(x) for
// the tanh form, and when x = Add(y, bias) with bias a 1-D constant of y's
// last dimension (read only by the pattern): BiasGelu(y, bias) /
// FastGelu(y, bias); QuickGelu(x, alpha) for the sigmoid form. There a
// standard Gelu (aten.gelu from opset 20) becomes the contrib one as well,
// taking its bias Add the same way. One kernel
// instead of 5-9 elementwise passes over the activation.
//
// Constants must equal the exact value rounded to the tensor's type to 1e-6
// relative (so 0.7071 or 1.4142 is not sqrt(1/2) or sqrt(2)), and be one
// element of rank at most x's (a broadcasting constant would change the
// result's shape). Left alone: a wrong constant, the 0.5 missing, a
// different value in the places x must be, an interior value read outside the
// pattern (or a graph output), and the standard target below opset 20.
#include <cmath>
#include <optional>

#include "opt/passes.h"
#include "opt/pattern.h"

namespace pt2onnx {

namespace {

// `want` rounded to the type of the constant.
double rounded(DType t, double want) {
  switch (t) {
    case DType::Float:
      return static_cast<float>(want);
    case DType::Float16:
      return half_to_float(float_to_half(static_cast<float>(want)));
    case DType::BFloat16:
      return bfloat16_to_float(float_to_bfloat16(static_cast<float>(want)));
    default:
      return want;
  }
}

bool is_float_type(DType t) {
  return t == DType::Float || t == DType::Float16 || t == DType::BFloat16 || t == DType::Double;
}

struct Matcher {
  const GraphIndex& ix;
  // Interior nodes of the match in progress (attempts that fail drop theirs).
  mutable std::vector<const Node*> seen;

  // Runs one alternative; on failure forgets the nodes it visited.
  template <typename F>
  auto attempt(F f) const {
    size_t mark = seen.size();
    auto r = f();
    if (!r) seen.resize(mark);
    return r;
  }

  // `v` is a one-element constant of rank <= rank(x) equal to `want` (to
  // 1e-6 relative, after rounding `want` to its type).
  bool is_const(const std::string& v, double want, const std::string& x) const {
    const TensorData* t = ix.constant(v);
    auto r = ix.rank(x);
    if (!t || t->numel() != 1 || !r || t->dims.size() > *r) return false;
    auto s = ix.scalar(v);
    if (!s) return false;
    double w = rounded(t->dtype, want);
    return std::abs(*s - w) <= 1e-6 * std::abs(w);
  }
  // Any one-element float constant of rank <= rank(x).
  std::optional<double> any_const(const std::string& v, const std::string& x) const {
    const TensorData* t = ix.constant(v);
    auto r = ix.rank(x);
    if (!t || t->numel() != 1 || !r || t->dims.size() > *r || !is_float_type(t->dtype))
      return std::nullopt;
    return ix.scalar(v);
  }
  // The producer of `v` when it is `op` and `v` is read once (inside the
  // pattern, so no graph output); recorded as an interior node.
  const Node* inner(const std::string& v, std::string_view op) const {
    const Node* n = ix.producer(v, op);
    if (!n || n->outputs.size() != 1 || ix.readers(v) != 1 || ix.is_graph_output(v)) return nullptr;
    if (n->inputs.size() != (op == "Erf" || op == "Tanh" || op == "Sigmoid" ? 1u : 2u))
      return nullptr;
    seen.push_back(n);
    return n;
  }

  // x * 0.7071... or x / 1.4142... (read once): x.
  std::optional<std::string> erf_arg(const std::string& v) const {
    auto r = attempt([&]() -> std::optional<std::string> {
      if (const Node* m = inner(v, "Mul"))
        for (int k = 0; k < 2; ++k)
          if (is_const(m->inputs[1 - k], M_SQRT1_2, m->inputs[k])) return m->inputs[k];
      return std::nullopt;
    });
    if (r) return r;
    return attempt([&]() -> std::optional<std::string> {
      if (const Node* d = inner(v, "Div"))
        if (is_const(d->inputs[1], M_SQRT2, d->inputs[0])) return d->inputs[0];
      return std::nullopt;
    });
  }

  // x^3: Pow(x, 3), Mul(Mul(x, x), x), Mul(x, Mul(x, x)) (interiors read once).
  bool is_cube(const std::string& v, const std::string& x) const {
    if (ix.producer(v, "Pow"))
      return attempt([&] {
        const Node* p = inner(v, "Pow");
        return p && p->inputs[0] == x && is_const(p->inputs[1], 3.0, x);
      });
    return attempt([&] {
      const Node* m = inner(v, "Mul");
      if (!m) return false;
      auto is_square = [&](const std::string& s) {
        return attempt([&] {
          const Node* q = inner(s, "Mul");
          return q && q->inputs[0] == x && q->inputs[1] == x;
        });
      };
      return (m->inputs[1] == x && is_square(m->inputs[0])) ||
             (m->inputs[0] == x && is_square(m->inputs[1]));
    });
  }

  // sqrt(2/pi) * (x + 0.044715 * x^3) (read once): x.
  std::optional<std::string> tanh_arg(const std::string& v) const {
    return attempt([&]() -> std::optional<std::string> {
      const Node* m = inner(v, "Mul");
      if (!m) return std::nullopt;
      for (int k = 0; k < 2; ++k) {
        auto r = attempt([&]() -> std::optional<std::string> {
          const Node* a = inner(m->inputs[k], "Add");
          if (!a) return std::nullopt;
          for (int j = 0; j < 2; ++j) {
            const std::string& x = a->inputs[j];
            if (!is_const(m->inputs[1 - k], std::sqrt(2.0 / M_PI), x)) continue;
            auto found = attempt([&]() -> std::optional<std::string> {
              const Node* c = inner(a->inputs[1 - j], "Mul");
              if (!c) return std::nullopt;
              for (int i = 0; i < 2; ++i)
                if (is_const(c->inputs[1 - i], 0.044715, x) && is_cube(c->inputs[i], x)) return x;
              return std::nullopt;
            });
            if (found) return found;
          }
          return std::nullopt;
        });
        if (r) return r;
      }
      return std::nullopt;
    });
  }

  // 1 + erf(x / sqrt 2) or 1 + tanh(...) (read once): x and whether tanh.
  std::optional<std::pair<std::string, bool>> one_plus(const std::string& v) const {
    using R = std::optional<std::pair<std::string, bool>>;
    return attempt([&]() -> R {
      const Node* a = inner(v, "Add");
      if (!a) return std::nullopt;
      for (int k = 0; k < 2; ++k) {
        const std::string& f = a->inputs[k];
        R r = attempt([&]() -> R {
          if (ix.producer(f, "Erf")) {
            const Node* e = inner(f, "Erf");
            auto x = e ? erf_arg(e->inputs[0]) : std::nullopt;
            if (x && is_const(a->inputs[1 - k], 1.0, *x)) return std::make_pair(*x, false);
          } else if (const Node* t = inner(f, "Tanh")) {
            auto x = tanh_arg(t->inputs[0]);
            if (x && is_const(a->inputs[1 - k], 1.0, *x)) return std::make_pair(*x, true);
          }
          return std::nullopt;
        });
        if (r) return r;
      }
      return std::nullopt;
    });
  }

  // The GELU whose last node is `mul` (a Mul of three factors x, 0.5,
  // (1 + erf|tanh), grouped any way, or of x / 2 and the third): x and
  // whether tanh. On success `seen` holds the interior nodes.
  std::optional<std::pair<std::string, bool>> gelu(const Node& mul) const {
    using R = std::optional<std::pair<std::string, bool>>;
    seen.clear();
    if (mul.inputs.size() != 2) return std::nullopt;
    for (int k = 0; k < 2; ++k) {
      const std::string& lhs = mul.inputs[static_cast<size_t>(k)];
      const std::string& rhs = mul.inputs[static_cast<size_t>(1 - k)];
      // rhs = 1 + f(x); lhs = x * 0.5 | 0.5 * x | x / 2.
      R r = attempt([&]() -> R {
        R p = one_plus(rhs);
        if (!p) return std::nullopt;
        const std::string& x = p->first;
        if (ix.producer(lhs, "Div")) {
          const Node* d = inner(lhs, "Div");
          if (d && d->inputs[0] == x && is_const(d->inputs[1], 2.0, x)) return p;
          return std::nullopt;
        }
        const Node* h = inner(lhs, "Mul");
        if (h && ((h->inputs[0] == x && is_const(h->inputs[1], 0.5, x)) ||
                  (h->inputs[1] == x && is_const(h->inputs[0], 0.5, x))))
          return p;
        return std::nullopt;
      });
      if (r) return r;
      // lhs = 0.5; rhs = x * (1 + f(x)).
      r = attempt([&]() -> R {
        const Node* h = inner(rhs, "Mul");
        if (!h) return std::nullopt;
        for (int j = 0; j < 2; ++j) {
          R p = one_plus(h->inputs[static_cast<size_t>(1 - j)]);
          if (p && h->inputs[static_cast<size_t>(j)] == p->first && is_const(lhs, 0.5, p->first))
            return p;
          if (p) return std::nullopt;
        }
        return std::nullopt;
      });
      if (r) return r;
      // lhs = x; rhs = 0.5 * (1 + f(x)).
      r = attempt([&]() -> R {
        const Node* h = inner(rhs, "Mul");
        if (!h) return std::nullopt;
        for (int j = 0; j < 2; ++j) {
          R p = one_plus(h->inputs[static_cast<size_t>(1 - j)]);
          if (p && lhs == p->first && is_const(h->inputs[static_cast<size_t>(j)], 0.5, p->first))
            return p;
          if (p) return std::nullopt;
        }
        return std::nullopt;
      });
      if (r) return r;
    }
    return std::nullopt;
  }

  // Every read of `x` is by a node in `seen` or by `last`, and x is no graph
  // output (so an Add producing x dies with the pattern).
  bool read_only_inside(const std::string& x, const Node& last) const {
    if (ix.is_graph_output(x)) return false;
    size_t inside = 0;
    auto count = [&](const Node& n) {
      for (auto& in : n.inputs) inside += in == x;
    };
    for (const Node* n : seen) count(*n);
    count(last);
    return inside == ix.readers(x);
  }
};

bool contrib_type(DType t) { return t == DType::Float || t == DType::Float16; }

}  // namespace

size_t fuse_gelu(Graph& g, const PassOptions& o) {
  const bool ort = o.onnxruntime();
  if (!ort && o.opset < 20) return 0;
  GraphIndex ix(g);
  Matcher m{ix};
  Rewriter rw(g);
  size_t fused = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (n.outputs.size() != 1 || !(is_op(&n, "Mul") || is_op(&n, "Gelu"))) continue;
    const ValueType* yt = ix.type(n.outputs[0]);
    if (!yt || !is_float_type(yt->dtype)) continue;
    if (ort && !contrib_type(yt->dtype)) continue;

    // onnxruntime: a Gelu of the standard domain (aten.gelu from opset 20)
    // becomes the contrib one, so the bias Add goes in as well.
    std::optional<std::pair<std::string, bool>> match;
    if (ort && is_op(&n, "Gelu") && n.inputs.size() == 1) {
      const Attr* a = n.attr("approximate");
      m.seen.clear();
      match = std::make_pair(n.inputs[0], a && a->s == "tanh");
    } else if (is_op(&n, "Mul")) {
      match = m.gelu(n);
    }
    if (auto& p = match) {
      const auto& [x, tanh] = *p;
      const ValueType* xt = ix.type(x);
      // The fused op keeps x's shape: x must already have the output's shape.
      if (!xt || !xt->shape || !yt->shape || xt->shape->size() != yt->shape->size()) continue;
      if (!ort) {
        rw.replace(k, {make_node("Gelu", {x}, n.outputs,
                                 {Attr::Str("approximate", tanh ? "tanh" : "none")}, n)});
        ++fused;
        continue;
      }
      std::vector<std::string> ins{x};
      // x = y + bias, x read only inside the pattern: the bias goes in.
      const Node* add = ix.producer(x, "Add");
      for (int j = 0; add && j < 2 && m.read_only_inside(x, n); ++j) {
        const std::string& y = add->inputs[static_cast<size_t>(j)];
        const std::string& bias = add->inputs[static_cast<size_t>(1 - j)];
        const TensorData* b = ix.constant(bias);
        const ValueType* ty = ix.type(y);
        if (!b || b->dims.size() != 1 || ix.constant(y) || !ty || !ty->shape ||
            ty->shape->empty() || ty->shape->size() != xt->shape->size() || ty->dtype != b->dtype)
          continue;
        const Dim& last = ty->shape->back();
        if (!last.is_static() || last.value != b->dims[0]) continue;
        ins = {y, bias};
        break;
      }
      const char* op = tanh ? "FastGelu" : (ins.size() == 2 ? "BiasGelu" : "Gelu");
      rw.replace(k, {make_node(op, ins, n.outputs, {}, n, "com.microsoft")});
      ++fused;
      continue;
    }

    // onnxruntime: x * sigmoid(alpha * x) -> QuickGelu(x, alpha).
    if (!ort || !is_op(&n, "Mul") || n.inputs.size() != 2) continue;
    for (int j = 0; j < 2; ++j) {
      const std::string& x = n.inputs[static_cast<size_t>(j)];
      const Node* s = m.inner(n.inputs[static_cast<size_t>(1 - j)], "Sigmoid");
      if (!s) continue;
      std::optional<double> alpha;
      if (s->inputs[0] == x) {
        alpha = 1.0;
      } else if (const Node* am = m.inner(s->inputs[0], "Mul")) {
        if (am->inputs[0] == x)
          alpha = m.any_const(am->inputs[1], x);
        else if (am->inputs[1] == x)
          alpha = m.any_const(am->inputs[0], x);
      }
      const ValueType* xt = ix.type(x);
      if (!alpha || !xt || !xt->shape || !yt->shape || xt->shape->size() != yt->shape->size())
        continue;
      rw.replace(
          k, {make_node("QuickGelu", {x}, n.outputs,
                        {Attr::Float("alpha", static_cast<float>(*alpha))}, n, "com.microsoft")});
      ++fused;
      break;
    }
  }
  rw.apply();
  return fused;
}

}  // namespace pt2onnx
