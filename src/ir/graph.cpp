#include "ir/graph.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_set>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "pt2onnx/error.h"

namespace pt2onnx {

bool ValueType::has_static_shape() const {
  if (!shape) return false;
  for (auto& d : *shape)
    if (!d.is_static()) return false;
  return true;
}

std::optional<std::vector<int64_t>> ValueType::static_dims() const {
  if (!has_static_shape()) return std::nullopt;
  std::vector<int64_t> r;
  r.reserve(shape->size());
  for (auto& d : *shape) r.push_back(d.value);
  return r;
}

std::optional<double> element_as_double(const TensorData& d, size_t k) {
  const uint8_t* p = d.bytes();
  auto get = [&](auto x) {
    std::memcpy(&x, p + k * sizeof x, sizeof x);
    return static_cast<double>(x);
  };
  switch (d.dtype) {
    case DType::Float:
      return get(float{});
    case DType::Double:
      return get(double{});
    case DType::Float16:
    case DType::BFloat16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * k, 2);
      return d.dtype == DType::Float16 ? half_to_float(h) : bfloat16_to_float(h);
    }
    case DType::Int64:
      return get(int64_t{});
    case DType::Int32:
      return get(int32_t{});
    case DType::Int16:
      return get(int16_t{});
    case DType::UInt16:
      return get(uint16_t{});
    case DType::Int8:
      return get(int8_t{});
    case DType::UInt8:
    case DType::Bool:
      return get(uint8_t{});
    default:
      return std::nullopt;
  }
}

std::optional<std::vector<double>> to_doubles(const TensorData& d) {
  TensorData c = d;
  if (!d.is_contiguous()) {
    c = TensorData::from_bytes(d.dtype, d.dims, d.contiguous_copy());
  }
  std::vector<double> v(static_cast<size_t>(c.numel()));
  for (size_t k = 0; k < v.size(); ++k) {
    auto x = element_as_double(c, k);
    if (!x) return std::nullopt;
    v[k] = *x;
  }
  return v;
}

std::optional<uint64_t> strided_span_bytes(const std::vector<int64_t>& sizes,
                                           const std::vector<int64_t>& strides, size_t elem_size) {
  if (!strides.empty() && strides.size() != sizes.size()) return std::nullopt;
  uint64_t numel = 1, last = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0) return std::nullopt;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(sizes[i]), &numel)) return std::nullopt;
  }
  if (numel == 0) return 0;
  if (strides.empty()) {
    last = numel - 1;
  } else {
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (strides[i] < 0) return std::nullopt;
      uint64_t term;
      if (__builtin_mul_overflow(static_cast<uint64_t>(sizes[i] - 1),
                                 static_cast<uint64_t>(strides[i]), &term) ||
          __builtin_add_overflow(last, term, &last))
        return std::nullopt;
    }
  }
  uint64_t bytes;
  if (__builtin_add_overflow(last, uint64_t{1}, &last) ||
      __builtin_mul_overflow(last, static_cast<uint64_t>(elem_size), &bytes))
    return std::nullopt;
  return bytes;
}

int64_t TensorData::numel() const {
  int64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

bool TensorData::is_contiguous() const {
  if (strides.empty()) return true;
  int64_t expect = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    if (dims[i] != 1 && strides[i] != expect) return false;
    expect *= dims[i];
  }
  return true;
}

namespace {

template <size_t N>
struct Elem {
  unsigned char b[N];
};

#if defined(__SSE2__)
// out rows r..r+8, columns c..c+8 from an 8x8 block of 2-byte elements whose
// rows are contiguous in the source along the output's rows (a transposed
// weight: src[(c + b) * s1 + r + a] -> out[(r + a) * cols + c + b]), with
// SSE2's 16-bit unpacks: 8 loads, 24 unpacks, 8 stores instead of 64 scalar
// moves.
inline void transpose8x8_16(const uint8_t* src, int64_t src_row_bytes, uint8_t* out,
                            int64_t out_row_bytes) {
  __m128i r[8];
  for (int b = 0; b < 8; ++b)
    r[b] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + b * src_row_bytes));
  __m128i t[8], u[8];
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm_unpacklo_epi16(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm_unpackhi_epi16(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 2; ++k) {
    u[4 * k] = _mm_unpacklo_epi32(t[4 * k], t[4 * k + 2]);
    u[4 * k + 1] = _mm_unpackhi_epi32(t[4 * k], t[4 * k + 2]);
    u[4 * k + 2] = _mm_unpacklo_epi32(t[4 * k + 1], t[4 * k + 3]);
    u[4 * k + 3] = _mm_unpackhi_epi32(t[4 * k + 1], t[4 * k + 3]);
  }
  // u[0..3]: columns (0,1), (2,3), (4,5), (6,7) of rows 0-3; u[4..7] of rows 4-7.
  for (int k = 0; k < 4; ++k) {
    __m128i lo = _mm_unpacklo_epi64(u[k], u[k + 4]);
    __m128i hi = _mm_unpackhi_epi64(u[k], u[k + 4]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (2 * k) * out_row_bytes), lo);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (2 * k + 1) * out_row_bytes), hi);
  }
}

// The same for 4x4 blocks of 4-byte elements (SSE's 4x4 float transpose).
inline void transpose4x4_32(const uint8_t* src, int64_t src_row_bytes, uint8_t* out,
                            int64_t out_row_bytes) {
  __m128 r0 = _mm_loadu_ps(reinterpret_cast<const float*>(src));
  __m128 r1 = _mm_loadu_ps(reinterpret_cast<const float*>(src + src_row_bytes));
  __m128 r2 = _mm_loadu_ps(reinterpret_cast<const float*>(src + 2 * src_row_bytes));
  __m128 r3 = _mm_loadu_ps(reinterpret_cast<const float*>(src + 3 * src_row_bytes));
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_ps(reinterpret_cast<float*>(out), r0);
  _mm_storeu_ps(reinterpret_cast<float*>(out + out_row_bytes), r1);
  _mm_storeu_ps(reinterpret_cast<float*>(out + 2 * out_row_bytes), r2);
  _mm_storeu_ps(reinterpret_cast<float*>(out + 3 * out_row_bytes), r3);
}
#endif

// One kTile x kTile block (rows [i0, i1), columns [j0, j1)) of a rank-2
// strided copy whose last stride is not 1.
template <typename E>
void gather_block(const E* src, E* out, int64_t cols, int64_t s0, int64_t s1, int64_t i0,
                  int64_t i1, int64_t j0, int64_t j1) {
  int64_t jv = j0, iv = i0;  // where the vector blocks end
#if defined(__SSE2__)
  constexpr int64_t B = sizeof(E) == 2 ? 8 : sizeof(E) == 4 ? 4 : 0;
  if constexpr (B > 0) {
    if (s0 == 1) {  // a transposed layout: the source rows run along the output rows
      iv = i0 + (i1 - i0) / B * B;
      jv = j0 + (j1 - j0) / B * B;
      for (int64_t i = i0; i < iv; i += B)
        for (int64_t j = j0; j < jv; j += B) {
          const auto* from = reinterpret_cast<const uint8_t*>(src + i + j * s1);
          auto* to = reinterpret_cast<uint8_t*>(out + i * cols + j);
          const int64_t sb = s1 * static_cast<int64_t>(sizeof(E));
          const int64_t ob = cols * static_cast<int64_t>(sizeof(E));
          if constexpr (B == 8)
            transpose8x8_16(from, sb, to, ob);
          else
            transpose4x4_32(from, sb, to, ob);
        }
    }
  }
#endif
  // What the vector blocks left: the right columns of the vector rows, then
  // the bottom rows (all when there are none).
  for (int64_t i = i0; i < iv; ++i)
    for (int64_t j = jv; j < j1; ++j) out[i * cols + j] = src[i * s0 + j * s1];
  for (int64_t j = j0; j < j1; ++j)
    for (int64_t i = iv; i < i1; ++i) out[i * cols + j] = src[i * s0 + j * s1];
}

// out[...] = src[strided ...] over dims/strides (elements), row-major out.
// The last two dims go in kTile x kTile blocks when the last one is not
// unit-stride (a transposed weight): a block's source lines and output lines
// (kTile of each) stay in L1 while it is copied, so each line is loaded once
// and few pages are touched at a time (a row-at-a-time sweep of a column
// touches every source row's page for each output row).
template <typename E>
void gather(const E* src, E* out, const int64_t* dims, const int64_t* strides, size_t rank) {
  constexpr int64_t kTile = 64;
  if (rank == 0) {
    *out = *src;
  } else if (rank == 1) {
    for (int64_t j = 0; j < dims[0]; ++j) out[j] = src[j * strides[0]];
  } else if (rank == 2) {
    const int64_t rows = dims[0], cols = dims[1], s0 = strides[0], s1 = strides[1];
    if (s1 == 1) {
      for (int64_t i = 0; i < rows; ++i)
        std::memcpy(out + i * cols, src + i * s0, cols * sizeof(E));
      return;
    }
    for (int64_t i0 = 0; i0 < rows; i0 += kTile) {
      const int64_t i1 = std::min(rows, i0 + kTile);
      for (int64_t j0 = 0; j0 < cols; j0 += kTile)
        gather_block(src, out, cols, s0, s1, i0, i1, j0, std::min(cols, j0 + kTile));
    }
  } else {
    int64_t inner = 1;
    for (size_t d = 1; d < rank; ++d) inner *= dims[d];
    for (int64_t k = 0; k < dims[0]; ++k)
      gather(src + k * strides[0], out + k * inner, dims + 1, strides + 1, rank - 1);
  }
}

}  // namespace

namespace {

void copy_rows_of(const uint8_t* base, size_t es, const std::vector<int64_t>& dims,
                  const std::vector<int64_t>& strides, bool contiguous, int64_t r0, int64_t r1,
                  uint8_t* out);

}  // namespace

void TensorData::copy_rows(int64_t r0, int64_t r1, uint8_t* out) const {
  const uint8_t* base = bytes();
  copy_rows_of(base, dtype_size(dtype), dims, strides, is_contiguous(), r0, r1, out);
}

void TensorData::copy_stored_rows(int64_t r0, int64_t r1, uint8_t* out) const {
  copy_rows_of(data, dtype_size(stored_type()), dims, strides, is_contiguous(), r0, r1, out);
}

void TensorData::finish_rows(const uint8_t* in, int64_t r0, int64_t r1, uint8_t* out) const {
  const int64_t rows = dims.empty() ? 1 : dims[0];
  const size_t n = rows ? static_cast<size_t>(numel() / rows * (r1 - r0)) : 0;
  if (stored != DType::Undefined)
    convert_floats(in, stored, out, dtype, n);
  else
    std::memcpy(out, in, n * dtype_size(dtype));
  if (scale) scale->apply(dtype, dims, r0, r1, out);
}

void TensorData::materialize() const {
  // The whole span the strides reach, converted in place of the stored
  // bytes: strides (in elements) stay valid. (A scaled tensor is contiguous.)
  const DType from = stored_type();
  auto span = strided_span_bytes(dims, strides, dtype_size(from));
  const size_t n = span ? *span / dtype_size(from) : 0;
  auto out = std::make_shared<std::vector<uint8_t>>(n * dtype_size(dtype));
  if (scale)
    finish_rows(data, 0, dims.empty() ? 1 : dims[0], out->data());
  else
    convert_floats(data, stored, out->data(), dtype, n);
  owned = std::move(out);
}

void ChannelScale::apply(DType t, const std::vector<int64_t>& dims, int64_t r0, int64_t r1,
                         uint8_t* rows) const {
  if (dims.size() < 2) return;
  size_t inner = 1;  // elements per (row, column) block
  for (size_t d = 2; d < dims.size(); ++d) inner *= static_cast<size_t>(dims[d]);
  const auto cols = static_cast<size_t>(dims[1]);
  const auto group_rows = static_cast<size_t>(rows_per_group);
  auto each = [&](auto* p, auto scale_one) {
    if (!group_rows) {  // one factor per row: the row's elements in one (vectorized) loop
      const size_t row = cols * inner;
      for (auto r = static_cast<size_t>(r0); r < static_cast<size_t>(r1); ++r) {
        const double f = factor[r];
        auto* q = p + (r - static_cast<size_t>(r0)) * row;
        for (size_t i = 0; i < row; ++i) q[i] = scale_one(q[i], f);
      }
      return;
    }
    for (auto r = static_cast<size_t>(r0); r < static_cast<size_t>(r1); ++r)
      for (size_t c = 0; c < cols; ++c) {
        const double f = group_rows ? factor[(r / group_rows) * cols + c] : factor[r];
        auto* q = p + ((r - static_cast<size_t>(r0)) * cols + c) * inner;
        for (size_t i = 0; i < inner; ++i) q[i] = scale_one(q[i], f);
      }
  };
  if (t == DType::Float)
    each(reinterpret_cast<float*>(rows),
         [](float x, double f) { return static_cast<float>(x * f); });
  else if (t == DType::Double)
    each(reinterpret_cast<double*>(rows), [](double x, double f) { return x * f; });
  else if (t == DType::Float16)
    each(reinterpret_cast<uint16_t*>(rows), [](uint16_t h, double f) {
      return float_to_half(static_cast<float>(static_cast<double>(half_to_float(h)) * f));
    });
  else
    throw Error(std::string("cannot scale a tensor of type ") + std::string(dtype_name(t)));
}

namespace {

void copy_rows_of(const uint8_t* base, size_t es, const std::vector<int64_t>& dims,
                  const std::vector<int64_t>& strides, bool contiguous, int64_t r0, int64_t r1,
                  uint8_t* out) {
  if (dims.empty()) {
    std::memcpy(out, base, es);
    return;
  }
  int64_t row = 1;
  for (size_t d = 1; d < dims.size(); ++d) row *= dims[d];
  if (contiguous) {
    std::memcpy(out, base + static_cast<size_t>(r0 * row) * es,
                static_cast<size_t>((r1 - r0) * row) * es);
    return;
  }
  std::vector<int64_t> d = dims;
  d[0] = r1 - r0;
  const uint8_t* src = base + static_cast<size_t>(r0 * strides[0]) * es;
  auto run = [&](auto tag) {
    using E = decltype(tag);
    gather(reinterpret_cast<const E*>(src), reinterpret_cast<E*>(out), d.data(), strides.data(),
           d.size());
  };
  switch (es) {
    case 1:
      return run(Elem<1>{});
    case 2:
      return run(Elem<2>{});
    case 4:
      return run(Elem<4>{});
    case 8:
      return run(Elem<8>{});
    case 16:
      return run(Elem<16>{});
    default:
      throw Error("internal: cannot copy elements of " + std::to_string(es) + " bytes");
  }
}

}  // namespace

std::vector<uint8_t> TensorData::contiguous_copy() const {
  std::vector<uint8_t> out(nbytes());
  if (out.empty()) return out;
  copy_rows(0, dims.empty() ? 1 : dims[0], out.data());
  return out;
}

TensorData TensorData::from_bytes(DType t, std::vector<int64_t> dims, std::vector<uint8_t> b) {
  TensorData d;
  d.dtype = t;
  d.dims = std::move(dims);
  d.owned = std::make_shared<const std::vector<uint8_t>>(std::move(b));
  return d;
}

std::optional<TensorData> TensorData::scalar(DType t, double v, std::vector<int64_t> dims) {
  std::vector<uint8_t> b(dtype_size(t));
  auto put = [&](auto x) { std::memcpy(b.data(), &x, sizeof x); };
  switch (t) {
    case DType::Float:
      put(static_cast<float>(v));
      break;
    case DType::Double:
      put(v);
      break;
    case DType::Int64:
      put(static_cast<int64_t>(v));
      break;
    case DType::Int32:
      put(static_cast<int32_t>(v));
      break;
    case DType::Int16:
      put(static_cast<int16_t>(v));
      break;
    case DType::Int8:
      put(static_cast<int8_t>(v));
      break;
    case DType::UInt8:
      put(static_cast<uint8_t>(v));
      break;
    case DType::Bool:
      put(static_cast<uint8_t>(v != 0));
      break;
    default:
      return std::nullopt;
  }
  return from_bytes(t, std::move(dims), std::move(b));
}

Attr Attr::Int(std::string n, int64_t v) {
  Attr a;
  a.name = std::move(n);
  a.kind = Kind::Int;
  a.i = v;
  return a;
}
Attr Attr::Float(std::string n, float v) {
  Attr a;
  a.name = std::move(n);
  a.kind = Kind::Float;
  a.f = v;
  return a;
}
Attr Attr::Str(std::string n, std::string v) {
  Attr a;
  a.name = std::move(n);
  a.kind = Kind::String;
  a.s = std::move(v);
  return a;
}
Attr Attr::Ints(std::string n, std::vector<int64_t> v) {
  Attr a;
  a.name = std::move(n);
  a.kind = Kind::Ints;
  a.ints = std::move(v);
  return a;
}
Attr Attr::Floats(std::string n, std::vector<float> v) {
  Attr a;
  a.name = std::move(n);
  a.kind = Kind::Floats;
  a.floats = std::move(v);
  return a;
}
Attr Attr::Tensor(std::string n, TensorData v) {
  Attr a;
  a.name = std::move(n);
  a.kind = Kind::Tensor;
  a.t = std::make_shared<TensorData>(std::move(v));
  return a;
}

Attr Attr::Subgraph(std::string n, Graph v) {
  Attr a;
  a.name = std::move(n);
  a.kind = Kind::Graph;
  a.g = std::make_shared<Graph>(std::move(v));
  return a;
}

bool Attr::operator==(const Attr& o) const {
  if (name != o.name || kind != o.kind || ref != o.ref) return false;
  if (!ref.empty()) return true;
  switch (kind) {
    case Kind::Float:
      return std::memcmp(&f, &o.f, sizeof f) == 0;
    case Kind::Int:
      return i == o.i;
    case Kind::String:
      return s == o.s;
    case Kind::Floats:
      return floats == o.floats;
    case Kind::Ints:
      return ints == o.ints;
    case Kind::Strings:
      return strings == o.strings;
    case Kind::Graph:
      return g == o.g;  // the same graph object; graphs are never compared by content
    case Kind::Tensor:
      return t->dtype == o.t->dtype && t->dims == o.t->dims && t->nbytes() == o.t->nbytes() &&
             t->is_contiguous() && o.t->is_contiguous() &&
             std::memcmp(t->bytes(), o.t->bytes(), t->nbytes()) == 0;
  }
  return false;
}

Origin& Node::edit_origin() {
  // A copy of its own (the nodes sharing the old one keep it as it was).
  auto own = std::make_shared<Origin>(origin ? *origin : Origin{});
  Origin& o = *own;
  origin = std::move(own);
  return o;
}

const std::string& Node::no_text() {
  static const std::string empty;
  return empty;
}

const std::shared_ptr<const std::string>& Node::no_stack() {
  static const std::shared_ptr<const std::string> none;
  return none;
}

const Attr* Node::attr(std::string_view n) const {
  for (auto& a : attrs)
    if (a.name == n) return &a;
  return nullptr;
}

bool Node::has_subgraphs() const {
  for (auto& a : attrs)
    if (a.kind == Attr::Kind::Graph) return true;
  return false;
}

std::vector<Graph*> subgraphs(Node& n) {
  std::vector<Graph*> r;
  for (auto& a : n.attrs)
    if (a.kind == Attr::Kind::Graph && a.g) r.push_back(a.g.get());
  return r;
}

std::vector<const Graph*> subgraphs(const Node& n) {
  std::vector<const Graph*> r;
  for (auto& a : n.attrs)
    if (a.kind == Attr::Kind::Graph && a.g) r.push_back(a.g.get());
  return r;
}

namespace {

void collect_outer_reads(const Graph& g, std::vector<std::string>& out,
                         std::unordered_set<std::string>& seen) {
  std::unordered_set<std::string> defined;
  for (auto& i : g.inputs) defined.insert(i.name);
  for (auto& i : g.initializers) defined.insert(i.name);
  for (auto& n : g.nodes)
    for (auto& o : n.outputs) defined.insert(o);
  auto read = [&](const std::string& v) {
    if (!v.empty() && !defined.count(v) && seen.insert(v).second) out.push_back(v);
  };
  for (auto& n : g.nodes) {
    for (auto& in : n.inputs) read(in);
    for (const Graph* s : subgraphs(n)) {
      std::vector<std::string> inner;
      std::unordered_set<std::string> inner_seen;
      collect_outer_reads(*s, inner, inner_seen);
      for (auto& v : inner) read(v);
    }
  }
  for (auto& o : g.outputs) read(o.name);
}

}  // namespace

ValueType static_type(DType t, const std::vector<int64_t>& dims) {
  Shape s;
  for (auto d : dims) s.push_back(Dim::of(d));
  return ValueType{t, std::move(s)};
}

FreshNames::FreshNames(const Graph& g) {
  used_.reserve(g.inputs.size() + g.initializers.size() + g.types.size());
  collect(g);
}

void FreshNames::collect(const Graph& g) {
  for (auto& i : g.inputs) used_.insert(i.name);
  for (auto& i : g.initializers) used_.insert(i.name);
  for (auto& [name, t] : g.types) used_.insert(name);
  for (auto& n : g.nodes) {
    for (auto& o : n.outputs) used_.insert(o);
    for (const Graph* s : subgraphs(n)) collect(*s);
  }
}

FreshNames FreshNames::few(const Graph& g) {
  FreshNames f;
  f.unread_ = &g;
  return f;
}

namespace {

// Whether `g` or a graph nested in it has a value named `v`: what
// FreshNames::collect would have collected.
bool has_value(const Graph& g, const std::string& v) {
  if (g.types.count(v)) return true;
  for (auto& i : g.inputs)
    if (i.name == v) return true;
  for (auto& i : g.initializers)
    if (i.name == v) return true;
  for (auto& n : g.nodes) {
    for (auto& o : n.outputs)
      if (o == v) return true;
    for (const Graph* s : subgraphs(n))
      if (has_value(*s, v)) return true;
  }
  return false;
}

}  // namespace

bool FreshNames::taken(const std::string& name) {
  if (used_.contains(name)) return true;
  if (!unread_) return false;
  constexpr int kWalks = 8;  // names checked by a walk before collecting
  if (walks_ < kWalks) {
    ++walks_;
    return has_value(*unread_, name);
  }
  used_.reserve(unread_->initializers.size() + unread_->types.size());
  collect(*unread_);
  unread_ = nullptr;
  return used_.contains(name);
}

std::string FreshNames::operator()(const std::string& base) {
  std::string n = base;
  for (int k = 1; taken(n); ++k) n = base + "_" + std::to_string(k);
  used_.insert(n);
  return n;
}

std::vector<std::string> outer_reads(const Graph& g) {
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  collect_outer_reads(g, out, seen);
  return out;
}

namespace {

// Calls `f` on every value name node `n` reads: its inputs and, deeply, the
// inputs and outputs of the graphs nested in it (one walk for any rename).
template <typename F>
void for_each_read(Node& n, F&& f) {
  for (auto& in : n.inputs) f(in);
  for (Graph* s : subgraphs(n)) {
    for (auto& m : s->nodes) for_each_read(m, f);
    for (auto& o : s->outputs) f(o.name);
  }
}

}  // namespace

void replace_uses_in_node(Node& n, const std::string& from, const std::string& to) {
  for_each_read(n, [&](std::string& v) {
    if (v == from) v = to;
  });
}

void rename_uses_in_node(Node& n, const std::unordered_map<std::string, std::string>& renames) {
  if (renames.empty()) return;
  for_each_read(n, [&](std::string& v) {
    auto it = renames.find(v);
    if (it != renames.end()) v = it->second;
  });
}

void replace_uses_deep(Graph& g, const std::string& from, const std::string& to) {
  for (auto& n : g.nodes) replace_uses_in_node(n, from, to);
}

const ValueType* Graph::type_of(const std::string& v) const { return types.get(v); }

}  // namespace pt2onnx
