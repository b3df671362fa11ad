// A small HTTP/1.x server for Prometheus scrapes: GET /metrics answers the
// text `render()` returns; anything else is 404 or 405; Connection: close.
//
// One thread runs an event loop (poll) over every open connection, so a slow
// or idle client holds only its own connection, never a scrape: each
// connection must deliver its request headers within `timeout` and take the
// whole response within `timeout` after that, or is closed. After the
// response the server ends its side and reads until the client closes
// (within the same time), so that unread bytes do not turn the close into a
// reset that loses the response. At most `max_connections` are open; a new
// one beyond that closes the oldest connection not writing a response (a
// slow-loris client loses its slot to a scraper, not the other way round).
// (prometheus-cpp's civetweb Exposer cannot start its threads in this
// process: civetweb's fixed thread stack is smaller than the static TLS of
// the linked libraries, e.g. OpenBLAS.)
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "core/status.h"

namespace encoderd::server {

struct MetricsHttpOptions {
  // Time a connection has to send its request headers, and then to take the
  // response.
  std::chrono::milliseconds timeout{2000};
  // Connections open at once.
  int max_connections = 256;
};

// The response to one request (its bytes up to the blank line):
// 200 with `render()` for GET /metrics (headers alone for HEAD), otherwise
// 400, 404 or 405; 414 or 431 when the bytes hold no blank line (the read
// limit came first).
std::string MetricsHttpResponse(const std::string& request,
                                const std::function<std::string()>& render);

class MetricsHttpServer {
 public:
  // Binds `address`:`port` (IPv4 or IPv6, ListenTcp; port 0 picks a free one) and starts serving.
  // `render` is called on the server's thread once per scrape.
  static StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& address, int port,
                                                            std::function<std::string()> render,
                                                            MetricsHttpOptions options = {});
  // Stops accepting, closes every connection and joins the thread.
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }
  // How many times the event loop has woken (for tests: a loop that spins
  // on an error it cannot clear shows as a count that keeps climbing).
  uint64_t polls() const { return polls_.load(std::memory_order_relaxed); }

 private:
  MetricsHttpServer(int listen_fd, int wake_fd, int port, std::function<std::string()> render,
                    MetricsHttpOptions options);
  void Serve();

  const int listen_fd_;
  const int wake_fd_;  // write end of a pipe whose read end wakes Serve() to stop
  int wake_read_fd_ = -1;
  const int port_;
  const std::function<std::string()> render_;
  const MetricsHttpOptions options_;
  std::atomic<uint64_t> polls_{0};
  std::thread thread_;
};

}  // namespace encoderd::server
