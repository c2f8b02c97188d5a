// Graph passes, one per file, run in the flat order listed in pass_list.cpp.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "pt2onnx/pt2onnx.h"

namespace pt2onnx {

// What the fusion passes may emit: the opset's operators, and with
// Target::OnnxRuntime onnxruntime's contrib operators. `dtype`: the float type
// the graph's float32 computation is written in (Float: unchanged; Float16 /
// BFloat16: convert_float16 runs last).
struct PassOptions {
  int opset = 18;
  Target target = Target::Standard;
  DType dtype = DType::Float;
  // Options::weights_by_reference: weights stay in their own layout where
  // the operator can read them transposed (read_weights_transposed).
  bool weights_by_reference = false;
  bool onnxruntime() const { return target == Target::OnnxRuntime; }
};

// Each pass returns how many nodes / initializers it changed. A pass works on
// one graph; run_default_passes also runs it on every nested graph (If / Loop /
// Scan bodies), innermost first. Passes never rename or drop a value a nested
// graph reads, and never touch a nested graph's inputs.
// Opsets 11 and 12: the graph, converted at 13, rewritten into their forms
// (lower_to_opset.cpp); throws listing every node that has none. Last.
void lower_to_opset(Graph& g, int opset);

size_t fold_constants(Graph& g);
size_t fold_weight_transpose(Graph& g);
size_t fold_weight_quantize(Graph& g);
size_t fold_conv_batchnorm(Graph& g);
size_t remove_identity(Graph& g);
size_t eliminate_common_subexpressions(Graph& g);
size_t remove_unused(Graph& g);

// Float weights read as MatMul / Gemm's B -> blocked integers (see
// WeightQuantization): MatMulNBits (onnxruntime target) or DequantizeLinear +
// MatMul. Fails naming the reason when the opset cannot say it.
size_t quantize_weights(Graph& g, const WeightQuantization& q, const PassOptions& o);

// Fusions: each rewrites the node patterns it proves equal to one fused
// operator, and leaves every near miss alone. They take the opset and target
// and do nothing where neither has their operator. One file each.
using FusionPass = size_t (*)(Graph& g, const PassOptions& o);
size_t fuse_layer_norm(Graph& g, const PassOptions& o);
size_t fuse_rms_norm(Graph& g, const PassOptions& o);
size_t fuse_skip_norm(Graph& g, const PassOptions& o);

// Rotary position embedding (rotate_half and interleaved, full or partial)
// as one RotaryEmbedding (fuse_rotary.cpp).
size_t fuse_rotary(Graph& g, const PassOptions& o);
size_t fuse_gelu(Graph& g, const PassOptions& o);
size_t fuse_matmul_transpose(Graph& g, const PassOptions& o);
size_t fuse_gemm(Graph& g, const PassOptions& o);
// A program's integer weights times A (DequantizeLinear / Cast of constant
// integers into MatMul or Gemm) as MatMulNBits (onnxruntime target;
// fuse_dequantize_matmul.cpp).
size_t fuse_dequantize_matmul(Graph& g, const PassOptions& o);
// Reshape -> Gemm -> Reshape (a Linear on rank > 2 input, as AOTAutograd
// writes it) back to MatMul + Add, before the fusions (unflatten_gemm.cpp).
size_t unflatten_gemm(Graph& g, const PassOptions& o);
size_t fuse_packed_qkv(Graph& g, const PassOptions& o);
// Transposed weight views read back in their own layout by a transB operand
// (weights_by_reference only; read_weights_transposed.cpp). Runs last.
size_t read_weights_transposed(Graph& g, const PassOptions& o);

// The graph's float32 values, weights and computation in float16 or bfloat16
// (`to`), keeping in float32 the ops precision needs (norm statistics,
// softmax, summing reductions) and those the opset does not define for `to`
// (convert_float16.cpp). Run once, after every other pass; refuses a graph
// with model-local functions. Returns the number of values and initializers
// changed and casts added.
size_t convert_float16(Graph& g, DType to, int opset);
size_t fold_shape_arithmetic(Graph& g, const PassOptions& o);
// Sibling MatMulNBits (one activation) -> one MatMulNBits + Split (fuse_sibling_matmuls.cpp).
size_t fuse_sibling_matmuls(Graph& g, const PassOptions& o);
size_t collapse_layout_chains(Graph& g, const PassOptions& o);

// scaled_dot_product_attention -> com.microsoft GroupQueryAttention (decoders
// with a KV cache, onnxruntime target) / ONNX Attention (opset >= 23).
size_t fuse_group_query_attention(Graph& g, const PassOptions& o);
// ... -> com.microsoft MultiHeadAttention (no cache, onnxruntime target).
size_t fuse_multi_head_attention(Graph& g, const PassOptions& o);
size_t fuse_attention(Graph& g, const PassOptions& o);

// Module calls as model-local functions (extract_module_functions.cpp): the
// calls of the selected modules (every submodule, or those whose class is
// listed: "pkg.mod.Block", or a bare "Block") become function calls.
// Returns the number of calls made.
struct ModuleSelection {
  bool all = false;
  std::vector<std::string> classes;
};
size_t extract_module_functions(Graph& g, const ModuleSelection& selection, int opset);

// With module functions (convert_program.cpp): folding, identity and
// dead-code removal before the calls become functions (no CSE: it would
// merge equal nodes of different calls), then the default passes on the main
// graph and on each function body (formal inputs / outputs kept).
std::vector<std::pair<std::string, size_t>> run_passes_before_functions(Graph& g);
size_t optimize_function_bodies(Graph& g, const PassOptions& o = {});
// Runs `fn` on each function body as a graph of its own (formal inputs and
// outputs typed as the values they stood for, Constant nodes as
// initializers), then puts the body back; domains `fn` brought in are
// imported by the function and the model. Returns the sum of fn's counts.
size_t run_on_function_bodies(Graph& g, const std::function<size_t(Graph&)>& fn);

// Every call of a model-local function replaced by its body; the functions
// are dropped. Returns the number of calls inlined.
size_t inline_functions(Graph& g);

// Runs the default pipeline: the clean-up passes, then the fusions of the
// opset and target (o), then the clean-up passes again; returns (pass name,
// changes) for each run.
std::vector<std::pair<std::string, size_t>> run_default_passes(Graph& g, const PassOptions& o = {});

// Makes node names unique (name_nodes.cpp): across the main graph and its
// nested graphs, and within each function body; later nodes of a repeated
// name get "<name>_<k>". Run once, after every other pass. Returns the number
// of nodes renamed.
size_t name_nodes(Graph& g);

// Replaces every use of `from` by `to` in node inputs, nested graphs
// included (not the outputs of `g`).
void replace_uses(Graph& g, const std::string& from, const std::string& to);

}  // namespace pt2onnx
