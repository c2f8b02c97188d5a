// Internal entries of the common pipeline. The program comes from a reader
// callback: the JSON of an archive or of the Python API (with a name for the
// JSON's source used in error messages), or the Python API's tree of torch's
// schema dataclasses (src/python/program_object.cpp, which takes the GIL
// while it reads). Its time is the "read" stage.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "pt2onnx/pt2onnx.h"
#include "schema/program.h"

namespace pt2onnx {

using ProgramReader = std::function<schema::Program()>;

Result convert_program_from(std::string_view program_json, const std::string& source,
                            const Weights& weights, const std::string& output_path,
                            const Options& options, schema::JsonPlace place = {});

// With weights taken from `source` as well (see WeightSource).
Result convert_read_program(const ProgramReader& read, const Weights& weights,
                            const WeightSource& source, const std::string& output_path,
                            const Options& options);

std::vector<UnsupportedOp> unsupported_ops_of(const ProgramReader& read, const Options& options);

}  // namespace pt2onnx
