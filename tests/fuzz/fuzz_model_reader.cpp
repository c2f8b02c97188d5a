// libFuzzer target: the ONNX model reader and printer on arbitrary bytes. Any input must
// end in a model or pt2onnx::Error: never a crash, leak or UB. Seeded with
// tests/data/onnx/*.onnx.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "onnx/model_reader.h"
#include "onnx/pretty.h"
#include "pt2onnx/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto m =
        pt2onnx::read_model(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    // Touch what the reader promised: initializer bytes lie inside the input.
    volatile uint8_t sink = 0;
    for (auto& init : m.graph.initializers)
      if (init.data.nbytes()) sink = sink + init.data.bytes()[init.data.nbytes() - 1];
    // And print it (pt2onnx show).
    sink = sink + static_cast<uint8_t>(pt2onnx::pretty(m).size());
  } catch (const pt2onnx::Error&) {
  }
  return 0;
}
