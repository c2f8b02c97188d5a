// LD_PRELOAD fault injector for the write-safety tests (never linked into
// pt2onnx). Driven by environment variables:
//   PT2ONNX_FAULT_LOG=<file>      append "fsync <path>" / "rename <from> <to>"
//                                 lines, in call order
//   PT2ONNX_FAULT_RENAME=fail     every renameat/rename fails with EIO
//   PT2ONNX_FAULT_ENOSPC=<n>      the n-th and later writes into our files
//                                 fail with ENOSPC (a full disk)
//   PT2ONNX_FAULT_KILL=<ev>:<n>   SIGKILL this process at the n-th <ev>:
//     write         write()/copy_file_range() into a file named .pt2onnx-* or
//                   *.data (the model temporary, the data file)
//     fsync         fsync()
//     rename        just before a rename
//     renamed       just after a rename succeeded
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

std::string fd_path(int fd) {
  char link[64], buf[4096];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = ::readlink(link, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

bool ours(int fd) {
  std::string p = fd_path(fd);
  std::string base = p.substr(p.rfind('/') + 1);
  return base.rfind(".pt2onnx-", 0) == 0 ||
         (base.size() > 5 && base.compare(base.size() - 5, 5, ".data") == 0);
}

void log_line(const std::string& s) {
  const char* f = std::getenv("PT2ONNX_FAULT_LOG");
  if (!f) return;
  int fd = ::open(f, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  std::string line = s + "\n";
  using WriteFn = ssize_t (*)(int, const void*, size_t);
  static auto real = reinterpret_cast<WriteFn>(dlsym(RTLD_NEXT, "write"));
  if (real(fd, line.data(), line.size()) < 0) {
  }
  ::close(fd);
}

// Kills the process at the configured occurrence of `event`.
void maybe_kill(const char* event) {
  const char* spec = std::getenv("PT2ONNX_FAULT_KILL");
  if (!spec) return;
  const char* colon = std::strchr(spec, ':');
  if (!colon || std::strncmp(spec, event, static_cast<size_t>(colon - spec)) != 0 ||
      std::strlen(event) != static_cast<size_t>(colon - spec))
    return;
  static int count = 0;
  if (++count == std::atoi(colon + 1)) ::kill(::getpid(), SIGKILL);
}

// True when this write into one of our files must fail as on a full disk.
bool disk_full(int fd) {
  const char* v = std::getenv("PT2ONNX_FAULT_ENOSPC");
  if (!v || !ours(fd)) return false;
  static int count = 0;
  return ++count >= std::atoi(v);
}

bool rename_fails() {
  const char* v = std::getenv("PT2ONNX_FAULT_RENAME");
  return v && std::strcmp(v, "fail") == 0;
}

template <class Fn>
Fn next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" {

ssize_t write(int fd, const void* buf, size_t n) {
  static auto real = next<ssize_t (*)(int, const void*, size_t)>("write");
  if (fd > 2 && std::getenv("PT2ONNX_FAULT_KILL") && ours(fd)) maybe_kill("write");
  if (fd > 2 && disk_full(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd, buf, n);
}

ssize_t copy_file_range(int in, loff_t* in_off, int out, loff_t* out_off, size_t n,
                        unsigned flags) {
  static auto real =
      next<ssize_t (*)(int, loff_t*, int, loff_t*, size_t, unsigned)>("copy_file_range");
  if (std::getenv("PT2ONNX_FAULT_KILL") && ours(out)) maybe_kill("write");
  if (disk_full(out)) {
    errno = ENOSPC;
    return -1;
  }
  return real(in, in_off, out, out_off, n, flags);
}

int fsync(int fd) {
  static auto real = next<int (*)(int)>("fsync");
  log_line("fsync " + fd_path(fd));
  maybe_kill("fsync");
  return real(fd);
}

int renameat(int olddir, const char* from, int newdir, const char* to) {
  static auto real = next<int (*)(int, const char*, int, const char*)>("renameat");
  log_line("rename " + fd_path(olddir) + "/" + from + " " + fd_path(newdir) + "/" + to);
  maybe_kill("rename");
  if (rename_fails()) {
    errno = EIO;
    return -1;
  }
  int rc = real(olddir, from, newdir, to);
  if (rc == 0) maybe_kill("renamed");
  return rc;
}

int rename(const char* from, const char* to) {
  static auto real = next<int (*)(const char*, const char*)>("rename");
  log_line(std::string("rename ") + from + " " + to);
  maybe_kill("rename");
  if (rename_fails()) {
    errno = EIO;
    return -1;
  }
  int rc = real(from, to);
  if (rc == 0) maybe_kill("renamed");
  return rc;
}

}  // extern "C"
