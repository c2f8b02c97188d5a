// Example: a converter written in C++ and registered through
// Options::converters, for an op the built-in registry does not know.
//
//   custom_converter MODEL.pt2 OUT.onnx
//
// The model holds pt2onnx_cc::scale_shift(x, float scale=2.0, float
// shift=0.5) -> x * scale + shift (a torch.library.custom_op of the tests).
// A C++ converter has the signature of the built-in ones (src/convert/): it
// reads the node's arguments through Ctx and emits ONNX nodes through the
// GraphBuilder `c.b`. It compiles against this source tree's headers
// (src/ on the include path); that API follows the tree, not a stable ABI.
#include <cstdio>

#include "convert/context.h"
#include "pt2onnx/pt2onnx.h"

namespace {

void convert_scale_shift(pt2onnx::Ctx& c) {
  std::string x = c.tensor("x");
  pt2onnx::DType t = c.dtype(x);
  // Arguments at their schema default are absent from the program: pass the default.
  std::string scaled = c.b.op("Mul", {x, c.b.scalar(t, c.f("scale", 2.0))});
  c.set_output(0, c.b.op("Add", {scaled, c.b.scalar(t, c.f("shift", 0.5))}));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL.pt2 OUT.onnx\n", argv[0]);
    return 2;
  }
  pt2onnx::Options options;
  options.converters["pt2onnx_cc::scale_shift"] = convert_scale_shift;
  options.input_dim_names["x"][0] = "batch";
  try {
    pt2onnx::Result r = pt2onnx::convert(argv[1], argv[2], options);
    std::printf("%s: %zu nodes\n", r.model_path.c_str(), r.nodes);
    return 0;
  } catch (const pt2onnx::Error& e) {
    std::fprintf(stderr, "conversion failed: %s\n", e.what());
    return 1;
  }
}
