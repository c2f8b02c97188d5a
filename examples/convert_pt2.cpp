// Example: embedding the converter in a C++ program.
//
//   convert_pt2 MODEL.pt2 OUT.onnx
//
// Converts the archive twice: from its path (memory-mapped by pt2onnx), and
// from bytes already in memory (as a program that received the archive over
// the network would), then checks that both files are identical.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "pt2onnx/pt2onnx.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL.pt2 OUT.onnx\n", argv[0]);
    return 2;
  }
  pt2onnx::Options options;
  options.opset = 18;
  options.input_dim_names["x"][0] = "batch";  // name a dynamic dim, if x has one
  try {
    pt2onnx::Result r = pt2onnx::convert(argv[1], argv[2], options);
    std::printf("%s: %zu nodes, %zu initializers\n", r.model_path.c_str(), r.nodes, r.initializers);
    for (auto& [stage, seconds] : r.timings)
      std::printf("  %s %.3f ms\n", stage.c_str(), seconds * 1e3);

    std::ifstream in(argv[1], std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::string second = std::string(argv[2]) + ".from_memory.onnx";
    pt2onnx::convert_buffer(bytes.data(), bytes.size(), second, options);
    std::ifstream a(argv[2], std::ios::binary), b(second, std::ios::binary);
    bool same = std::string((std::istreambuf_iterator<char>(a)), {}) ==
                std::string((std::istreambuf_iterator<char>(b)), {});
    std::remove(second.c_str());
    std::printf("in-memory conversion %s\n", same ? "identical" : "DIFFERS");
    return same ? 0 : 1;
  } catch (const pt2onnx::Error& e) {
    std::fprintf(stderr, "conversion failed: %s\n", e.what());
    return 1;
  }
}
