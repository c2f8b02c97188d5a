// Symmetric eigenvalues and singular values for static matrix sizes (see
// eigen.cpp), shared with the norm converters.
#pragma once
#include <optional>
#include <string>

#include "convert/context.h"

namespace pt2onnx {

// Singular values of x [..., m, n] (static m, n), descending, in x's type.
std::string singular_values(Ctx& c, const std::string& x);

}  // namespace pt2onnx
