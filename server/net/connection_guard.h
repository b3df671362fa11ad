// The gRPC port's front: accepts the TCP connections itself and relays each
// one, through a socketpair, to the gRPC server (which then listens on no
// port of its own), reading the HTTP/2 frame headers on the way
// (Http2Guard). gRPC 1.51, Debian 12's, has no defence against HTTP/2 rapid
// reset or stream floods (upstream added some in 1.60); the guard closes a
// connection whose client abuses streams, with a GOAWAY (ENHANCE_YOUR_CALM)
// when the server's bytes allow one, and counts it. It also caps the open
// connections (a new one beyond the cap is closed at once, with a log line),
// raises the fd limit to what the cap needs, and closes a connection that
// has not sent the HTTP/2 preface within `preface_timeout` or does not take
// what waits for it within `send_timeout`. With a screen,
// it answers the calls the server would refuse at once itself (CallGate),
// so that refusing costs no call through gRPC; and it refuses new calls
// while too many calls' requests have not fully arrived (CallGate again).
//
// One thread runs an epoll loop over every connection; each direction has a
// bounded buffer, and a full buffer stops reading its source (the peer's TCP
// window then pushes back). With TLS, the guard terminates it (a TlsSession
// per connection): it reads and answers the plaintext HTTP/2 inside, and
// gRPC gets plaintext through the socketpair, as on a plaintext port.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "core/status.h"
#include "server/metrics/serving_metrics.h"
#include "server/net/call_gate.h"
#include "server/net/http2_guard.h"
#include "server/net/tls_terminator.h"

namespace encoderd::server {

struct ConnectionGuardOptions {
  // The port, as warnings name it, and the setting that caps its
  // connections.
  std::string name = "gRPC port";
  std::string cap_setting = "listen.max_connections";
  // The `port` label of its connection metrics.
  GuardPort port = GuardPort::kGrpc;
  // Connections open at once.
  int max_connections = 4096;
  // Connections one client address (an IPv6 client's /64) may hold at once;
  // a new one past this is closed at once. 0: no limit.
  int max_connections_per_address = 0;
  // Connections another guard of the process may hold (the health port's):
  // their fds are left out of what this one's cap may use.
  int others_connections = 0;
  // Time a new connection has to send the 24-byte HTTP/2 preface.
  std::chrono::milliseconds preface_timeout{10000};
  // Once bytes wait for a client in the guard's buffer (the kernel's for
  // it being full), or the kernel queues more than buffer_bytes for it, it
  // must take all that was queued for it then within this long, and so on
  // while bytes wait; a connection whose client did not is reset. Such a client stopped reading or
  // reads a trickle, and gRPC would keep the answers it computed for it meanwhile (a client
  // granting the largest HTTP/2 windows gets them all). 0: never.
  std::chrono::milliseconds send_timeout{30000};
  Http2GuardOptions http2;
  // Bytes buffered per connection and direction, give or take what one of
  // the client's frames becomes (at most ~64 KiB: a header block written
  // out) or one read of gRPC's (64 KiB); a client's bytes that would
  // overfill them wait unparsed.
  size_t buffer_bytes = 256 * 1024;
  // How long new connections from an address closed for abuse (or opening
  // too many a second) wait before anything of theirs is read.
  std::chrono::milliseconds tarpit{1000};
  // Asked about every new call before gRPC sees it; a call it refuses is
  // answered by the guard (call_gate.h). Empty: every call goes to gRPC.
  CallScreen screen;
  // Calls whose request has not fully arrived, per connection and in all:
  // new ones past these are answered by the guard (call_gate.h).
  IncompleteRequestLimits incomplete_requests;
  // Set: the port speaks TLS only, terminated here (tls_terminator.h).
  std::shared_ptr<TlsContext> tls;
};

// The connections a process with `fd_limit` fds (ulimit -n) may give one
// guard: three fds each, less 256 kept for everything else and the fds of
// `others_connections` connections of another guard.
int ConnectionsTheFdLimitAllows(uint64_t fd_limit, int others_connections);

class ConnectionGuard {
 public:
  // Binds `address`:`port` (IPv4 or IPv6, ListenTcp; port 0 picks a free one). Each accepted
  // connection becomes one end of a socketpair handed to `attach` (which
  // owns it: grpc::AddInsecureChannelFromFd); the guard relays the bytes
  // between the client and the other end. `metrics` may be null.
  static StatusOr<std::unique_ptr<ConnectionGuard>> Start(const std::string& address, int port,
                                                          std::function<void(int fd)> attach,
                                                          ConnectionGuardOptions options,
                                                          ServingMetrics* metrics);
  // Closes every connection and joins the thread.
  ~ConnectionGuard();
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  int port() const { return port_; }
  // The cap in force (max_connections, lowered to what the fd limit allows).
  int max_connections() const { return options_.max_connections; }
  // How many times the event loop has woken (at least every 100 ms; for
  // tests: a loop spinning on an error it cannot clear keeps it climbing).
  uint64_t wakeups() const;
  // The most bytes a connection's buffer held at once, over every
  // connection and both ways so far: the answers the guard wrote for the
  // client count with the client's side. At most buffer_bytes and ~64 KiB
  // (buffer_bytes).
  uint64_t peak_buffered_bytes() const;
  // Closes the listening socket (new clients are refused by the kernel);
  // open connections go on until either side closes them.
  void StopAccepting();
  // From now on a connection is closed once gRPC has sent it a GOAWAY (as
  // its Shutdown does) at least a second ago, no stream of its client is
  // open, and everything either side sent has been passed on: gRPC's end at
  // once; to the client our side is ended, and the connection closes when
  // the client ends its own, a second after its kernel has acknowledged all
  // it was sent and the FIN, or 5 s on (one whose bytes have all been
  // acknowledged for a second already, an idle one, closes at once). gRPC's
  // Shutdown waits until every connection is closed, and clients do not
  // close an idle one on a GOAWAY: a client holding one open but idle held
  // the drain (4.1 s with one idle grpcio channel, measured with
  // loadtest/scripts/drain_time.py; a client that never closes, up to
  // shutdown.grace_s).
  void Drain();
  // Waits until every connection is closed, or until `deadline`; true when
  // none is left open. After gRPC's Shutdown: each connection then flushes
  // what gRPC sent it, ends our side, and closes at the client's end, a
  // second after the client's kernel has acknowledged all of it and the FIN
  // (kAckedLinger), or 5 s on (kFlushAfterClose). The process exiting before
  // that closed them with answers still queued for the client, and the
  // client's next WINDOW_UPDATE reset the connection, dropping the rest (5
  // of 100 calls answered during a drain, 1 run in 13, in e2e_reliability's
  // shutdown part).
  bool AwaitClosed(std::chrono::steady_clock::time_point deadline);

 private:
  class Loop;
  ConnectionGuard(int port, ConnectionGuardOptions options);

  const int port_;
  ConnectionGuardOptions options_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace encoderd::server
