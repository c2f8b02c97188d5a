// Errors raised by every stage of pt2onnx. The message always names the cause
// (node, aten target, source line, file entry) so a user can act on it.
#pragma once
#include <stdexcept>
#include <string>

namespace pt2onnx {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace pt2onnx
