// histogram / histogramdd: bin edges (linspace over the data's [min, max] or
// the given range, widened by 0.5 each side when empty; or the given edge
// tensors), each element's bin found by comparing against the edges (bin k
// is [e_k, e_k+1), the last bin closed; elements outside are dropped), and
// the (weighted) counts summed per bin: ScatterElements(add) from opset 16,
// a one-hot matrix product below. density divides by total * bin volume.
#include <limits>

#include "convert/context.h"
#include "convert/registry.h"
#include "convert/scatter_gather.h"

namespace pt2onnx {

namespace {

constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();

std::string slice(Ctx& c, const std::string& v, int64_t axis, int64_t start, int64_t end) {
  return c.b.op("Slice", {v, c.b.const_i64({start}), c.b.const_i64({end}), c.b.const_i64({axis})});
}

// nb + 1 edges from lo to hi (0-D values of type t), as torch.linspace: the
// first half counted up from lo, the second half down from hi.
std::string linspace(Ctx& c, DType t, const std::string& lo, const std::string& hi, int64_t nb) {
  std::string step =
      c.b.op("Div", {c.b.op("Sub", {hi, lo}), c.b.scalar(t, static_cast<double>(nb))});
  std::string k =
      c.cast(c.b.op("Range", {c.b.scalar_i64(0), c.b.scalar_i64(nb + 1), c.b.scalar_i64(1)}), t);
  std::string up = c.b.op("Add", {lo, c.b.op("Mul", {step, k})});
  std::string rev = c.b.op("Sub", {c.b.scalar(t, static_cast<double>(nb)), k});
  std::string down = c.b.op("Sub", {hi, c.b.op("Mul", {step, rev})});
  std::string first = c.b.op("Less", {k, c.b.scalar(t, static_cast<double>((nb + 1) / 2))});
  return c.b.op("Where", {first, up, down});
}

struct Axis {
  std::string edges;  // 1-D [nb + 1]
  int64_t nb = 0;     // bins (static)
};

// Which outputs the op has: hist and edges (histogram, histogramdd), only
// the hist or only the edges (the pieces run_decompositions splits it into).
enum class Outputs { All, Hist, Edges };

// x2: [N, D]; weight: [N] or empty. Writes the outputs `outs` names.
void histogram_nd(Ctx& c, const std::string& x2, size_t D, std::vector<int64_t> bin_cts,
                  std::vector<std::string> edge_tensors, const std::optional<std::string>& weight,
                  Outputs outs = Outputs::All) {
  DType t = c.out_dtype(0);
  const schema::Argument* ra = c.arg("range");
  std::vector<double> range;
  if (ra && ra->kind != schema::ArgKind::None) {
    range = ra->floats;
    if (range.empty())
      for (auto v : ra->ints) range.push_back(static_cast<double>(v));
    if (range.size() != 2 * D) c.fail("range needs 2 values per dimension");
  }
  std::vector<Axis> axes(D);
  std::vector<std::string> cols(D);
  for (size_t k = 0; k < D; ++k) {
    auto kk = static_cast<int64_t>(k);
    cols[k] = c.squeeze(slice(c, x2, 1, kk, kk + 1), {1});  // [N]
    if (!edge_tensors.empty()) {
      axes[k].edges = c.cast(edge_tensors[k], t);
      const Shape& s = c.shape(axes[k].edges);
      if (s.size() != 1 || !s[0].is_static()) c.fail("bin edges need a static length");
      axes[k].nb = s[0].value - 1;
      continue;
    }
    axes[k].nb = bin_cts[k];
    std::string lo, hi;
    if (!range.empty()) {
      lo = c.b.scalar(t, range[2 * k]);
      hi = c.b.scalar(t, range[2 * k + 1]);
    } else {
      lo = c.reduce("ReduceMin", cols[k], {0}, false);
      hi = c.reduce("ReduceMax", cols[k], {0}, false);
    }
    // An empty range [v, v] becomes [v - 0.5, v + 0.5].
    std::string same = c.b.op("Equal", {lo, hi});
    std::string half = c.b.scalar(t, 0.5);
    lo = c.b.op("Where", {same, c.b.op("Sub", {lo, half}), lo});
    hi = c.b.op("Where", {same, c.b.op("Add", {hi, half}), hi});
    axes[k].edges = linspace(c, t, lo, hi, axes[k].nb);
  }
  if (outs == Outputs::Edges) {
    for (size_t k = 0; k < D; ++k) c.set_output(k, axes[k].edges);
    return;
  }
  // Bin per element and dim: how many inner edges are <= x.
  std::string linear, valid;
  int64_t total = 1;
  for (size_t k = D; k-- > 0;) {
    const Axis& a = axes[k];
    if (a.nb < 1) c.fail("bins must be at least 1");
    std::string inner = slice(c, a.edges, 0, 1, a.nb);  // [nb - 1]
    std::string ge = c.b.op("GreaterOrEqual", {c.unsqueeze(cols[k], {1}), inner});
    std::string idx = c.reduce("ReduceSum", c.cast(ge, DType::Int64), {1}, false);
    std::string first = slice(c, a.edges, 0, 0, 1), last = slice(c, a.edges, 0, a.nb, a.nb + 1);
    std::string in = c.b.op("And", {c.b.op("GreaterOrEqual", {cols[k], first}),
                                    c.b.op("LessOrEqual", {cols[k], last})});
    std::string term = total == 1 ? idx : c.b.op("Mul", {idx, c.b.scalar_i64(total)});
    linear = linear.empty() ? term : c.b.op("Add", {linear, term});
    valid = valid.empty() ? in : c.b.op("And", {valid, in});
    total *= a.nb;
  }
  std::string w = weight ? c.cast(*weight, t)
                         : c.b.op("Expand", {c.b.scalar(t, 1.0), c.b.op("Shape", {linear})});
  w = c.b.op("Where", {valid, w, c.b.scalar(t, 0.0)});
  std::string counts;
  if (c.opset() >= 16) {
    std::string zeros = c.b.op("Expand", {c.b.scalar(t, 0.0), c.b.const_i64({total})});
    ValueType ct{t, Shape{Dim::of(total)}};
    counts = c.b.op("ScatterElements", {zeros, linear, w},
                    {Attr::Int("axis", 0), Attr::Str("reduction", "add")}, ct);
  } else {
    std::string range_all =
        c.b.op("Range", {c.b.scalar_i64(0), c.b.scalar_i64(total), c.b.scalar_i64(1)});
    std::string onehot = c.cast(c.b.op("Equal", {c.unsqueeze(linear, {1}), range_all}), t);
    counts = c.squeeze(c.b.op("MatMul", {c.unsqueeze(w, {0}), onehot}), {0});
  }
  std::vector<int64_t> bshape;
  for (auto& a : axes) bshape.push_back(a.nb);
  std::string hist = c.reshape(counts, c.b.const_i64(bshape));
  if (c.flag("density", false)) {
    std::string sum = c.reduce("ReduceSum", counts, {0}, false);
    hist = c.b.op("Div", {hist, sum});
    for (size_t k = 0; k < D; ++k) {
      const Axis& a = axes[k];
      std::string width =
          c.b.op("Sub", {slice(c, a.edges, 0, 1, kEnd), slice(c, a.edges, 0, 0, a.nb)});
      std::vector<int64_t> shape(D, 1);
      shape[k] = a.nb;
      hist = c.b.op("Div", {hist, c.reshape(width, c.b.const_i64(shape))});
    }
  }
  c.set_output(0, hist);
  if (outs == Outputs::All)
    for (size_t k = 0; k < D; ++k) c.set_output(1 + k, axes[k].edges);
}

void histogram(Ctx& c) {
  std::string x = c.cast(c.tensor("self"), c.out_dtype(0));
  std::string x2 = c.reshape(x, c.b.const_i64({-1, 1}));
  std::optional<std::string> w;
  if (auto wt = c.opt_tensor("weight")) w = c.reshape(*wt, c.b.const_i64({-1}));
  const schema::Argument* bins = c.arg("bins");
  if (bins && bins->kind == schema::ArgKind::Tensor)
    return histogram_nd(c, x2, 1, {}, {c.tensor("bins")}, w);
  histogram_nd(c, x2, 1, {c.i("bins", 100)}, {}, w);
}

void histogramdd_outputs(Ctx& c, Outputs outs) {
  std::string x = c.cast(c.tensor("self"), c.out_dtype(0));
  const Shape& s = c.shape(x);
  if (s.empty() || !s.back().is_static()) c.fail("histogramdd needs a static last dim");
  size_t D = static_cast<size_t>(s.back().value);
  std::string x2 = c.reshape(x, c.b.const_i64({-1, s.back().value}));
  std::optional<std::string> w;
  if (auto wt = c.opt_tensor("weight")) w = c.reshape(*wt, c.b.const_i64({-1}));
  const schema::Argument* bins = c.arg("bins");
  if (bins && (bins->kind == schema::ArgKind::Tensors))
    return histogram_nd(c, x2, D, {}, c.tensors("bins"), w, outs);
  std::vector<int64_t> cts = c.ints("bins", {});
  if (cts.size() == 1 && D != 1) cts.assign(D, cts[0]);
  if (cts.size() != D) c.fail("bins needs one count per dimension");
  histogram_nd(c, x2, D, cts, {}, w, outs);
}
void histogramdd(Ctx& c) { histogramdd_outputs(c, Outputs::All); }
void histogramdd_hist(Ctx& c) { histogramdd_outputs(c, Outputs::Hist); }
void histogramdd_edges(Ctx& c) { histogramdd_outputs(c, Outputs::Edges); }

}  // namespace

// bincount(x, weights, minlength): length max(max(x) + 1, minlength) (known
// only at run time), counts or summed weights scattered with ScatterND add.
void bincount(Ctx& c) {
  DType t = c.out_dtype();
  std::string x = c.cast(c.tensor("self"), DType::Int64);
  // max over x and -1: an empty x gives length minlength.
  std::string top = c.reduce(
      "ReduceMax", c.b.op("Concat", {x, c.b.const_i64({-1})}, {Attr::Int("axis", 0)}), {0}, true);
  std::string n = c.b.op(
      "Max", {c.b.op("Add", {top, c.b.const_i64({1})}), c.b.const_i64({c.i("minlength", 0)})});
  std::string zeros =
      c.b.op("Expand", {c.b.scalar(t, 0.0), n}, {}, ValueType{t, c.out_type().shape});
  auto w = c.opt_tensor("weights");
  std::string upd =
      w ? c.cast(*w, t) : c.b.op("Expand", {c.b.scalar(t, 1.0), c.b.op("Shape", {x})});
  c.set_output(0, scatter_nd(c, zeros, c.unsqueeze(x, {-1}), upd, "add"));
}

void register_histogram(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "bincount.default", bincount);
  r.add(p + "histogram.bin_ct", histogram);
  r.add(p + "histogram.bins_tensor", histogram);
  for (const char* o :
       {"histogramdd.default", "histogramdd.int_bins", "histogramdd.TensorList_bins"})
    r.add(p + o, histogramdd);
  r.add(p + "_histogramdd_bin_edges.default", histogramdd_edges);
  r.add(p + "_histogramdd_from_bin_cts.default", histogramdd_hist);
  r.add(p + "_histogramdd_from_bin_tensors.default", histogramdd_hist);
}

}  // namespace pt2onnx
