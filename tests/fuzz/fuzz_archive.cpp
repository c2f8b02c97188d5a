// libFuzzer target: archive + schema reader, and the TorchScript file check, on
// arbitrary bytes. Any input must end in success or pt2onnx::Error: never a
// crash, leak or UB.
#include <cstddef>
#include <cstdint>

#include "archive/pt2_archive.h"
#include "archive/torchscript_check.h"
#include "schema/program.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto archive = pt2onnx::Pt2Archive::from_memory(data, size, "fuzz");
    pt2onnx::schema::parse_program(archive->program_json(), archive->program_source());
  } catch (const pt2onnx::Error&) {
  }
  try {
    pt2onnx::check_torchscript_bytes(data, size, "fuzz");
  } catch (const pt2onnx::Error&) {
  }
  return 0;
}
