// Internal entry of the common pipeline, with a name for the JSON's source
// (an archive entry) used in error messages.
#pragma once
#include <string>
#include <string_view>

#include "pt2onnx/pt2onnx.h"

namespace pt2onnx {

Result convert_program_from(std::string_view program_json, const std::string& source,
                            const Weights& weights, const std::string& output_path,
                            const Options& options);

}  // namespace pt2onnx
