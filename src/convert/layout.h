// Shared by the shape, layout and pad families: integer expressions that fold
// to constants when dims are static and become small int64 graphs otherwise,
// and a few tensor helpers built on them.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "convert/context.h"

namespace pt2onnx::layout {

// An int64 quantity: a constant, or a 1-D int64 value of one element.
struct IE {
  std::optional<int64_t> k;
  std::string v;
  static IE of(int64_t x) { return {x, {}}; }
  bool is(int64_t x) const { return k && *k == x; }
};

IE dim(Ctx& c, const std::string& x, int64_t axis);
IE sym(Ctx& c, const schema::SymIntArg& a);
std::string val(Ctx& c, const IE& e);
// op: Add Sub Mul Div (floor, operands >= 0 or as torch's // for ints) Mod Min Max
IE bin(Ctx& c, const std::string& op, const IE& a, const IE& b);
// A 1-D shape value from per-dim quantities.
std::string shape_of(Ctx& c, const std::vector<IE>& dims);
// Reshape to exactly `dims` (zeros are sizes, not copies, at every opset).
std::string reshape(Ctx& c, const std::string& x, const std::vector<IE>& dims);
// x[start:end:step] along axis (python slicing semantics; Slice clamps).
std::string slice(Ctx& c, const std::string& x, int64_t axis, const IE& start, const IE& end,
                  int64_t step = 1);
// Reverses `axes`.
std::string flip(Ctx& c, const std::string& x, const std::vector<int64_t>& axes);
// ONNX Pad (begins then ends per axis, like its `pads` input), typed;
// bfloat16 goes through float32. `value` is the constant fill (mode constant).
std::string pad(Ctx& c, const std::string& x, const std::vector<IE>& pads,
                const std::string& mode = "constant", std::optional<double> value = std::nullopt);
// A tensor of zeros of type t and shape `dims`.
std::string zeros(Ctx& c, DType t, const std::vector<IE>& dims);
// Every dim of x.
std::vector<IE> dims_of(Ctx& c, const std::string& x);

}  // namespace pt2onnx::layout
