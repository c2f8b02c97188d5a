// pt2onnx public C++ API: convert a serialized torch.export ExportedProgram
// (the JSON torch.export.save writes as models/model.json) plus views of its
// weights into an ONNX file.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pt2onnx/error.h"

namespace pt2onnx {

enum class ExternalData { Auto, Always, Never };

struct Options {
  int opset = 18;
  bool optimize = true;
  // Auto: external data when the initializers exceed `external_data_threshold`.
  ExternalData external_data = ExternalData::Auto;
  uint64_t external_data_threshold = 1800ull << 20;  // stays clear of protobuf's 2 GiB
  uint64_t external_min_tensor_bytes = 1024;         // smaller tensors stay inline
  std::vector<std::string> input_names;              // overrides, positional
  std::vector<std::string> output_names;             // overrides, positional
  // dim_param names: user input (FX placeholder name) -> axis -> name.
  std::map<std::string, std::map<int64_t, std::string>> input_dim_names;
  // Output dim names by output position -> axis -> name (torch.onnx dynamic_axes on outputs).
  std::map<int64_t, std::map<int64_t, std::string>> output_dim_names;
};

// A view of one weight tensor owned by the caller (alive until convert returns).
struct WeightView {
  const void* data = nullptr;  // address of element [0, 0, ...]
  std::string dtype;           // torch spelling: "float32", "torch.int64", ...
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // elements; empty = contiguous
  uint64_t available_bytes = 0;  // readable bytes from `data` on
};

using Weights = std::unordered_map<std::string, WeightView>;  // keyed by FQN

struct Result {
  std::string model_path;
  std::vector<std::string> data_paths;  // external data files written
  int opset = 0;
  int ir_version = 0;
  size_t nodes = 0;
  size_t initializers = 0;
  uint64_t weight_bytes = 0;
  std::vector<std::pair<std::string, double>> timings;  // stage -> seconds
};

// Lowest ONNX IR version that carries `opset`.
int ir_version_for_opset(int opset);
// Opsets this build converts to.
inline constexpr int kMinOpset = 17;
inline constexpr int kMaxOpset = 26;

// Converts and writes `output_path` (plus external data beside it). On any
// error throws pt2onnx::Error and leaves no output file.
Result convert_program(std::string_view program_json, const Weights& weights,
                       const std::string& output_path, const Options& options);

// Every aten target this build converts at `opset`.
std::vector<std::string> supported_targets(int opset);

}  // namespace pt2onnx
