// Type and shape inference for the ONNX ops that converters emit without
// stating an output type. Symbolic dims flow through; anything that cannot be
// derived stays unknown rather than guessed.
#include <algorithm>
#include <functional>
#include <unordered_map>

#include "ir/builder.h"
#include "pt2onnx/error.h"

namespace pt2onnx {

namespace {

using InferFn = std::function<std::vector<ValueType>(const GraphBuilder&, const Node&)>;

const ValueType& in_type(const GraphBuilder& b, const Node& n, size_t i) {
  static const ValueType none;
  if (i >= n.inputs.size() || n.inputs[i].empty() || !b.has_type(n.inputs[i])) return none;
  return b.type(n.inputs[i]);
}

int64_t norm_axis(int64_t a, size_t rank) { return a < 0 ? a + static_cast<int64_t>(rank) : a; }

// Axis `a` of node n's rank-`rank` operand, as an index into its shape. An axis
// outside [-rank, rank) makes the node invalid (a converter's bug, or a crafted
// program's sizes): an error naming the op, not an index past the shape.
size_t checked_axis(const Node& n, int64_t a, size_t rank) {
  int64_t k = norm_axis(a, rank);
  if (k < 0 || k >= static_cast<int64_t>(rank))
    throw Error("internal: " + n.op_type + " axis " + std::to_string(a) +
                " is out of range for rank " + std::to_string(rank));
  return static_cast<size_t>(k);
}

// The length of the 1-D int64 shape input i when its type has it static:
// the rank a Reshape, Expand or ConstantOfShape to a computed shape gives, its
// dims unknown. A length no real rank has (a crafted program's sizes) stays
// unknown rather than becoming a Shape of that many dims.
std::optional<size_t> shape_input_length(const GraphBuilder& b, const Node& n, size_t i) {
  constexpr int64_t kMaxRank = 1024;
  const ValueType& t = in_type(b, n, i);
  if (!t.shape || t.shape->size() != 1 || !(*t.shape)[0].is_static()) return std::nullopt;
  if ((*t.shape)[0].value > kMaxRank) return std::nullopt;
  return static_cast<size_t>((*t.shape)[0].value);
}

std::vector<ValueType> same_as_input(const GraphBuilder& b, const Node& n) {
  return {in_type(b, n, 0)};
}

std::vector<ValueType> broadcast(const GraphBuilder& b, const Node& n, DType out) {
  std::optional<Shape> s = in_type(b, n, 0).shape;
  for (size_t i = 1; i < n.inputs.size(); ++i) s = broadcast_shapes(s, in_type(b, n, i).shape);
  return {ValueType{out, s}};
}

Shape dims_of(const std::vector<int64_t>& v) {
  Shape s;
  for (auto d : v) s.push_back(d < 0 ? Dim::unknown() : Dim::of(d));
  return s;
}

// Target shape of Reshape/Expand/ConstantOfShape when the shape input is a constant.
std::optional<std::vector<int64_t>> shape_input(const GraphBuilder& b, const Node& n, size_t i) {
  if (i >= n.inputs.size()) return std::nullopt;
  return b.const_ints(n.inputs[i]);
}

std::vector<ValueType> infer_reshape(const GraphBuilder& b, const Node& n) {
  const ValueType& x = in_type(b, n, 0);
  auto target = shape_input(b, n, 1);
  if (!target) {
    // A computed shape (a symbolic batch among constants): its length is still
    // the rank, which converters that go on with the value need.
    auto len = shape_input_length(b, n, 1);
    if (!len) return {ValueType{x.dtype, std::nullopt}};
    return {ValueType{x.dtype, Shape(*len, Dim::unknown())}};
  }
  Shape out;
  int minus_one = -1;
  const Attr* az = n.attr("allowzero");
  bool allowzero = az && az->i != 0;
  for (size_t i = 0; i < target->size(); ++i) {
    int64_t v = (*target)[i];
    if (v == 0 && !allowzero) {  // 0 copies the input's dim
      out.push_back(x.shape && i < x.shape->size() ? (*x.shape)[i] : Dim::unknown());
    } else if (v == -1) {
      minus_one = static_cast<int>(i);
      out.push_back(Dim::unknown());
    } else {
      out.push_back(Dim::of(v));
    }
  }
  if (minus_one >= 0 && x.has_static_shape()) {
    int64_t total = 1, known = 1;
    for (auto& d : *x.shape) total *= d.value;
    bool ok = true;
    for (size_t i = 0; i < out.size(); ++i)
      if (static_cast<int>(i) != minus_one) {
        if (!out[i].is_static())
          ok = false;
        else
          known *= out[i].value;
      }
    if (ok && known > 0) out[static_cast<size_t>(minus_one)] = Dim::of(total / known);
  }
  return {ValueType{x.dtype, out}};
}

std::vector<ValueType> infer_unsqueeze(const GraphBuilder& b, const Node& n) {
  const ValueType& x = in_type(b, n, 0);
  auto axes = shape_input(b, n, 1);
  if (!axes || !x.shape) return {ValueType{x.dtype, std::nullopt}};
  size_t r = x.shape->size() + axes->size();
  std::vector<bool> is_new(r, false);
  for (auto a : *axes) {
    // A repeated axis leaves fewer new axes than counted, and the copy below
    // would read past x's shape.
    size_t k = checked_axis(n, a, r);
    if (is_new[k]) throw Error("internal: Unsqueeze axis " + std::to_string(a) + " repeated");
    is_new[k] = true;
  }
  Shape out;
  size_t k = 0;
  for (size_t i = 0; i < r; ++i) out.push_back(is_new[i] ? Dim::of(1) : (*x.shape)[k++]);
  return {ValueType{x.dtype, out}};
}

std::vector<ValueType> infer_squeeze(const GraphBuilder& b, const Node& n) {
  const ValueType& x = in_type(b, n, 0);
  if (!x.shape) return {ValueType{x.dtype, std::nullopt}};
  auto axes = shape_input(b, n, 1);
  Shape out;
  for (size_t i = 0; i < x.shape->size(); ++i) {
    bool drop = false;
    if (axes) {
      for (auto a : *axes) drop |= norm_axis(a, x.shape->size()) == static_cast<int64_t>(i);
    } else {
      if (!(*x.shape)[i].is_static()) return {ValueType{x.dtype, std::nullopt}};
      drop = (*x.shape)[i].value == 1;
    }
    if (!drop) out.push_back((*x.shape)[i]);
  }
  return {ValueType{x.dtype, out}};
}

std::vector<ValueType> infer_transpose(const GraphBuilder& b, const Node& n) {
  const ValueType& x = in_type(b, n, 0);
  if (!x.shape) return {x};
  const Attr* perm = n.attr("perm");
  Shape out;
  if (perm) {
    if (perm->ints.size() != x.shape->size())
      throw Error("internal: Transpose perm of " + std::to_string(perm->ints.size()) +
                  " axes for rank " + std::to_string(x.shape->size()));
    for (auto p : perm->ints) out.push_back((*x.shape)[checked_axis(n, p, x.shape->size())]);
  } else {
    out.assign(x.shape->rbegin(), x.shape->rend());
  }
  return {ValueType{x.dtype, out}};
}

std::vector<ValueType> infer_matmul(const GraphBuilder& b, const Node& n) {
  const ValueType& a = in_type(b, n, 0);
  const ValueType& c = in_type(b, n, 1);
  if (!a.shape || !c.shape || a.shape->empty() || c.shape->empty())
    return {ValueType{a.dtype, std::nullopt}};
  Shape sa = *a.shape, sb = *c.shape;
  bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  if (a1) sa.insert(sa.begin(), Dim::of(1));
  if (b1) sb.push_back(Dim::of(1));
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  auto batch = broadcast_shapes(ba, bb);
  if (!batch) return {ValueType{a.dtype, std::nullopt}};
  Shape out = *batch;
  if (!a1) out.push_back(sa[sa.size() - 2]);
  if (!b1) out.push_back(sb.back());
  return {ValueType{a.dtype, out}};
}

std::vector<ValueType> infer_gemm(const GraphBuilder& b, const Node& n) {
  const ValueType& a = in_type(b, n, 0);
  const ValueType& c = in_type(b, n, 1);
  if (!a.shape || !c.shape) return {ValueType{a.dtype, std::nullopt}};
  if (a.shape->size() != 2 || c.shape->size() != 2)
    throw Error("internal: Gemm of operands of rank " + std::to_string(a.shape->size()) + " and " +
                std::to_string(c.shape->size()) + " (2 expected)");
  const Attr* ta = n.attr("transA");
  const Attr* tb = n.attr("transB");
  Dim m = (*a.shape)[ta && ta->i ? 1 : 0];
  Dim k = (*c.shape)[tb && tb->i ? 0 : 1];
  return {ValueType{a.dtype, Shape{m, k}}};
}

std::vector<ValueType> infer_concat(const GraphBuilder& b, const Node& n) {
  const ValueType& x = in_type(b, n, 0);
  if (!x.shape) return {ValueType{x.dtype, std::nullopt}};
  const Attr* ax = n.attr("axis");
  if (!ax) throw Error("internal: Concat without its axis");
  size_t axis = checked_axis(n, ax->i, x.shape->size());
  Shape out = *x.shape;
  int64_t total = 0;
  bool known = true;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const ValueType& t = in_type(b, n, i);
    // An operand of another rank (invalid, left to the checker) has no dim to add.
    if (!t.shape || t.shape->size() != out.size() || !(*t.shape)[axis].is_static()) {
      known = false;
      break;
    }
    total += (*t.shape)[axis].value;
  }
  out[axis] = known ? Dim::of(total) : Dim::unknown();
  return {ValueType{x.dtype, out}};
}

std::vector<ValueType> infer_gather(const GraphBuilder& b, const Node& n) {
  const ValueType& x = in_type(b, n, 0);
  const ValueType& idx = in_type(b, n, 1);
  if (!x.shape || !idx.shape) return {ValueType{x.dtype, std::nullopt}};
  const Attr* ax = n.attr("axis");
  size_t axis = checked_axis(n, ax ? ax->i : 0, x.shape->size());
  Shape out(x.shape->begin(), x.shape->begin() + static_cast<long>(axis));
  out.insert(out.end(), idx.shape->begin(), idx.shape->end());
  out.insert(out.end(), x.shape->begin() + static_cast<long>(axis) + 1, x.shape->end());
  return {ValueType{x.dtype, out}};
}

std::vector<ValueType> infer_shape(const GraphBuilder& b, const Node& n) {
  const ValueType& x = in_type(b, n, 0);
  if (!x.shape) return {ValueType{DType::Int64, Shape{Dim::unknown()}}};
  int64_t r = static_cast<int64_t>(x.shape->size());
  const Attr* s = n.attr("start");
  const Attr* e = n.attr("end");
  int64_t start = s ? std::clamp(norm_axis(s->i, x.shape->size()), int64_t{0}, r) : 0;
  int64_t end = e ? std::clamp(norm_axis(e->i, x.shape->size()), int64_t{0}, r) : r;
  return {ValueType{DType::Int64, Shape{Dim::of(std::max<int64_t>(0, end - start))}}};
}

std::vector<ValueType> infer_reduce(const GraphBuilder& b, const Node& n) {
  const ValueType& x = in_type(b, n, 0);
  if (!x.shape) return {ValueType{x.dtype, std::nullopt}};
  std::optional<std::vector<int64_t>> axes;
  if (const Attr* a = n.attr("axes"))
    axes = a->ints;
  else if (n.inputs.size() > 1)
    axes = shape_input(b, n, 1);
  else
    axes = std::vector<int64_t>{};
  if (!axes) return {ValueType{x.dtype, std::nullopt}};
  const Attr* kd = n.attr("keepdims");
  bool keep = !kd || kd->i;
  Shape out;
  for (size_t i = 0; i < x.shape->size(); ++i) {
    bool red = axes->empty();
    for (auto a : *axes) red |= norm_axis(a, x.shape->size()) == static_cast<int64_t>(i);
    if (!red)
      out.push_back((*x.shape)[i]);
    else if (keep)
      out.push_back(Dim::of(1));
  }
  return {ValueType{x.dtype, out}};
}

std::vector<ValueType> infer_expand(const GraphBuilder& b, const Node& n) {
  const ValueType& x = in_type(b, n, 0);
  auto target = shape_input(b, n, 1);
  if (target) return {ValueType{x.dtype, broadcast_shapes(x.shape, dims_of(*target))}};
  // A computed shape of known length: the rank is known, and a static dim of
  // x above 1 stays (the target's must be 1 or equal there).
  auto len = shape_input_length(b, n, 1);
  if (!len) return {ValueType{x.dtype, std::nullopt}};
  return {ValueType{x.dtype, broadcast_shapes(x.shape, Shape(*len, Dim::unknown()))}};
}

std::vector<ValueType> infer_slice(const GraphBuilder& b, const Node& n) {
  const ValueType& x = in_type(b, n, 0);
  if (!x.shape) return {x};
  auto starts = shape_input(b, n, 1), ends = shape_input(b, n, 2);
  auto axes = n.inputs.size() > 3 ? shape_input(b, n, 3) : std::nullopt;
  auto steps = n.inputs.size() > 4 ? shape_input(b, n, 4) : std::nullopt;
  Shape out = *x.shape;
  if (!starts || !ends || (n.inputs.size() > 3 && !axes) || (n.inputs.size() > 4 && !steps)) {
    if (!axes) return {ValueType{x.dtype, std::nullopt}};
    for (auto a : *axes) out[checked_axis(n, a, out.size())] = Dim::unknown();
    return {ValueType{x.dtype, out}};
  }
  size_t m = starts->size();
  if (ends->size() != m || (axes && axes->size() != m) || (steps && steps->size() != m))
    throw Error("internal: Slice with starts, ends, axes and steps of different lengths");
  if (!axes && m > out.size())
    throw Error("internal: Slice of " + std::to_string(m) + " axes of a value of rank " +
                std::to_string(out.size()));
  for (size_t i = 0; i < m; ++i) {
    size_t a = axes ? checked_axis(n, (*axes)[i], out.size()) : i;
    int64_t step = steps ? (*steps)[i] : 1;
    Dim& d = out[a];
    if (!d.is_static() || step <= 0) {
      d = Dim::unknown();
      continue;
    }
    auto clampi = [&](int64_t v) {
      if (v < 0) v += d.value;
      return std::clamp<int64_t>(v, 0, d.value);
    };
    int64_t s = clampi((*starts)[i]), e = clampi((*ends)[i]);
    d = Dim::of(e > s ? (e - s + step - 1) / step : 0);
  }
  return {ValueType{x.dtype, out}};
}

std::vector<ValueType> infer_cast(const GraphBuilder& b, const Node& n) {
  const Attr* to = n.attr("to");
  if (!to) throw Error("internal: Cast without its 'to'");
  return {ValueType{static_cast<DType>(to->i), in_type(b, n, 0).shape}};
}

std::vector<ValueType> infer_constant_of_shape(const GraphBuilder& b, const Node& n) {
  const Attr* v = n.attr("value");
  DType t = v && v->t ? v->t->dtype : DType::Float;
  auto target = shape_input(b, n, 0);
  if (!target) {
    auto len = shape_input_length(b, n, 0);
    if (!len) return {ValueType{t, std::nullopt}};
    return {ValueType{t, Shape(*len, Dim::unknown())}};
  }
  return {ValueType{t, dims_of(*target)}};
}

std::vector<ValueType> infer_split(const GraphBuilder& b, const Node& n) {
  const ValueType& x = in_type(b, n, 0);
  auto sizes = shape_input(b, n, 1);
  std::vector<ValueType> out(n.outputs.size(), ValueType{x.dtype, std::nullopt});
  if (!x.shape || !sizes || sizes->size() != n.outputs.size()) return out;
  const Attr* ax = n.attr("axis");
  size_t axis = checked_axis(n, ax ? ax->i : 0, x.shape->size());
  for (size_t k = 0; k < out.size(); ++k) {
    Shape s = *x.shape;
    s[axis] = Dim::of((*sizes)[k]);
    out[k].shape = s;
  }
  return out;
}

const std::unordered_map<std::string, InferFn>& table() {
  static const std::unordered_map<std::string, InferFn> t = [] {
    std::unordered_map<std::string, InferFn> m;
    for (const char* op : {"Relu",
                           "Sigmoid",
                           "Tanh",
                           "Neg",
                           "Sqrt",
                           "Reciprocal",
                           "Exp",
                           "Log",
                           "Cos",
                           "Sin",
                           "Erf",
                           "Abs",
                           "Not",
                           "Identity",
                           "Softmax",
                           "LogSoftmax",
                           "LeakyRelu",
                           "Clip",
                           "Gelu",
                           "Floor",
                           "Ceil",
                           "Round",
                           "LayerNormalization",
                           "BatchNormalization",
                           "Trilu",
                           "HardSigmoid",
                           "Sign"})
      m[op] = same_as_input;
    for (const char* op :
         {"Add", "Sub", "Mul", "Div", "Max", "Min", "Mod", "BitwiseAnd", "BitwiseOr"})
      m[op] = [](const GraphBuilder& b, const Node& n) {
        return broadcast(b, n, in_type(b, n, 0).dtype);
      };
    m["Pow"] = [](const GraphBuilder& b, const Node& n) {
      return broadcast(b, n, in_type(b, n, 0).dtype);
    };
    for (const char* op :
         {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor"})
      m[op] = [](const GraphBuilder& b, const Node& n) { return broadcast(b, n, DType::Bool); };
    m["Where"] = [](const GraphBuilder& b, const Node& n) {
      return broadcast(b, n, in_type(b, n, 1).dtype);
    };
    m["Cast"] = infer_cast;
    m["Reshape"] = infer_reshape;
    m["Unsqueeze"] = infer_unsqueeze;
    m["Squeeze"] = infer_squeeze;
    m["Transpose"] = infer_transpose;
    m["MatMul"] = infer_matmul;
    m["Gemm"] = infer_gemm;
    m["Concat"] = infer_concat;
    m["Gather"] = infer_gather;
    m["Split"] = infer_split;
    m["Shape"] = infer_shape;
    m["Expand"] = infer_expand;
    m["Slice"] = infer_slice;
    m["ConstantOfShape"] = infer_constant_of_shape;
    for (const char* op :
         {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceLogSumExp",
          "ReduceLogSum", "ReduceSumSquare", "ReduceL1", "ReduceL2"})
      m[op] = infer_reduce;
    // Quantized values take the zero point's type (always given here), and
    // dequantized ones the scale's.
    m["QuantizeLinear"] = [](const GraphBuilder& b, const Node& n) {
      return std::vector<ValueType>{ValueType{in_type(b, n, 2).dtype, in_type(b, n, 0).shape}};
    };
    m["DequantizeLinear"] = [](const GraphBuilder& b, const Node& n) {
      return std::vector<ValueType>{ValueType{in_type(b, n, 1).dtype, in_type(b, n, 0).shape}};
    };
    m["Range"] = [](const GraphBuilder& b, const Node& n) {
      return std::vector<ValueType>{ValueType{in_type(b, n, 0).dtype, Shape{Dim::unknown()}}};
    };
    return m;
  }();
  return t;
}

}  // namespace

std::optional<Shape> broadcast_shapes(const std::optional<Shape>& a,
                                      const std::optional<Shape>& b) {
  if (!a || !b) return std::nullopt;
  size_t r = std::max(a->size(), b->size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const Dim* da = i < r - a->size() ? nullptr : &(*a)[i - (r - a->size())];
    const Dim* db = i < r - b->size() ? nullptr : &(*b)[i - (r - b->size())];
    if (!da)
      out[i] = *db;
    else if (!db)
      out[i] = *da;
    else if (da->is_static() && da->value == 1)
      out[i] = *db;
    else if (db->is_static() && db->value == 1)
      out[i] = *da;
    else if (*da == *db)
      out[i] = *da;
    else if (da->is_static())
      out[i] = *da;  // the other must broadcast to it
    else if (db->is_static())
      out[i] = *db;
    else
      out[i] = Dim::unknown();
  }
  return out;
}

std::vector<ValueType> infer_types(const GraphBuilder& b, const Node& n) {
  auto it = table().find(n.op_type);
  if (it == table().end()) return {};
  return it->second(b, n);
}

}  // namespace pt2onnx
