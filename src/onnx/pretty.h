// Text of a model read by onnx/model_reader.h (see include/pt2onnx/pretty.h).
#pragma once
#include <string>

#include "onnx/model_reader.h"

namespace pt2onnx {

std::string pretty(const ReadModel& m);

}  // namespace pt2onnx
