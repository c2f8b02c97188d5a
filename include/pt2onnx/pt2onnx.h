// pt2onnx public C++ API: convert a serialized torch.export ExportedProgram
// (the JSON torch.export.save writes as models/model.json) plus views of its
// weights into an ONNX file.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pt2onnx/error.h"

namespace pt2onnx {

enum class ExternalData { Auto, Always, Never };
// "auto" / "always" / "never"; nullopt for anything else.
std::optional<ExternalData> external_data_from_string(std::string_view s);
// "shards:2GB" (also KB / MB / GB / TB, KiB / MiB / GiB / TiB, or plain bytes;
// at least 4096): the shard size for Options::external_data_shard_bytes;
// nullopt for anything else.
std::optional<uint64_t> external_data_shards_from_string(std::string_view s);

class Ctx;  // what a converter sees of one node: src/convert/context.h
// A C++ converter (the signature of the built-in ones in src/convert/).
using ConvertFn = void (*)(Ctx&);

// A user converter written as an ONNX function: every node of `target` is
// replaced by the function's body, its tensor arguments bound to the
// function's inputs in schema order and its other arguments to the
// attributes of the same name (docs: README "Custom converters").
struct CustomFunction {
  // The op overload: "torch.ops.mylib.foo.default", "mylib.foo.default",
  // "mylib::foo" (= .default); an aten target overrides our converter.
  std::string target;
  std::string function_proto;  // a serialized onnx FunctionProto
};
// torch.onnx's TrainingMode. The core converts a program already captured in
// one mode: every mode converts dropout and batch norm in the form their
// captured flags say (dropout's `train`, batch norm's `training`); pt2onnx's
// Python export() chooses the mode at capture (model.eval() / model.train()).
// Training also writes each buffer the program updates in place (batch norm's
// running_mean / running_var / num_batches_tracked in torch.export's training
// IR) as an output "<buffer>_updated" after the user outputs and the
// signature's mutations. Eval and Preserve convert as captured. In every mode
// the mutations the program's signature names (run_decompositions()) are
// outputs.
enum class TrainingMode { Eval, Training, Preserve };
// "eval" / "training" / "preserve"; nullopt for anything else.
std::optional<TrainingMode> training_mode_from_string(std::string_view s);

// What the written graph is made for. Standard: ONNX operators only, fused
// into the standard's own fused operators where the opset has them
// (LayerNormalization, Gelu, RMSNormalization, Attention, ...). OnnxRuntime:
// onnxruntime's contrib operators (domain com.microsoft, and
// SimplifiedLayerNormalization) where onnxruntime runs them faster; such a
// file needs onnxruntime. A target is a list of passes (src/opt/pass_list.cpp);
// converters never ask which one is on.
enum class Target { Standard, OnnxRuntime };
// "standard" / "onnxruntime"; nullopt for anything else.
std::optional<Target> target_from_string(std::string_view s);

// The float type the graph computes in. Float32: as captured (the float32
// path is untouched). Float16 / BFloat16: float32 weights, inputs, outputs
// and computation become that type, except the computations precision needs
// in float32 (norm statistics, softmax, summing reductions), which are cast
// to float32 and back (src/opt/convert_float16.cpp). float64 stays float64.
enum class OutputDType { Float32, Float16, BFloat16 };
// "float32" / "float16" / "bfloat16"; nullopt for anything else.
std::optional<OutputDType> output_dtype_from_string(std::string_view s);

// Weights quantized at export (src/opt/quantize_weights.cpp): the float
// weights that MatMul / Gemm read as B become `bits`-bit integers with one
// scale (and, asymmetric, one zero point) per block of `block_size` values
// along K, computed from the weight bytes as they are. Target onnxruntime:
// com.microsoft MatMulNBits; standard: DequantizeLinear (blocked from opset
// 21, int4 from 21) + MatMul.
struct WeightQuantization {
  int bits = 0;            // 0: off; 4 or 8
  int64_t block_size = 0;  // 0: 32 for 4 bits; one block per column (per channel) for 8
  bool symmetric = true;   // false: a zero point per block
  int accuracy_level = 4;  // MatMulNBits': 0 = float compute, 4 = int8 compute (CPU)
  // Also the embedding tables (Gather of a float weight by indices) whose row
  // length is a multiple of the block: com.microsoft GatherBlockQuantized on
  // the onnxruntime target; Gather of the integer rows and their scales, then
  // a blocked DequantizeLinear, on the standard one (opset 21).
  bool embeddings = false;
};

// "int4" / "int8", then optional ",key=value" settings: block_size=N,
// symmetric=0|1 (or the words symmetric / asymmetric), accuracy_level=N,
// embeddings=0|1 (or the word embeddings).
// "" or "none": off. nullopt (with `error` set) for anything else.
std::optional<WeightQuantization> weight_quantization_from_string(std::string_view s,
                                                                  std::string* error);

// What a model file holds, read from its contents: a torch.export archive
// (.pt2), a TorchScript archive (torch.jit.save), a torch.save file of
// pickled objects (a state dict: no model), or not a zip archive at all.
enum class FileKind { Pt2, TorchScript, TorchSave, NotAnArchive };
// Throws pt2onnx::Error when the file cannot be read.
FileKind file_kind(const std::string& path);

// Whether a TorchScript file may be handed to torch.jit.load, decided without
// running anything: loading runs the file's code (each __setstate__), so all of
// its code/ text is read first and refused unless it is tensor code (no
// __setstate__ but torch's own, no op that reaches files, prints, the network or
// global state; src/archive/torchscript_check.cpp). Throws pt2onnx::Error with
// one line naming the entry, line, method and op; returns when the file may load.
void check_torchscript_file(const std::string& path);
// Why a TorchScript node kind ("aten::from_file") is refused by the same rules,
// or nothing: for graphs read after loading.
std::optional<std::string> torchscript_op_refusal(std::string_view kind);

struct Options {
  int opset = 18;
  bool optimize = true;
  // Always (default, as torch.onnx.export): weights go to `<output>.data`.
  // Never: one file. Auto: external data when the initializers exceed
  // `external_data_threshold`.
  ExternalData external_data = ExternalData::Always;
  uint64_t external_data_threshold = 1800ull << 20;  // stays clear of protobuf's 2 GiB
  uint64_t external_min_tensor_bytes = 1024;         // smaller tensors stay inline
  // External data in several files (shards) of at most this many bytes each
  // (a tensor larger than that fills a file alone); 0: one file. Each tensor
  // starts 4096-aligned in its file. Names: <output>.data, <output>.1.data, ...
  uint64_t external_data_shard_bytes = 0;
  std::vector<std::string> input_names;   // overrides, positional
  std::vector<std::string> output_names;  // overrides, positional
  // dim_param names: user input (FX placeholder name) -> axis -> name.
  std::map<std::string, std::map<int64_t, std::string>> input_dim_names;
  // Output dim names by output position -> axis -> name (torch.onnx dynamic_axes on outputs).
  std::map<int64_t, std::map<int64_t, std::string>> output_dim_names;
  // What to do with ops no converter handles. None (default): fail, listing
  // all of them. CustomDomain: write each as one node of domain
  // "pkg.torch.ops" named after its target (non-tensor arguments as
  // attributes) and list them in Result::fallback_ops. Opt-in, never silent.
  enum class Fallback { None, CustomDomain };
  Fallback fallback = Fallback::None;
  // User converters, consulted before the built-in ones (they override them):
  // ONNX functions (custom_translation_table, the command's --functions) and
  // C++ functions keyed by target (see examples/custom_converter.cpp).
  std::vector<CustomFunction> custom_functions;
  // ONNX files of such functions (the command's --functions): each function
  // converts the target "<domain>.<name>" (name "relu" = "relu.default"), or
  // its name when that is a whole target ("torch.ops.mylib.foo.default"); the
  // file's opset_import versions custom domains (custom_opsets wins).
  std::vector<std::string> custom_function_files;
  std::map<std::string, ConvertFn> converters;
  // Versions of custom domains the converters' nodes use (torch.onnx's
  // custom_opsets); a domain named nowhere gets version 1.
  std::map<std::string, int64_t> custom_opsets;
  // See TrainingMode. Preserve: the program as captured.
  TrainingMode training = TrainingMode::Preserve;
  // Modules as model-local functions (torch.onnx's export_modules_as_functions):
  // each call of a selected module becomes a call of an ONNX function, one
  // function per module class and body (calls of equal bodies share it),
  // weights passed as its inputs. Selected: every submodule call
  // (all_modules_as_functions) or those whose class is listed by its
  // qualified name ("pkg.mod.Block", as torch.typename gives it; a bare
  // "Block" matches any module's Block). inline_functions then writes every
  // function call as its body again (no functions in the model).
  bool all_modules_as_functions = false;
  std::vector<std::string> modules_as_functions;
  bool inline_functions = false;
  // See Target. Fusions run only with `optimize`.
  Target target = Target::Standard;
  // See OutputDType. Applied with or without `optimize`; not with module
  // functions kept as functions.
  OutputDType dtype = OutputDType::Float32;
  // Called from the converting thread as stages advance (fraction in 0..1).
  std::function<void(std::string_view stage, double fraction)> progress;
  // The model goes to Result::model_bytes, not to a file (output path
  // ignored): one ModelProto, every weight inline (2 GiB at most), for
  // callers that hand it to a runtime directly (the torch.compile backend).
  bool in_memory = false;
  // With in_memory: initializers (of external_min_tensor_bytes or more) are
  // not copied into the model; they are external data at location
  // "pt2onnx:memory" and listed in Result::memory_initializers, for the
  // caller to give its runtime in memory (onnxruntime's
  // AddExternalInitializers): a caller's weight bytes as they are
  // (contiguous, neither converted nor folded) where they lie, any other
  // (folded, transposed, converted) once, in a buffer the result hands over.
  // The passes then keep weights in their own layout where the target's
  // operator reads them transposed (onnxruntime: FusedMatMul / Gemm with
  // transB), so a Linear weight stays the caller's bytes.
  bool weights_by_reference = false;
  // See WeightQuantization; after every other pass, with or without `optimize`.
  WeightQuantization quantize;
  // torch.onnx.export's export_params: false writes the parameters and
  // buffers as graph inputs (after the model's own inputs, no initializer):
  // the caller feeds them. The passes then cannot fold them.
  bool export_params = true;
  // torch.onnx.export's keep_initializers_as_inputs: every initializer of the
  // main graph is also listed as a graph input (after the model's inputs),
  // which a runtime then lets the caller override.
  bool keep_initializers_as_inputs = false;
  // Names for weights (program target, e.g. "features.0.weight" -> its name
  // in the file): torch.onnx's input_names past the model's inputs.
  std::map<std::string, std::string> weight_names;
};

// An initializer left in the caller's memory (Options::weights_by_reference).
struct MemoryInitializer {
  std::string name;
  const void* data = nullptr;
  // Null: `data` is the caller's memory. Otherwise the buffer holding the
  // bytes at `data` (made by the conversion), kept alive by whoever holds it.
  std::shared_ptr<const void> owner;
  int32_t dtype = 0;  // ONNX TensorProto data type
  std::vector<int64_t> dims;
  uint64_t nbytes = 0;
};

// A view of one weight tensor owned by the caller (alive until convert returns).
struct WeightView {
  const void* data = nullptr;  // address of element [0, 0, ...]
  std::string dtype;           // torch spelling: "float32", "torch.int64", ...
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // elements; empty = contiguous
  uint64_t available_bytes = 0;  // readable bytes from `data` on
  // Optional: the same bytes in a file (a mapped archive): descriptor and the
  // offset of `data`, so the writer can copy them in the kernel.
  int source_fd = -1;
  uint64_t source_offset = 0;
  // Optional: the bytes are of this float type (torch spelling), converted to
  // `dtype` while written (a bfloat16 checkpoint read by a float32 model; see
  // WeightSource::convert_floats). Empty: they are of type `dtype`.
  std::string stored_dtype;
};

using Weights = std::unordered_map<std::string, WeightView>;  // keyed by FQN

// Where the weights come from when the program was captured without them (a
// model built on the meta device or under FakeTensorMode): a view with no data
// (data == nullptr; dtype and sizes as captured) is a fake weight. Every
// weight the source holds replaces the caller's view (fake or not, e.g. a
// persistent buffer the model filled at init); a fake one it lacks, a tensor
// of the source nothing reads (unless allow_unused), and a dtype or shape
// that differs from the program's are errors naming the tensor, all listed.
struct WeightSource {
  // Safetensors files (a checkpoint's shards, any order): mapped, headers
  // checked, bytes copied file-to-file by the writer (src/archive/safetensors.h).
  std::vector<std::string> safetensors_files;
  // Tensors in memory by name (a state dict); used with or instead of files.
  Weights tensors;
  // Other names of a program weight in the source (tied weights: the
  // checkpoint holds one of them), tried in order after the FQN itself.
  std::map<std::string, std::vector<std::string>> aliases;
  bool allow_unused = false;
  // A float weight (float32 / float16 / bfloat16) stored as another of these
  // types is converted to the model's type as it is written (streamed, never
  // whole in memory) instead of being a dtype mismatch.
  bool convert_floats = false;
  bool empty() const { return safetensors_files.empty() && tensors.empty(); }
};

// An op target the converters do not handle at an opset.
struct UnsupportedOp {
  std::string target;     // "torch.ops.mylib.foo.default"
  int count = 0;          // nodes with this target (nested graphs included)
  std::string where;      // the first one: module path and source line, or node name
  int converts_from = 0;  // lowest opset that converts it (0: none)
};

// A graph input or output: its name, dtype and dims (numbers, or dim_param
// names / expressions; "?" when unknown).
struct ValueSummary {
  std::string name;
  std::string dtype;
  std::vector<std::string> dims;
};

struct Result {
  std::string model_path;
  std::string model_bytes;                             // Options::in_memory
  std::vector<MemoryInitializer> memory_initializers;  // Options::weights_by_reference
  std::vector<std::string> data_paths;                 // external data files written
  int opset = 0;
  int ir_version = 0;
  size_t nodes = 0;
  size_t initializers = 0;
  size_t functions = 0;  // model-local functions (modules as functions)
  uint64_t weight_bytes = 0;
  std::vector<std::pair<std::string, double>> timings;  // stage -> seconds
  std::vector<UnsupportedOp> fallback_ops;              // written as pkg.torch.ops nodes (Fallback)
  std::vector<ValueSummary> inputs, outputs;            // of the written graph
  // Node count per op type of the written graph ("domain::Op" outside the
  // default domain), nested graphs included, most frequent first.
  std::vector<std::pair<std::string, size_t>> node_histogram;
};

// Lowest ONNX IR version that carries `opset`.
int ir_version_for_opset(int opset);
// Opsets this build converts to.
// Opsets 11 and 12 are written by converting at 13 and lowering the result
// (src/opt/lower_to_opset.cpp); the converters emit 13 and later.
inline constexpr int kMinOpset = 11;
inline constexpr int kMaxOpset = 26;

// Converts and writes `output_path` (plus external data beside it). On any
// error throws pt2onnx::Error and leaves no output file.
Result convert_program(std::string_view program_json, const Weights& weights,
                       const std::string& output_path, const Options& options);

// The same with weights taken from `source` (see WeightSource); timings add
// a "weights" stage (mapping and checking the files).
Result convert_program(std::string_view program_json, const Weights& weights,
                       const WeightSource& source, const std::string& output_path,
                       const Options& options);

// Converts the .pt2 archive at `input_path` (what torch.export.save writes;
// older layouts too). The archive is memory-mapped and nothing in it is
// executed: pickled payloads go through a reader that only accepts tensor
// records. Timings add an "open" stage (mapping, zip and weight tables).
Result convert(const std::string& input_path, const std::string& output_path,
               const Options& options);

// The same for archive bytes already in memory; `data` must stay alive until
// the call returns.
Result convert_buffer(const void* data, size_t size, const std::string& output_path,
                      const Options& options);

// What `pt2onnx inspect` prints.
struct ArchiveInfo {
  using Value = ValueSummary;
  std::string layout;
  int schema_major = 0;
  int schema_minor = 0;
  std::string torch_version;
  std::vector<Value> inputs;
  std::vector<Value> outputs;
  std::vector<std::pair<std::string, size_t>> op_histogram;  // most frequent first
  std::vector<std::string> unsupported;                      // targets, at `opset`
  size_t weights = 0;
  uint64_t weight_bytes = 0;
};
ArchiveInfo inspect(const std::string& input_path, int opset = 18);

// The ops of a serialized program (ExportedProgram JSON) that no converter
// handles at `opset`, sorted by target; nothing is written.
std::vector<UnsupportedOp> unsupported_ops(std::string_view program_json, int opset);
// The same, counting the user converters of `options` (and its opset) as supported.
std::vector<UnsupportedOp> unsupported_ops(std::string_view program_json, const Options& options);

// Every aten target this build converts at `opset`.
std::vector<std::string> supported_targets(int opset);

}  // namespace pt2onnx
