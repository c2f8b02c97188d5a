// Resolves a program's weights against a WeightSource (see pt2onnx.h).
#pragma once
#include "archive/safetensors.h"
#include "pt2onnx/pt2onnx.h"

namespace pt2onnx {

// `program` with every weight the source holds (files, then memory) in place
// of the caller's view; throws pt2onnx::Error listing every missing, unused
// or mismatched tensor. `files` (the opened source.safetensors_files) may be
// null when there are none.
Weights resolve_weights(const Weights& program, const WeightSource& source,
                        const SafetensorsFiles* files);

}  // namespace pt2onnx
