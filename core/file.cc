#include "core/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace encoderd {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

StatusOr<std::string> ReadWholeFile(const std::string& path, const std::string& what,
                                    FileKind kind) {
  const std::string named = what + " " + path;
  // O_NONBLOCK: opening a FIFO must not wait for a writer before it is
  // refused; it changes nothing for a regular file.
  const int flags = O_RDONLY | O_CLOEXEC | (kind == FileKind::kRegular ? O_NONBLOCK : 0);
  Fd fd(::open(path.c_str(), flags));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFound(named + " does not exist");
    return NotFound("cannot open " + named + ": " + std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return NotFound("cannot open " + named + ": " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return NotFound(named + " is a directory");
  if (kind == FileKind::kRegular && !S_ISREG(st.st_mode)) {
    return NotFound(named + " is not a regular file (a FIFO, socket or device)");
  }
  std::string data;
  if (S_ISREG(st.st_mode)) data.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return DataLoss("error reading " + named + ": " + std::strerror(errno));
    }
    data.append(buffer, static_cast<size_t>(n));
  }
  return data;
}

}  // namespace encoderd
