#include "archive/zip_reader.h"

#include <cstring>

#include "pt2onnx/error.h"

namespace pt2onnx {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;

// Little-endian reads with bounds checks.
struct Cursor {
  const uint8_t* base;
  size_t size;
  const std::string& what;

  [[noreturn]] void fail(const std::string& why) const { throw Error(what + ": " + why); }
  void need(uint64_t off, uint64_t n, const char* field) const {
    if (off > size || n > size - off)
      fail(std::string(field) + " lies outside the file (truncated or corrupt zip)");
  }
  uint16_t u16(uint64_t off) const {
    need(off, 2, "zip record");
    return static_cast<uint16_t>(base[off] | (base[off + 1] << 8));
  }
  uint32_t u32(uint64_t off) const {
    need(off, 4, "zip record");
    uint32_t v;
    std::memcpy(&v, base + off, 4);
    return v;
  }
  uint64_t u64(uint64_t off) const {
    need(off, 8, "zip record");
    uint64_t v;
    std::memcpy(&v, base + off, 8);
    return v;
  }
};

bool unsafe_name(const std::string& n) {
  if (n.empty() || n[0] == '/' || n.find('\\') != std::string::npos ||
      n.find('\0') != std::string::npos)
    return true;
  size_t start = 0;
  while (start <= n.size()) {
    size_t end = n.find('/', start);
    if (end == std::string::npos) end = n.size();
    if (n.compare(start, end - start, "..") == 0 && end - start == 2) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace

ZipReader::ZipReader(const uint8_t* data, size_t size, std::string what, bool list_compressed)
    : data_(data), size_(size), what_(std::move(what)) {
  Cursor c{data_, size_, what_};
  if (size_ < 22) c.fail("too short to be a zip archive (" + std::to_string(size_) + " bytes)");
  // End of central directory: the last 22 bytes, or earlier with a comment.
  uint64_t eocd = UINT64_MAX;
  uint64_t lowest = size_ > 22 + 65535 ? size_ - 22 - 65535 : 0;
  for (uint64_t p = size_ - 22;; --p) {
    if (c.u32(p) == kEndSig) {
      eocd = p;
      break;
    }
    if (p == lowest) break;
  }
  if (eocd == UINT64_MAX) c.fail("no end-of-central-directory record (not a zip, or truncated)");
  uint64_t count = c.u16(eocd + 10);
  uint64_t cd_size = c.u32(eocd + 12);
  uint64_t cd_offset = c.u32(eocd + 16);
  if (count == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    // zip64: the locator sits right before the end record.
    if (eocd < 20 || c.u32(eocd - 20) != kZip64LocatorSig)
      c.fail("zip64 archive without a zip64 locator");
    uint64_t z64 = c.u64(eocd - 20 + 8);
    if (c.u32(z64) != kZip64EndSig) c.fail("bad zip64 end-of-central-directory signature");
    count = c.u64(z64 + 32);
    cd_size = c.u64(z64 + 40);
    cd_offset = c.u64(z64 + 48);
  }
  c.need(cd_offset, cd_size, "central directory");
  if (count > cd_size / 46) c.fail("central directory claims more entries than it can hold");
  entries_.reserve(static_cast<size_t>(count));
  uint64_t p = cd_offset;
  for (uint64_t i = 0; i < count; ++i) {
    if (c.u32(p) != kCentralSig)
      c.fail("bad central directory entry " + std::to_string(i) + " (wrong signature)");
    uint16_t method = c.u16(p + 10);
    uint64_t csize = c.u32(p + 20);
    uint64_t usize = c.u32(p + 24);
    uint16_t name_len = c.u16(p + 28);
    uint16_t extra_len = c.u16(p + 30);
    uint16_t comment_len = c.u16(p + 32);
    uint64_t local = c.u32(p + 42);
    c.need(p + 46, name_len, "entry name");
    ZipEntry e;
    e.name.assign(reinterpret_cast<const char*>(data_ + p + 46), name_len);
    // zip64 extra field: the fields that are 0xffffffff, in order.
    uint64_t x = p + 46 + name_len, xend = x + extra_len;
    c.need(x, extra_len, "entry extra field");
    while (x + 4 <= xend) {
      uint16_t id = c.u16(x), len = c.u16(x + 2);
      if (x + 4 + len > xend) c.fail("entry '" + e.name + "': malformed extra field");
      if (id == 0x0001) {
        uint64_t q = x + 4, qend = q + len;
        auto take = [&](uint64_t& v) {
          if (v != 0xffffffff) return;
          if (q + 8 > qend) c.fail("entry '" + e.name + "': short zip64 extra field");
          v = c.u64(q);
          q += 8;
        };
        take(usize);
        take(csize);
        take(local);
      }
      x += 4 + len;
    }
    if (unsafe_name(e.name)) c.fail("entry '" + e.name + "' has an unsafe name (absolute or '..')");
    if (method != 0 && !list_compressed)
      c.fail("entry '" + e.name + "' is compressed (method " + std::to_string(method) +
             "); torch archives store entries uncompressed");
    if (method == 0 && csize != usize) c.fail("entry '" + e.name + "': stored sizes disagree");
    if (c.u32(local) != kLocalSig) c.fail("entry '" + e.name + "': bad local header signature");
    // The local header's own name / extra lengths decide where data starts.
    uint64_t data_off = local + 30 + c.u16(local + 26) + c.u16(local + 28);
    c.need(data_off, csize, ("entry '" + e.name + "' data").c_str());
    e.offset = data_off;
    e.size = csize;
    // Listed with list_compressed (TorchScript archives deflate their code).
    e.compressed = method != 0;
    e.method = method;
    e.inflated_size = usize;
    if (!index_.emplace(e.name, entries_.size()).second)
      c.fail("entry '" + e.name + "' appears twice");
    entries_.push_back(std::move(e));
    p += 46 + name_len + extra_len + comment_len;
  }
}

const ZipEntry* ZipReader::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

}  // namespace pt2onnx
