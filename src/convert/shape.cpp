// Shape manipulation: view/reshape/flatten/unflatten, permute/transpose,
// unsqueeze/squeeze, cat/stack, split/split_with_sizes/chunk, expand.
// Reshape targets are built from torch's recorded output shape: static dims
// as numbers, dims equal to the input's at the same position as 0 (copy),
// one remaining symbolic dim as -1, so most dynamic reshapes need no Shape op.
#include <algorithm>
#include <climits>

#include "convert/complex.h"
#include "convert/context.h"
#include "convert/layout.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

struct Target {
  std::string shape;
  bool allowzero = false;
};

Target reshape_target(Ctx& c, const std::string& x, const ValueType& out,
                      const std::vector<schema::SymIntArg>* sizes) {
  const Shape& od = *out.shape;
  const ValueType& in = c.type(x);
  bool has_zero = false, all_static = true;
  for (auto& d : od) {
    has_zero |= d.is_static() && d.value == 0;
    all_static &= d.is_static();
  }
  if (all_static) {
    std::vector<int64_t> v;
    for (auto& d : od) v.push_back(d.value);
    return {c.b.const_i64(v), has_zero};
  }
  if (!has_zero) {
    std::vector<int64_t> v;
    int unresolved = 0;
    for (size_t i = 0; i < od.size(); ++i) {
      if (od[i].is_static()) {
        v.push_back(od[i].value);
      } else if (in.shape && i < in.shape->size() && (*in.shape)[i].same_as(od[i])) {
        v.push_back(0);
      } else {
        v.push_back(-1);
        ++unresolved;
      }
    }
    if (unresolved <= 1) return {c.b.const_i64(v), false};
  }
  if (sizes) return {c.shape_tensor(*sizes), has_zero};
  // Each symbolic output dim equal to some input dim is read from the input.
  std::vector<std::string> parts;
  for (auto& d : od) {
    if (d.is_static()) {
      parts.push_back(c.b.const_i64({d.value}));
      continue;
    }
    bool found = false;
    for (size_t j = 0; in.shape && j < in.shape->size() && !found; ++j)
      if ((*in.shape)[j].same_as(d)) {
        parts.push_back(c.dim_value(x, static_cast<int64_t>(j)));
        found = true;
      }
    if (!found) c.fail("cannot express reshape target dim '" + d.sym + "' from the input's dims");
  }
  return {c.b.op("Concat", parts, {Attr::Int("axis", 0)}), has_zero};
}

void emit_reshape(Ctx& c, const std::string& x, const std::vector<schema::SymIntArg>* sizes) {
  ValueType out = c.out_type();
  const ValueType& in = c.type(x);
  if (in.shape && out.shape && same_shape(*in.shape, *out.shape)) return c.set_output(0, x);
  Target t = reshape_target(c, x, out, sizes);
  std::vector<Attr> attrs;
  if (t.allowzero) attrs.push_back(Attr::Int("allowzero", 1));
  c.set_output(0, c.b.op("Reshape", {x, t.shape}, attrs, out));
}

void view(Ctx& c) {
  const char* arg = c.arg("size") ? "size" : "shape";
  auto sizes = c.symints(arg);
  emit_reshape(c, c.tensor("self"), &sizes);
}

void flatten(Ctx& c) { emit_reshape(c, c.tensor("self"), nullptr); }

void unflatten(Ctx& c) {
  // sizes cover only the unflattened dim; the output metadata has the rest.
  emit_reshape(c, c.tensor("self"), nullptr);
}

void permute(Ctx& c) {
  std::string x = c.tensor("self");
  size_t r = torch_rank(c, "self", x);
  std::vector<int64_t> perm = c.ints("dims", {});
  for (auto& p : perm) p = Ctx::norm_axis(p, r);
  if (r < c.rank(x)) perm.push_back(static_cast<int64_t>(r));  // complex components stay last
  c.set_output(0, c.transpose(x, perm));
}

void transpose(Ctx& c) {
  std::string x = c.tensor("self");
  size_t r = torch_rank(c, "self", x);
  if (r < 2) return c.set_output(0, x);
  std::vector<int64_t> perm;
  for (size_t k = 0; k < c.rank(x); ++k) perm.push_back(static_cast<int64_t>(k));
  bool ax = c.arg("axis0") != nullptr;  // swapaxes names them axis0/axis1
  int64_t a = Ctx::norm_axis(c.i(ax ? "axis0" : "dim0"), r),
          b = Ctx::norm_axis(c.i(ax ? "axis1" : "dim1"), r);
  std::swap(perm[static_cast<size_t>(a)], perm[static_cast<size_t>(b)]);
  c.set_output(0, c.transpose(x, perm));
}

void unsqueeze(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t d = Ctx::norm_axis(c.i("dim"), torch_rank(c, "self", x) + 1);
  c.set_output(0, c.unsqueeze(x, {d}));
}

void squeeze(Ctx& c) {
  std::string x = c.tensor("self");
  const Shape& s = c.shape(x);
  std::vector<int64_t> dims;
  const schema::Argument* da = c.arg("dim");
  if (da && (da->kind == schema::ArgKind::Ints || da->kind == schema::ArgKind::SymInts))
    dims = c.ints("dim", {});
  else if (da)
    dims = {c.i("dim")};
  else if (c.arg("dims"))
    dims = c.ints("dims", {});
  else
    for (size_t k = 0; k < torch_rank(c, "self", x); ++k) dims.push_back(static_cast<int64_t>(k));
  // torch squeezes only dims of size 1; others are left alone.
  std::vector<int64_t> axes;
  size_t r = torch_rank(c, "self", x);
  for (auto d : dims) {
    if (r == 0) break;
    int64_t a = Ctx::norm_axis(d, r);
    if (s[static_cast<size_t>(a)].is_static() && s[static_cast<size_t>(a)].value == 1)
      axes.push_back(a);
  }
  if (axes.empty()) return c.set_output(0, x);
  c.set_output(0, c.squeeze(x, axes));
}

void cat(Ctx& c) {
  DType t = c.out_dtype();
  size_t r = c.out_type().shape->size();
  int64_t axis = Ctx::norm_axis(c.i("dim", 0), r);
  std::vector<std::string> parts;
  for (auto& v : c.tensors("tensors")) {
    const ValueType& vt = c.type(v);
    // torch.cat skips 1-D empty tensors whatever the other shapes.
    if (vt.shape && vt.shape->size() == 1 && (*vt.shape)[0].is_static() &&
        (*vt.shape)[0].value == 0 && r != 1)
      continue;
    parts.push_back(c.cast(v, t));
  }
  if (parts.size() == 1) return c.set_output(0, parts[0]);
  c.set_output(0, c.b.op("Concat", parts, {Attr::Int("axis", axis)}, c.out_type()));
}

void stack(Ctx& c) {
  DType t = c.out_dtype();
  size_t r = c.out_type().shape->size();
  int64_t axis = Ctx::norm_axis(c.i("dim", 0), r);
  std::vector<std::string> parts;
  for (auto& v : c.tensors("tensors")) parts.push_back(c.unsqueeze(c.cast(v, t), {axis}));
  if (parts.size() == 1) return c.set_output(0, parts[0]);
  c.set_output(0, c.b.op("Concat", parts, {Attr::Int("axis", axis)}, c.out_type()));
}

using layout::IE;

// Emits the pieces [starts[k], ends[k]) of x along axis: one Split when they
// are static, non-empty and tile the axis, else one Slice each.
void emit_pieces(Ctx& c, const std::string& x, int64_t axis, const std::vector<IE>& starts,
                 const std::vector<IE>& ends) {
  size_t n = starts.size();
  if (n != c.n_outputs()) c.fail("internal: split produced a different number of pieces");
  IE D = layout::dim(c, x, axis);
  bool tiles = D.k.has_value();
  std::vector<int64_t> sizes;
  int64_t pos = 0;
  for (size_t k = 0; k < n && tiles; ++k) {
    tiles = starts[k].k && ends[k].k && *starts[k].k == pos && *ends[k].k > pos;
    if (tiles) sizes.push_back(std::min(*ends[k].k, *D.k) - pos), pos = std::min(*ends[k].k, *D.k);
    tiles &= sizes.back() > 0;
  }
  tiles &= tiles && pos == *D.k;
  if (n == 1 && tiles) return c.set_output(0, x);
  if (tiles) {
    std::vector<ValueType> types;
    for (size_t k = 0; k < n; ++k) types.push_back(c.out_type(k));
    auto outs =
        c.b.add_node("Split", {x, c.b.const_i64(sizes)}, n, {Attr::Int("axis", axis)}, types);
    for (size_t k = 0; k < n; ++k) c.set_output(k, outs[k]);
    return;
  }
  for (size_t k = 0; k < n; ++k) c.set_output(k, layout::slice(c, x, axis, starts[k], ends[k]));
}

// Pieces of (symbolic) size `size` each, the last one clamped.
void split_even(Ctx& c, const std::string& x, int64_t axis, const IE& size) {
  std::vector<IE> st, en;
  for (size_t k = 0; k < c.n_outputs(); ++k) {
    IE s = layout::bin(c, "Mul", IE::of(static_cast<int64_t>(k)), size);
    st.push_back(s);
    en.push_back(k + 1 == c.n_outputs() ? IE::of(INT64_MAX) : layout::bin(c, "Add", s, size));
  }
  emit_pieces(c, x, axis, st, en);
}

void split_sizes(Ctx& c, const std::string& x, int64_t axis,
                 const std::vector<schema::SymIntArg>& sizes) {
  std::vector<IE> st, en;
  IE pos = IE::of(0);
  for (auto& a : sizes) {
    st.push_back(pos);
    pos = layout::bin(c, "Add", pos, layout::sym(c, a));
    en.push_back(pos);
  }
  emit_pieces(c, x, axis, st, en);
}

// tensor_split into n sections: the first D % n get one more.
void split_sections(Ctx& c, const std::string& x, int64_t axis, const IE& n) {
  IE D = layout::dim(c, x, axis);
  IE q = layout::bin(c, "Div", D, n), m = layout::bin(c, "Mod", D, n);
  std::vector<IE> st, en;
  for (size_t k = 0; k <= c.n_outputs(); ++k) {
    IE kk = IE::of(static_cast<int64_t>(k));
    IE s = layout::bin(c, "Add", layout::bin(c, "Mul", kk, q), layout::bin(c, "Min", kk, m));
    if (k > 0) en.push_back(s);
    if (k < c.n_outputs()) st.push_back(s);
  }
  emit_pieces(c, x, axis, st, en);
}

void split_indices(Ctx& c, const std::string& x, int64_t axis, const std::vector<int64_t>& idx) {
  std::vector<IE> st{IE::of(0)}, en;
  for (auto i : idx) st.push_back(IE::of(i)), en.push_back(IE::of(i));
  en.push_back(IE::of(INT64_MAX));
  // Python slicing semantics for negative / out-of-order indices: Slice each
  // unless they tile the axis in order.
  IE D = layout::dim(c, x, axis);
  bool plain = D.k.has_value();
  for (size_t k = 0; k < idx.size() && plain; ++k)
    plain = idx[k] >= 0 && idx[k] <= *D.k && (k == 0 || idx[k] >= idx[k - 1]);
  if (!plain) {
    for (size_t k = 0; k < st.size(); ++k) c.set_output(k, layout::slice(c, x, axis, st[k], en[k]));
    return;
  }
  emit_pieces(c, x, axis, st, en);
}

int64_t split_axis(Ctx& c, const std::string& x) {
  return Ctx::norm_axis(c.i("dim", 0), std::max<size_t>(c.rank(x), 1));
}

void split(Ctx& c) {
  std::string x = c.tensor("self");
  split_even(c, x, split_axis(c, x), layout::sym(c, c.symints("split_size")[0]));
}

void split_with_sizes(Ctx& c) {
  std::string x = c.tensor("self");
  split_sizes(c, x, split_axis(c, x), c.symints("split_sizes"));
}

void chunk(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t axis = split_axis(c, x);
  IE n = IE::of(c.i("chunks"));
  IE D = layout::dim(c, x, axis);
  // torch: pieces of ceil(D / chunks).
  IE size = layout::bin(c, "Div", layout::bin(c, "Add", D, layout::bin(c, "Sub", n, IE::of(1))), n);
  if (c.n_outputs() == 1) return c.set_output(0, x);
  split_even(c, x, axis, size);
}

void tensor_split_sections(Ctx& c) {
  std::string x = c.tensor("self");
  split_sections(c, x, split_axis(c, x), layout::sym(c, c.symints("sections")[0]));
}

void tensor_split_indices(Ctx& c) {
  std::string x = c.tensor("self");
  split_indices(c, x, split_axis(c, x), c.ints("indices", {}));
}

// Indices (1-D) or a section count (0-D) given as a tensor: read at runtime.
void tensor_split_tensor(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t axis = split_axis(c, x);
  std::string t = c.tensor("tensor_indices_or_sections");
  size_t n = c.n_outputs();
  if (c.rank(t) == 0) {
    IE sec{std::nullopt, c.unsqueeze(t, {0})};
    return split_sections(c, x, axis, sec);
  }
  std::vector<IE> st{IE::of(0)}, en;
  for (size_t k = 0; k + 1 < n; ++k) {
    std::string v =
        c.b.op("Gather", {t, c.b.const_i64({static_cast<int64_t>(k)})}, {Attr::Int("axis", 0)});
    st.push_back({std::nullopt, v}), en.push_back({std::nullopt, v});
  }
  en.push_back(IE::of(INT64_MAX));
  for (size_t k = 0; k < n; ++k) c.set_output(k, layout::slice(c, x, axis, st[k], en[k]));
}

// hsplit / vsplit / dsplit: torch checks divisibility; the axis is fixed.
int64_t dir_axis(Ctx& c, const std::string& x) {
  const std::string& t = c.node.target;
  if (t.find("hsplit") != std::string::npos) return c.rank(x) == 1 ? 0 : 1;
  if (t.find("vsplit") != std::string::npos) return 0;
  return 2;
}

void dir_split_int(Ctx& c) {
  std::string x = c.tensor("self");
  split_sections(c, x, dir_axis(c, x), IE::of(c.i("sections")));
}

void dir_split_array(Ctx& c) {
  std::string x = c.tensor("self");
  split_indices(c, x, dir_axis(c, x), c.ints("indices", {}));
}

void unbind(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t axis = Ctx::norm_axis(c.i("dim", 0), c.rank(x));
  const Dim& d = c.shape(x)[static_cast<size_t>(axis)];
  size_t n = c.n_outputs();
  if (d.is_static() && static_cast<size_t>(d.value) == n && n > 1) {
    auto parts = c.b.add_node("Split", {x, c.b.const_i64(std::vector<int64_t>(n, 1))}, n,
                              {Attr::Int("axis", axis)});
    for (size_t k = 0; k < n; ++k) c.set_output(k, c.squeeze(parts[k], {axis}));
    return;
  }
  // A symbolic dim: torch fixed the count of outputs; one Gather each.
  for (size_t k = 0; k < n; ++k)
    c.set_output(k, c.b.op("Gather", {x, c.b.scalar_i64(static_cast<int64_t>(k))},
                           {Attr::Int("axis", axis)}));
}

void expand(Ctx& c) {
  std::string x = c.tensor("self");
  auto sizes = c.symints("size");
  ValueType out = c.out_type();
  const Shape& in = c.shape(x);
  const Shape& od = *out.shape;
  // Expand broadcasts: a 1 keeps the input's dim, so dims torch keeps (-1 or
  // equal to the input's) need no runtime size.
  std::vector<schema::SymIntArg> target;
  size_t lead = od.size() - in.size();
  for (size_t k = 0; k < od.size(); ++k) {
    bool keep =
        k >= lead && (in[k - lead].same_as(od[k]) || (sizes[k].value && *sizes[k].value == -1));
    if (keep)
      target.push_back(schema::SymIntArg{1, {}});
    else if (od[k].is_static())
      target.push_back(schema::SymIntArg{od[k].value, {}});
    else
      target.push_back(sizes[k]);
  }
  if (in == od) return c.set_output(0, x);
  if (c.dtype(x) == DType::BFloat16) {  // onnxruntime has no bfloat16 Expand
    std::string f = c.b.op("Expand", {c.cast(x, DType::Float), c.shape_tensor(target)});
    return c.set_output(0, c.cast(f, DType::BFloat16));
  }
  c.set_output(0, c.b.op("Expand", {x, c.shape_tensor(target)}, {}, out));
}

void expand_as(Ctx& c) {
  std::string x = c.tensor("self");
  std::string other = c.tensor("other");
  c.set_output(0, c.b.op("Expand", {x, c.b.op("Shape", {other})}, {}, c.out_type()));
}

void identity(Ctx& c) { c.set_output(0, c.tensor("self")); }

std::vector<int64_t> iota(size_t r) {
  std::vector<int64_t> p;
  for (size_t k = 0; k < r; ++k) p.push_back(static_cast<int64_t>(k));
  return p;
}

void t_copy(Ctx& c) {
  std::string x = c.tensor("self");
  c.set_output(0, c.rank(x) < 2 ? x : c.transpose(x, {1, 0}));
}

// mT / mH / adjoint / matrix_H (real tensors: conjugation is the identity).
void matrix_t(Ctx& c) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  auto p = iota(r);
  std::swap(p[r - 1], p[r - 2]);
  c.set_output(0, c.transpose(x, p));
}

void numpy_t(Ctx& c) {
  std::string x = c.tensor("self");
  auto p = iota(c.rank(x));
  std::reverse(p.begin(), p.end());
  c.set_output(0, c.transpose(x, p));
}

void movedim(Ctx& c) {
  std::string x = c.tensor("self");
  size_t r = c.rank(x);
  auto src = c.ints("source", {}), dst = c.ints("destination", {});
  std::vector<int64_t> perm(r, -1);
  std::vector<bool> used(r, false);
  for (size_t k = 0; k < src.size(); ++k) {
    int64_t s = Ctx::norm_axis(src[k], r), d = Ctx::norm_axis(dst[k], r);
    perm[static_cast<size_t>(d)] = s;
    used[static_cast<size_t>(s)] = true;
  }
  size_t next = 0;
  for (size_t p = 0; p < r; ++p) {
    if (perm[p] >= 0) continue;
    while (used[next]) ++next;
    perm[p] = static_cast<int64_t>(next++);
  }
  c.set_output(0, c.transpose(x, perm));
}

// atleast_Nd of one tensor: 0-D -> (1,..), 1-D (n) -> (1,n) / (1,n,1), 2-D -> (m,n,1).
std::string atleast(Ctx& c, const std::string& x, size_t n) {
  size_t r = c.rank(x);
  if (r >= n) return x;
  if (r == 0) return c.unsqueeze(x, iota(n));
  if (n == 2) return c.unsqueeze(x, {0});
  if (r == 1) return c.unsqueeze(x, {0, 2});
  return c.unsqueeze(x, {2});
}

void atleast_nd(Ctx& c) {
  const std::string& t = c.node.target;
  size_t n = t.find("atleast_1d") != std::string::npos   ? 1
             : t.find("atleast_2d") != std::string::npos ? 2
                                                         : 3;
  if (c.arg("self")) return c.set_output(0, atleast(c, c.tensor("self"), n));
  auto ts = c.tensors("tensors");
  for (size_t k = 0; k < ts.size(); ++k) c.set_output(k, atleast(c, ts[k], n));
}

void concat_parts(Ctx& c, std::vector<std::string> parts, int64_t axis) {
  DType t = c.out_dtype();
  for (auto& p : parts) p = c.cast(p, t);
  if (parts.size() == 1) return c.set_output(0, parts[0]);
  c.set_output(0, c.b.op("Concat", parts, {Attr::Int("axis", axis)}, c.out_type()));
}

void hstack(Ctx& c) {
  std::vector<std::string> parts;
  bool all_1d = true;
  for (auto& v : c.tensors("tensors")) {
    parts.push_back(atleast(c, v, 1));
    all_1d &= c.rank(parts.back()) == 1;
  }
  concat_parts(c, parts, all_1d ? 0 : 1);
}

void vstack(Ctx& c) {
  std::vector<std::string> parts;
  for (auto& v : c.tensors("tensors")) parts.push_back(atleast(c, v, 2));
  concat_parts(c, parts, 0);
}

void dstack(Ctx& c) {
  std::vector<std::string> parts;
  for (auto& v : c.tensors("tensors")) parts.push_back(atleast(c, v, 3));
  concat_parts(c, parts, 2);
}

void column_stack(Ctx& c) {
  std::vector<std::string> parts;
  for (auto& v : c.tensors("tensors")) {
    size_t r = c.rank(v);
    parts.push_back(r == 0 ? c.unsqueeze(v, {0, 1}) : r == 1 ? c.unsqueeze(v, {1}) : v);
  }
  concat_parts(c, parts, 1);
}

void ravel(Ctx& c) {
  std::string x = c.tensor("self");
  if (c.rank(x) == 1) return c.set_output(0, x);
  IE n = IE::of(1);
  for (auto& d : layout::dims_of(c, x)) n = layout::bin(c, "Mul", n, d);
  c.set_output(0, layout::reshape(c, x, {n}));
}

void reshape_as(Ctx& c) {
  std::string x = c.tensor("self"), o = c.tensor("other");
  c.set_output(0, layout::reshape(c, x, layout::dims_of(c, o)));
}

// Each output broadcast to the common shape: static dims as numbers, a dim
// the input already has as 1, others read from an input that has them.
std::vector<IE> broadcast_dims(Ctx& c, const std::string& x, const Shape& od,
                               const std::vector<std::string>& all) {
  const Shape& in = c.shape(x);
  size_t lead = od.size() - in.size();
  std::vector<IE> r;
  for (size_t k = 0; k < od.size(); ++k) {
    if (od[k].is_static()) {
      r.push_back(IE::of(od[k].value));
      continue;
    }
    if (k >= lead && in[k - lead].same_as(od[k])) {
      r.push_back(IE::of(1));
      continue;
    }
    bool found = false;
    for (auto& v : all) {
      const Shape& s = c.shape(v);
      size_t l = od.size() - s.size();
      if (k >= l && s[k - l].same_as(od[k])) {
        r.push_back(layout::dim(c, v, static_cast<int64_t>(k - l)));
        found = true;
        break;
      }
    }
    if (!found) c.fail("cannot express broadcast dim '" + od[k].sym + "' from the inputs");
  }
  return r;
}

std::string bexpand(Ctx& c, const std::string& x, const std::vector<IE>& dims) {
  if (c.dtype(x) != DType::BFloat16) return c.b.op("Expand", {x, layout::shape_of(c, dims)});
  std::string f = c.b.op("Expand", {c.cast(x, DType::Float), layout::shape_of(c, dims)});
  return c.cast(f, DType::BFloat16);
}

void broadcast_tensors(Ctx& c) {
  auto ts = c.tensors("tensors");
  for (size_t k = 0; k < ts.size(); ++k) {
    ValueType ot = c.out_type(k);
    if (c.type(ts[k]).shape && same_shape(c.shape(ts[k]), *ot.shape)) {
      c.set_output(k, ts[k]);
      continue;
    }
    c.set_output(k, bexpand(c, ts[k], broadcast_dims(c, ts[k], *ot.shape, ts)));
  }
}

void sum_to_size(Ctx& c) {
  std::string x = c.tensor("self");
  auto size = c.symints("size");
  const Shape& in = c.shape(x);
  size_t lead = in.size() - size.size();
  std::vector<int64_t> axes;
  for (size_t k = 0; k < in.size(); ++k) {
    if (k < lead) {
      axes.push_back(static_cast<int64_t>(k));
      continue;
    }
    auto s = c.symint_const(size[k - lead]);
    if (s && *s == 1 && !(in[k].is_static() && in[k].value == 1))
      axes.push_back(static_cast<int64_t>(k));
  }
  x = c.cast(x, c.out_dtype());  // bool sums to int64
  if (axes.empty()) return c.set_output(0, x);
  std::string y = c.reduce("ReduceSum", x, axes, true);
  if (lead > 0) {
    std::vector<int64_t> sq;
    for (size_t k = 0; k < lead; ++k) sq.push_back(static_cast<int64_t>(k));
    y = c.squeeze(y, sq);
  }
  c.set_output(0, c.cast(y, c.out_dtype()));
}

// narrow with python semantics for a negative start (torch wraps it once).
void narrow_copy(Ctx& c) {
  std::string x = c.tensor("self");
  int64_t axis = Ctx::norm_axis(c.i("dim"), c.rank(x));
  IE s = layout::sym(c, c.symints("start")[0]);
  IE len = layout::sym(c, c.symints("length")[0]);
  if (s.k && *s.k < 0) s = layout::bin(c, "Add", s, layout::dim(c, x, axis));
  c.set_output(0, layout::slice(c, x, axis, s, layout::bin(c, "Add", s, len)));
}

}  // namespace

void register_shape(Registry& r) {
  const std::string p = "torch.ops.aten.";
  for (const char* o :
       {"view.default", "reshape.default", "_unsafe_view.default", "view_copy.default"})
    r.add(p + o, view);
  r.add(p + "flatten.using_ints", flatten);
  r.add(p + "unflatten.int", unflatten);
  for (const char* o : {"permute.default", "permute_copy.default"}) r.add(p + o, permute);
  for (const char* o :
       {"transpose.int", "transpose_copy.int", "swapaxes.default", "swapdims.default"})
    r.add(p + o, transpose);
  for (const char* o : {"unsqueeze.default", "unsqueeze_copy.default"}) r.add(p + o, unsqueeze);
  for (const char* o : {"squeeze.default", "squeeze.dim", "squeeze.dims", "squeeze_copy.default",
                        "squeeze_copy.dim", "squeeze_copy.dims"})
    r.add(p + o, squeeze);
  for (const char* o : {"cat.default", "concat.default", "concatenate.default"}) r.add(p + o, cat);
  r.add(p + "stack.default", stack);
  for (const char* o : {"split.Tensor", "unsafe_split.Tensor", "split_copy.Tensor"})
    r.add(p + o, split);
  for (const char* o : {"split_with_sizes.default", "unsafe_split_with_sizes.default",
                        "split_with_sizes_copy.default"})
    r.add(p + o, split_with_sizes);
  for (const char* o : {"chunk.default", "unsafe_chunk.default"}) r.add(p + o, chunk);
  r.add(p + "tensor_split.sections", tensor_split_sections);
  r.add(p + "tensor_split.indices", tensor_split_indices);
  r.add(p + "tensor_split.tensor_indices_or_sections", tensor_split_tensor);
  for (const char* o : {"hsplit.int", "vsplit.int", "dsplit.int"}) r.add(p + o, dir_split_int);
  for (const char* o : {"hsplit.array", "vsplit.array", "dsplit.array"})
    r.add(p + o, dir_split_array);
  for (const char* o : {"unbind.int", "unbind_copy.int"}) r.add(p + o, unbind);
  for (const char* o : {"expand.default", "expand_copy.default", "broadcast_to.default"})
    r.add(p + o, expand);
  r.add(p + "alias_copy.default", identity);
  r.add(p + "t_copy.default", t_copy);
  for (const char* o : {"mT.default", "mH.default", "adjoint.default", "matrix_H.default"})
    r.add(p + o, matrix_t);
  r.add(p + "numpy_T.default", numpy_t);
  for (const char* o : {"movedim.int", "movedim.intlist", "moveaxis.int", "moveaxis.intlist"})
    r.add(p + o, movedim);
  for (const char* o : {"atleast_1d.default", "atleast_1d.Sequence", "atleast_2d.default",
                        "atleast_2d.Sequence", "atleast_3d.default", "atleast_3d.Sequence"})
    r.add(p + o, atleast_nd);
  r.add(p + "hstack.default", hstack);
  r.add(p + "vstack.default", vstack);
  r.add(p + "dstack.default", dstack);
  r.add(p + "column_stack.default", column_stack);
  r.add(p + "ravel.default", ravel);
  for (const char* o : {"reshape_as.default", "view_as.default"}) r.add(p + o, reshape_as);
  r.add(p + "broadcast_tensors.default", broadcast_tensors);
  r.add(p + "sum_to_size.default", sum_to_size);
  r.add(p + "narrow_copy.default", narrow_copy);
  r.add(p + "expand_as.default", expand_as);
}

}  // namespace pt2onnx
