// A readable text of an ONNX model: header, inputs, initializers (summed up),
// one line per node with its attributes and module path, outputs, functions,
// subgraphs indented under their node. `pt2onnx show` prints it and Python's
// pt2onnx.pretty() returns it. The text is deterministic (the same file
// gives the same text); external data files are never read.
#pragma once
#include <string>
#include <string_view>

namespace pt2onnx {

// Maps the file (no copy of its weights). Throws pt2onnx::Error on a file
// that cannot be read or is not a valid ONNX model.
std::string pretty_model_file(const std::string& path);
// A serialized ModelProto; `source` names it in errors.
std::string pretty_model_bytes(std::string_view bytes, const std::string& source);

}  // namespace pt2onnx
