// The pt2onnx command. This scope: --version and --help; converting a
// .pt2 archive arrives with the archive reader.
#include <cstdio>
#include <cstring>
#include <string>

#include "pt2onnx/pt2onnx.h"

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: pt2onnx MODEL.pt2 -o MODEL.onnx [--opset N]\n"
               "       pt2onnx --version | --help\n\n"
               "Converts a torch.export archive to ONNX without Python.\n"
               "Opsets %d..%d. Reading .pt2 archives is not available in this build yet;\n"
               "use pt2onnx.export() from Python.\n",
               pt2onnx::kMinOpset, pt2onnx::kMaxOpset);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string a = argv[1];
  if (a == "--version" || a == "-V") {
    std::printf("pt2onnx %s\n", PT2ONNX_VERSION);
    return 0;
  }
  if (a == "--help" || a == "-h") {
    usage(stdout);
    return 0;
  }
  std::fprintf(stderr, "pt2onnx: converting .pt2 archives is not implemented yet\n");
  usage(stderr);
  return 2;
}
