// Reads the entries of a zip archive held in memory (a mapped file or a
// stored entry of another zip).
//
// Why not libzip / minizip: the converter needs each stored entry's exact
// byte range inside the file, to stream weights from the mapping (or with
// copy_file_range) without copying them; those libraries give decompressed
// streams, not offsets. torch's archives only use STORED entries, so reading
// the central directory (zip64 included) is all there is to it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pt2onnx {

struct ZipEntry {
  std::string name;
  uint64_t offset = 0;  // of the data, from the start of the zip bytes
  uint64_t size = 0;
  // Listed only with list_compressed: offset and size are then the compressed bytes', and
  // inflated_size what they inflate to (torchscript_check.cpp inflates code/ text).
  bool compressed = false;
  uint16_t method = 0;
  uint64_t inflated_size = 0;
};

class ZipReader {
 public:
  // `what` names the archive in error messages. Throws pt2onnx::Error on any
  // inconsistency (truncation, bad signatures, entries outside the file,
  // compressed entries, unsafe names).
  // list_compressed: compressed entries are listed (names only) instead of
  // refused, for telling a file's kind apart (file_kind.cpp).
  ZipReader(const uint8_t* data, size_t size, std::string what, bool list_compressed = false);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(const std::string& name) const;
  const uint8_t* data(const ZipEntry& e) const { return data_ + e.offset; }
  const std::string& what() const { return what_; }

 private:
  const uint8_t* data_;
  size_t size_;
  std::string what_;
  std::vector<ZipEntry> entries_;
  std::map<std::string, size_t> index_;
};

}  // namespace pt2onnx
