#include "onnx/model_reader.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>

#include "pt2onnx/error.h"

namespace pt2onnx {

static_assert(std::endian::native == std::endian::little,
              "ONNX raw_data is little-endian; this reader views it in place");

namespace {

constexpr int kMaxDepth = 64;  // nested graphs, types and groups

struct Seg {
  const char* name;
  int64_t index;  // -1: not a repeated field
};

// The file's name, the field path being read (for messages) and the side tables.
class Ctx {
 public:
  Ctx(const std::string& source, ReadModel* m) : model(m), source_(source) {}
  [[noreturn]] void fail(std::string_view what) const {
    std::string p;
    for (auto& s : path_) {
      if (!p.empty()) p += '.';
      p += s.name;
      if (s.index >= 0) p += "[" + std::to_string(s.index) + "]";
    }
    throw Error(source_ + ": " + (p.empty() ? "" : p + ": ") + std::string(what));
  }
  [[noreturn]] void fail_at(const char* field, std::string_view what) {
    path_.push_back({field, -1});
    fail(what);
  }
  void push(const char* name, int64_t index) { path_.push_back({name, index}); }
  void pop() { path_.pop_back(); }

  ReadModel* model;  // null when reading a lone FunctionProto
  int depth = 0;

 private:
  const std::string& source_;
  std::vector<Seg> path_;
};

// Enters a field of the path for the duration of a scope.
class Scope {
 public:
  Scope(Ctx& c, const char* name, int64_t index = -1) : c_(c) { c_.push(name, index); }
  ~Scope() { c_.pop(); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Ctx& c_;
};

// One level deeper (nested graphs, types): bounded, so hostile nesting cannot
// exhaust the stack.
class Deeper {
 public:
  explicit Deeper(Ctx& c) : c_(c) {
    if (++c_.depth > kMaxDepth)
      c_.fail("nested deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  ~Deeper() { --c_.depth; }
  Deeper(const Deeper&) = delete;
  Deeper& operator=(const Deeper&) = delete;

 private:
  Ctx& c_;
};

enum Wire : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLen = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5
};

struct Field {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t v = 0;          // varint, fixed64 or fixed32 value
  std::string_view bytes;  // length-delimited payload (a view on the input)
};

// Reads the fields of one message; every read is checked against its end.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : p_(s.data()), end_(s.data() + s.size()) {}
  bool done() const { return p_ == end_; }
  size_t left() const { return static_cast<size_t>(end_ - p_); }

  uint64_t varint(Ctx& c) {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (p_ == end_) c.fail("truncated: a varint runs past the end");
      uint8_t b = static_cast<uint8_t>(*p_++);
      if (shift == 63 && b > 1) c.fail("malformed varint (longer than 64 bits)");
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  }

  // The next field; false at the end of the message. Groups (deprecated,
  // unused by ONNX) are skipped whole.
  bool next(Ctx& c, Field& f) {
    while (!done()) {
      uint64_t tag = varint(c);
      f.number = static_cast<uint32_t>(tag >> 3);
      f.wire = static_cast<uint32_t>(tag & 7);
      if ((tag >> 3) == 0 || (tag >> 3) > 0x1fffffff)
        c.fail("invalid field number " + std::to_string(tag >> 3));
      if (f.wire == kStartGroup) {
        skip_group(c, f.number, 1);
        continue;
      }
      read_value(c, f);
      return true;
    }
    return false;
  }

 private:
  std::string_view take(Ctx& c, uint64_t n, uint32_t field) {
    if (n > left())
      c.fail("truncated: field " + std::to_string(field) + " claims " + std::to_string(n) +
             " bytes, " + std::to_string(left()) + " left");
    std::string_view s(p_, static_cast<size_t>(n));
    p_ += n;
    return s;
  }
  void read_value(Ctx& c, Field& f) {
    switch (f.wire) {
      case kVarint:
        f.v = varint(c);
        return;
      case kFixed64: {
        auto s = take(c, 8, f.number);
        std::memcpy(&f.v, s.data(), 8);
        return;
      }
      case kFixed32: {
        auto s = take(c, 4, f.number);
        uint32_t u;
        std::memcpy(&u, s.data(), 4);
        f.v = u;
        return;
      }
      case kLen:
        f.bytes = take(c, varint(c), f.number);
        return;
      case kEndGroup:
        c.fail("end-group tag of field " + std::to_string(f.number) + " without its start");
      default:
        c.fail("invalid wire type " + std::to_string(f.wire) + " (field " +
               std::to_string(f.number) + ")");
    }
  }
  void skip_group(Ctx& c, uint32_t number, int depth) {
    if (depth > kMaxDepth) c.fail("groups nested too deep");
    while (true) {
      if (done()) c.fail("truncated: group field " + std::to_string(number) + " is not closed");
      uint64_t tag = varint(c);
      Field f;
      f.number = static_cast<uint32_t>(tag >> 3);
      f.wire = static_cast<uint32_t>(tag & 7);
      if (f.wire == kEndGroup) {
        if (f.number != number)
          c.fail("group field " + std::to_string(number) + " closed as field " +
                 std::to_string(f.number));
        return;
      }
      if (f.wire == kStartGroup)
        skip_group(c, f.number, depth + 1);
      else
        read_value(c, f);
    }
  }
  const char* p_;
  const char* end_;
};

const char* wire_name(uint32_t w) {
  switch (w) {
    case kVarint:
      return "varint";
    case kFixed64:
      return "fixed64";
    case kLen:
      return "length-delimited";
    case kFixed32:
      return "fixed32";
  }
  return "group";
}

[[noreturn]] void wrong_wire(Ctx& c, const Field& f, const char* name, const char* expected) {
  c.fail_at(name, std::string("wire type ") + wire_name(f.wire) + ", expected " + expected);
}

std::string_view len_of(Ctx& c, const Field& f, const char* name) {
  if (f.wire != kLen) wrong_wire(c, f, name, "length-delimited");
  return f.bytes;
}
std::string str_of(Ctx& c, const Field& f, const char* name) {
  return std::string(len_of(c, f, name));
}
int64_t int_of(Ctx& c, const Field& f, const char* name) {
  if (f.wire != kVarint) wrong_wire(c, f, name, "varint");
  return static_cast<int64_t>(f.v);
}
float float_of(Ctx& c, const Field& f, const char* name) {
  if (f.wire != kFixed32) wrong_wire(c, f, name, "fixed32");
  uint32_t u = static_cast<uint32_t>(f.v);
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Repeated scalars: packed (one length-delimited run) or one field per value.
void varints_into(Ctx& c, const Field& f, const char* name, std::vector<int64_t>& out) {
  if (f.wire == kVarint) {
    out.push_back(static_cast<int64_t>(f.v));
  } else if (f.wire == kLen) {
    Scope s(c, name);
    Cursor in(f.bytes);
    while (!in.done()) out.push_back(static_cast<int64_t>(in.varint(c)));
  } else {
    wrong_wire(c, f, name, "varint or packed");
  }
}
template <typename T, uint32_t kWire>
void fixed_into(Ctx& c, const Field& f, const char* name, std::vector<T>& out) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  if (f.wire == kWire) {
    if constexpr (sizeof(T) == 4) {
      uint32_t u = static_cast<uint32_t>(f.v);
      T x;
      std::memcpy(&x, &u, 4);
      out.push_back(x);
    } else {
      T x;
      std::memcpy(&x, &f.v, 8);
      out.push_back(x);
    }
  } else if (f.wire == kLen) {
    if (f.bytes.size() % sizeof(T))
      c.fail_at(name, "packed run of " + std::to_string(f.bytes.size()) +
                          " bytes is not a multiple of " + std::to_string(sizeof(T)));
    size_t n = f.bytes.size() / sizeof(T);
    size_t at = out.size();
    out.resize(at + n);
    if (n) std::memcpy(out.data() + at, f.bytes.data(), n * sizeof(T));
  } else {
    wrong_wire(c, f, name, sizeof(T) == 4 ? "fixed32 or packed" : "fixed64 or packed");
  }
}

std::pair<std::string, std::string> string_entry(Ctx& c, std::string_view bytes) {
  std::pair<std::string, std::string> kv;
  Cursor in(bytes);
  Field f;
  while (in.next(c, f)) {
    if (f.number == 1)
      kv.first = str_of(c, f, "key");
    else if (f.number == 2)
      kv.second = str_of(c, f, "value");
  }
  return kv;
}

std::pair<std::string, int64_t> opset_entry(Ctx& c, std::string_view bytes) {
  std::pair<std::string, int64_t> dv{"", 0};
  Cursor in(bytes);
  Field f;
  while (in.next(c, f)) {
    if (f.number == 1)
      dv.first = str_of(c, f, "domain");
    else if (f.number == 2)
      dv.second = int_of(c, f, "version");
  }
  if (dv.first == "ai.onnx") dv.first.clear();
  return dv;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// The low `size` bytes of each value, little-endian (int32_data holds
// float16 / bfloat16 / 8-bit values widened to int32; uint64_data uint32).
template <typename T>
void narrow_into(const std::vector<T>& v, size_t size, std::vector<uint8_t>& out) {
  out.resize(v.size() * size);
  for (size_t i = 0; i < v.size(); ++i) std::memcpy(out.data() + i * size, &v[i], size);
}

struct ParsedTensor {
  std::string name;
  TensorData data;
  std::optional<ExternalRef> external;
};

ParsedTensor parse_tensor(Ctx& c, std::string_view bytes) {
  ParsedTensor t;
  int64_t data_type = 0, data_location = 0;
  std::optional<std::string_view> raw;
  std::vector<float> floats;
  std::vector<double> doubles;
  std::vector<int64_t> i32, i64, u64;
  size_t strings = 0;
  std::vector<std::pair<std::string, std::string>> ext;
  Cursor in(bytes);
  Field f;
  while (in.next(c, f)) {
    switch (f.number) {
      case 1:
        varints_into(c, f, "dims", t.data.dims);
        break;
      case 2:
        data_type = int_of(c, f, "data_type");
        break;
      case 4:
        fixed_into<float, kFixed32>(c, f, "float_data", floats);
        break;
      case 5:
        varints_into(c, f, "int32_data", i32);
        break;
      case 6:
        len_of(c, f, "string_data");
        ++strings;
        break;
      case 7:
        varints_into(c, f, "int64_data", i64);
        break;
      case 8:
        t.name = str_of(c, f, "name");
        break;
      case 9:
        raw = len_of(c, f, "raw_data");
        break;
      case 10:
        fixed_into<double, kFixed64>(c, f, "double_data", doubles);
        break;
      case 11:
        varints_into(c, f, "uint64_data", u64);
        break;
      case 13: {
        Scope s(c, "external_data", static_cast<int64_t>(ext.size()));
        ext.push_back(string_entry(c, len_of(c, f, "external_data")));
        break;
      }
      case 14:
        data_location = int_of(c, f, "data_location");
        break;
      default:
        break;
    }
  }
  const std::string who = "tensor '" + t.name + "'";
  t.data.dtype = static_cast<DType>(static_cast<int32_t>(data_type));
  uint64_t numel = 1;
  for (auto d : t.data.dims)
    if (d < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel))
      c.fail(who + ": invalid dims " + dims_text(t.data.dims));
  const size_t esize = dtype_size(t.data.dtype);
  uint64_t nbytes = 0;
  if (numel > (uint64_t{1} << 62) ||  // TensorData::numel() is an int64 product
      __builtin_mul_overflow(numel, static_cast<uint64_t>(esize), &nbytes) ||
      nbytes > (uint64_t{1} << 62))
    c.fail(who + ": dims " + dims_text(t.data.dims) + " overflow");
  std::string type_text = std::string(dtype_name(t.data.dtype)) + dims_text(t.data.dims);

  if (data_location == 1) {  // EXTERNAL
    ExternalRef r;
    bool has_location = false;
    for (auto& [k, v] : ext) {
      if (k == "location") {
        r.location = v;
        has_location = true;
      } else if (k == "offset" || k == "length") {
        auto n = parse_u64(v);
        if (!n) c.fail(who + ": external data " + k + " '" + v + "' is not a number");
        if (k == "offset")
          r.offset = *n;
        else
          r.length = *n;
      } else if (k == "checksum") {
        r.checksum = v;
      }
    }
    if (!has_location) c.fail(who + ": external data without a location");
    if (r.length && esize && *r.length != nbytes)
      c.fail(who + ": external data length " + std::to_string(*r.length) + ", " + type_text +
             " needs " + std::to_string(nbytes));
    t.external = std::move(r);
    return t;
  }
  auto count_error = [&](const char* field, size_t have, uint64_t want) {
    c.fail(who + ": " + field + " holds " + std::to_string(have) + " values, " + type_text +
           " needs " + std::to_string(want));
  };
  if (raw) {
    if (esize && raw->size() != nbytes)
      c.fail(who + ": raw_data holds " + std::to_string(raw->size()) + " bytes, " + type_text +
             " needs " + std::to_string(nbytes));
    if (esize) t.data.data = reinterpret_cast<const uint8_t*>(raw->data());
    return t;
  }
  if (!esize) {  // strings, or a type without a fixed width: no bytes kept
    if (t.data.dtype == DType::String && strings != numel)
      count_error("string_data", strings, numel);
    return t;
  }
  auto owned = std::make_shared<std::vector<uint8_t>>();
  switch (t.data.dtype) {
    case DType::Float:
    case DType::Complex64: {
      uint64_t want = numel * (t.data.dtype == DType::Complex64 ? 2 : 1);
      if (floats.size() != want) count_error("float_data", floats.size(), want);
      narrow_into(floats, 4, *owned);
      break;
    }
    case DType::Double:
    case DType::Complex128: {
      uint64_t want = numel * (t.data.dtype == DType::Complex128 ? 2 : 1);
      if (doubles.size() != want) count_error("double_data", doubles.size(), want);
      narrow_into(doubles, 8, *owned);
      break;
    }
    case DType::Int64:
      if (i64.size() != numel) count_error("int64_data", i64.size(), numel);
      narrow_into(i64, 8, *owned);
      break;
    case DType::UInt32:
    case DType::UInt64:
      if (u64.size() != numel) count_error("uint64_data", u64.size(), numel);
      narrow_into(u64, esize, *owned);
      break;
    default:  // int32 and narrower (bool, 8/16-bit ints, float16, bfloat16, float8)
      if (i32.size() != numel) count_error("int32_data", i32.size(), numel);
      narrow_into(i32, esize, *owned);
      break;
  }
  t.data.owned = std::move(owned);
  return t;
}

std::string dim_text(const Dim& d) {
  if (d.is_static()) return std::to_string(d.value);
  return d.sym.empty() ? "?" : d.sym;
}

// TypeProto.Tensor (and SparseTensor, which has the same fields).
ValueType parse_tensor_type(Ctx& c, std::string_view bytes) {
  ValueType t;
  Cursor in(bytes);
  Field f;
  while (in.next(c, f)) {
    if (f.number == 1) {
      t.dtype = static_cast<DType>(static_cast<int32_t>(int_of(c, f, "elem_type")));
    } else if (f.number == 2) {
      Scope s(c, "shape");
      if (!t.shape) t.shape.emplace();
      Cursor sh(len_of(c, f, "shape"));
      Field df;
      while (sh.next(c, df)) {
        if (df.number != 1) continue;
        Scope ds(c, "dim", static_cast<int64_t>(t.shape->size()));
        Dim d = Dim::unknown();
        Cursor dc(len_of(c, df, "dim"));
        Field vf;
        while (dc.next(c, vf)) {
          if (vf.number == 1)
            d = Dim::of(int_of(c, vf, "dim_value"));
          else if (vf.number == 2)
            d = Dim::symbol(str_of(c, vf, "dim_param"));
        }
        t.shape->push_back(std::move(d));
      }
    }
  }
  return t;
}

struct ParsedType {
  ValueType tensor;
  std::optional<std::string> other;  // set for types that are not tensors
};

ParsedType parse_type(Ctx& c, std::string_view bytes) {
  Deeper deeper(c);
  ParsedType t;
  // The element type of a sequence / optional, or the value type of a map.
  auto inner = [&](std::string_view b, uint32_t number, const char* name) {
    std::string text = "?";
    Cursor in(b);
    Field f;
    while (in.next(c, f)) {
      if (f.number != number) continue;
      Scope s(c, name);
      auto e = parse_type(c, len_of(c, f, name));
      text = e.other ? *e.other : value_type_text(e.tensor);
    }
    return text;
  };
  Cursor in(bytes);
  Field f;
  while (in.next(c, f)) {
    switch (f.number) {
      case 1: {
        Scope s(c, "tensor_type");
        t.tensor = parse_tensor_type(c, len_of(c, f, "tensor_type"));
        t.other.reset();
        break;
      }
      case 4: {
        Scope s(c, "sequence_type");
        t.other = "seq(" + inner(len_of(c, f, "sequence_type"), 1, "elem_type") + ")";
        break;
      }
      case 9: {
        Scope s(c, "optional_type");
        t.other = "optional(" + inner(len_of(c, f, "optional_type"), 1, "elem_type") + ")";
        break;
      }
      case 8: {
        Scope s(c, "sparse_tensor_type");
        t.other = "sparse(" +
                  value_type_text(parse_tensor_type(c, len_of(c, f, "sparse_tensor_type"))) + ")";
        break;
      }
      case 5: {
        Scope s(c, "map_type");
        auto b = len_of(c, f, "map_type");
        std::string key = "?";
        Cursor m(b);
        Field mf;
        while (m.next(c, mf))
          if (mf.number == 1)
            key = dtype_name(static_cast<DType>(static_cast<int32_t>(int_of(c, mf, "key_type"))));
        t.other = "map(" + key + ", " + inner(b, 2, "value_type") + ")";
        break;
      }
      default:
        break;
    }
  }
  return t;
}

GraphIO parse_value_info(Ctx& c, std::string_view bytes) {
  GraphIO io;
  std::optional<std::string> other;
  Cursor in(bytes);
  Field f;
  while (in.next(c, f)) {
    if (f.number == 1) {
      io.name = str_of(c, f, "name");
    } else if (f.number == 2) {
      Scope s(c, "type");
      auto t = parse_type(c, len_of(c, f, "type"));
      io.type = t.tensor;
      other = t.other;
    }
  }
  if (other && c.model) c.model->other_types[io.name] = *other;
  return io;
}

void parse_graph(Ctx& c, std::string_view bytes, Graph& g);

Attr parse_attribute(Ctx& c, std::string_view bytes) {
  Attr a;
  int64_t type = 0;
  bool has_f = false, has_i = false, has_s = false;
  Cursor in(bytes);
  Field f;
  while (in.next(c, f)) {
    switch (f.number) {
      case 1:
        a.name = str_of(c, f, "name");
        break;
      case 21:
        a.ref = str_of(c, f, "ref_attr_name");
        break;
      case 20:
        type = int_of(c, f, "type");
        break;
      case 2:
        a.f = float_of(c, f, "f");
        has_f = true;
        break;
      case 3:
        a.i = int_of(c, f, "i");
        has_i = true;
        break;
      case 4:
        a.s = str_of(c, f, "s");
        has_s = true;
        break;
      case 5: {
        Scope s(c, "t");
        auto t = parse_tensor(c, len_of(c, f, "t"));
        if (t.external && c.model) c.model->external[t.name] = *t.external;
        a.t = std::make_shared<TensorData>(std::move(t.data));
        break;
      }
      case 6: {
        Scope s(c, "g");
        Deeper deeper(c);
        auto g = std::make_shared<Graph>();
        g->name.clear();
        parse_graph(c, len_of(c, f, "g"), *g);
        a.g = std::move(g);
        break;
      }
      case 7:
        fixed_into<float, kFixed32>(c, f, "floats", a.floats);
        break;
      case 8:
        varints_into(c, f, "ints", a.ints);
        break;
      case 9:
        a.strings.push_back(str_of(c, f, "strings"));
        break;
      case 10:
      case 11:
      case 14:
      case 15:
      case 22:
      case 23:
        if (!type) type = 100 + f.number;  // a kind the IR does not hold (named below)
        break;
      default:
        break;
    }
  }
  const std::string who = "attribute '" + a.name + "'";
  switch (type) {
    case 0:  // no type (IR < 3 or a sloppy producer): the field that is set
      if (!a.ref.empty()) c.fail(who + " refers to '" + a.ref + "' but has no type");
      if (a.g)
        a.kind = Attr::Kind::Graph;
      else if (a.t)
        a.kind = Attr::Kind::Tensor;
      else if (has_s)
        a.kind = Attr::Kind::String;
      else if (has_f)
        a.kind = Attr::Kind::Float;
      else if (has_i)
        a.kind = Attr::Kind::Int;
      else if (!a.floats.empty())
        a.kind = Attr::Kind::Floats;
      else if (!a.ints.empty())
        a.kind = Attr::Kind::Ints;
      else if (!a.strings.empty())
        a.kind = Attr::Kind::Strings;
      else
        c.fail(who + " has neither a type nor a value");
      return a;
    case 1:
      a.kind = Attr::Kind::Float;
      break;
    case 2:
      a.kind = Attr::Kind::Int;
      break;
    case 3:
      a.kind = Attr::Kind::String;
      break;
    case 4:
      a.kind = Attr::Kind::Tensor;
      if (!a.t && a.ref.empty()) c.fail(who + " has type TENSOR but no tensor");
      break;
    case 5:
      a.kind = Attr::Kind::Graph;
      if (!a.g && a.ref.empty()) c.fail(who + " has type GRAPH but no graph");
      break;
    case 6:
      a.kind = Attr::Kind::Floats;
      break;
    case 7:
      a.kind = Attr::Kind::Ints;
      break;
    case 8:
      a.kind = Attr::Kind::Strings;
      break;
    default: {
      static const std::map<int64_t, const char*> names = {
          {9, "TENSORS"},         {10, "GRAPHS"},         {11, "SPARSE_TENSOR"},
          {12, "SPARSE_TENSORS"}, {13, "TYPE_PROTO"},     {14, "TYPE_PROTOS"},
          {110, "TENSORS"},       {111, "GRAPHS"},        {114, "TYPE_PROTO"},
          {115, "TYPE_PROTOS"},   {122, "SPARSE_TENSOR"}, {123, "SPARSE_TENSORS"}};
      auto it = names.find(type);
      c.fail(who + " has type " +
             (it != names.end() ? std::string(it->second) : std::to_string(type)) +
             ", which pt2onnx does not read");
    }
  }
  return a;
}

// Node provenance: metadata_props (IR >= 10), or the writer's doc_string
// form "key: value; key: value" (IR < 10) when every part is one of ours.
bool apply_provenance(Node& n, const std::string& key, const std::string& value) {
  if (key == "namespace")
    n.edit_origin().module_path = value;
  else if (key == "pkg.torch.onnx.fx_node")
    n.edit_origin().fx_node = value;
  else if (key == "pkg.pt2onnx.aten_target")
    n.edit_origin().fx_target = value;
  else
    return false;
  return true;
}

void provenance_from_doc(Node& n, std::string_view doc) {
  std::vector<std::pair<std::string, std::string>> parts;
  size_t start = 0;
  while (start < doc.size()) {
    size_t end = doc.find("; ", start);
    if (end == std::string_view::npos) end = doc.size();
    auto part = doc.substr(start, end - start);
    size_t colon = part.find(": ");
    if (colon == std::string_view::npos) return;
    std::string key(part.substr(0, colon));
    if (key != "namespace" && key != "pkg.torch.onnx.fx_node" && key != "pkg.pt2onnx.aten_target")
      return;
    parts.emplace_back(std::move(key), std::string(part.substr(colon + 2)));
    start = end + 2;
  }
  for (auto& [k, v] : parts) apply_provenance(n, k, v);
}

Node parse_node(Ctx& c, std::string_view bytes) {
  Node n;
  std::string doc;
  bool has_props = false;
  Cursor in(bytes);
  Field f;
  while (in.next(c, f)) {
    switch (f.number) {
      case 1:
        n.inputs.push_back(str_of(c, f, "input"));
        break;
      case 2:
        n.outputs.push_back(str_of(c, f, "output"));
        break;
      case 3:
        n.name = str_of(c, f, "name");
        break;
      case 4:
        n.op_type = str_of(c, f, "op_type");
        break;
      case 7:
        n.domain = str_of(c, f, "domain");
        if (n.domain == "ai.onnx") n.domain.clear();
        break;
      case 5: {
        Scope s(c, "attribute", static_cast<int64_t>(n.attrs.size()));
        n.attrs.push_back(parse_attribute(c, len_of(c, f, "attribute")));
        break;
      }
      case 6:
        doc = str_of(c, f, "doc_string");
        break;
      case 9: {
        Scope s(c, "metadata_props");
        auto [k, v] = string_entry(c, len_of(c, f, "metadata_props"));
        has_props |= apply_provenance(n, k, v);
        break;
      }
      default:
        break;
    }
  }
  if (!has_props && !doc.empty()) provenance_from_doc(n, doc);
  return n;
}

void parse_graph(Ctx& c, std::string_view bytes, Graph& g) {
  Cursor in(bytes);
  Field f;
  while (in.next(c, f)) {
    switch (f.number) {
      case 1: {
        Scope s(c, "node", static_cast<int64_t>(g.nodes.size()));
        g.nodes.push_back(parse_node(c, len_of(c, f, "node")));
        break;
      }
      case 2:
        g.name = str_of(c, f, "name");
        break;
      case 5: {
        Scope s(c, "initializer", static_cast<int64_t>(g.initializers.size()));
        auto t = parse_tensor(c, len_of(c, f, "initializer"));
        if (t.external && c.model) c.model->external[t.name] = *t.external;
        g.initializers.push_back(Initializer{std::move(t.name), std::move(t.data)});
        break;
      }
      case 15:
        len_of(c, f, "sparse_initializer");
        if (c.model) ++c.model->sparse_initializers;
        break;
      case 11:
      case 12:
      case 13: {
        const char* name = f.number == 11 ? "input" : f.number == 12 ? "output" : "value_info";
        auto& list = f.number == 11 ? g.inputs : g.outputs;
        Scope s(c, name, f.number == 13 ? -1 : static_cast<int64_t>(list.size()));
        GraphIO io = parse_value_info(c, len_of(c, f, name));
        g.types[io.name] = io.type;
        if (f.number != 13) list.push_back(std::move(io));
        break;
      }
      default:
        break;
    }
  }
}

Function parse_function(Ctx& c, std::string_view bytes) {
  Function fn;
  std::vector<std::string> defaults_names;
  Cursor in(bytes);
  Field f;
  while (in.next(c, f)) {
    switch (f.number) {
      case 1:
        fn.name = str_of(c, f, "name");
        break;
      case 4:
        fn.inputs.push_back(str_of(c, f, "input"));
        break;
      case 5:
        fn.outputs.push_back(str_of(c, f, "output"));
        break;
      case 6:
        fn.attributes.push_back(str_of(c, f, "attribute"));
        break;
      case 11: {
        Scope s(c, "attribute_proto", static_cast<int64_t>(fn.attribute_defaults.size()));
        fn.attribute_defaults.push_back(parse_attribute(c, len_of(c, f, "attribute_proto")));
        break;
      }
      case 7: {
        Scope s(c, "node", static_cast<int64_t>(fn.nodes.size()));
        fn.nodes.push_back(parse_node(c, len_of(c, f, "node")));
        break;
      }
      case 8:
        fn.doc = str_of(c, f, "doc_string");
        break;
      case 9: {
        Scope s(c, "opset_import", static_cast<int64_t>(fn.opset_imports.size()));
        fn.opset_imports.insert(opset_entry(c, len_of(c, f, "opset_import")));
        break;
      }
      case 10:
        fn.domain = str_of(c, f, "domain");
        break;
      default:
        break;
    }
  }
  // Function::attributes lists every attribute callers may set, those with a
  // default (attribute_proto) included.
  for (auto& a : fn.attribute_defaults)
    if (std::find(fn.attributes.begin(), fn.attributes.end(), a.name) == fn.attributes.end())
      fn.attributes.push_back(a.name);
  return fn;
}

}  // namespace

std::string value_type_text(const ValueType& t) {
  std::string s = t.dtype == DType::Undefined ? "?" : std::string(dtype_name(t.dtype));
  if (!t.shape) return s + "[...]";
  s += '[';
  for (size_t i = 0; i < t.shape->size(); ++i) s += (i ? ", " : "") + dim_text((*t.shape)[i]);
  return s + ']';
}

ReadModel read_model(std::string_view bytes, const std::string& source) {
  ReadModel m;
  m.graph.name.clear();
  Ctx c(source, &m);
  if (bytes.starts_with(std::string_view("PK\x03\x04", 4)))
    c.fail("not an ONNX model: a zip archive (a .pt2?)");
  bool has_graph = false;
  Cursor in(bytes);
  Field f;
  while (in.next(c, f)) {
    switch (f.number) {
      case 1:
        m.ir_version = int_of(c, f, "ir_version");
        break;
      case 2:
        m.producer_name = str_of(c, f, "producer_name");
        break;
      case 3:
        m.producer_version = str_of(c, f, "producer_version");
        break;
      case 4:
        m.domain = str_of(c, f, "domain");
        break;
      case 5:
        m.model_version = int_of(c, f, "model_version");
        break;
      case 6:
        m.doc = str_of(c, f, "doc_string");
        break;
      case 7: {
        Scope s(c, "graph");
        parse_graph(c, len_of(c, f, "graph"), m.graph);
        has_graph = true;
        break;
      }
      case 8: {
        Scope s(c, "opset_import", static_cast<int64_t>(m.opset_imports.size()));
        m.opset_imports.insert(opset_entry(c, len_of(c, f, "opset_import")));
        break;
      }
      case 14: {
        Scope s(c, "metadata_props", static_cast<int64_t>(m.metadata_props.size()));
        m.metadata_props.push_back(string_entry(c, len_of(c, f, "metadata_props")));
        break;
      }
      case 25: {
        Scope s(c, "functions", static_cast<int64_t>(m.graph.functions.size()));
        m.graph.functions.push_back(parse_function(c, len_of(c, f, "functions")));
        break;
      }
      default:
        break;
    }
  }
  if (!has_graph) c.fail("not an ONNX model: no graph");
  for (auto& [domain, version] : m.opset_imports)
    if (!domain.empty()) m.graph.domain_versions[domain] = version;
  return m;
}

Function read_function(std::string_view bytes, const std::string& source) {
  Ctx c(source, nullptr);
  return parse_function(c, bytes);
}

}  // namespace pt2onnx
