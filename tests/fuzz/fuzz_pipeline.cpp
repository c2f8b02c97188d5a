// libFuzzer target: the whole pipeline on arbitrary bytes. The archive is read,
// converted, optimized and written into this process's own temporary
// directory. Any input must end in success or pt2onnx::Error (never a crash,
// leak or UB), and a failed conversion must leave no file behind.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "pt2onnx/pt2onnx.h"

namespace fs = std::filesystem;

namespace {

fs::path& out_dir() {
  static fs::path dir;
  return dir;
}

void remove_out_dir() {
  std::error_code ec;
  fs::remove_all(out_dir(), ec);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string dir = (fs::temp_directory_path() / "pt2onnx_fuzz_XXXXXX").string();
  if (!::mkdtemp(dir.data())) {
    std::perror("fuzz_pipeline: mkdtemp");
    std::abort();
  }
  out_dir() = dir;
  std::atexit(remove_out_dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path& dir = out_dir();
  bool converted = false;
  try {
    pt2onnx::convert_buffer(data, size, (dir / "model.onnx").string(), pt2onnx::Options{});
    converted = true;
  } catch (const pt2onnx::Error&) {
  }
  std::vector<fs::path> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path());
  if (!converted && !left.empty()) {
    std::fprintf(stderr, "fuzz_pipeline: a failed conversion left %s behind\n",
                 left.front().c_str());
    std::abort();
  }
  for (const auto& p : left) fs::remove_all(p);  // the next input starts from an empty directory
  return 0;
}
