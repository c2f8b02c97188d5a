#include "archive/unpickler.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <unordered_map>

#include "pt2onnx/error.h"

namespace pt2onnx {

namespace {

// Values on the pickle stack. Only what torch.save's state dicts use. They
// live in the machine's arena and point at each other without owning: freeing
// is one flat loop however deep they nest, and cycles (a list appended to
// itself through the memo) cannot leak.
struct Value {
  enum class Kind { None, Bool, Int, Float, Str, Tuple, List, Dict, Global, Storage, Tensor, Mark };
  Kind kind = Kind::None;
  size_t depth = 0;  // levels of containers inside (0: a scalar or an empty container)
  int64_t i = 0;
  double f = 0;
  std::string s;                    // Str; Global "module.name"
  std::vector<Value*> items;        // Tuple / List; Dict as key, value pairs
  PickledTensor* tensor = nullptr;  // Storage (key, dtype, numel) / Tensor
};
using V = Value*;

DType storage_dtype(const std::string& cls) {
  static const std::unordered_map<std::string, DType> m{
      {"torch.FloatStorage", DType::Float},
      {"torch.DoubleStorage", DType::Double},
      {"torch.HalfStorage", DType::Float16},
      {"torch.BFloat16Storage", DType::BFloat16},
      {"torch.LongStorage", DType::Int64},
      {"torch.IntStorage", DType::Int32},
      {"torch.ShortStorage", DType::Int16},
      {"torch.CharStorage", DType::Int8},
      {"torch.ByteStorage", DType::UInt8},
      {"torch.BoolStorage", DType::Bool},
      {"torch.ComplexFloatStorage", DType::Complex64},
      {"torch.ComplexDoubleStorage", DType::Complex128},
  };
  auto it = m.find(cls);
  return it == m.end() ? DType::Undefined : it->second;
}

bool allowed_global(const std::string& g) {
  return g == "collections.OrderedDict" || g == "torch._utils._rebuild_tensor_v2" ||
         g == "torch._utils._rebuild_parameter" || storage_dtype(g) != DType::Undefined;
}

class Machine {
 public:
  Machine(const uint8_t* d, size_t n, const std::string& what) : d_(d), n_(n), what_(what) {}

  V run() {
    while (true) {
      if (steps_++ > kMaxSteps) fail("too many pickle operations");
      uint8_t op = byte();
      switch (op) {
        case 0x80:
          byte();
          break;  // PROTO
        case 0x95:
          skip(8);
          break;  // FRAME
        case '.':
          return pop();  // STOP
        case '(':
          push(make(Value::Kind::Mark));
          break;
        case ')':
          push(make(Value::Kind::Tuple));
          break;  // EMPTY_TUPLE
        case ']':
          push(make(Value::Kind::List));
          break;  // EMPTY_LIST
        case '}':
          push(make(Value::Kind::Dict));
          break;  // EMPTY_DICT
        case 'N':
          push(make(Value::Kind::None));
          break;
        case 0x88:
          push_bool(true);
          break;  // NEWTRUE
        case 0x89:
          push_bool(false);
          break;  // NEWFALSE
        case 'K':
          push_int(byte());
          break;  // BININT1
        case 'M':
          push_int(u16());
          break;  // BININT2
        case 'J':
          push_int(static_cast<int32_t>(u32()));
          break;      // BININT
        case 0x8a: {  // LONG1
          uint8_t len = byte();
          if (len > 8) fail("integer too large");
          const uint8_t* p = take(len);
          int64_t v = 0;
          for (int k = len - 1; k >= 0; --k) v = (v << 8) | p[k];
          if (len && len < 8 && (p[len - 1] & 0x80)) v -= int64_t{1} << (8 * len);
          push_int(v);
          break;
        }
        case 'G': {  // BINFLOAT (big-endian double)
          const uint8_t* p = take(8);
          uint64_t bits = 0;
          for (int k = 0; k < 8; ++k) bits = (bits << 8) | p[k];
          V v = make(Value::Kind::Float);
          std::memcpy(&v->f, &bits, 8);
          push(v);
          break;
        }
        case 'X':
          push_str(u32());
          break;  // BINUNICODE
        case 0x8c:
          push_str(byte());
          break;  // SHORT_BINUNICODE
        case 'q':
          memo(byte());
          break;  // BINPUT
        case 'r':
          memo(u32());
          break;  // LONG_BINPUT
        case 0x94:
          memo(memo_.size());
          break;  // MEMOIZE
        case 'h':
          get(byte());
          break;  // BINGET
        case 'j':
          get(u32());
          break;     // LONG_BINGET
        case 'c': {  // GLOBAL "module\nname\n"
          std::string mod = line(), name = line();
          push_global(mod, name);
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          V name = pop(), mod = pop();
          if (name->kind != Value::Kind::Str || mod->kind != Value::Kind::Str)
            fail("malformed STACK_GLOBAL");
          push_global(mod->s, name->s);
          break;
        }
        case 't':
          push(tuple(pop_mark()));
          break;  // TUPLE
        case 0x85:
          push(tuple({pop()}));
          break;      // TUPLE1
        case 0x86: {  // TUPLE2
          V b = pop(), a = pop();
          push(tuple({a, b}));
          break;
        }
        case 0x87: {  // TUPLE3
          V c = pop(), b = pop(), a = pop();
          push(tuple({a, b, c}));
          break;
        }
        case 'a': {  // APPEND
          V v = pop();
          add_items(list_of(top()), {v});
          break;
        }
        case 'e': {  // APPENDS
          auto vs = pop_mark();
          add_items(list_of(top()), vs);
          break;
        }
        case 's': {  // SETITEM
          V v = pop(), k = pop();
          add_items(dict_of(top()), {k, v});
          break;
        }
        case 'u': {  // SETITEMS
          auto kv = pop_mark();
          if (kv.size() % 2) fail("odd SETITEMS");
          add_items(dict_of(top()), kv);
          break;
        }
        case 'Q': {  // BINPERSID
          push(storage(pop()));
          break;
        }
        case 'R': {  // REDUCE
          V args = pop(), fn = pop();
          push(reduce(fn, args));
          break;
        }
        default: {
          char buf[8];
          std::snprintf(buf, sizeof buf, "0x%02x", op);
          fail(std::string("unsupported pickle opcode ") + buf +
               " (only torch.save tensor dicts are read; nothing is executed)");
        }
      }
    }
  }

 private:
  static constexpr size_t kMaxSteps = 50'000'000;
  static constexpr size_t kMaxStack = 1'000'000;

  V make(Value::Kind k) {
    V v = &values_.emplace_back();
    v->kind = k;
    return v;
  }
  PickledTensor* new_tensor(const PickledTensor& t) { return &tensors_.emplace_back(t); }

  // Depth is tracked as values are built, so no walk over them ever recurses.
  void nest(V container, const std::vector<V>& items) {
    size_t d = container->depth;
    for (V x : items) d = std::max(d, x->depth + 1);
    if (d > kMaxPickleDepth)
      fail("pickled values nest " + std::to_string(d) + " levels deep, more than the " +
           std::to_string(kMaxPickleDepth) + " allowed");
    container->depth = d;
  }
  void add_items(V container, const std::vector<V>& items) {
    nest(container, items);
    container->items.insert(container->items.end(), items.begin(), items.end());
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw Error(what_ + ": " + why + " (at byte " + std::to_string(p_) + ")");
  }
  const uint8_t* take(size_t k) {
    if (k > n_ - p_) fail("truncated pickle");
    const uint8_t* r = d_ + p_;
    p_ += k;
    return r;
  }
  void skip(size_t k) { take(k); }
  uint8_t byte() { return *take(1); }
  uint32_t u16() {
    const uint8_t* p = take(2);
    return static_cast<uint32_t>(p[0] | (p[1] << 8));
  }
  uint32_t u32() {
    const uint8_t* p = take(4);
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  std::string line() {
    size_t b = p_;
    while (p_ < n_ && d_[p_] != '\n') ++p_;
    if (p_ >= n_) fail("truncated GLOBAL");
    return std::string(reinterpret_cast<const char*>(d_ + b), p_++ - b);
  }

  void push(V v) {
    if (stack_.size() >= kMaxStack) fail("pickle stack too deep");
    stack_.push_back(std::move(v));
  }
  V pop() {
    if (stack_.empty() || stack_.back()->kind == Value::Kind::Mark) fail("pickle stack underflow");
    V v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  V& top() {
    if (stack_.empty()) fail("pickle stack underflow");
    return stack_.back();
  }
  std::vector<V> pop_mark() {
    std::vector<V> r;
    while (true) {
      if (stack_.empty()) fail("MARK not found");
      V v = std::move(stack_.back());
      stack_.pop_back();
      if (v->kind == Value::Kind::Mark) break;
      r.push_back(std::move(v));
    }
    return {r.rbegin(), r.rend()};
  }
  void push_bool(bool b) {
    V v = make(Value::Kind::Bool);
    v->i = b;
    push(v);
  }
  void push_int(int64_t i) {
    V v = make(Value::Kind::Int);
    v->i = i;
    push(v);
  }
  void push_str(size_t len) {
    V v = make(Value::Kind::Str);
    const uint8_t* p = take(len);
    v->s.assign(reinterpret_cast<const char*>(p), len);
    push(v);
  }
  void memo(size_t k) {
    if (k > 10'000'000) fail("memo index too large");
    if (memo_.size() <= k) memo_.resize(k + 1);
    memo_[k] = top();
  }
  void get(size_t k) {
    if (k >= memo_.size() || !memo_[k]) fail("memo entry " + std::to_string(k) + " not set");
    push(memo_[k]);
  }
  void push_global(const std::string& mod, const std::string& name) {
    std::string g = mod + "." + name;
    if (!allowed_global(g))
      fail("refusing to load global '" + mod + " " + name +
           "': only torch tensor records are allowed (nothing from a pickle is executed)");
    V v = make(Value::Kind::Global);
    v->s = g;
    push(v);
  }
  V tuple(std::vector<V> items) {
    V v = make(Value::Kind::Tuple);
    add_items(v, items);
    return v;
  }
  V list_of(V v) {
    if (v->kind != Value::Kind::List) fail("APPEND to a non-list");
    return v;
  }
  V dict_of(V v) {
    if (v->kind != Value::Kind::Dict) fail("SETITEM on a non-dict");
    return v;
  }
  int64_t as_int(V v, const char* what) {
    if (v->kind != Value::Kind::Int) fail(std::string(what) + " is not an integer");
    return v->i;
  }
  std::vector<int64_t> int_tuple(V v, const char* what) {
    if (v->kind != Value::Kind::Tuple) fail(std::string(what) + " is not a tuple");
    std::vector<int64_t> r;
    for (auto& x : v->items) r.push_back(as_int(x, what));
    return r;
  }

  V storage(V pid) {
    // ('storage', torch.<T>Storage, key, location, numel)
    if (pid->kind != Value::Kind::Tuple || pid->items.size() != 5 ||
        pid->items[0]->kind != Value::Kind::Str || pid->items[0]->s != "storage" ||
        pid->items[1]->kind != Value::Kind::Global || pid->items[2]->kind != Value::Kind::Str)
      fail("unsupported persistent id (expected a torch storage record)");
    PickledTensor t;
    t.dtype = storage_dtype(pid->items[1]->s);
    t.storage_key = pid->items[2]->s;
    int64_t numel = as_int(pid->items[4], "storage size");
    if (numel < 0) fail("negative storage size");
    t.storage_numel = static_cast<uint64_t>(numel);
    V v = make(Value::Kind::Storage);
    v->tensor = new_tensor(t);
    return v;
  }

  V reduce(V fn, V args) {
    if (fn->kind != Value::Kind::Global || args->kind != Value::Kind::Tuple)
      fail("REDUCE of something other than an allowed torch record");
    const auto& a = args->items;
    if (fn->s == "collections.OrderedDict") {
      if (!a.empty()) fail("OrderedDict with arguments");
      return make(Value::Kind::Dict);
    }
    if (fn->s == "torch._utils._rebuild_tensor_v2") {
      // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
      if (a.size() < 6 || a[0]->kind != Value::Kind::Storage)
        fail("malformed _rebuild_tensor_v2 record");
      PickledTensor pt = *a[0]->tensor;
      pt.storage_offset = as_int(a[1], "storage offset");
      pt.sizes = int_tuple(a[2], "tensor size");
      pt.strides = int_tuple(a[3], "tensor stride");
      if (pt.sizes.size() != pt.strides.size()) fail("sizes and strides differ in rank");
      V t = make(Value::Kind::Tensor);
      t->tensor = new_tensor(pt);
      return t;
    }
    if (fn->s == "torch._utils._rebuild_parameter") {
      if (a.empty() || a[0]->kind != Value::Kind::Tensor)
        fail("malformed _rebuild_parameter record");
      return a[0];
    }
    fail("calling '" + fn->s + "' is not allowed");
  }

  const uint8_t* d_;
  size_t n_;
  size_t p_ = 0;
  size_t steps_ = 0;
  const std::string& what_;
  std::deque<Value> values_;  // the arena: every value, freed flat
  std::deque<PickledTensor> tensors_;
  std::vector<V> stack_;
  std::vector<V> memo_;
};

}  // namespace

std::vector<PickledTensor> read_tensor_dict_pickle(const uint8_t* data, size_t size,
                                                   const std::string& what) {
  Machine m(data, size, what);  // owns every value until the tensors are copied out
  V root = m.run();
  if (root->kind != Value::Kind::Dict) throw Error(what + ": the pickle is not a dict of tensors");
  std::vector<PickledTensor> out;
  for (size_t k = 0; k + 1 < root->items.size(); k += 2) {
    V key = root->items[k];
    V val = root->items[k + 1];
    if (key->kind != Value::Kind::Str) throw Error(what + ": a key is not a string");
    if (val->kind != Value::Kind::Tensor)
      throw Error(what + ": entry '" + key->s + "' is not a plain tensor");
    PickledTensor t = *val->tensor;
    t.name = key->s;
    if (t.dtype == DType::Undefined)
      throw Error(what + ": entry '" + key->s + "' has an unknown storage type");
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace pt2onnx
