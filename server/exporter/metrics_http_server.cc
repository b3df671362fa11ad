#include "server/exporter/metrics_http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <vector>

#include "core/listen_socket.h"

namespace encoderd::server {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr size_t kMaxRequestBytes = 8192;
// What is read and dropped after the response, waiting for the client to
// close, before the connection is closed anyway.
constexpr size_t kMaxDrainBytes = 256 * 1024;
// How long accepts stop after accept() fails for want of a descriptor or of
// memory (the pending connection stays, so the socket stays readable).
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

// `head`: the headers a GET would get, no body (HEAD). `extra`: more header
// lines, each ending in CRLF.
std::string Response(const std::string& status, const std::string& type, const std::string& body,
                     bool head = false, const std::string& extra = "") {
  return "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra +
         "Connection: close\r\n\r\n" + (head ? std::string() : body);
}

// Where the request line starts: past any empty lines before it, which a
// server should ignore (RFC 9112 2.2; one was 400 until 2026-12-04).
size_t RequestStart(const std::string& request) {
  size_t at = 0;
  while (at < request.size() && (request[at] == '\r' || request[at] == '\n')) ++at;
  return at;
}

// Where the empty line that ends the headers ends, or npos. Lines may end in
// a bare LF (RFC 9112 2.2 lets a recipient take LF as a line's end; such
// requests got no answer until 2026-12-04).
size_t HeadersEnd(const std::string& request) {
  for (size_t lf = request.find('\n', RequestStart(request)); lf != std::string::npos;
       lf = request.find('\n', lf + 1)) {
    if (lf + 1 < request.size() && request[lf + 1] == '\n') return lf + 2;
    if (lf + 2 < request.size() && request[lf + 1] == '\r' && request[lf + 2] == '\n')
      return lf + 3;
  }
  return std::string::npos;
}

// One client connection: reading its request, writing its response, then
// reading what is left of the request until the client closes (draining).
struct Connection {
  enum class Phase { kReading, kWriting, kDraining };
  int fd = -1;
  Phase phase = Phase::kReading;
  std::string request;
  std::string response;
  size_t sent = 0;
  size_t drained = 0;
  SteadyClock::time_point deadline;
};

}  // namespace

std::string MetricsHttpResponse(const std::string& request,
                                const std::function<std::string()>& render) {
  // The server's read limit came before the blank line: the request is not
  // whole, and is answered as too large, not as what its start says (a GET
  // with 9 KB of headers was rendered, 200, until 2026-12-04).
  const size_t start = RequestStart(request);
  if (HeadersEnd(request) == std::string::npos) {
    return request.find('\n', start) == std::string::npos
               ? Response("414 URI Too Long", "text/plain", "request line too long\n")
               : Response("431 Request Header Fields Too Large", "text/plain",
                          "request headers too large\n");
  }
  std::string line = request.substr(start, request.find('\n', start) - start);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos) return Response("400 Bad Request", "text/plain", "bad request\n");
  const std::string method = line.substr(0, sp1);
  std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  // The absolute form (through a proxy) names the same path after its
  // authority (RFC 9112 3.2.2; it was 404 until 2026-12-04).
  if (const size_t scheme = target.find("://");
      scheme != std::string::npos && target.compare(0, 4, "http") == 0) {
    const size_t path = target.find('/', scheme + 3);
    target = path == std::string::npos ? "/" : target.substr(path);
  }
  target = target.substr(0, target.find('?'));
  const bool head = method == "HEAD";
  if (target != "/metrics") return Response("404 Not Found", "text/plain", "try /metrics\n", head);
  // HEAD, which probes use, is answered as GET without the body; other
  // methods name the ones allowed (RFC 9110 15.5.6; both were a bare 405
  // until 2026-12-04).
  if (method != "GET" && !head)
    return Response("405 Method Not Allowed", "text/plain", "GET only\n", false,
                    "Allow: GET, HEAD\r\n");
  return Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", render(), head);
}

StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, int port, std::function<std::string()> render,
    MetricsHttpOptions options) {
  int bound_port = 0;
  auto listening = ListenTcp(address, port, 128, &bound_port);
  if (!listening.ok()) {
    // "metrics: ... (listen.metrics_port)" says which listener failed.
    const Status& why = listening.status();
    return Status(why.code(), "metrics: " + why.message() +
                                  (why.code() == StatusCode::kInvalidArgument
                                       ? std::string()
                                       : std::string(" (listen.metrics_port)")));
  }
  const int fd = listening.value();
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    close(fd);
    return Unavailable("metrics: cannot create a pipe");
  }
  std::unique_ptr<MetricsHttpServer> server(
      new MetricsHttpServer(fd, pipe_fds[1], bound_port, std::move(render), options));
  server->wake_read_fd_ = pipe_fds[0];
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

MetricsHttpServer::MetricsHttpServer(int listen_fd, int wake_fd, int port,
                                     std::function<std::string()> render,
                                     MetricsHttpOptions options)
    : listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      port_(port),
      render_(std::move(render)),
      options_(options) {}

MetricsHttpServer::~MetricsHttpServer() {
  const char byte = 0;
  if (write(wake_fd_, &byte, 1) < 0) {
    // The pipe cannot be full (one byte, written once); nothing else to do.
  }
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(wake_fd_);
  close(wake_read_fd_);
}

void MetricsHttpServer::Serve() {
  // Each GET /metrics renders here, and anyone who reaches the port can send
  // them in a loop: at nice 10 this thread takes a small share of a core the
  // encoder needs (CFS weight 110 against 1024) and all of an idle one.
  pthread_setname_np(pthread_self(), "metrics-http");
  // Lowering one's own priority is always allowed; nothing to do if not.
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  std::list<Connection> connections;  // oldest first
  std::vector<pollfd> fds;
  const auto close_connection = [&](std::list<Connection>::iterator it) {
    close(it->fd);
    return connections.erase(it);
  };
  SteadyClock::time_point accept_paused_until;  // epoch: not paused
  SteadyClock::time_point accept_failure_logged;
  while (true) {
    const bool accepting = SteadyClock::now() >= accept_paused_until;
    fds.assign(
        {{listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0}, {wake_read_fd_, POLLIN, 0}});
    SteadyClock::time_point next = accepting ? SteadyClock::time_point::max() : accept_paused_until;
    for (const Connection& c : connections) {
      fds.push_back(
          {c.fd, static_cast<short>(c.phase == Connection::Phase::kWriting ? POLLOUT : POLLIN), 0});
      next = std::min(next, c.deadline);
    }
    int wait_ms = -1;
    if (next != SteadyClock::time_point::max()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(next - SteadyClock::now());
      wait_ms = static_cast<int>(std::max<int64_t>(0, left.count() + 1));
    }
    if (poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) break;
    if (fds[1].revents) break;
    polls_.fetch_add(1, std::memory_order_relaxed);
    const SteadyClock::time_point now = SteadyClock::now();

    // Connections first (fds[2..] follow `connections` in order), then new ones.
    size_t i = 2;
    for (auto it = connections.begin(); it != connections.end(); ++i) {
      Connection& c = *it;
      const short events = fds[i].revents;
      bool done = false;
      const auto failed = [] { return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR; };
      if (c.phase == Connection::Phase::kReading && (events & (POLLIN | POLLHUP | POLLERR))) {
        char buffer[2048];
        const ssize_t n = recv(c.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
        if (n > 0) {
          c.request.append(buffer, static_cast<size_t>(n));
        } else if (n == 0 || failed()) {
          done = true;  // closed or failed before a full request
        }
        if (!done &&
            (HeadersEnd(c.request) != std::string::npos || c.request.size() >= kMaxRequestBytes)) {
          c.response = MetricsHttpResponse(c.request, render_);
          c.phase = Connection::Phase::kWriting;
          c.deadline = now + options_.timeout;
        }
      } else if (c.phase == Connection::Phase::kWriting &&
                 (events & (POLLOUT | POLLHUP | POLLERR))) {
        const ssize_t n = send(c.fd, c.response.data() + c.sent, c.response.size() - c.sent,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) c.sent += static_cast<size_t>(n);
        if (n < 0 && failed()) done = true;
        if (c.sent == c.response.size()) {
          // Closing with unread bytes (the rest of a request cut by the
          // read limit, or a body) sends a reset, which can discard the
          // response before the client reads it: end the writing side
          // only, and close once the client has closed (or at the
          // deadline, or past kMaxDrainBytes).
          c.phase = Connection::Phase::kDraining;
          done = shutdown(c.fd, SHUT_WR) != 0;
        }
      } else if (c.phase == Connection::Phase::kDraining &&
                 (events & (POLLIN | POLLHUP | POLLERR))) {
        char buffer[2048];
        const ssize_t n = recv(c.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
        if (n > 0) c.drained += static_cast<size_t>(n);
        if (n == 0 || (n < 0 && failed()) || c.drained > kMaxDrainBytes) done = true;
      }
      if (done || now >= c.deadline) {
        it = close_connection(it);
      } else {
        ++it;
      }
    }
    if (fds[0].revents & POLLIN) {
      while (true) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            // Out of descriptors or memory: the connection stays pending and
            // the socket readable, so polling it again at once would spin.
            accept_paused_until = now + kAcceptPause;
            if (now - accept_failure_logged >= std::chrono::seconds(10)) {
              spdlog::warn("metrics: cannot accept connections: {}; pausing accepts for {} ms",
                           std::strerror(errno), kAcceptPause.count());
              accept_failure_logged = now;
            }
          }
          break;  // EAGAIN: accepted everything pending
        }
        if (static_cast<int>(connections.size()) >= options_.max_connections) {
          auto oldest = std::find_if(
              connections.begin(), connections.end(),
              [](const Connection& c) { return c.phase != Connection::Phase::kWriting; });
          if (oldest == connections.end()) {
            close(fd);  // every slot is writing a response: this one waits for none
            continue;
          }
          close_connection(oldest);
        }
        Connection c;
        c.fd = fd;
        c.deadline = now + options_.timeout;
        connections.push_back(std::move(c));
      }
    }
  }
  for (const Connection& c : connections) close(c.fd);
}

}  // namespace encoderd::server
