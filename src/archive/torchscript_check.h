// The TorchScript file check on bytes in memory (check_torchscript_file in
// pt2onnx.h maps the file and calls it): for the fuzzer (tests/fuzz/fuzz_archive.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace pt2onnx {

// `what` names the file in messages. Throws pt2onnx::Error as check_torchscript_file.
void check_torchscript_bytes(const uint8_t* data, size_t size, const std::string& what);

}  // namespace pt2onnx
