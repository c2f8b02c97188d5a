#include "onnx/model_writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "archive/mapped_file.h"
#include "onnx/output_files.h"
#include "onnx/wire.h"

namespace pt2onnx {

static_assert(std::endian::native == std::endian::little,
              "ONNX raw_data is little-endian; this writer streams native bytes");

namespace {

using wire::Msg;

constexpr uint64_t kStridedChunk = 4ull << 20;      // strided views go out in pieces this big
constexpr uint64_t kAlign = 4096;                   // external data offsets: page aligned for mmap
constexpr uint64_t kProtoLimit = (2ull << 30) - 1;  // protobuf's 2 GiB message limit

// Copies n bytes of `in_fd` at `in_off` to `out_fd` in the kernel
// (copy_file_range: no pages pass through this process), at *out_off or, when
// it is null, at the file's position. False if the kernel cannot do it here
// (then nothing was copied and the caller writes from memory).
bool kernel_copy(int in_fd, uint64_t in_off, int out_fd, loff_t* out_off, size_t n,
                 const std::string& path) {
  auto from = static_cast<loff_t>(in_off);
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::copy_file_range(in_fd, &from, out_fd, out_off, n - done, 0);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (done == 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL ||
                        errno == EOPNOTSUPP || errno == EBADF))
        return false;
      throw Error("cannot write '" + path + "': " + std::strerror(errno));
    }
    if (w == 0) throw Error("unexpected end of input while copying into '" + path + "'");
    done += static_cast<size_t>(w);
  }
  return true;
}

// pwrite until all n bytes are out, advancing p, n and off as they go; 0, or
// the errno that stopped it.
int pwrite_all(int fd, const uint8_t*& p, size_t& n, uint64_t& off) {
  while (n) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= static_cast<size_t>(w);
    off += static_cast<uint64_t>(w);
  }
  return 0;
}

// Buffered writer over a file descriptor it does not own (OutputFiles does);
// large payloads bypass the buffer.
class FileOut {
 public:
  FileOut(int fd, std::string path) : path_(std::move(path)), fd_(fd) {}
  void put(std::string_view s) {
    if (buf_.size() + s.size() > kBuf) flush();
    if (s.size() >= kBuf) return raw(s.data(), s.size());
    buf_.append(s);
  }
  void put_big(const uint8_t* p, size_t n) {
    if (n < kBuf) return put(std::string_view(reinterpret_cast<const char*>(p), n));
    flush();
    raw(p, n);
  }
  void zeros(size_t n) { put(std::string(n, '\0')); }
  // Copies n bytes of file `fd` at `off` in the kernel (no pages pass through
  // this process). False if the kernel cannot do it here (then nothing was
  // copied and the caller writes from memory).
  bool copy_from(int fd, uint64_t off, size_t n) {
    flush();
    if (!kernel_copy(fd, off, fd_, nullptr, n, path_)) return false;
    written_ += n;
    return true;
  }
  void finish() { flush(); }
  uint64_t written() const { return written_ + buf_.size(); }

 private:
  static constexpr size_t kBuf = 1 << 20;
  void flush() {
    raw(buf_.data(), buf_.size());
    buf_.clear();
  }
  void raw(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    written_ += n;
    while (n) {
      ssize_t w = ::write(fd_, c, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        throw Error("cannot write '" + path_ + "': " + std::strerror(errno));
      }
      c += w;
      n -= static_cast<size_t>(w);
    }
  }
  std::string path_;
  int fd_ = -1;
  std::string buf_;
  uint64_t written_ = 0;
};

// The model in memory (Options::in_memory: a torch.compile backend hands it
// to onnxruntime without a file): the same bytes a file would get.
class MemoryOut {
 public:
  explicit MemoryOut(std::string& out) : out_(out) {}
  void put(std::string_view s) { out_.append(s); }
  void put_big(const uint8_t* p, size_t n) { out_.append(reinterpret_cast<const char*>(p), n); }
  void zeros(size_t n) { out_.append(n, '\0'); }
  bool copy_from(int, uint64_t, size_t) { return false; }  // mapped bytes are read instead
  void finish() {}
  uint64_t written() const { return out_.size(); }

 private:
  std::string& out_;
};

constexpr size_t kKernelCopyMin = 64 << 10;  // below this a memory write is as cheap

// The external data file, written with O_DIRECT where the file system takes
// it: weights that pass through memory anyway (transposed or converted while
// streamed) then go from our buffer to the disk without the kernel's copy
// into the page cache, which costs as much as the transpose itself (measured:
// copy_folio_from_iter was the top symbol of a LLaMA-7B-layout export,
// bench/scale.md). Whole blocks at block-aligned offsets go direct; anything
// else (the file's unaligned tail, a block after an unaligned kernel copy)
// goes through the page cache, so the file's bytes and size are exact.
// Tensors that lie contiguous in a file still go file-to-file
// (copy_file_range). Where O_DIRECT is refused (tmpfs, ...) every write is
// an ordinary pwrite.
class DataOut {
 public:
  DataOut(int fd, std::string path) : path_(std::move(path)), fd_(fd) {
    void* p = nullptr;
    if (::posix_memalign(&p, kBlock, kBuf) != 0) throw Error("out of memory writing " + path_);
    buf_.reset(static_cast<uint8_t*>(p));
    flags_ = ::fcntl(fd_, F_GETFL);
    can_direct_ = flags_ >= 0 && ::fcntl(fd_, F_SETFL, flags_ | O_DIRECT) == 0;
    direct_on_ = can_direct_;
  }
  ~DataOut() {
    try {
      wait();
    } catch (...) {  // the export is failing already; its error is the one reported
    }
  }
  DataOut(const DataOut&) = delete;
  DataOut& operator=(const DataOut&) = delete;
  void put_big(const uint8_t* p, size_t n) {
    while (n) {
      size_t k = std::min(n, kBuf - used_);
      std::memcpy(buf_.get() + used_, p, k);
      used_ += k;
      p += k;
      n -= k;
      if (used_ == kBuf) flush(false);
    }
  }
  void zeros(size_t n) {
    while (n) {
      size_t k = std::min(n, kBuf - used_);
      std::memset(buf_.get() + used_, 0, k);
      used_ += k;
      n -= k;
      if (used_ == kBuf) flush(false);
    }
  }
  // Copies n bytes of file `fd` at `off` in the kernel; false if it cannot.
  bool copy_from(int fd, uint64_t off, size_t n) {
    flush(true);
    direct(false);
    auto out_off = static_cast<loff_t>(file_off_);
    if (!kernel_copy(fd, off, fd_, &out_off, n, path_)) return false;
    file_off_ += n;
    return true;
  }
  void finish() {
    flush(true);
    direct(false);
    wait();
  }
  uint64_t written() const { return file_off_ + used_; }

 private:
  static constexpr size_t kBlock = 4096;
  // 32 MiB a write: the block layer splits it into max_sectors_kb pieces that
  // are in flight at once (one 8 MiB write at a time left a cached-program
  // export of 0.75 GB waiting on the disk: write stage 0.73-0.85 s, 0.59-0.74
  // s with 32 MiB; bench/program_cache.md). Two buffers: 64 MiB of memory.
  static constexpr size_t kBuf = 32 << 20;
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  // A full buffer at an aligned offset, once direct writes have worked:
  // written by a helper thread while the caller fills the other buffer (the
  // transposes and conversions overlap the disk).
  bool write_behind() {
    if (!proven_ || file_off_ % kBlock != 0 || used_ != kBuf) return false;
    wait();
    direct(true);
    if (!direct_on_) return false;
    if (!spare_) {
      void* p = nullptr;
      if (::posix_memalign(&p, kBlock, kBuf) != 0) return false;
      spare_.reset(static_cast<uint8_t*>(p));
    }
    std::swap(buf_, spare_);
    const uint64_t off = file_off_;
    file_off_ += kBuf;
    used_ = 0;
    pending_ = std::async(std::launch::async, [this, p = spare_.get(), off] {
      const uint8_t* q = p;
      size_t n = kBuf;
      uint64_t at = off;
      if (int e = pwrite_all(fd_, q, n, at))
        throw Error("cannot write '" + path_ + "': " + std::strerror(e));
    });
    return true;
  }
  void wait() {
    if (pending_.valid()) pending_.get();  // rethrows the helper's error
  }
  void direct(bool on) {
    on = on && can_direct_;
    if (on == direct_on_) return;
    wait();
    if (::fcntl(fd_, F_SETFL, on ? (flags_ | O_DIRECT) : (flags_ & ~O_DIRECT)) == 0)
      direct_on_ = on;
  }
  // Writes the buffer: up to the next block boundary through the page cache
  // (after an unaligned kernel copy), then whole blocks direct, then (`all`)
  // the remainder through the page cache; what is left moves to the front.
  void flush(bool all) {
    if (!all && write_behind()) return;
    size_t from = 0;
    if (file_off_ % kBlock) {
      from = std::min(used_, static_cast<size_t>(kBlock - file_off_ % kBlock));
      direct(false);
      write_at(buf_.get(), from);
    }
    // Whole blocks from `from`: their source must be block-aligned too.
    size_t whole = (used_ - from) / kBlock * kBlock;
    if (whole) {
      if (from) std::memmove(buf_.get(), buf_.get() + from, used_ - from);
      used_ -= from;
      from = 0;
      direct(true);
      write_at(buf_.get(), whole);
      from = whole;
    }
    if (all && used_ > from) {
      direct(false);
      write_at(buf_.get() + from, used_ - from);
      from = used_;
    }
    std::memmove(buf_.get(), buf_.get() + from, used_ - from);
    used_ -= from;
  }
  void write_at(const uint8_t* p, size_t n) {
    wait();
    while (int e = pwrite_all(fd_, p, n, file_off_)) {
      if (e != EINVAL || !direct_on_)
        throw Error("cannot write '" + path_ + "': " + std::strerror(e));
      direct(false);  // refused after all: through the page cache
      can_direct_ = false;
    }
    if (direct_on_) proven_ = true;
  }
  std::string path_;
  int fd_ = -1;
  int flags_ = 0;
  bool can_direct_ = false, direct_on_ = false, proven_ = false;
  std::unique_ptr<uint8_t, Free> buf_, spare_;
  std::future<void> pending_;
  size_t used_ = 0;
  uint64_t file_off_ = 0;
};

// The bytes of the mapped file a tensor reads: its stored elements' span (a
// bfloat16 weight exported as float32 reads half its output's bytes).
uint64_t mapped_bytes(const TensorData& t) {
  return strided_span_bytes(t.dims, t.strides, dtype_size(t.stored_type())).value_or(0);
}

void advise_mapped(const TensorData& t, int advice, bool inner) {
  if (uint64_t span = mapped_bytes(t)) advise_pages(t.data, span, advice, inner);
}

// Drops pages of a file-backed (read-only, private) mapping after reading
// them, so streaming a large archive does not grow resident memory.
void release_mapped(const TensorData& t) { advise_mapped(t, MADV_DONTNEED, true); }

// Drops a file-backed tensor's pages from this process's mapping and from the
// page cache (pages another process maps, or not yet written back, stay).
void uncache_mapped(const TensorData& t) {
  release_mapped(t);  // a kernel copy leaves them mapped if a pass had read them
  if (uint64_t span = mapped_bytes(t))
    ::posix_fadvise(t.src_fd, static_cast<off_t>(t.src_offset), static_cast<off_t>(span),
                    POSIX_FADV_DONTNEED);
}

// Asks the kernel to read a file-backed tensor ahead: a transposed copy reads
// it column by column, which its fault-time readahead serves in small reads
// from a cold cache.
void prefetch_mapped(const TensorData& t) { advise_mapped(t, MADV_WILLNEED, false); }

// Reads the file-backed tensors a writer will stream ahead of it, on a
// thread of its own, up to kWindow bytes of the files past the one being
// written: the kernel's work of filling the page cache (allocating pages,
// charging them, submitting the reads: a quarter of a cached-program export's
// CPU time, bench/program_cache.md) and the disk's reads run while the writer
// transposes or converts the tensor before. Asked on the writer's thread,
// that work waited for the copy before it and the copy waited for it.
//
// When the tensors come to over `uncache_above` bytes (0: a quarter of the
// machine's memory) it also drops each one from the page cache once the
// writer is done with it. Kept, a 7B checkpoint (13.5 GB on a 24 GB machine)
// filled the page cache halfway through the export and the kernel's reclaim
// of it halved the disk's rates for the rest (0.78 -> 0.37 GB/s in, 1.5 ->
// 0.72 GB/s out; dropped: 24-27 s -> 16-20 s, bench/program_cache.md). A
// smaller stream stays cached for the next export, as `cp` leaves it. The
// drops are made by the same thread as the reads ahead, after them, so a
// read ahead never brings back what was dropped.
class ReadAhead {
 public:
  static constexpr uint64_t kWindow = 128ull << 20;
  // `order`: the tensors in the order the writer will stream them (those not
  // read from a mapped file are skipped).
  ReadAhead(const std::vector<const TensorData*>& order, uint64_t uncache_above) {
    for (const TensorData* t : order)
      if (t->src_fd >= 0) {
        start_.push_back(end_);
        end_ += mapped_bytes(*t);
        tensors_.push_back(t);
      }
    if (!uncache_above) {
      const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
      uncache_above = pages > 0 && page > 0
                          ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 4
                          : UINT64_MAX;
    }
    drop_ = end_ > uncache_above;
    if (tensors_.size() > 1) thread_ = std::thread([this] { run(); });
  }
  ~ReadAhead() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    // Once over all, the thread's drops done or not: what it had not dropped
    // yet, and pages still being read ahead when their tensor was dropped (a
    // read ahead that fell behind the writer), which that drop skipped.
    if (drop_)
      for (const TensorData* t : tensors_) uncache_mapped(*t);
  }
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;
  // Whether this thread reads `t` ahead (else the writer asks for it itself).
  bool covers(const TensorData& t) const { return thread_.joinable() && t.src_fd >= 0; }
  // The writer is done with file-backed `t`: the window moves past it, and it
  // may be dropped.
  void done(const TensorData& t) {
    if (t.src_fd < 0) return;
    {
      std::lock_guard lock(mu_);
      consumed_ += mapped_bytes(t);
      ++done_;
    }
    cv_.notify_all();
  }

 private:
  void run() {
    size_t done = 0;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || start_[i] <= consumed_ + kWindow; });
        if (stop_) return;
        done = done_;
      }
      drop_done(done);
      if (i >= done) prefetch_mapped(*tensors_[i]);  // else the writer is past it
    }
    if (!drop_) return;
    for (;;) {  // every tensor asked for: the rest dropped as the writer ends them
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || done_ > dropped_; });
        if (stop_) return;
        done = done_;
      }
      drop_done(done);
    }
  }
  // Drops the tensors before the n-th from the page cache (when drop_); the
  // thread's only.
  void drop_done(size_t n) {
    for (; dropped_ < n; ++dropped_)
      if (drop_) uncache_mapped(*tensors_[dropped_]);
  }
  std::vector<const TensorData*> tensors_;
  std::vector<uint64_t> start_;  // byte offset of each in the stream of file-backed tensors
  uint64_t end_ = 0, consumed_ = 0;
  size_t done_ = 0;     // tensors the writer is done with (in order)
  size_t dropped_ = 0;  // tensors drop_done has passed
  bool drop_ = false;
  bool stop_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

void tensor_header(Msg& m, const TensorData& t, const std::string& name) {
  for (auto d : t.dims) m.int_field(1, d);
  m.int_field(2, static_cast<int64_t>(t.dtype));
  if (!name.empty()) m.bytes_field(8, name);
}

void write_type(Msg& m, const ValueType& t) {
  Msg tensor;
  tensor.int_field(1, static_cast<int64_t>(t.dtype));
  if (t.shape) {
    Msg shape;
    for (auto& d : *t.shape) {
      Msg dim;
      if (d.is_static())
        dim.int_field(1, d.value);
      else if (!d.sym.empty())
        dim.bytes_field(2, d.sym);
      shape.message(1, dim);
    }
    tensor.message(2, shape);
  }
  Msg type;
  type.message(1, tensor);
  m.message(2, type);
}

Msg value_info(const std::string& name, const ValueType& t) {
  Msg m;
  m.bytes_field(1, name);
  write_type(m, t);
  return m;
}

Msg graph_proto(const Graph& g, int ir_version);

// AttributeProto.type for each kind.
int64_t attr_type_code(Attr::Kind k) {
  switch (k) {
    case Attr::Kind::Float:
      return 1;
    case Attr::Kind::Int:
      return 2;
    case Attr::Kind::String:
      return 3;
    case Attr::Kind::Tensor:
      return 4;
    case Attr::Kind::Graph:
      return 5;
    case Attr::Kind::Floats:
      return 6;
    case Attr::Kind::Ints:
      return 7;
    case Attr::Kind::Strings:
      return 8;
  }
  return 0;
}

Msg attribute(const Attr& a, int ir_version) {
  Msg m;
  m.bytes_field(1, a.name);
  if (!a.ref.empty()) {  // a function body's reference to its caller's attribute
    m.bytes_field(21, a.ref);
    m.int_field(20, attr_type_code(a.kind));
    return m;
  }
  switch (a.kind) {
    case Attr::Kind::Float:
      m.float_field(2, a.f);
      break;
    case Attr::Kind::Int:
      m.int_field(3, a.i);
      break;
    case Attr::Kind::String:
      m.bytes_field(4, a.s);
      break;
    case Attr::Kind::Tensor:
      m.bytes_field(5, tensor_proto_bytes(*a.t, ""));
      break;
    case Attr::Kind::Floats:
      m.packed_floats(7, a.floats);
      break;
    case Attr::Kind::Ints:
      m.packed_ints(8, a.ints);
      break;
    case Attr::Kind::Strings:
      for (auto& s : a.strings) m.bytes_field(9, s);
      break;
    case Attr::Kind::Graph:
      m.message(6, graph_proto(*a.g, ir_version));
      break;
  }
  m.int_field(20, attr_type_code(a.kind));
  return m;
}

Msg node_proto(const Node& n, int ir_version) {
  Msg m;
  for (auto& i : n.inputs) m.bytes_field(1, i);
  for (auto& o : n.outputs) m.bytes_field(2, o);
  m.bytes_field(3, n.name);
  m.bytes_field(4, n.op_type);
  for (auto& a : n.attrs) m.message(5, attribute(a, ir_version));
  if (!n.domain.empty()) m.bytes_field(7, n.domain);
  // Where the node came from: metadata_props (IR >= 10), else doc_string.
  std::vector<std::pair<std::string, std::string>> props;
  if (!n.module_path().empty()) props.emplace_back("namespace", n.module_path());
  if (!n.fx_node().empty()) props.emplace_back("pkg.torch.onnx.fx_node", n.fx_node());
  if (!n.fx_target().empty()) props.emplace_back("pkg.pt2onnx.aten_target", n.fx_target());
  if (ir_version >= 10) {
    for (auto& [k, v] : props) {
      Msg e;
      e.bytes_field(1, k);
      e.bytes_field(2, v);
      m.message(9, e);
    }
  } else if (!props.empty()) {
    std::string doc;
    for (auto& [k, v] : props) doc += (doc.empty() ? "" : "; ") + k + ": " + v;
    m.bytes_field(6, doc);
  }
  return m;
}

// value_info of every typed node output that is not a graph input or output.
void value_infos(Msg& m, const Graph& g) {
  std::unordered_set<std::string> io;
  for (auto& i : g.inputs) io.insert(i.name);
  for (auto& o : g.outputs) io.insert(o.name);
  for (auto& n : g.nodes)
    for (auto& o : n.outputs) {
      if (o.empty() || io.count(o)) continue;
      const ValueType* t = g.type_of(o);
      if (t && t->dtype != DType::Undefined) m.message(13, value_info(o, *t));
    }
}

// A nested graph (If / Loop / Scan body), whole and in memory: its
// initializers are small constants (weights live in the main graph).
Msg graph_proto(const Graph& g, int ir_version) {
  Msg m;
  for (auto& n : g.nodes) m.message(1, node_proto(n, ir_version));
  m.bytes_field(2, g.name);
  for (auto& init : g.initializers) m.bytes_field(5, tensor_proto_bytes(init.data, init.name));
  for (auto& i : g.inputs) m.message(11, value_info(i.name, i.type));
  for (auto& o : g.outputs) m.message(12, value_info(o.name, o.type));
  value_infos(m, g);
  return m;
}

// A model-local function (ModelProto.functions).
Msg function_proto(const Function& f, int ir_version) {
  Msg m;
  m.bytes_field(1, f.name);
  for (auto& i : f.inputs) m.bytes_field(4, i);
  for (auto& o : f.outputs) m.bytes_field(5, o);
  // A name with a default goes in attribute_proto only (ONNX: not both).
  for (auto& a : f.attributes)
    if (std::none_of(f.attribute_defaults.begin(), f.attribute_defaults.end(),
                     [&](const Attr& d) { return d.name == a; }))
      m.bytes_field(6, a);
  for (auto& n : f.nodes) m.message(7, node_proto(n, ir_version));
  if (!f.doc.empty()) m.bytes_field(8, f.doc);
  for (auto& [domain, version] : f.opset_imports) {
    Msg opset;
    opset.bytes_field(1, domain);
    opset.int_field(2, version);
    m.message(9, opset);
  }
  m.bytes_field(10, f.domain);
  for (auto& a : f.attribute_defaults) m.message(11, attribute(a, ir_version));
  return m;
}

}  // namespace

std::string tensor_proto_bytes(const TensorData& t, const std::string& name) {
  Msg m;
  tensor_header(m, t, name);
  if (t.is_contiguous()) {
    m.bytes_field(9, std::string_view(reinterpret_cast<const char*>(t.bytes()), t.nbytes()));
  } else {
    auto c = t.contiguous_copy();
    m.bytes_field(9, std::string_view(reinterpret_cast<const char*>(c.data()), c.size()));
  }
  return m.bytes;
}

namespace {

// One initializer as it will be written: inline or at an offset of a data file.
struct Planned {
  const Initializer* init;
  bool ext;
  uint64_t offset;
  size_t file;  // data file (shard) index
  Msg header;   // TensorProto without its payload (raw_data comes last)
};

// A weight still as the caller gave it: its bytes can stay where they are.
bool caller_bytes(const TensorData& t) {
  return t.data && !t.owned && !t.lazy() && t.src_fd < 0 && t.is_contiguous();
}

void external_entry(Msg& header, const std::string& location, uint64_t offset, uint64_t length) {
  for (auto [k, v] : {std::pair<std::string, std::string>{"location", location},
                      {"offset", std::to_string(offset)},
                      {"length", std::to_string(length)}}) {
    Msg e;
    e.bytes_field(1, k);
    e.bytes_field(2, v);
    header.message(13, e);
  }
  header.int_field(14, 1);  // data_location = EXTERNAL
}

// One buffer, not zeroed, for every initializer the conversion hands over
// in memory that it must make (Options::weights_by_reference), each a slice
// that keeps the whole alive, made by fill() on the cores at hand: the page
// faults of first writes into fresh memory cost as much as computing the
// bytes, and they run in parallel too (ResNet-50's 94 MB of folded conv
// weights: 66 ms through a growing string, 36-41 ms here on 2 cores).
// Measured and left out: MAP_POPULATE (faults taken serially in mmap, 52 ms)
// and madvise(MADV_HUGEPAGE) (the kernel's compaction on fault: 170-260 ms).
class MadeBuffers {
 public:
  static constexpr size_t kAlign = 64;
  explicit MadeBuffers(size_t n) {
    if (!n) return;
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw Error("out of memory for " + std::to_string(n) + " bytes of weights");
    next_ = static_cast<uint8_t*>(p);
    whole_ = std::shared_ptr<uint8_t[]>(next_, [n](uint8_t* q) { ::munmap(q, n); });
  }
  // The `n` bytes of it that tensor `t` is made in (by fill()); each call
  // after the one before.
  std::shared_ptr<uint8_t[]> take(const TensorData& t, size_t n) {
    std::shared_ptr<uint8_t[]> slice(whole_, next_);
    jobs_.push_back({&t, next_, n});
    next_ += room(n);
    return slice;
  }
  // Makes every tensor taken, contiguous, in one pass over its bytes, on up
  // to 4 threads (the page faults of fresh memory and the folding scale).
  void fill() {
    auto make = [](const Job& j) {
      const int64_t rows = j.t->dims.empty() ? 1 : j.t->dims[0];
      if (j.t->lazy())
        j.t->finish_rows(j.t->data, 0, rows, j.out);
      else
        j.t->copy_rows(0, rows, j.out);
    };
    size_t total = 0;
    for (auto& j : jobs_) total += j.n;
    const size_t threads =
        std::clamp<size_t>(std::min<size_t>(std::thread::hardware_concurrency(), 4), 1,
                           std::max<size_t>(1, total >> 22));  // 4 MiB a thread at least
    // Contiguous runs of jobs of about equal bytes, one a thread.
    std::vector<std::future<void>> running;
    size_t start = 0, done = 0;
    for (size_t k = 1; k <= threads; ++k) {
      size_t end = start;
      while (end < jobs_.size() && (k == threads || done < total * k / threads))
        done += jobs_[end++].n;
      auto run = [this, start, end, make] {
        for (size_t i = start; i < end; ++i) make(jobs_[i]);
      };
      if (k == threads)
        run();
      else
        running.push_back(std::async(std::launch::async, run));
      start = end;
    }
    for (auto& f : running) f.get();
    jobs_.clear();
  }
  static size_t room(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

 private:
  struct Job {
    const TensorData* t;
    uint8_t* out;
    size_t n;
  };
  std::shared_ptr<uint8_t[]> whole_;
  uint8_t* next_ = nullptr;
  std::vector<Job> jobs_;
};

// Whether a tensor handed over in memory is made in a MadeBuffers slice:
// not the caller's bytes, not a buffer the conversion made whole already,
// and not read from a mapped file or strided and converted (streamed).
bool made_in_place(const TensorData& t) {
  return !caller_bytes(t) && !(t.owned && !t.lazy() && t.is_contiguous()) && t.src_fd < 0 &&
         (!t.lazy() || t.is_contiguous());
}

MemoryInitializer memory_initializer(const Initializer& init, const WriteOptions& opt,
                                     MadeBuffers& made);

// Plans every initializer; `files` (null: in memory, all inline) gets the
// data files the external ones go to; `refs` (in memory) the initializers
// left in the caller's memory.
std::vector<Planned> plan_initializers(const Graph& g, const WriteOptions& opt, bool external,
                                       OutputFiles* files,
                                       std::vector<MemoryInitializer>* refs = nullptr) {
  std::vector<Planned> plan;
  plan.reserve(g.initializers.size());
  std::unique_ptr<MadeBuffers> made;
  if (!files && refs) {
    size_t n = 0;
    for (auto& init : g.initializers)
      if (init.data.nbytes() >= opt.external_min_tensor_bytes && made_in_place(init.data))
        n += MadeBuffers::room(init.data.nbytes());
    made = std::make_unique<MadeBuffers>(n);
  }
  uint64_t data_end = 0;
  uint64_t inline_bytes = 0;
  for (auto& init : g.initializers) {
    Planned p{&init, false, 0, 0, {}};
    uint64_t nb = init.data.nbytes();
    p.ext = files && external && nb >= opt.external_min_tensor_bytes;
    tensor_header(p.header, init.data, init.name);
    if (!files && refs && nb >= opt.external_min_tensor_bytes) {
      p.ext = true;
      external_entry(p.header, kMemoryLocation, 0, nb);
      refs->push_back(memory_initializer(init, opt, *made));
    } else if (p.ext) {
      p.offset = (data_end + kAlign - 1) / kAlign * kAlign;
      // Shards: a tensor that would pass the limit starts the next file (one
      // larger than the limit fills a file alone: tensors are not split).
      if (files->data_files() == 0 ||
          (opt.shard_bytes && data_end > 0 && p.offset + nb > opt.shard_bytes)) {
        files->create_data();
        p.offset = 0;
      }
      p.file = files->data_files() - 1;
      data_end = p.offset + nb;
      external_entry(p.header, files->data_location(p.file), p.offset, nb);
    } else {
      p.header.tag(9, wire::kLen);
      p.header.varint(nb);
      inline_bytes += nb;
    }
    plan.push_back(std::move(p));
  }
  if (made) made->fill();
  if (inline_bytes > kProtoLimit)
    throw Error("the model's weights (" + std::to_string(inline_bytes) +
                " bytes) exceed protobuf's 2 GiB limit for one file; export with " +
                (files ? "external_data=True (or 'auto')" : "external data, to a file"));
  return plan;
}

// Streams a tensor's bytes to `out`: file to file where the kernel can,
// converted / scaled / made contiguous a few MiB at a time otherwise.
class PayloadWriter {
 public:
  PayloadWriter(const WriteOptions& opt, uint64_t total, ReadAhead* ahead = nullptr)
      : opt_(opt), total_(total), ahead_(ahead) {}

  template <class Out>
  void operator()(Out& out, const TensorData& t) {
    const size_t n = t.nbytes();
    bool copied = false;
    if (t.is_contiguous() && t.src_fd >= 0 && n >= kKernelCopyMin && !t.lazy())
      copied = out.copy_from(t.src_fd, t.src_offset, n);
    if (!copied && t.src_fd >= 0 && !(ahead_ && ahead_->covers(t))) prefetch_mapped(t);
    if (!copied && t.lazy()) {
      // Converted and scaled a few MiB at a time (TensorData::stored, ::scale):
      // never whole in memory.
      const int64_t rows = t.dims.empty() ? 1 : t.dims[0];
      const uint64_t row_elems = rows ? static_cast<uint64_t>(t.numel() / rows) : 0;
      const uint64_t row_in = row_elems * dtype_size(t.stored_type());
      const uint64_t row_out = row_elems * dtype_size(t.dtype);
      const int64_t step = static_cast<int64_t>(
          std::max<uint64_t>(1, kStridedChunk / std::max<uint64_t>(row_in + row_out, 1)));
      const auto chunk = static_cast<size_t>(std::min<int64_t>(step, rows));
      std::vector<uint8_t> in(t.is_contiguous() ? 0 : chunk * row_in), conv(chunk * row_out);
      for (int64_t r = 0; r < rows; r += step) {
        const int64_t e = std::min(rows, r + step);
        const uint8_t* src = t.data + static_cast<uint64_t>(r) * row_in;
        if (!t.is_contiguous()) {
          t.copy_stored_rows(r, e, in.data());
          src = in.data();
        }
        t.finish_rows(src, r, e, conv.data());
        out.put_big(conv.data(), static_cast<size_t>(e - r) * row_out);
      }
      if (t.src_fd >= 0) release_mapped(t);
    } else if (!copied) {
      if (t.is_contiguous()) {
        out.put_big(t.bytes(), n);
      } else {
        // A strided view (a weight folded into its transposed layout): made
        // contiguous a few MiB at a time, never a second copy of the tensor.
        const int64_t rows = t.dims.empty() ? 1 : t.dims[0];
        const uint64_t row_bytes = rows ? n / static_cast<uint64_t>(rows) : 0;
        const int64_t step = static_cast<int64_t>(
            std::max<uint64_t>(1, kStridedChunk / std::max<uint64_t>(row_bytes, 1)));
        std::vector<uint8_t> buf(static_cast<size_t>(std::min<int64_t>(step, rows) * row_bytes));
        for (int64_t r = 0; r < rows; r += step) {
          const int64_t e = std::min(rows, r + step);
          t.copy_rows(r, e, buf.data());
          out.put_big(buf.data(), static_cast<size_t>((e - r) * static_cast<int64_t>(row_bytes)));
        }
      }
      if (t.src_fd >= 0) release_mapped(t);
    }
    if (ahead_) ahead_->done(t);
    done_ += n;
    if (opt_.progress) opt_.progress("writing", total_ ? static_cast<double>(done_) / total_ : 1.0);
  }

 private:
  const WriteOptions& opt_;
  uint64_t total_, done_ = 0;
  ReadAhead* ahead_;
};

// An initializer handed over in memory (Options::weights_by_reference): the
// caller's bytes where they lie; a tensor the conversion made contiguous and
// whole already, its own buffer; any other (a strided view, a lazily
// converted or scaled weight) made once, contiguous, into a new buffer.
// Either way no second copy of the bytes goes through a serialized model.
MemoryInitializer memory_initializer(const Initializer& init, const WriteOptions& opt,
                                     MadeBuffers& made) {
  const TensorData& t = init.data;
  MemoryInitializer m{init.name, t.data,    nullptr, static_cast<int32_t>(t.dtype),
                      t.dims,    t.nbytes()};
  if (caller_bytes(t)) return m;
  if (t.owned && !t.lazy() && t.is_contiguous()) {
    m.data = t.owned->data();
    m.owner = t.owned;
    return m;
  }
  if (made_in_place(t)) {  // filled by made.fill()
    std::shared_ptr<uint8_t[]> buf = made.take(t, m.nbytes);
    m.data = buf.get();
    m.owner = std::move(buf);
    return m;
  }
  auto buf = std::make_shared<std::string>();  // mapped, or strided and converted: streamed
  buf->reserve(m.nbytes);
  MemoryOut out(*buf);
  WriteOptions quiet = opt;  // not part of the model's write: no progress
  quiet.progress = nullptr;
  PayloadWriter payload(quiet, m.nbytes);
  payload(out, t);
  m.data = buf->data();
  m.owner = std::move(buf);
  return m;
}

// The ModelProto: header, nodes, initializers (inline payloads streamed by
// `payload`), inputs / outputs / value infos, functions.
template <class Out>
void put_model(Out& out, const Graph& g, const WriteOptions& opt, const std::vector<Planned>& plan,
               PayloadWriter& payload) {
  // Everything but the initializers, serialized in memory (small).
  Msg nodes_part;
  for (auto& n : g.nodes) nodes_part.message(1, node_proto(n, opt.ir_version));
  Msg tail;
  tail.bytes_field(2, g.name);
  for (auto& i : g.inputs) tail.message(11, value_info(i.name, i.type));
  for (auto& o : g.outputs) tail.message(12, value_info(o.name, o.type));
  value_infos(tail, g);

  uint64_t graph_len = nodes_part.size() + tail.size();
  for (auto& p : plan) {
    uint64_t len = p.header.size() + (p.ext ? 0 : p.init->data.nbytes());
    graph_len += wire::varint_size((5 << 3) | wire::kLen) + wire::varint_size(len) + len;
  }

  Msg head;
  head.int_field(1, opt.ir_version);
  head.bytes_field(2, "pt2onnx");
  head.bytes_field(3, PT2ONNX_VERSION);
  {
    Msg opset;
    opset.bytes_field(1, "");
    opset.int_field(2, opt.opset);
    head.message(8, opset);
  }
  for (auto& [domain, version] : g.domain_versions) {
    Msg opset;
    opset.bytes_field(1, domain);
    opset.int_field(2, version);
    head.message(8, opset);
  }
  head.tag(7, wire::kLen);
  head.varint(graph_len);

  out.put(head.bytes);
  out.put(nodes_part.bytes);
  for (auto& p : plan) {
    Msg prefix;
    uint64_t len = p.header.size() + (p.ext ? 0 : p.init->data.nbytes());
    prefix.tag(5, wire::kLen);
    prefix.varint(len);
    out.put(prefix.bytes);
    out.put(p.header.bytes);
    if (!p.ext) payload(out, p.init->data);
  }
  out.put(tail.bytes);
  Msg functions;
  for (auto& f : g.functions) functions.message(25, function_proto(f, opt.ir_version));
  out.put(functions.bytes);
  out.finish();
}

uint64_t weight_bytes(const Graph& g) {
  uint64_t n = 0;
  for (auto& init : g.initializers) n += init.data.nbytes();
  return n;
}

}  // namespace

WriteResult write_model(const Graph& g, const std::string& path, const WriteOptions& opt) {
  WriteResult result;
  result.weight_bytes = weight_bytes(g);

  bool external = opt.external_data == ExternalData::Always ||
                  (opt.external_data == ExternalData::Auto &&
                   result.weight_bytes > opt.external_data_threshold);
  // Temporary model file now, data files under their final fresh names (the
  // model names them), made while planning: nothing at `path` changes before
  // files.commit().
  OutputFiles files(path);
  // Plan: which tensors go to the side file and at which offsets.
  std::vector<Planned> plan = plan_initializers(g, opt, external, &files);
  // The order put_model and the data files below stream the payloads in.
  std::vector<const TensorData*> order;
  for (auto& p : plan)
    if (!p.ext) order.push_back(&p.init->data);
  for (size_t f = 0; f < files.data_files(); ++f)
    for (auto& p : plan)
      if (p.ext && p.file == f) order.push_back(&p.init->data);
  ReadAhead ahead(order, opt.uncache_sources_above);
  PayloadWriter payload(opt, result.weight_bytes, &ahead);
  {
    FileOut out(files.model_fd(), files.model_temp_path());
    put_model(out, g, opt, plan, payload);
  }
  for (size_t f = 0; f < files.data_files(); ++f) {
    DataOut out(files.data_fd(f), files.data_path(f));
    for (auto& p : plan) {
      if (!p.ext || p.file != f) continue;
      out.zeros(p.offset - out.written());
      payload(out, p.init->data);
    }
    out.finish();
    result.data_paths.push_back(files.data_path(f));
  }
  files.commit();
  return result;
}

std::string write_model_bytes(const Graph& g, const WriteOptions& opt, uint64_t* weights,
                              std::vector<MemoryInitializer>* refs) {
  const uint64_t total = weight_bytes(g);
  if (weights) *weights = total;
  std::vector<Planned> plan = plan_initializers(g, opt, false, nullptr, refs);
  std::string bytes;
  bytes.reserve((refs ? 0 : total) + (1 << 16));
  MemoryOut out(bytes);
  PayloadWriter payload(opt, total);
  put_model(out, g, opt, plan, payload);
  return bytes;
}

}  // namespace pt2onnx
