// A read-only memory map of a whole file (weights are read in place).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace pt2onnx {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// madvise(advice) on the pages of [data, data + size) of a file mapping. inner: only the whole
// pages inside the range (for MADV_DONTNEED: the neighbouring bytes may be in use); otherwise
// every page the range touches (MADV_WILLNEED).
void advise_pages(const void* data, size_t size, int advice, bool inner);

// n zero bytes that cost no memory: a read-only anonymous mapping, whose
// pages all read as the kernel's one zero page. Fake tensors (empty storage
// files) point here, so a tiny hostile archive naming a huge one cannot
// exhaust memory.
class ZeroPages {
 public:
  ZeroPages(size_t n, const std::string& what);
  ~ZeroPages();
  ZeroPages(const ZeroPages&) = delete;
  ZeroPages& operator=(const ZeroPages&) = delete;
  const uint8_t* data() const { return data_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pt2onnx
