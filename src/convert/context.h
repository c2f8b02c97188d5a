// Ctx: what a converter sees of one FX node. Typed access to its arguments
// (each converter passes the schema default it relies on, since arguments at
// their default are omitted from the JSON), the output metadata torch
// recorded, and helpers shared by all op families.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/builder.h"
#include "ir/name_map.h"
#include "schema/program.h"

namespace pt2onnx {

// FX value name -> ONNX value name (tensors and sym ints alike).
struct Env {
  NameMap<std::string> values;
  std::map<std::string, std::string> symbol_names;  // sympy symbol -> dim_param
  // Values computed once and reused by later nodes (the graph is in
  // topological order): runtime sizes per symbolic dim, causal masks, ...
  NameMap<std::string> cache;
  // Metadata of values the converter itself adds to the FX graph (writing a
  // mutation back into its base tensor), looked up before the program's.
  std::unordered_map<std::string, schema::TensorMeta> extra_meta;
  // Converting a higher-order op's graph argument (convert_nested).
  bool nested = false;
  // Ops without a converter become pkg.torch.ops nodes (Options::Fallback).
  bool fallback = false;
  // User converters, tried before the registry (convert/custom_converters.h).
  const class CustomConverters* custom = nullptr;
};

// Env::cache key of inner tensor `attr` of the tensor-subclass weight bound
// to placeholder `placeholder`.
inline std::string subclass_inner_key(const std::string& placeholder, const std::string& attr) {
  return "subclass_inner:" + placeholder + ":" + attr;
}

// The type a converted value is declared with: torch's recorded one, unless
// the value computed is of another rank. Where torch's meta kernel and its
// eager kernel disagree (multilabel_margin_loss of one 1-D sample: meta [1],
// eager []), converters compute eager's, and the file must declare what it
// computes (onnx.checker's shape inference refuses it otherwise).
ValueType declared_type(ValueType recorded, const ValueType* computed);

class Ctx {
 public:
  Ctx(GraphBuilder& builder, const schema::Program& p, const schema::Node& n, Env& e)
      : b(builder), prog(p), node(n), env(e), first_node(builder.graph().nodes.size()) {}

  GraphBuilder& b;
  const schema::Program& prog;
  const schema::Node& node;
  Env& env;
  const size_t first_node;

  int opset() const { return b.opset(); }
  [[noreturn]] void fail(const std::string& why) const;

  // ---- arguments
  const schema::Argument* arg(std::string_view name) const;  // nullptr if absent
  bool has(std::string_view name) const;                     // present and not None
  std::string tensor(std::string_view name) const;
  std::optional<std::string> opt_tensor(std::string_view name) const;
  std::vector<std::string> tensors(std::string_view name) const;
  int64_t i(std::string_view name) const;
  int64_t i(std::string_view name, int64_t def) const;
  double f(std::string_view name, double def) const;
  bool flag(std::string_view name, bool def) const;
  std::vector<int64_t> ints(std::string_view name, std::vector<int64_t> def) const;
  std::optional<std::string> str(std::string_view name) const;
  std::optional<DType> scalar_type(std::string_view name) const;

  // A scalar-or-tensor operand as an ONNX value of type `t`.
  std::string operand(std::string_view name, DType t);
  // dtype and promotion class of an operand (2 tensor, 1 zero-dim tensor, 0 scalar).
  std::pair<DType, int> operand_class(std::string_view name) const;
  // A constant scalar operand's value, if it is one.
  std::optional<double> scalar_value(std::string_view name) const;

  // ---- sym ints (ONNX form: 1-D int64 of one element)
  std::vector<schema::SymIntArg> symints(std::string_view name) const;
  std::optional<int64_t> symint_const(const schema::SymIntArg& a) const;
  std::string symint_value(const schema::SymIntArg& a);
  std::string shape_tensor(const std::vector<schema::SymIntArg>& dims);

  // ---- outputs
  size_t n_outputs() const { return out_names_().size(); }
  const std::string& out_name(size_t i = 0) const { return out_names_().at(i); }
  const schema::TensorMeta& out_meta(size_t i = 0) const;
  const schema::TensorMeta* find_meta(const std::string& fx) const;
  ValueType out_type(size_t i = 0) const;
  DType out_dtype(size_t i = 0) const { return out_meta(i).dtype; }
  void set_output(size_t i, const std::string& value);

  // ---- values
  const ValueType& type(const std::string& v) const { return b.type(v); }
  size_t rank(const std::string& v) const { return b.rank(v); }
  // v's shape, an error when its rank is unknown (see GraphBuilder::shape).
  const Shape& shape(const std::string& v) const { return b.shape(v); }
  DType dtype(const std::string& v) const { return b.type(v).dtype; }
  ValueType meta_type(const schema::TensorMeta& m) const;
  Dim meta_dim(const schema::SymSize& s) const;

  // ---- helpers shared by op families
  std::string cast(const std::string& v, DType t);
  // The type ONNX op `op` computes values of torch type `t` in: `t` where the
  // op at this opset (and onnxruntime's CPU provider) has it, else a type
  // that holds its values (see context.cpp).
  DType kernel_type(std::string_view op, DType t) const;
  // Dim `axis` of `v` as a 1-D int64 value (constant when static).
  std::string dim_value(const std::string& v, int64_t axis);
  // Dims [start, end) of v's shape as a 1-D int64 (negative counts from the
  // end; kToEnd: through the last). Shape's start / end exist from opset 15;
  // before it, Shape + Slice.
  static constexpr int64_t kToEnd = INT64_MAX;
  std::string shape_part(const std::string& v, int64_t start, int64_t end = kToEnd);
  std::string unsqueeze(const std::string& v, const std::vector<int64_t>& axes);
  std::string squeeze(const std::string& v, const std::vector<int64_t>& axes);
  std::string transpose(const std::string& v, const std::vector<int64_t>& perm);
  std::string reshape(const std::string& v, const std::string& shape);
  // ReduceX with axes as attribute or input, as the opset wants.
  std::string reduce(const std::string& op, const std::string& v, const std::vector<int64_t>& axes,
                     bool keepdims);
  // The last two dims of `a` (rows, cols) for lowerings unrolled per
  // element or column (QR, Jacobi sweeps); fails naming `what` when dynamic.
  std::pair<int64_t, int64_t> static_matrix_dims(const std::string& a, const char* what);
  // When torch knows the SymInt output's value statically (sym_int_values),
  // emits it as a constant and returns true.
  bool emit_known_symint();
  // A rows x cols identity constant (ones on the main diagonal) of type t.
  std::string eye(int64_t rows, int64_t cols, DType t);
  static int64_t norm_axis(int64_t axis, size_t rank) {
    return axis < 0 ? axis + static_cast<int64_t>(rank) : axis;
  }

 private:
  const std::vector<std::string>& out_names_() const;
  mutable std::optional<std::vector<std::string>> out_names_cache_;
};

}  // namespace pt2onnx
