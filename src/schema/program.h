// The serialized torch.export ExportedProgram (schema major version 8), as
// plain structs. This is the one contract between capture and conversion:
// the Python path and the .pt2 path both arrive here.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/dtype.h"
#include "ir/name_map.h"
#include "schema/lazy_vec.h"
#include "schema/sym_expr.h"
#include "schema/versions.h"

namespace pt2onnx::schema {

// A size / stride in a TensorMeta: a constant or a symbolic expression.
struct SymSize {
  std::optional<int64_t> value;  // set when constant
  SymExprPtr expr;               // set when symbolic
  std::optional<int64_t> hint;   // example value of a symbolic size
};

struct TensorMeta {
  DType dtype = DType::Undefined;
  int64_t scalar_type = 0;  // schema numbering, for messages
  std::vector<SymSize> sizes;
  std::vector<SymSize> strides;  // a weight's (payload configs) only; see Reader::tensor_meta
  SymSize storage_offset;
};

// One element of an as_sym_ints / as_sym_int argument.
struct SymIntArg {
  std::optional<int64_t> value;  // as_int
  std::string name;              // as_name: an FX sym value
};

enum class ArgKind {
  None,
  Tensor,
  Tensors,
  OptionalTensor,
  OptionalTensors,
  Int,
  Ints,
  Float,
  Floats,
  String,
  Strings,
  Bool,
  Bools,
  SymInt,
  SymInts,
  SymBool,
  SymFloat,
  ScalarType,
  MemoryFormat,
  Layout,
  Device,
  Graph,
  Other,
};

struct Graph;

struct Argument {
  ArgKind kind = ArgKind::None;
  std::string variant;         // the JSON key, e.g. "as_tensor"
  std::string name;            // tensor / sym value name
  LazyVec<std::string> names;  // tensors; "" marks a None element
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  LazyVec<int64_t> ints;
  LazyVec<double> floats;
  LazyVec<bool> bools;
  LazyVec<std::string> strings;
  LazyVec<SymIntArg> symints;    // as_sym_int(s)
  std::shared_ptr<Graph> graph;  // as_graph: a subgraph (higher-order ops); name in `name`
};

struct NamedArgument {
  std::string name;
  Argument arg;
  int kind = 1;  // 1 positional, 2 keyword
};

// Text that many nodes repeat, held once and shared: a node's stack trace
// and module stack (every layer's nodes repeat the same source lines, every
// node of a module its stack), ~370 bytes a node when each held its own copy
// (bench/node_scaling.md). The reader interns them (SharedText::Pool).
class SharedText {
 public:
  SharedText() = default;
  SharedText(std::string s) : s_(std::make_shared<const std::string>(std::move(s))) {}
  SharedText(const char* s) : SharedText(std::string(s)) {}
  const std::string& str() const { return s_ ? *s_ : empty_string(); }
  operator const std::string&() const { return str(); }
  bool empty() const { return !s_ || s_->empty(); }

  // One SharedText for each distinct text handed to it.
  class Pool {
   public:
    SharedText get(std::string_view s);

   private:
    std::unordered_map<std::string_view, std::shared_ptr<const std::string>> texts_;
  };

 private:
  static const std::string& empty_string();
  std::shared_ptr<const std::string> s_;
};

struct Node {
  std::string target;
  std::string name;
  std::vector<NamedArgument> inputs;
  std::vector<Argument> outputs;
  SharedText stack_trace;
  SharedText nn_module_stack;

  const Argument* input(std::string_view arg_name) const;
  // The innermost module path from nn_module_stack ("layers.0.attn"), or "".
  std::string module_path() const;
  // The last source line of the user's stack trace, for messages.
  std::string source_line() const;
};

struct Graph {
  std::vector<Argument> inputs;
  std::vector<Argument> outputs;
  std::vector<Node> nodes;
  NameMap<TensorMeta> tensor_values;
  NameMap<SymSize> sym_int_values;
};

struct InputSpec {
  enum class Kind { UserInput, Parameter, Buffer, TensorConstant, CustomObj, Token, ConstantInput };
  Kind kind = Kind::UserInput;
  std::string arg_name;  // the graph placeholder
  std::string target;    // FQN of the parameter / buffer / constant
  bool persistent = true;
  Argument arg;  // for user inputs
};

struct OutputSpec {
  enum class Kind {
    UserOutput,
    LossOutput,
    BufferMutation,
    UserInputMutation,
    GradientToParameter,
    GradientToUserInput,
    Token,
    ParameterMutation
  };
  Kind kind = Kind::UserOutput;
  Argument arg;
  std::string target;
};

// A pytree spec (torch.utils._pytree.treespec_dumps, protocol 1) of the
// program's user inputs or outputs: which nested tuples / lists / dicts /
// registered classes the flat leaves come from.
struct TreeSpec {
  std::string type;               // "builtins.dict", ...; "" for a leaf
  std::vector<std::string> keys;  // child keys when the node names them, else empty
  std::vector<TreeSpec> children;
  bool is_leaf() const { return type.empty(); }
};

struct RangeConstraint {
  std::optional<int64_t> min, max;
};

struct Program {
  Graph graph;
  std::vector<InputSpec> input_specs;
  std::vector<OutputSpec> output_specs;
  std::map<std::string, RangeConstraint> range_constraints;
  // module_call_graph's root entry: forward's argument names and the pytree
  // specs of (args, kwargs) and of the outputs (absent in hand-made programs).
  std::vector<std::string> forward_arg_names;
  std::optional<TreeSpec> in_spec, out_spec;
  int schema_major = 0;
  int schema_minor = 0;
  std::string torch_version;
};

// One entry of data/weights/model_weights_config.json (or the constants'):
// which raw file holds the tensor's storage and how to view it.
struct PayloadEntry {
  std::string path_name;
  bool is_param = false;
  bool use_pickle = false;
  std::optional<TensorMeta> tensor_meta;
};
// FQN -> entry, in file order.
std::vector<std::pair<std::string, PayloadEntry>> parse_payload_config(std::string_view json,
                                                                       const std::string& source);

// Where a program's JSON lies, so that it can be parsed without a copy.
struct JsonPlace {
  // In a read-only private file mapping: its pages are dropped from memory
  // once parsed (read again from the file if touched again; the parsed
  // document holds copies of its strings).
  bool in_file = false;
  // Bytes past its end known to be readable (the rest of a mapped archive),
  // besides those of its last page.
  size_t readable_after = 0;
};

// Parses the ExportedProgram JSON (what torch.export.save writes as
// models/model.json). `source` names the input in error messages.
Program parse_program(std::string_view json, const std::string& source = "model.json",
                      JsonPlace place = {});

}  // namespace pt2onnx::schema
