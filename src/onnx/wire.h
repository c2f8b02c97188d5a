// Protobuf wire-format primitives for the ONNX writer.
//
// Why not libprotobuf: a ModelProto built with it must hold every weight's
// bytes inside the message (a full copy of the model in memory) and cannot
// exceed 2 GiB. Writing the wire format ourselves lets the writer stream each
// weight from its own memory straight to the file, with no copy and no size
// limit, and computing message lengths up front is simple for ONNX's schema.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace pt2onnx::wire {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5 };

inline size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// An append-only message under construction.
class Msg {
 public:
  std::string bytes;

  void varint(uint64_t v) {
    while (v >= 0x80) {
      bytes.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    bytes.push_back(static_cast<char>(v));
  }
  void tag(uint32_t field, WireType t) { varint((static_cast<uint64_t>(field) << 3) | t); }
  void int_field(uint32_t field, int64_t v) {
    tag(field, kVarint);
    varint(static_cast<uint64_t>(v));  // negatives: ten-byte two's complement, as protobuf
  }
  void float_field(uint32_t field, float v) {
    tag(field, kFixed32);
    char b[4];
    std::memcpy(b, &v, 4);
    bytes.append(b, 4);
  }
  void bytes_field(uint32_t field, std::string_view s) {
    tag(field, kLen);
    varint(s.size());
    bytes.append(s);
  }
  void message(uint32_t field, const Msg& m) { bytes_field(field, m.bytes); }
  void packed_ints(uint32_t field, const std::vector<int64_t>& v) {
    Msg inner;
    for (auto x : v) inner.varint(static_cast<uint64_t>(x));
    bytes_field(field, inner.bytes);
  }
  void packed_floats(uint32_t field, const std::vector<float>& v) {
    bytes_field(
        field, std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  }
  size_t size() const { return bytes.size(); }
};

}  // namespace pt2onnx::wire
