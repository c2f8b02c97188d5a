#include "archive/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "pt2onnx/error.h"

namespace pt2onnx {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO (a hostile checkpoint's "model.safetensors") would otherwise wait
  // for a writer forever; it is refused below, as is every file that is not a regular one.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw Error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw Error("'" + path + "' is not a regular file");
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);  // reads of a file then block
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) return;
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    ::close(fd_);
    throw Error("cannot map '" + path + "': " + std::strerror(e));
  }
  data_ = static_cast<const uint8_t*>(p);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

ZeroPages::ZeroPages(size_t n, const std::string& what) : size_(n) {
  void* p = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw Error(what + ": a fake (empty-storage) tensor of " + std::to_string(n) +
                " bytes cannot be mapped: " + std::strerror(errno));
  data_ = static_cast<const uint8_t*>(p);
}

ZeroPages::~ZeroPages() { ::munmap(const_cast<uint8_t*>(data_), size_); }

void advise_pages(const void* data, size_t size, int advice, bool inner) {
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto p = reinterpret_cast<uintptr_t>(data);
  const uintptr_t b = inner ? (p + page - 1) & ~(page - 1) : p & ~(page - 1);
  const uintptr_t e = inner ? (p + size) & ~(page - 1) : (p + size + page - 1) & ~(page - 1);
  if (size && e > b) ::madvise(reinterpret_cast<void*>(b), e - b, advice);
}

}  // namespace pt2onnx
