// Reads an ONNX ModelProto (or one FunctionProto) into the IR of ir/graph.h.
//
// Hand-written protobuf decoding, like the writer (wire.h), rather than
// libprotobuf: the decoder is small and has no generated code or extra
// dependency; every varint, length and count is checked against the buffer
// (malformed input throws pt2onnx::Error naming the file and the field path,
// e.g. "model.onnx: graph.node[3].attribute[0]: truncated"), it has no 2 GiB
// limit, and initializers stay zero-copy views on the caller's bytes (a
// mapped file), so reading a large model copies no weights.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace pt2onnx {

// Where a tensor stored outside the model file lives (TensorProto.external_data).
// Such tensors keep their dtype and dims; their TensorData has no bytes.
struct ExternalRef {
  std::string location;  // relative to the model's directory
  uint64_t offset = 0;
  std::optional<uint64_t> length;
  std::string checksum;
};

struct ReadModel {
  int64_t ir_version = 0;
  std::string producer_name, producer_version, domain, doc;
  int64_t model_version = 0;
  std::map<std::string, int64_t> opset_imports;  // "" = ai.onnx
  std::vector<std::pair<std::string, std::string>> metadata_props;
  // Nodes, inputs / outputs, initializers, value_info (into graph.types, with
  // the inputs' and outputs' types), functions (ModelProto.functions);
  // graph.domain_versions holds opset_imports without "".
  // Initializers with raw_data point into the caller's bytes, which must
  // outlive this model; data given as typed fields (float_data, ...) is
  // copied into owned bytes. The bytes of a TensorData are not aligned.
  Graph graph;
  // Tensors with external data, by TensorProto name (initializers of every
  // graph level; names are unique across scopes in a valid model).
  std::map<std::string, ExternalRef> external;
  // Values whose type is not a tensor (sequence, map, optional, sparse
  // tensor): their type as text, e.g. "seq(float32[?, 4])". Their
  // graph.types entry has dtype Undefined.
  std::unordered_map<std::string, std::string> other_types;
  // Counts of parts the IR does not hold (skipped): sparse initializers.
  size_t sparse_initializers = 0;
};

// `source` names the bytes in error messages (usually the file path).
ReadModel read_model(std::string_view bytes, const std::string& source);
// One serialized FunctionProto.
Function read_function(std::string_view bytes, const std::string& source);

// A tensor type as text: "float32[batch, 4]" ("?" for an unknown dim or
// dtype, "float32[...]" for an unknown rank).
std::string value_type_text(const ValueType& t);

}  // namespace pt2onnx
