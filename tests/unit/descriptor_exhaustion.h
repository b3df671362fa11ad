// Runs out of file descriptors on purpose, for tests of what a server does
// when accept() fails with EMFILE.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace encoderd::testing {

// While alive, this process has no descriptor left: its soft RLIMIT_NOFILE
// is lowered to a little above the highest descriptor open and the rest are
// taken by /dev/null. Create the sockets a test needs before it.
class DescriptorExhaustion {
 public:
  DescriptorExhaustion() {
    ok_ = getrlimit(RLIMIT_NOFILE, &saved_) == 0;
    if (!ok_) return;
    int highest = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      highest = std::max(highest, std::stoi(entry.path().filename().string()));
    }
    rlimit low = saved_;
    low.rlim_cur = std::min<rlim_t>(saved_.rlim_cur, static_cast<rlim_t>(highest) + 16);
    ok_ = setrlimit(RLIMIT_NOFILE, &low) == 0;
    for (int fd; ok_ && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;)
      fillers_.push_back(fd);
    ok_ = ok_ && errno == EMFILE;
  }
  ~DescriptorExhaustion() { Release(); }
  DescriptorExhaustion(const DescriptorExhaustion&) = delete;
  DescriptorExhaustion& operator=(const DescriptorExhaustion&) = delete;

  // Whether open() ended with EMFILE, as intended.
  bool ok() const { return ok_; }

  // Frees the descriptors and restores the limit (once).
  void Release() {
    for (int fd : fillers_) close(fd);
    fillers_.clear();
    if (restore_) setrlimit(RLIMIT_NOFILE, &saved_);
    restore_ = false;
  }

 private:
  rlimit saved_{};
  std::vector<int> fillers_;
  bool ok_ = false;
  bool restore_ = true;
};

// A client that connects to 127.0.0.1:`port` while this process has no
// descriptor left (so the server's accept() fails with EMFILE), and how
// often the server's loop woke (`wakeups`, a counter the server keeps) in
// the 500 ms after. `client` is the connected socket (-1 on failure), to
// use once the descriptors are free again.
struct StarvedAccept {
  int client = -1;
  uint64_t wakeups = 0;
};

inline StarvedAccept ConnectWhileOutOfDescriptors(int port,
                                                  const std::function<uint64_t()>& wakeups) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  StarvedAccept result;
  const int client = socket(AF_INET, SOCK_STREAM, 0);  // before the descriptors run out
  if (client < 0) return result;
  DescriptorExhaustion exhaustion;
  const bool connected = connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  const uint64_t before = wakeups();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  result.wakeups = wakeups() - before;
  exhaustion.Release();
  if (!exhaustion.ok() || !connected) {
    close(client);
    return result;
  }
  result.client = client;
  return result;
}

}  // namespace encoderd::testing
