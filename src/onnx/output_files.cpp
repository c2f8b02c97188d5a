#include "onnx/output_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <tuple>

#include "pt2onnx/error.h"

namespace pt2onnx {

namespace {

constexpr size_t kNameMax = NAME_MAX;  // longest file name (not path) the kernel takes

[[noreturn]] void sys_fail(const std::string& what, const std::string& path) {
  throw Error(what + " '" + path + "': " + std::strerror(errno));
}

std::string hex64(uint64_t v) {
  static const char* d = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = d[v & 15];
  return s;
}

// FNV-1a: a stable short tag of the target's file name, so temporaries are
// tied to one target without repeating its (possibly 255-byte) name.
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::pair<std::string, std::string> split(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  if (slash == 0) return {"/", path.substr(1)};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

// Follows symlinks at `path` (the link itself is kept; the file it names is
// what gets replaced). A dangling link names the file to create.
std::string resolve_links(std::string path) {
  for (int hops = 0;; ++hops) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return path;
    if (hops >= 40) throw Error("cannot write '" + path + "': too many levels of symbolic links");
    std::string buf(PATH_MAX, '\0');
    ssize_t n = ::readlink(path.c_str(), buf.data(), buf.size());
    if (n < 0) sys_fail("cannot read the symbolic link", path);
    buf.resize(static_cast<size_t>(n));
    if (!buf.empty() && buf[0] == '/')
      path = buf;
    else
      path = (path.find('/') == std::string::npos ? std::string() : split(path).first + "/") + buf;
  }
}

// Holds an exclusive flock for the lifetime of the guard. On file systems
// without flock the guard holds nothing: writing stays correct, only the
// protection of concurrent exports to one directory is lost (and cleanup,
// which needs a lock to tell dead files from live ones, removes nothing).
struct FlockGuard {
  int fd;
  bool held = false;
  explicit FlockGuard(int f) : fd(f) {
    int rc;
    while ((rc = ::flock(fd, LOCK_EX)) != 0 && errno == EINTR) {
    }
    held = rc == 0;
  }
  ~FlockGuard() {
    if (held) ::flock(fd, LOCK_UN);
  }
};

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

bool starts_with(const std::string& s, const std::string& p) {
  return s.compare(0, p.size(), p) == 0;
}
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

uint64_t random64() {
  static std::atomic<uint64_t> counter{0};
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng() ^ (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull) ^ static_cast<uint64_t>(::getpid());
}

}  // namespace

OutputFiles::OutputFiles(const std::string& path) {
  if (path.empty()) throw Error("the output path is empty");
  target_ = resolve_links(path);
  std::tie(dir_, base_) = split(target_);
  if (base_.empty() || base_ == "." || base_ == "..")
    throw Error("cannot write '" + path + "': not a file name");
  tag_ = ".pt2onnx-" + hex64(fnv1a(base_)) + "-";
  dir_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0)
    throw Error("cannot create '" + target_ + "': its directory '" + dir_ +
                "' cannot be opened: " + std::strerror(errno));
  int err = 0;
  {
    FlockGuard lock(dir_fd_);
    cleanup_locked(false);
    for (int attempt = 0; model_fd_ < 0 && err == 0; ++attempt) {
      std::string name = tag_ + hex64(random64()).substr(0, 8) + ".tmp";
      model_fd_ = ::openat(dir_fd_, name.c_str(),
                           O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (model_fd_ >= 0) {
        model_tmp_ = name;
        ::flock(model_fd_, LOCK_EX | LOCK_NB);  // fresh file: nobody else holds it
      } else if (errno != EEXIST || attempt >= 100) {
        err = errno;
      }
    }
  }
  if (err) {
    ::close(dir_fd_);
    dir_fd_ = -1;
    throw Error("cannot create '" + target_ + "': no temporary file can be made in '" + dir_ +
                "': " + std::strerror(err));
  }
}

OutputFiles::~OutputFiles() {
  if (!committed_ && dir_fd_ >= 0) {
    // Unlink before closing: the lock keeps other cleanups off until then.
    if (!model_tmp_.empty()) ::unlinkat(dir_fd_, model_tmp_.c_str(), 0);
    for (auto& d : data_) ::unlinkat(dir_fd_, d.name.c_str(), 0);
  }
  if (model_fd_ >= 0) ::close(model_fd_);
  for (auto& d : data_)
    if (d.fd >= 0) ::close(d.fd);
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

std::string OutputFiles::data_path(size_t i) const {
  const std::string& name = data_[i].name;
  return dir_ == "." && target_.find('/') == std::string::npos ? name : dir_ + "/" + name;
}

bool OutputFiles::is_ours(const std::string& data_name) const {
  for (auto& d : data_)
    if (d.name == data_name) return true;
  return false;
}

// <f>.data as torch.onnx names it, unless that name exists (the current
// model's data, or another export's): then <f>.1.data, <f>.2.data, ...; for
// names too long for that, pt2onnx-<hash>.<n>.data.
size_t OutputFiles::create_data() {
  FlockGuard lock(dir_fd_);
  const std::string hashed = "pt2onnx-" + hex64(fnv1a(base_));
  for (int n = 0; n < 10000; ++n) {
    std::string name = n == 0 ? base_ + ".data" : base_ + "." + std::to_string(n) + ".data";
    if (name.size() > kNameMax) name = hashed + "." + std::to_string(n) + ".data";
    int fd =
        ::openat(dir_fd_, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      sys_fail("cannot create", dir_ + "/" + name);
    }
    ::flock(fd, LOCK_EX | LOCK_NB);
    data_.push_back({name, fd});
    return data_.size() - 1;
  }
  throw Error("cannot pick a free external-data name beside '" + target_ + "'");
}

void OutputFiles::commit() {
  if (::fsync(model_fd_) != 0) sys_fail("cannot write", dir_ + "/" + model_tmp_);
  for (size_t i = 0; i < data_.size(); ++i)
    if (::fsync(data_[i].fd) != 0) sys_fail("cannot write", data_path(i));
  FlockGuard lock(dir_fd_);
  // The data files' directory entries are durable before the model names them.
  if (!data_.empty() && ::fsync(dir_fd_) != 0) sys_fail("cannot write the directory", dir_);
  if (::renameat(dir_fd_, model_tmp_.c_str(), dir_fd_, base_.c_str()) != 0)
    throw Error("cannot rename '" + dir_ + "/" + model_tmp_ + "' to '" + target_ +
                "': " + std::strerror(errno));
  committed_ = true;
  ::fsync(dir_fd_);  // the commit itself is done; a failure here only weakens durability
  cleanup_locked(true);
  // Unlock our files before the directory: once another export commits after
  // this one, its cleanup must be able to remove our data (then unreferenced);
  // a lock held until our destructor would leave it behind as an orphan.
  ::close(model_fd_);
  model_fd_ = -1;
  for (auto& d : data_) {
    ::close(d.fd);
    d.fd = -1;
  }
}

// Under the directory lock. Removes our temporaries of this path that no live
// writer holds (killed runs) and, after a commit, data files of earlier models
// of this path other than the one just committed.
void OutputFiles::cleanup_locked(bool after_commit) {
  DIR* d = ::fdopendir(::dup(dir_fd_));
  if (!d) return;  // cleanup is best effort; the export itself is unaffected
  ::rewinddir(d);  // the dup shares dir_fd_'s offset, left at the end by an earlier scan
  const std::string data_prefix = base_ + ".";
  const std::string hashed = "pt2onnx-" + hex64(fnv1a(base_)) + ".";
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    bool temp = starts_with(name, tag_) && ends_with(name, ".tmp") && name != model_tmp_;
    bool data = false;
    if (after_commit && !is_ours(name) && ends_with(name, ".data")) {
      if (name == base_ + ".data") {
        data = true;
      } else if (starts_with(name, data_prefix) || starts_with(name, hashed)) {
        size_t from = starts_with(name, data_prefix) ? data_prefix.size() : hashed.size();
        data = all_digits(name.substr(from, name.size() - from - 5));
      }
    }
    if (!temp && !data) continue;
    int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    // A live writer holds its files locked; a killed one's lock died with it.
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0)
      ::unlinkat(dir_fd_, name.c_str(), 0);
    ::close(fd);
  }
  ::closedir(d);
}

}  // namespace pt2onnx
