// Indexing: slice, select, narrow, embedding, embedding_bag, advanced
// indexing (index / index_put and their _unsafe forms: several index tensors,
// None entries, bool masks through NonZero, broadcasting, negative indices),
// masked_select/masked_scatter, nonzero/argwhere/nonzero_static.
#include <algorithm>
#include <climits>
#include <cmath>

#include "convert/context.h"
#include "convert/registry.h"
#include "convert/scatter_gather.h"

namespace pt2onnx {

namespace {

void slice(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t axis = Ctx::norm_axis(c.i("dim", 0), c.rank(x));
  int64_t step = c.i("step", 1);
  const auto* start = c.arg("start");
  const auto* end = c.arg("end");
  auto bound = [&](const schema::Argument* a, const char* name, int64_t def) -> std::string {
    if (!a || a->kind == schema::ArgKind::None) return c.b.const_i64({def});
    return c.symint_value(c.symints(name)[0]);
  };
  auto start_c = (!start || start->kind == schema::ArgKind::None)
                     ? std::optional<int64_t>(0)
                     : c.symint_const(c.symints("start")[0]);
  auto end_c = (!end || end->kind == schema::ArgKind::None) ? std::optional<int64_t>(INT64_MAX)
                                                            : c.symint_const(c.symints("end")[0]);
  const Dim& d = c.shape(x)[static_cast<size_t>(axis)];
  // The whole axis: no Slice at all.
  if (step == 1 && start_c && *start_c == 0 && end_c &&
      (*end_c == INT64_MAX || (d.is_static() && *end_c >= d.value)))
    return c.set_output(0, x);
  std::string s = bound(start, "start", 0), e = bound(end, "end", INT64_MAX);
  std::vector<std::string> in{x, s, e, c.b.const_i64({axis})};
  if (step != 1) in.push_back(c.b.const_i64({step}));
  c.set_output(0, c.b.op("Slice", in, {}, c.out_type()));
}

void narrow(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t axis = Ctx::norm_axis(c.i("dim"), c.rank(x));
  auto start = c.symints("start")[0];
  // torch wraps a negative start once (python's x[-2:-2+2] would be empty).
  if (auto k = c.symint_const(start); k && *k < 0) {
    const Dim& d = c.shape(x)[static_cast<size_t>(axis)];
    if (d.is_static()) start = schema::SymIntArg{*k + d.value, {}};
  }
  std::string s = c.symint_value(start);
  if (auto k = c.symint_const(start); k && *k < 0) s = c.b.op("Add", {s, c.dim_value(x, axis)});
  std::string len = c.symint_value(c.symints("length")[0]);
  std::string e = c.b.op("Add", {s, len});
  c.set_output(0, c.b.op("Slice", {x, s, e, c.b.const_i64({axis})}, {}, c.out_type()));
}

void select(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t axis = Ctx::norm_axis(c.i("dim"), c.rank(x));
  auto idx = c.symints("index")[0];
  std::string i = idx.value ? c.b.scalar_i64(*idx.value) : c.squeeze(c.symint_value(idx), {0});
  c.set_output(0, c.b.op("Gather", {x, i}, {Attr::Int("axis", axis)}, c.out_type()));
}

void embedding(Ctx& c) {
  std::string w = c.tensor("weight");
  std::string idx = c.tensor("indices");
  c.set_output(0, c.b.op("Gather", {w, idx}, {Attr::Int("axis", 0)}, c.out_type()));
}

// Advanced indexing prepared: the indexed dims of x, one int64 index per dim
// (bool masks expanded through NonZero, negatives wrapped), all broadcast to
// one shape B.
struct AdvIndex {
  std::vector<int64_t> dims;
  std::vector<std::string> idx;
  bool adjacent = true;
};

AdvIndex prepare_index(Ctx& c, const std::string& x, const std::vector<std::string>& indices,
                       bool clamp = false) {
  AdvIndex a;
  size_t r = c.rank(x);
  int64_t p = 0;
  for (auto& t : indices) {
    if (t.empty()) {
      ++p;
      continue;
    }
    DType dt = c.dtype(t);
    if (dt == DType::Bool || dt == DType::UInt8) {
      std::string m = c.cast(t, DType::Bool);
      size_t k = c.rank(m);
      if (k == 0) c.fail("indexing with a 0-d boolean mask is not converted");
      std::string nz =
          c.b.op("NonZero", {m}, {},
                 ValueType{DType::Int64, Shape{Dim::of(static_cast<int64_t>(k)), Dim::unknown()}});
      for (size_t j = 0; j < k; ++j) {
        a.dims.push_back(p++);
        a.idx.push_back(c.b.op("Gather", {nz, c.b.scalar_i64(static_cast<int64_t>(j))},
                               {Attr::Int("axis", 0)}));
      }
      continue;
    }
    std::string size = dim_scalar(c, x, p);
    std::string i = c.cast(t, DType::Int64);
    if (clamp) {
      std::string neg = c.b.op("Neg", {size});
      std::string hi = c.b.op("Sub", {size, c.b.scalar_i64(1)});
      i = c.b.op("Min", {c.b.op("Max", {i, neg}), hi});
    }
    a.dims.push_back(p++);
    a.idx.push_back(wrap_index(c, i, size));
  }
  if (static_cast<size_t>(p) > r) c.fail("too many indices for the tensor's rank");
  for (size_t k = 1; k < a.dims.size(); ++k) a.adjacent &= a.dims[k] == a.dims[k - 1] + 1;
  if (a.idx.size() > 1) {
    bool same = true;
    for (auto& v : a.idx) {
      const ValueType& t = c.type(v);
      same &= t.has_static_shape() && t.shape == c.type(a.idx[0]).shape;
    }
    if (!same) {
      std::string z;
      for (auto& v : a.idx) {
        std::string m = c.b.op("Mul", {v, c.b.scalar_i64(0)});
        z = z.empty() ? m : c.b.op("Add", {z, m});
      }
      for (auto& v : a.idx) v = c.b.op("Add", {v, z});
    }
  }
  return a;
}

// x's dims not indexed, in order.
std::vector<int64_t> rest_dims(const AdvIndex& a, size_t r) {
  std::vector<int64_t> rest;
  for (int64_t k = 0; k < static_cast<int64_t>(r); ++k)
    if (std::find(a.dims.begin(), a.dims.end(), k) == a.dims.end()) rest.push_back(k);
  return rest;
}

std::string stack_last(Ctx& c, const std::vector<std::string>& v) {
  std::vector<std::string> parts;
  for (auto& x : v) parts.push_back(c.unsqueeze(x, {static_cast<int64_t>(c.rank(x))}));
  if (parts.size() == 1) return parts[0];
  return c.b.op("Concat", parts, {Attr::Int("axis", -1)});
}

// x[indices] as torch computes it.
std::string gather_index(Ctx& c, const std::string& x, const AdvIndex& a) {
  size_t r = c.rank(x);
  if (a.idx.size() == 1) return c.b.op("Gather", {x, a.idx[0]}, {Attr::Int("axis", a.dims[0])});
  auto rest = rest_dims(a, r);
  std::vector<int64_t> perm = a.dims;
  perm.insert(perm.end(), rest.begin(), rest.end());
  std::string xt = c.transpose(x, perm);
  std::string idx = stack_last(c, a.idx);
  const ValueType& bt = c.type(a.idx[0]);
  Shape gs = *bt.shape;
  for (auto d : rest) gs.push_back(c.shape(x)[static_cast<size_t>(d)]);
  std::string g = c.b.op("GatherND", {xt, idx}, {}, ValueType{c.dtype(x), gs});
  int64_t first = a.dims[0];
  if (!a.adjacent || first == 0) return g;
  // [B, before, after] -> [before, B, after]
  int64_t nb = static_cast<int64_t>(bt.shape->size());
  std::vector<int64_t> p2;
  for (int64_t k = 0; k < first; ++k) p2.push_back(nb + k);
  for (int64_t k = 0; k < nb; ++k) p2.push_back(k);
  for (int64_t k = nb + first; k < static_cast<int64_t>(gs.size()); ++k) p2.push_back(k);
  return c.transpose(g, p2);
}

void index(Ctx& c) {
  std::string x = c.tensor("self");
  auto idx = c.tensors("indices");
  bool any = false;
  for (auto& i : idx) any |= !i.empty();
  if (!any) return c.set_output(0, x);
  AdvIndex a = prepare_index(c, x, idx);
  c.set_output(0, gather_index(c, x, a));
}

// index_put core: self with values written at [indices] (added if accumulate).
std::string index_put_value(Ctx& c, const std::string& x, const AdvIndex& a, std::string values,
                            bool accumulate) {
  size_t r = c.rank(x);
  auto rest = rest_dims(a, r);
  std::vector<int64_t> perm = a.dims;
  perm.insert(perm.end(), rest.begin(), rest.end());
  std::string xt = c.transpose(x, perm);
  std::string b_shape = shape_of(c, a.idx[0]);
  size_t nb = c.rank(a.idx[0]);
  int64_t first = a.dims[0];
  bool moved = a.adjacent && first > 0;
  // values broadcast to x[indices]'s shape, in torch's layout.
  std::vector<std::string> parts;
  if (moved) {
    std::vector<int64_t> before, after;
    for (auto d : rest) (d < first ? before : after).push_back(d);
    if (!before.empty()) parts.push_back(dims_of(c, x, before));
    parts.push_back(b_shape);
    if (!after.empty()) parts.push_back(dims_of(c, x, after));
  } else {
    parts.push_back(b_shape);
    if (!rest.empty()) parts.push_back(dims_of(c, x, rest));
  }
  std::string vshape =
      parts.size() == 1 ? parts[0] : c.b.op("Concat", parts, {Attr::Int("axis", 0)});
  size_t vr = nb + rest.size();
  values = c.cast(values, c.dtype(x));
  if (auto k = c.b.const_ints(vshape)) {
    values = expand_to(c, values, vshape, vr);
  } else {
    values =
        c.b.op("Expand", {values, vshape}, {}, ValueType{c.dtype(x), Shape(vr, Dim::unknown())});
  }
  if (moved) {
    std::vector<int64_t> p2;
    int64_t nbi = static_cast<int64_t>(nb);
    for (int64_t k = 0; k < nbi; ++k) p2.push_back(first + k);
    for (int64_t k = 0; k < first; ++k) p2.push_back(k);
    for (int64_t k = first + nbi; k < static_cast<int64_t>(vr); ++k) p2.push_back(k);
    values = c.transpose(values, p2);
  }
  std::string idx = stack_last(c, a.idx);
  std::string out = scatter_nd(c, xt, idx, values, accumulate ? "add" : "none");
  std::vector<int64_t> inv(perm.size());
  for (size_t k = 0; k < perm.size(); ++k)
    inv[static_cast<size_t>(perm[k])] = static_cast<int64_t>(k);
  return c.transpose(out, inv);
}

void index_put(Ctx& c) {
  std::string x = c.tensor("self");
  auto idx = c.tensors("indices");
  bool any = false;
  for (auto& i : idx) any |= !i.empty();
  std::string values = c.tensor("values");
  bool acc = c.flag("accumulate", false);
  if (!any) c.fail("index_put without index tensors");
  AdvIndex a = prepare_index(c, x, idx);
  c.set_output(0, index_put_value(c, x, a, values, acc));
}

void unsafe_masked_index(Ctx& c) {
  std::string x = c.tensor("self");
  AdvIndex a = prepare_index(c, x, c.tensors("indices"), true);
  std::string g = gather_index(c, x, a);
  std::string fill = c.operand("fill", c.out_dtype());
  c.set_output(0, where_any(c, c.tensor("mask"), c.cast(g, c.out_dtype()), fill));
}

void unsafe_masked_index_put_accumulate(Ctx& c) {
  std::string x = c.tensor("self");
  AdvIndex a = prepare_index(c, x, c.tensors("indices"), true);
  std::string v = c.cast(c.tensor("values"), c.dtype(x));
  v = where_any(c, c.tensor("mask"), v, c.b.scalar(c.dtype(x), 0));
  c.set_output(0, index_put_value(c, x, a, v, true));
}

// self and mask broadcast to one shape.
std::pair<std::string, std::string> broadcast_pair(Ctx& c, const std::string& x,
                                                   const std::string& mask) {
  const ValueType& tx = c.type(x);
  const ValueType& tm = c.type(mask);
  if (tx.shape && tm.shape && *tx.shape == *tm.shape && tx.has_static_shape()) return {x, mask};
  std::string xb = where_any(c, mask, x, x);
  std::string mb =
      c.b.op("Expand", {mask, shape_of(c, xb)}, {}, ValueType{DType::Bool, c.type(xb).shape});
  return {xb, mb};
}

void masked_select(Ctx& c) {
  auto [x, m] = broadcast_pair(c, c.cast(c.tensor("self"), c.out_dtype()), c.tensor("mask"));
  std::string flat = c.b.op("Reshape", {m, c.b.const_i64({-1})});
  DType t = c.out_dtype();
  std::string xf =
      c.cast(c.b.op("Reshape", {x, c.b.const_i64({-1})}), c.kernel_type("Compress", t));
  c.set_output(0, c.cast(c.b.op("Compress", {xf, flat}, {Attr::Int("axis", 0)}), t));
}

void masked_scatter(Ctx& c) {
  DType t = c.out_dtype();
  auto [x, m] = broadcast_pair(c, c.cast(c.tensor("self"), t), c.tensor("mask"));
  std::string mf = c.b.op("Reshape", {m, c.b.const_i64({-1})});
  std::string xf = c.b.op("Reshape", {x, c.b.const_i64({-1})});
  std::string pos = c.b.op("CumSum", {c.cast(mf, DType::Int64), c.b.scalar_i64(0)}, {},
                           c.type(c.cast(mf, DType::Int64)));
  pos = c.b.op("Max", {c.b.op("Sub", {pos, c.b.scalar_i64(1)}), c.b.scalar_i64(0)});
  std::string src = c.b.op("Reshape", {c.cast(c.tensor("source"), t), c.b.const_i64({-1})});
  // One spare element so that an empty source can still be gathered from.
  src = c.b.op("Concat", {src, c.b.op("Reshape", {c.b.scalar(t, 0), c.b.const_i64({1})})},
               {Attr::Int("axis", 0)});
  std::string g = c.b.op("Gather", {src, pos}, {Attr::Int("axis", 0)});
  std::string out = where_any(c, mf, g, xf);
  c.set_output(0, c.b.op("Reshape", {out, shape_of(c, x)}, {}, c.out_type()));
}

// NonZero as [n, rank] (0-d inputs as [n, 0]).
std::string nonzero_rows(Ctx& c, std::string x, bool scalar_as_1d = false) {
  DType t = c.dtype(x);
  if (t == DType::Float16 || t == DType::BFloat16 || t == DType::Double || t == DType::Int8 ||
      t == DType::Int16)
    x = c.cast(x, t == DType::Double ? DType::Double : DType::Float);
  size_t r = c.rank(x);
  bool scalar = r == 0;
  if (scalar) x = c.unsqueeze(x, {0});
  size_t rr = std::max<size_t>(r, 1);
  std::string nz =
      c.b.op("NonZero", {x}, {},
             ValueType{DType::Int64, Shape{Dim::of(static_cast<int64_t>(rr)), Dim::unknown()}});
  std::string out = c.transpose(nz, {1, 0});
  if (scalar && !scalar_as_1d)
    out = c.b.op("Slice", {out, c.b.const_i64({0}), c.b.const_i64({0}), c.b.const_i64({1})});
  return out;
}

void nonzero(Ctx& c) {
  std::string out = nonzero_rows(c, c.tensor("self"));
  c.set_output(0, c.b.op("Identity", {out}, {}, c.out_type()));
}

// embedding_renorm_'s functional form: the rows of `self` that `indices`
// reference, scaled down to norm max_norm where their norm exceeds it.
void embedding_renorm(Ctx& c) {
  std::string w = c.tensor("self");
  DType t = c.dtype(w);
  std::string wf = c.cast(w, DType::Float);
  double max_norm = c.f("max_norm", 0), p = c.f("norm_type", 2);
  std::string norm;
  if (p == 2) {
    norm = c.reduce("ReduceL2", wf, {1}, true);
  } else if (p == 1) {
    norm = c.reduce("ReduceL1", wf, {1}, true);
  } else if (std::isinf(p)) {
    norm = c.reduce("ReduceMax", c.b.op("Abs", {wf}), {1}, true);
  } else {
    std::string pw = c.b.op("Pow", {c.b.op("Abs", {wf}), c.b.scalar(DType::Float, p)});
    norm = c.b.op("Pow", {c.reduce("ReduceSum", pw, {1}, true), c.b.scalar(DType::Float, 1.0 / p)});
  }
  std::string vocab = dim_scalar(c, w, 0);
  std::string rows = c.b.op("Range", {c.b.scalar_i64(0), vocab, c.b.scalar_i64(1)});
  std::string idx =
      c.b.op("Reshape", {c.cast(c.tensor("indices"), DType::Int64), c.b.const_i64({-1, 1})});
  std::string hit = c.cast(c.b.op("Equal", {idx, rows}), DType::Int64);
  std::string used = c.b.op("Greater", {c.reduce("ReduceSum", hit, {0}, false), c.b.scalar_i64(0)});
  std::string big = c.b.op("Greater", {norm, c.b.scalar(DType::Float, max_norm)});
  std::string sel = c.b.op("And", {c.unsqueeze(used, {1}), big});
  std::string scale = c.b.op("Div", {c.b.scalar(DType::Float, max_norm),
                                     c.b.op("Add", {norm, c.b.scalar(DType::Float, 1e-7)})});
  std::string scaled = c.cast(c.b.op("Mul", {wf, scale}), t);
  c.set_output(0, c.b.op("Where", {sel, scaled, w}, {}, c.out_type()));
}

void nonzero_numpy(Ctx& c) {
  // where.default (torch.where(condition)) names its argument "condition".
  std::string x = c.tensor(c.has("condition") ? "condition" : "self");
  std::string out = nonzero_rows(c, x, true);
  for (size_t k = 0; k < c.n_outputs(); ++k)
    c.set_output(k, c.b.op("Gather", {out, c.b.scalar_i64(static_cast<int64_t>(k))},
                           {Attr::Int("axis", 1)}, c.out_type(k)));
}

void nonzero_static(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t size = c.i("size");
  int64_t fill = c.i("fill_value", -1);
  std::string rows = nonzero_rows(c, x);
  int64_t r = static_cast<int64_t>(std::max<size_t>(c.rank(x), 1));
  TensorData pad = *TensorData::scalar(DType::Int64, static_cast<double>(fill), {1});
  std::string padv = c.b.op("ConstantOfShape", {c.b.const_i64({size, c.rank(x) == 0 ? 0 : r})},
                            {Attr::Tensor("value", pad)});
  std::string all = c.b.op("Concat", {rows, padv}, {Attr::Int("axis", 0)});
  c.set_output(
      0, c.b.op("Slice", {all, c.b.const_i64({0}), c.b.const_i64({size}), c.b.const_i64({0})}, {},
                c.out_type()));
}

// _embedding_bag / embedding_bag.padding_idx: output 0 only (the other
// outputs are the backward's bookkeeping).
void embedding_bag(Ctx& c) {
  std::string w = c.tensor("weight");
  std::string idx = c.cast(c.tensor("indices"), DType::Int64);
  std::string offsets = c.cast(c.tensor("offsets"), DType::Int64);
  int64_t mode = c.i("mode", 0);
  bool include_last = c.flag("include_last_offset", false);
  // None: no padding row; a negative index counts from the end.
  std::optional<int64_t> padding_idx;
  if (c.has("padding_idx")) padding_idx = c.i("padding_idx");
  DType t = c.out_dtype();
  if (c.rank(idx) != 1) c.fail("embedding_bag with indices of rank != 1");
  std::string n = dim_scalar(c, idx, 0);
  std::string pos = c.b.op("Range", {c.b.scalar_i64(0), n, c.b.scalar_i64(1)});
  // bag of each position: the number of offsets <= position, minus one.
  std::string le = c.b.op("LessOrEqual", {c.unsqueeze(offsets, {0}), c.unsqueeze(pos, {1})});
  std::string bag = c.b.op(
      "Sub", {c.reduce("ReduceSum", c.cast(le, DType::Int64), {1}, false), c.b.scalar_i64(1)});
  std::string nbags = dim_scalar(c, offsets, 0);
  if (include_last) nbags = c.b.op("Sub", {nbags, c.b.scalar_i64(1)});
  std::string bags = c.b.op("Range", {c.b.scalar_i64(0), nbags, c.b.scalar_i64(1)});
  // member[b, j]: position j belongs to bag b and counts.
  std::string member = c.b.op("Equal", {c.unsqueeze(bags, {1}), c.unsqueeze(bag, {0})});
  if (padding_idx) {
    std::string pi = *padding_idx >= 0
                         ? c.b.scalar_i64(*padding_idx)
                         : c.b.op("Add", {dim_scalar(c, w, 0), c.b.scalar_i64(*padding_idx)});
    member = c.b.op("And", {member, c.unsqueeze(c.b.op("Not", {c.b.op("Equal", {idx, pi})}), {0})});
  }
  std::string emb = c.cast(c.b.op("Gather", {w, idx}, {Attr::Int("axis", 0)}), t);  // [n, D]
  if (c.has("per_sample_weights"))
    emb = c.b.op("Mul", {emb, c.unsqueeze(c.cast(c.tensor("per_sample_weights"), t), {1})});
  std::string m3 = c.unsqueeze(member, {2});                                         // [B, n, 1]
  std::string e3 = c.unsqueeze(emb, {0});                                            // [1, n, D]
  std::string cnt = c.reduce("ReduceSum", c.cast(member, DType::Int64), {1}, true);  // [B,1]
  std::string out;
  if (mode == 2) {
    std::string masked = c.b.op("Where", {m3, e3, c.b.scalar(t, -INFINITY)});
    out = c.reduce("ReduceMax", masked, {1}, false);
    out = c.b.op("Where", {c.b.op("Equal", {cnt, c.b.scalar_i64(0)}), c.b.scalar(t, 0), out});
  } else {
    std::string masked = c.b.op("Where", {m3, e3, c.b.scalar(t, 0)});
    out = c.reduce("ReduceSum", masked, {1}, false);
    if (mode == 1) out = c.b.op("Div", {out, c.cast(c.b.op("Max", {cnt, c.b.const_i64({1})}), t)});
  }
  c.set_output(0, c.b.op("Identity", {out}, {}, c.out_type()));
  // The bookkeeping outputs (used by the backward only): bag of each
  // position, bag sizes, and for max the index of each maximum.
  std::string sizes = c.squeeze(cnt, {1});
  std::string mi;
  if (mode == 2) {
    std::string masked = c.b.op("Where", {m3, e3, c.b.scalar(t, -INFINITY)});
    std::string am = c.b.op("ArgMax", {masked}, {Attr::Int("axis", 1), Attr::Int("keepdims", 0)});
    mi = c.b.op("Gather", {idx, am}, {Attr::Int("axis", 0)});
  } else {
    mi = c.b.op("Mul", {sizes, c.b.scalar_i64(0)});
  }
  std::vector<std::string> extra{bag, sizes, mi};
  for (size_t k = 1; k < c.n_outputs() && k < 4; ++k)
    c.set_output(k, c.b.op("Identity", {c.cast(extra[k - 1], c.out_dtype(k))}));
}

}  // namespace

// one_hot(x, num_classes): OneHot with depth num_classes, or max(x) + 1
// (known only at run time) for -1.
void one_hot(Ctx& c) {
  std::string x = c.cast(c.tensor("self"), DType::Int64);
  int64_t k = c.i("num_classes", -1);
  std::string depth = k >= 0
                          ? c.b.const_i64({k})
                          : c.b.op("Add", {c.reduce("ReduceMax", x, {}, true), c.b.const_i64({1})});
  if (k < 0) depth = c.reshape(depth, c.b.const_i64({1}));
  bool scalar = c.rank(x) == 0;  // OneHot wants indices of rank >= 1
  if (scalar) x = c.unsqueeze(x, {0});
  ValueType yt = c.out_type();
  if (scalar && yt.shape) yt.shape->insert(yt.shape->begin(), Dim::of(1));
  std::string y = c.b.op("OneHot", {x, depth, c.b.const_i64({0, 1})}, {Attr::Int("axis", -1)}, yt);
  c.set_output(0, scalar ? c.squeeze(y, {0}) : y);
}

void register_indexing(Registry& r) {
  const std::string p = "torch.ops.aten.";
  r.add(p + "one_hot.default", one_hot);
  r.add(p + "slice.Tensor", slice);
  r.add(p + "narrow.default", narrow);
  r.add(p + "select.int", select);
  r.add(p + "embedding.default", embedding);
  r.add(p + "index.Tensor", index);
  r.add(p + "_unsafe_index.Tensor", index);
  r.add(p + "index_put.default", index_put);
  r.add(p + "_unsafe_index_put.default", index_put);
  r.add(p + "_unsafe_masked_index.default", unsafe_masked_index);
  r.add(p + "_unsafe_masked_index_put_accumulate.default", unsafe_masked_index_put_accumulate);
  r.add(p + "masked_select.default", masked_select);
  r.add(p + "masked_scatter.default", masked_scatter);
  r.add(p + "nonzero.default", nonzero);
  r.add(p + "argwhere.default", nonzero);
  r.add(p + "nonzero_numpy.default", nonzero_numpy);
  r.add(p + "where.default", nonzero_numpy);
  r.add(p + "nonzero_static.default", nonzero_static);
  r.add(p + "_embedding_bag.default", embedding_bag);
  r.add(p + "_embedding_bag_forward_only.default", embedding_bag);
  r.add(p + "embedding_bag.padding_idx", embedding_bag);
  r.add(p + "embedding_bag.default", embedding_bag);
  r.add(p + "embedding_renorm.default", embedding_renorm);
}

}  // namespace pt2onnx
