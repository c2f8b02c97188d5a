// Writes a Graph as an ONNX ModelProto, streaming weights from their memory
// to the file (and to a side file for external data). One rename commits the
// model (see output_files.h): a failed or killed export leaves the previous
// model and its data as they were, and nothing of its own.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "pt2onnx/pt2onnx.h"

namespace pt2onnx {

struct WriteOptions {
  int opset = 18;
  int ir_version = 8;
  ExternalData external_data = ExternalData::Auto;
  uint64_t external_data_threshold = 1800ull << 20;
  uint64_t external_min_tensor_bytes = 1024;
  uint64_t shard_bytes = 0;  // external data split into files of at most this size (0: one)
  // Weights read from mapped files are dropped from the page cache once
  // written when they come to more than this many bytes (0: a quarter of
  // the machine's memory; see ReadAhead::drop_after_use in model_writer.cpp).
  uint64_t uncache_sources_above = 0;
  std::function<void(std::string_view stage, double fraction)> progress;
};

struct WriteResult {
  std::vector<std::string> data_paths;
  uint64_t weight_bytes = 0;
};

WriteResult write_model(const Graph& g, const std::string& path, const WriteOptions& opt);

// The location external initializers left in the caller's memory name.
inline constexpr const char* kMemoryLocation = "pt2onnx:memory";

// The same ModelProto in memory, every initializer inline (2 GiB at most);
// `weights` (if given) gets their byte count. With `refs`, initializers that
// view caller memory as they are become external (kMemoryLocation) and are
// listed there instead (see Options::weights_by_reference).
std::string write_model_bytes(const Graph& g, const WriteOptions& opt, uint64_t* weights = nullptr,
                              std::vector<MemoryInitializer>* refs = nullptr);

// Serialized TensorProto of a small tensor with inline raw_data (attributes).
std::string tensor_proto_bytes(const TensorData& t, const std::string& name);

}  // namespace pt2onnx
