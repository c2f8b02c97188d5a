// The ONNX-side IR: values named by strings, nodes, initializers that keep a
// view on the caller's weight memory until the writer streams them out.
#pragma once
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/dtype.h"
#include "ir/name_map.h"
#include "ir/name_set.h"

namespace pt2onnx {

// One dimension: a known integer, a symbol / symbolic expression (dim_param),
// or unknown (neither: value < 0 and no symbol).
struct Dim {
  int64_t value = -1;
  std::string sym;  // non-empty => symbolic
  static Dim of(int64_t v) { return Dim{v, {}}; }
  static Dim symbol(std::string s) { return Dim{-1, std::move(s)}; }
  static Dim unknown() { return Dim{-1, {}}; }
  bool is_static() const { return sym.empty() && value >= 0; }
  bool is_unknown() const { return sym.empty() && value < 0; }
  bool same_as(const Dim& o) const { return !is_unknown() && *this == o; }
  bool operator==(const Dim& o) const { return value == o.value && sym == o.sym; }
};
using Shape = std::vector<Dim>;
// Whether two shapes are known to be equal: of one rank, each dim the same static value or
// symbol. Unknown dims are never the same (== on Shape takes two of them as equal, which would
// let a converter skip a Reshape or a broadcast that a value of unknown dims needs).
inline bool same_shape(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].same_as(b[i])) return false;
  return true;
}

struct ValueType {
  DType dtype = DType::Undefined;
  std::optional<Shape> shape;  // nullopt: rank unknown
  bool has_static_shape() const;
  std::optional<std::vector<int64_t>> static_dims() const;
};
// The type of a tensor of static `dims` (initializers, folded constants).
ValueType static_type(DType t, const std::vector<int64_t>& dims);

// Per-channel factors a weight is multiplied by when its bytes are made (a
// batch norm folded into a convolution, fold_conv_batchnorm.cpp): the
// [dims[0], dims[1], inner...] block (r, c) is scaled by
// factor[rows_per_group ? (r / rows_per_group) * dims[1] + c : r] (a
// ConvTranspose weight's output channels run along dim 1 within each group).
// Each element: its value in the tensor's type, times the factor in double,
// rounded once to that type (float16 through float).
struct ChannelScale {
  std::vector<double> factor;
  int64_t rows_per_group = 0;
  // Scales rows [r0, r1) of dim 0 of a contiguous `dims` tensor of type t,
  // held contiguously at `rows` (float, float16 or double).
  void apply(DType t, const std::vector<int64_t>& dims, int64_t r0, int64_t r1,
             uint8_t* rows) const;
};

// Bytes of a tensor. Either a view on memory owned elsewhere (weights: the
// caller keeps them alive until the export returns) or owned bytes (constants
// made during conversion). Strides are in elements; empty means contiguous.
struct TensorData {
  DType dtype = DType::Undefined;
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;
  const uint8_t* data = nullptr;
  mutable std::shared_ptr<const std::vector<uint8_t>> owned;  // mutable: see `stored`
  // When the bytes also lie in a file (a mapped archive): the file and the
  // offset of `data`. The writer may then copy in the kernel, and may drop the
  // mapped pages after reading them.
  int src_fd = -1;
  uint64_t src_offset = 0;
  // Converted lazily: `data` holds the values as this float type (a bfloat16
  // checkpoint) and `dtype` is the float type they are exported as. The
  // writer converts them a few MiB at a time while streaming, so a converted
  // weight never exists whole in memory; bytes() converts the whole tensor
  // once (into `owned`), for the rare pass that reads a weight's values.
  // Undefined: `data` is already of type `dtype`.
  DType stored = DType::Undefined;
  // Scaled lazily per channel (contiguous tensors only), after the `stored`
  // conversion if any: by the writer as it streams, or whole by bytes().
  std::shared_ptr<const ChannelScale> scale;

  int64_t numel() const;
  size_t nbytes() const {
    auto n = static_cast<size_t>(numel());
    return is_4bit(dtype) ? (n + 1) / 2 : n * dtype_size(dtype);
  }
  bool is_contiguous() const;
  bool lazy() const { return (stored != DType::Undefined || scale) && !owned; }
  // The type of the elements at `data`.
  DType stored_type() const { return stored != DType::Undefined ? stored : dtype; }
  const uint8_t* bytes() const {
    if (lazy()) materialize();
    return owned ? owned->data() : data;
  }
  // The elements in a new contiguous buffer, whatever the layout.
  std::vector<uint8_t> contiguous_copy() const;
  // Writes rows [r0, r1) of dim 0 (the whole tensor when rank 0) to `out`,
  // contiguous: a strided view streamed out in pieces. Transposed layouts
  // are copied in tiles, so both sides stay in cache.
  void copy_rows(int64_t r0, int64_t r1, uint8_t* out) const;
  // The same rows as stored (of type stored_type(), neither converted nor
  // scaled): the writer converts and scales them itself. Only for lazy() tensors.
  void copy_stored_rows(int64_t r0, int64_t r1, uint8_t* out) const;
  // Rows [r0, r1) of a lazy() tensor as exported (converted and scaled),
  // contiguous, from its stored rows at `in` (of type stored_type()).
  void finish_rows(const uint8_t* in, int64_t r0, int64_t r1, uint8_t* out) const;
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(bytes());
  }
  static TensorData from_bytes(DType t, std::vector<int64_t> dims, std::vector<uint8_t> bytes);

 private:
  void materialize() const;

 public:
  // One value `v` converted to type t, shaped `dims` (one element); nullopt for
  // types a C++ cast cannot produce exactly (float16, bfloat16, ...).
  static std::optional<TensorData> scalar(DType t, double v, std::vector<int64_t> dims = {});
  template <typename T>
  static TensorData from_vector(DType t, std::vector<int64_t> dims, const std::vector<T>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    return from_bytes(t, std::move(dims), std::move(b));
  }
};

// Element k of a contiguous tensor of a real or integer type (float, double,
// float16, bfloat16, int8..int64, uint8, uint16, bool), as double; nullopt
// for other types.
std::optional<double> element_as_double(const TensorData& d, size_t k);
// Every element of such a tensor (strided views read in order), as doubles;
// nullopt for other types.
std::optional<std::vector<double>> to_doubles(const TensorData& d);

// Bytes spanned by a strided view: (size-1)*stride summed, plus one element;
// nullopt on negative values or overflow. Contiguous when strides is empty.
std::optional<uint64_t> strided_span_bytes(const std::vector<int64_t>& sizes,
                                           const std::vector<int64_t>& strides, size_t elem_size);

struct Initializer {
  std::string name;
  TensorData data;
};

struct Graph;

struct Attr {
  enum class Kind { Float, Int, String, Tensor, Floats, Ints, Strings, Graph };
  std::string name;
  Kind kind = Kind::Int;
  float f = 0;
  int64_t i = 0;
  std::string s;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::shared_ptr<TensorData> t;
  // A nested graph (If branches, Loop / Scan bodies). It reads values of the
  // enclosing scopes by name; names are unique across all scopes.
  std::shared_ptr<Graph> g;
  // Inside a Function's body only: the value is the caller's attribute of
  // this name (ONNX ref_attr_name); `kind` still gives the type.
  std::string ref;

  static Attr Int(std::string n, int64_t v);
  static Attr Float(std::string n, float v);
  static Attr Str(std::string n, std::string v);
  static Attr Ints(std::string n, std::vector<int64_t> v);
  static Attr Floats(std::string n, std::vector<float> v);
  static Attr Tensor(std::string n, TensorData v);
  static Attr Subgraph(std::string n, Graph v);
  bool operator==(const Attr& o) const;
};

// Where a node came from: the FX node and its aten target, the torch module
// path, and the module calls around it (nn_module_stack as the schema writes
// it: "key,path,type;...", outermost first; a repeated call's key ends in
// "@N"). One is shared by every ONNX node made of one FX node: as three
// strings of every node it cost ~100 bytes and two allocations per node
// (bench/node_scaling.md).
struct Origin {
  std::string fx_node;
  std::string fx_target;
  std::string module_path;
  std::shared_ptr<const std::string> module_stack;  // null when there is none
};

struct Node {
  std::string op_type;
  std::string domain;  // "" = default ONNX domain
  std::string name;
  std::vector<std::string> inputs;  // "" = omitted optional input
  std::vector<std::string> outputs;
  std::vector<Attr> attrs;
  // Where it came from (null: nowhere known). Shared: nodes copy the
  // pointer; edit_origin() gives the node a copy of its own to change (for
  // each change: only readers and rare passes change an origin).
  std::shared_ptr<const Origin> origin;

  const std::string& fx_node() const { return origin ? origin->fx_node : no_text(); }
  const std::string& fx_target() const { return origin ? origin->fx_target : no_text(); }
  const std::string& module_path() const { return origin ? origin->module_path : no_text(); }
  const std::shared_ptr<const std::string>& module_stack() const {
    return origin ? origin->module_stack : no_stack();
  }
  Origin& edit_origin();

  const Attr* attr(std::string_view n) const;
  bool has_subgraphs() const;

 private:
  static const std::string& no_text();
  static const std::shared_ptr<const std::string>& no_stack();
};

struct GraphIO {
  std::string name;
  ValueType type;
};

// A model-local ONNX function (FunctionProto): modules exported as functions,
// custom converters written as ONNX functions. Nodes call it with
// op_type = name, domain = domain. Its body reads only its inputs and
// attributes (Attr::ref); versions of the domains it uses are in opset_imports.
struct Function {
  std::string domain;
  std::string name;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<std::string> attributes;   // attribute names callers may set
  std::vector<Attr> attribute_defaults;  // those with a default value
  std::vector<Node> nodes;
  std::map<std::string, int64_t> opset_imports;  // "" = default ONNX domain
  std::string doc;
};

struct Graph {
  std::string name = "main_graph";
  // Versions of the non-default domains its nodes use (the model's opset_import).
  std::map<std::string, int64_t> domain_versions;
  std::vector<Node> nodes;
  std::vector<Initializer> initializers;
  std::vector<GraphIO> inputs;
  std::vector<GraphIO> outputs;
  NameMap<ValueType> types;  // every known value
  // Model-local functions (main graph only), written as ModelProto.functions.
  std::vector<Function> functions;

  const ValueType* type_of(const std::string& v) const;
};

// The graphs nested in a node's attributes (none for most nodes).
std::vector<Graph*> subgraphs(Node& n);
std::vector<const Graph*> subgraphs(const Node& n);

// Names the nodes of `g` (and of graphs nested in them) read from scopes
// enclosing `g`: read, but neither an input, an initializer nor a node output
// of `g` or of the nested graph that reads it.
std::vector<std::string> outer_reads(const Graph& g);

// Fresh names for values a pass adds to `g`: `base` when free, else base_1,
// base_2, ... Taken: every input, initializer, typed value and node output of
// `g` and of the graphs nested in it, what take() adds, and each name handed out.
class FreshNames {
 public:
  FreshNames() = default;  // nothing taken yet
  explicit FreshNames(const Graph& g);
  // For a pass that makes a few names and keeps every node in the graph
  // while it names (it may rename or add): each of the first names is checked
  // by a walk of the graph as it is then, instead of collecting every name of
  // a large graph up front for one or two new ones; past a few names the
  // names are collected as by the constructor.
  static FreshNames few(const Graph& g);
  void take(const std::string& name) { used_.insert(name); }
  std::string operator()(const std::string& base);

 private:
  void collect(const Graph& g);
  bool taken(const std::string& name);
  NameSet used_;
  const Graph* unread_ = nullptr;  // few(): the graph, until collected
  int walks_ = 0;
};

// Replaces every read of `from` by `to` in the nodes of `g` and of all graphs
// nested in them (their outputs included: a nested graph's output may be an
// enclosing value). The outputs of `g` itself are left alone.
void replace_uses_deep(Graph& g, const std::string& from, const std::string& to);
// The same for one node: its inputs and the graphs nested in it.
void replace_uses_in_node(Node& n, const std::string& from, const std::string& to);
// Every rename of `renames` (from -> to) at once, in one walk of the node.
void rename_uses_in_node(Node& n, const std::unordered_map<std::string, std::string>& renames);

}  // namespace pt2onnx
