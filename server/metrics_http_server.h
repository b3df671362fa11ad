// A minimal HTTP/1.x server for Prometheus scrapes: GET /metrics answers the
// text `render()` returns; anything else is 404 or 405. One thread, one
// connection at a time, Connection: close, a 2 s read timeout per request.
// (prometheus-cpp's civetweb Exposer cannot start its threads in this
// process: civetweb's fixed thread stack is smaller than the static TLS of
// the linked libraries, e.g. OpenBLAS.)
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "engine/core/status.h"

namespace encoderd::server {

class MetricsHttpServer {
 public:
  // Binds `address`:`port` (IPv4; port 0 picks a free one) and starts serving.
  // `render` is called on the server's thread once per scrape.
  static StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& address, int port,
                                                            std::function<std::string()> render);
  // Stops accepting and joins the thread.
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsHttpServer(int listen_fd, int wake_fd, int port, std::function<std::string()> render);
  void Serve();
  void Answer(int fd);

  const int listen_fd_;
  const int wake_fd_;  // write end of a pipe whose read end wakes Serve() to stop
  int wake_read_fd_ = -1;
  const int port_;
  const std::function<std::string()> render_;
  std::thread thread_;
};

}  // namespace encoderd::server
