#include "server/net/connection_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/listen_socket.h"

namespace encoderd::server {
namespace {

using Clock = std::chrono::steady_clock;

// fds one connection holds: the client's socket, our end of the socketpair,
// and gRPC's end.
constexpr int kFdsPerConnection = 3;
// fds kept for everything else (models, logs, metrics, health).
constexpr rlim_t kSpareFds = 256;
// How long a connection closed for abuse may take to receive our GOAWAY,
// and one whose server side closed to receive what is left.
constexpr auto kFlushAfterAbuse = std::chrono::milliseconds(500);
constexpr auto kFlushAfterClose = std::chrono::seconds(5);
// New connections from an address closed for abuse within kAbuserMemory
// wait options.tarpit before anything of theirs is read.
constexpr auto kAbuserMemory = std::chrono::seconds(10);
// New connections an address may open per second before the next ones wait
// the tarpit too.
constexpr int kNewPerAddressPerSecond = 200;
// Accepting pauses this long after running out of fds or memory.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
// Draining, a connection without open streams is closed this long after
// gRPC's GOAWAY: streams its client sent before the GOAWAY reached it have
// arrived by then (gRPC clients retry those the GOAWAY left unprocessed
// anyway).
constexpr auto kDrainLinger = std::chrono::seconds(1);
// Once our side to a client is ended, the connection is closed when the
// client ends its own, or once the client's kernel has acknowledged all we
// sent and the FIN for this long: acknowledged is in its receive buffer,
// not yet read, and a client that writes (a WINDOW_UPDATE) to a closed
// socket is reset, and may drop what it had not read yet. An idle grpcio
// channel does not close on the FIN for seconds.
constexpr auto kAckedLinger = std::chrono::seconds(1);
// Reads of a client's socket (64 KiB each) per epoll event.
constexpr int kReadsPerEvent = 4;
// A client's bytes read are passed through the parsers a frame at a time
// (at most kMaxSliceBytes of one), each only while the buffers have room:
// what one frame becomes is bounded, what many do is not. A refused call's
// 10-byte HEADERS frame becomes an answer of up to ~300 bytes (call_gate.cc,
// TrailersOnlyResponse); a HEADERS frame of a few bytes whose table entries
// the gate writes out as literals, a block of up to 64 KiB. A whole 64 KiB
// read parsed at once put ~460 KB of answers in a 64 KiB buffer (measured:
// http2_guard_test.cc), and could put ~130 MB of blocks toward gRPC. What
// does not fit waits, unparsed, until the buffers drain (FeedClient).
constexpr size_t kMaxSliceBytes = 16 * 1024;

// Events of one kind counted between log lines, a line at most every 10 s,
// written by the loop's sweep: Due hands the count over and restarts it.
struct LogTally {
  int64_t count = 0;
  Clock::time_point logged;
  bool Due(Clock::time_point now, int64_t* n) {
    if (count == 0 || now - logged < std::chrono::seconds(10)) return false;
    *n = count;
    count = 0;
    logged = now;
    return true;
  }
};

// A byte queue: appended at the back, written from the front.
struct Buffer {
  std::string bytes;
  size_t front = 0;
  size_t size() const { return bytes.size() - front; }
  bool empty() const { return size() == 0; }
  void Append(const char* data, size_t n) {
    if (front > 0 && front == bytes.size()) {
      bytes.clear();
      front = 0;
    }
    bytes.append(data, n);
  }
  // Writes what it can to `fd`; false on an error other than EAGAIN.
  bool WriteTo(int fd) {
    while (!empty()) {
      const ssize_t n = send(fd, bytes.data() + front, size(), MSG_NOSIGNAL);
      if (n < 0) {
        // A reader that never empties the buffer must not make it grow
        // with every byte relayed: drop what was written once it is most.
        if (front >= 64 * 1024 && front * 2 >= bytes.size()) {
          bytes.erase(0, front);
          front = 0;
        }
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      }
      front += static_cast<size_t>(n);
    }
    Clear();
    return true;
  }
  void Clear() {
    bytes.clear();
    front = 0;
  }
};

}  // namespace

class ConnectionGuard::Loop {
 public:
  Loop(int listen_fd, std::function<void(int)> attach, const ConnectionGuardOptions& options,
       ServingMetrics* metrics)
      : listen_fd_(listen_fd),
        attach_(std::move(attach)),
        options_(options),
        metrics_(metrics),
        epoll_fd_(epoll_create1(EPOLL_CLOEXEC)),
        wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        incomplete_{options.incomplete_requests} {}

  ~Loop() {
    for (auto& [id, c] : conns_) CloseBoth(c.get());
    if (listen_fd_ >= 0) close(listen_fd_);
    if (epoll_fd_ >= 0) close(epoll_fd_);
    if (wake_fd_ >= 0) close(wake_fd_);
  }

  bool ok() const { return epoll_fd_ >= 0 && wake_fd_ >= 0; }
  uint64_t wakeups() const { return wakeups_.load(std::memory_order_relaxed); }
  uint64_t peak_buffered_bytes() const { return peak_buffered_.load(std::memory_order_relaxed); }

  void Run();
  // From other threads.
  void Stop() {
    stop_.store(true);
    Wake();
  }
  void Drain() {
    draining_.store(true);
    Wake();
  }
  bool AwaitClosed(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return closed_cv_.wait_until(lock, deadline, [this] { return open_ == 0 || exited_; }) &&
           open_ == 0;
  }
  void StopAccepting() {
    std::future<void> closed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_accepting_requested_) return;
      stop_accepting_requested_ = true;
      if (exited_) {  // the loop is gone: close the socket here
        if (listen_fd_ >= 0) close(listen_fd_);
        listen_fd_ = -1;
        return;
      }
      closed = listen_closed_.get_future();
    }
    Wake();
    closed.wait();
  }

 private:
  struct Conn {
    uint64_t id = 0;
    int client = -1;
    int server = -1;
    // gRPC's end of the socketpair until HandOver gives it to gRPC; -1 then.
    int grpc_end = -1;
    std::string ip;  // the address's bytes (PeerAddress's key)
    std::string peer;
    Clock::time_point accepted;
    // Held (tarpit) until then, neither read nor attached; epoch: not held.
    Clock::time_point held_until;
    Buffer to_server;
    Buffer to_client;  // as sent: TLS records on a TLS port
    // The client's bytes read (decrypted, on a TLS port) but not yet passed
    // through the parsers: they wait for room in the buffers (FeedClient).
    std::string held;
    // The connection's TLS (options.tls); null on a plaintext port.
    std::unique_ptr<TlsSession> tls;
    Http2Guard guard;
    // Answers the calls the screen refuses, and those past the bounds on
    // incomplete requests.
    std::unique_ptr<CallGate> gate;
    // With the gate off, the guard's count of the connection's incomplete
    // requests, as added to the total (incomplete_.open).
    int64_t off_counted = 0;
    bool was_held = false;  // tarpitted when accepted
    bool client_eof = false;
    bool server_eof = false;
    bool server_shut = false;  // our write side to gRPC shut after the client's end
    bool client_shut = false;  // our write side to the client shut after gRPC's end
    // Closed for abuse: the server side is gone; flushing to the client
    // until `close_by`.
    bool abusive = false;
    bool finished = false;  // in done_
    Clock::time_point close_by;
    // Draining: since when the client's kernel has acknowledged all we sent
    // (after client_shut, the FIN too), as Sweep saw it; epoch: not yet, or
    // bytes were written since.
    Clock::time_point acked_since;
    // When gRPC's first GOAWAY came through; epoch: none yet.
    Clock::time_point goaway_at;
    // Bytes written to the client's socket so far. Once bytes wait in
    // to_client (the kernel's buffer for the client full), or the kernel
    // queues more than buffer_bytes for it, the client must take everything
    // queued for it at `owed_since` (the kernel's queue and to_client),
    // `owed_through` bytes in all, within send_timeout (OwesTooLong);
    // epoch: it owes nothing.
    uint64_t client_written = 0;
    Clock::time_point owed_since;
    uint64_t owed_through = 0;
    // client_written when the kernel's queue for the client was last looked
    // at (OwesTooLong), and when.
    uint64_t written_at_check = 0;
    Clock::time_point queue_checked;
    uint32_t client_events = 0;
    uint32_t server_events = 0;
    Conn(const Http2GuardOptions& o, std::shared_ptr<ResetBudget> budget)
        : guard(o, std::move(budget)) {}
  };

  // epoll user data: the connection id, shifted, with the low bit for the side.
  static constexpr uint64_t kListen = 0, kWake = 1;
  static uint64_t Key(uint64_t id, bool server) { return (id << 1) | (server ? 1 : 0); }

  void Wake() {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  void Accept();
  // Gives the connection its socketpair and starts relaying; false when no
  // socketpair could be made. gRPC gets the other end from HandOver.
  bool Attach(Conn* c);
  // Hands gRPC its end of an attached connection, unless the connection
  // was closed meanwhile (then closes it): at the end of each Update.
  void HandOver(Conn* c);
  void OnClient(Conn* c, uint32_t events);
  // One read of the client's bytes into scratch_: how many (0 or less:
  // none; client_eof set at its end or on an error).
  ssize_t RecvClient(Conn* c);
  void OnServer(Conn* c, uint32_t events);
  // Reads what gRPC's end wrote and passes it on toward the client: while
  // to_client has room, or all of it once that end is closed (`closed`:
  // nothing else will read it, and it holds at most a socket buffer more).
  // Sets server_eof at its end.
  void ReadServer(Conn* c, bool closed);
  void Update(Conn* c);
  void Abuse(Conn* c, Http2Verdict verdict);
  // Queues n plaintext bytes for the client (as TLS records on a TLS port).
  void ToClient(Conn* c, const char* data, size_t n) {
    if (n == 0) return;
    if (!c->tls) return c->to_client.Append(data, n);
    tls_out_.clear();
    c->tls->ToClient(data, n, &tls_out_);
    c->to_client.Append(tls_out_.data(), tls_out_.size());
  }
  // On a TLS port, queues the session's close_notify for the client (once;
  // TlsSession::Close): before our side of an orderly end, after all else.
  // Only after whole frames of gRPC's: an end inside one (gRPC gone, or the
  // guard closing it for abuse mid-frame) stays a cut to the client's TLS.
  void EndTls(Conn* c) {
    if (!c->tls || !c->guard.server_at_frame_boundary()) return;
    tls_out_.clear();
    c->tls->Close(&tls_out_);
    c->to_client.Append(tls_out_.data(), tls_out_.size());
  }
  // Writes what the client's socket takes of to_client; false on an error.
  // What is left waits: from now the client owes what is queued for it,
  // unless it already owes something (OwesTooLong).
  bool FlushToClient(Conn* c) {
    const size_t before = c->to_client.size();
    if (!c->to_client.WriteTo(c->client)) return false;
    if (c->to_client.size() < before) c->acked_since = Clock::time_point();
    c->client_written += before - c->to_client.size();
    if (!c->to_client.empty() && c->owed_since == Clock::time_point()) Owe(c, Clock::now());
    return true;
  }
  // From `now`, the client owes what is queued for it.
  static void Owe(Conn* c, Clock::time_point now) {
    c->owed_since = now;
    c->owed_through = c->client_written + c->to_client.size();
  }
  // What the kernel holds for the client on `fd`: written, not yet
  // acknowledged (after our SHUT_WR, the FIN counts as a byte).
  static uint64_t Unacknowledged(int fd) {
    int queued = 0;
    return ioctl(fd, SIOCOUTQ, &queued) == 0 ? static_cast<uint64_t>(std::max(queued, 0))
                                             : uint64_t{0};
  }
  // How long the client's kernel has held all we sent (once our side is
  // ended, the FIN included), as seen at each Sweep since the last write;
  // zero while it does not.
  static Clock::duration AckedFor(Conn* c, Clock::time_point now) {
    if (Unacknowledged(c->client) > 0) {
      c->acked_since = Clock::time_point();
      return Clock::duration::zero();
    }
    if (c->acked_since == Clock::time_point()) c->acked_since = now;
    return now - c->acked_since;
  }
  // Writes what gRPC's end takes of to_server. An error there is gRPC's end
  // gone (it closes after its last answers: a drain, a connection's max
  // age): then what the client sent it is dropped, and what gRPC sent, read
  // to its end first (a write fails as soon as gRPC closes, its last bytes
  // perhaps still unread), is flushed to the client (Update), not dropped
  // with the connection.
  void FlushToServer(Conn* c) {
    if (c->to_server.WriteTo(c->server)) return;
    ReadServer(c, /*closed=*/true);
    c->to_server.Clear();
    c->server_eof = true;
  }
  void CloseBoth(Conn* c) {
    if (c->client >= 0) close(c->client);
    if (c->server >= 0) close(c->server);
    if (c->grpc_end >= 0) close(c->grpc_end);
    c->client = c->server = c->grpc_end = -1;
  }
  // Closes the connection; reaped at the end of the loop's pass (once,
  // however often it is called).
  void Finish(Conn* c) {
    CloseBoth(c);
    c->held = std::string();
    ServerGone(c);
    idle_.erase(c->id);
    if (c->finished) return;
    c->finished = true;
    done_.push_back(c->id);
    if (options_.max_connections_per_address > 0) {
      auto held = per_address_.find(c->ip);
      if (held != per_address_.end() && --held->second <= 0) per_address_.erase(held);
    }
  }
  void Sweep(Clock::time_point now);
  // Bytes waited for the client in the guard send_timeout ago, and it has
  // not taken all that was queued for it then (a client that stopped
  // reading, or reads a trickle to look alive). One that took it all owes
  // what is queued now, if bytes still wait in the guard, for send_timeout
  // more. A client reading as fast as its link allows never owes more than
  // the kernel's buffer (sized to the link) and the guard's; a gRPC client
  // reads its socket whatever its application does (HTTP/2 flow control
  // holds gRPC's answers back instead).
  bool OwesTooLong(Conn* c, Clock::time_point now) {
    if (c->owed_since == Clock::time_point()) {
      // The kernel's buffer for a client grows to megabytes (net.ipv4.tcp_wmem)
      // before anything waits in the guard's: a client that stopped reading
      // holds those too. Looked at once a second, if bytes were written since.
      if (c->client_written != c->written_at_check &&
          now - c->queue_checked >= std::chrono::seconds(1)) {
        c->written_at_check = c->client_written;
        c->queue_checked = now;
        if (Unacknowledged(c->client) > options_.buffer_bytes) Owe(c, now);
      }
      return false;
    }
    if (now - c->owed_since < options_.send_timeout) return false;
    const uint64_t queued = std::min(Unacknowledged(c->client), c->client_written);
    if (c->client_written - queued < c->owed_through) return true;
    if (c->to_client.empty()) {
      c->owed_since = Clock::time_point();
    } else {
      Owe(c, now);
    }
    return false;
  }
  // gRPC's end of the connection is closed: none of its calls counts as
  // incomplete any more.
  void ServerGone(Conn* c) {
    c->gate->ServerGone();
    incomplete_.open -= c->off_counted;
    c->off_counted = 0;
  }
  // With the gate off, the guard's own count of the connection's incomplete
  // requests stands in the total; false when that closed the connection: over
  // max_incomplete_requests, or over the total while holding its fair share.
  bool CountWhileOff(Conn* c);
  // Draining: gRPC's GOAWAY went out kDrainLinger ago, no stream is open,
  // and nothing is left to pass on either way (Drain()).
  bool Drained(const Conn& c, Clock::time_point now) const {
    return draining_.load() && !c.abusive && c.server >= 0 && c.goaway_at != Clock::time_point() &&
           now - c.goaway_at >= kDrainLinger && c.guard.open_streams() == 0 &&
           c.guard.server_at_frame_boundary() && c.to_server.empty() && c.to_client.empty() &&
           c.gate->pending_bytes() == 0 && c.held.empty();
  }
  // Room for what the client's next bytes become, in bytes: in gRPC's
  // buffer, and for the guard's answers to the client (a client that does
  // not read them stops being read).
  size_t Room(const Conn& c) const {
    const size_t used = Used(c);
    return used < options_.buffer_bytes ? options_.buffer_bytes - used : 0;
  }
  // The fuller of the connection's two buffers, in bytes (the guard's
  // answers waiting for a frame boundary count with the client's side).
  static size_t Used(const Conn& c) {
    return std::max(c.to_server.size(), c.to_client.size() + c.gate->pending_bytes());
  }
  // Whether to read the client's socket: nothing of it is held, and there
  // is room.
  bool ClientReadable(const Conn& c) const { return c.held.empty() && Room(c) > 0; }
  // Passes n plaintext bytes of the client through the parsers, a frame
  // at a time while there is room (kMaxSliceBytes); the rest goes to
  // c->held. False when the connection was closed on the way (for abuse,
  // or finished): then nothing is held.
  bool FeedClient(Conn* c, const char* data, size_t n);
  // One slice: false when the connection was closed.
  bool RelayFromClient(Conn* c, const char* data, size_t n);
  // Feeds the held bytes of a connection whose buffers drained (drain_).
  void FeedHeld(Conn* c);
  // Queues the connection for FeedHeld at the end of the loop's pass if it
  // holds bytes and its buffers have room for some.
  void QueueHeld(const Conn& c) {
    if (!c.held.empty() && Room(c) > 0) drain_.push_back(c.id);
  }
  // The most a connection's buffers held one way, so far (peak_buffered_).
  void NotePeak(const Conn& c) {
    const uint64_t now = Used(c);
    if (now > peak_buffered_.load(std::memory_order_relaxed))
      peak_buffered_.store(now, std::memory_order_relaxed);
  }
  void SetInterest(int fd, uint64_t key, uint32_t want, uint32_t* have) {
    if (fd < 0 || want == *have) return;
    epoll_event ev{};
    ev.events = want;
    ev.data.u64 = key;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
    *have = want;
  }
  void Closed(ConnectionClose reason) {
    if (metrics_) metrics_->ObserveConnectionClosed(options_.port, reason);
  }
  // Connections open: those in conns_ not yet reaped after Finish().
  int64_t Open() const { return static_cast<int64_t>(conns_.size() - done_.size()); }
  void ReportOpen() {
    if (metrics_) metrics_->SetOpenConnections(options_.port, Open());
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = Open();
    }
    closed_cv_.notify_all();
  }

  int listen_fd_;
  std::function<void(int)> attach_;
  const ConnectionGuardOptions options_;
  ServingMetrics* const metrics_;
  const int epoll_fd_;
  const int wake_fd_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> wakeups_{0};
  std::atomic<uint64_t> peak_buffered_{0};
  std::mutex mu_;
  bool stop_accepting_requested_ = false;
  bool accepting_ = true;  // the loop thread's view: no Attach once false
  bool exited_ = false;
  std::promise<void> listen_closed_;
  int64_t open_ = 0;  // Open(), as the loop last reported it
  std::condition_variable closed_cv_;
  // Calls whose request has not fully arrived, every gate's (declared
  // before conns_: the gates give theirs back as they go); and the refusals
  // logged so far, and when.
  IncompleteRequests incomplete_;
  int64_t incomplete_refusals_logged_ = 0;
  Clock::time_point incomplete_logged_;
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::vector<uint64_t> done_;
  // Connections with bytes held whose buffers have room again (Update):
  // fed at the end of the loop's pass.
  std::vector<uint64_t> drain_;
  // Connections that have not opened a stream, oldest (lowest id) first.
  std::set<uint64_t> idle_;
  // Addresses whose connection was closed for abuse, and when.
  std::unordered_map<std::string, Clock::time_point> abusers_;
  // New connections per address in the current second.
  struct NewConnections {
    Clock::time_point since;
    int count = 0;
  };
  std::unordered_map<std::string, NewConnections> new_connections_;
  // Premature resets each address with open connections may still make.
  std::unordered_map<std::string, std::shared_ptr<ResetBudget>> reset_budgets_;
  uint64_t next_id_ = 1;
  // Evictions and refusals at the cap since the last log line, and when
  // that was.
  int64_t evicted_at_cap_ = 0;
  // Accepting paused (out of fds) until then; epoch: not paused.
  Clock::time_point accept_paused_until_;
  Clock::time_point fds_logged_;
  int64_t refused_at_cap_ = 0;
  Clock::time_point cap_logged_;
  // Connections each address holds (with max_connections_per_address), and
  // those refused for it since the last log line (and the last one's peer).
  std::unordered_map<std::string, int> per_address_;
  LogTally refused_per_address_;
  std::string refused_peer_;
  // Connections closed for send_timeout since the last log line.
  LogTally send_timeouts_;
  std::vector<char> scratch_ = std::vector<char>(64 * 1024);
  std::string relay_;    // what a CallGate passes on, per read
  std::string plain_;    // what a TlsSession decrypted, per read
  std::string tls_out_;  // what a TlsSession wrote for the client
};

void ConnectionGuard::Loop::Run() {
  // SCHED_BATCH: a packet arriving while the engine computes does not
  // preempt it; the guard runs at the end of the engine's time slice and
  // handles every packet that came meanwhile in one pass (one write per
  // connection for many refusals). On an idle CPU it runs at once. Measured
  // on 2 vCPUs at 2-8x capacity: goodput 95-107% of capacity instead of
  // 59-95%, refusals still within ~5 ms (docs/reliability.md).
  sched_param param{};
  if (sched_setscheduler(0, SCHED_BATCH, &param) != 0)
    spdlog::debug("connection guard: SCHED_BATCH: {}", std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListen;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = kWake;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  std::vector<epoll_event> events(256);
  Clock::time_point next_sweep = Clock::now();
  while (!stop_.load()) {
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()),
                             drain_.empty() ? 100 : 0);
    wakeups_.fetch_add(1, std::memory_order_relaxed);
    if (n < 0 && errno != EINTR) {
      spdlog::error("connection guard: epoll_wait: {}", std::strerror(errno));
      break;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t key = events[i].data.u64;
      if (key == kListen) {
        Accept();
      } else if (key == kWake) {
        uint64_t count;
        (void)!read(wake_fd_, &count, sizeof(count));
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_accepting_requested_ && listen_fd_ >= 0) {
          epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
          close(listen_fd_);
          listen_fd_ = -1;
          listen_closed_.set_value();
          accepting_ = false;
          // Connections gRPC has not seen yet are closed: the server drains.
          for (auto& [id, conn] : conns_)
            if (conn->server < 0 && conn->client >= 0 && !conn->abusive) Finish(conn.get());
        }
      } else {
        auto it = conns_.find(key >> 1);
        if (it == conns_.end() || it->second->client < 0) continue;
        if (key & 1) {
          OnServer(it->second.get(), events[i].events);
        } else {
          OnClient(it->second.get(), events[i].events);
        }
      }
    }
    std::vector<uint64_t> drain;
    drain.swap(drain_);
    for (uint64_t id : drain) {
      auto it = conns_.find(id);
      if (it != conns_.end()) FeedHeld(it->second.get());
    }
    const Clock::time_point now = Clock::now();
    if (now >= next_sweep) {
      Sweep(now);
      next_sweep = now + std::chrono::milliseconds(100);
    }
    if (!done_.empty()) {
      for (uint64_t id : done_) conns_.erase(id);
      done_.clear();
      ReportOpen();
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    exited_ = true;
    if (stop_accepting_requested_ && listen_fd_ >= 0) {
      close(listen_fd_);
      listen_fd_ = -1;
      listen_closed_.set_value();
    }
  }
  closed_cv_.notify_all();
}

void ConnectionGuard::Loop::Accept() {
  while (true) {
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    const int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The pending connection stays, so the socket stays readable: stop
        // watching it for a while instead of spinning on the error (the
        // accept loop of CVE-2023-4785), and say so at most every 10 s.
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        accept_paused_until_ = Clock::now() + kAcceptPause;
        if (Clock::now() - fds_logged_ >= std::chrono::seconds(10)) {
          spdlog::warn("{}: cannot accept connections: {}; pausing accepts for {} ms",
                       options_.name, std::strerror(errno), kAcceptPause.count());
          fds_logged_ = Clock::now();
        }
      }
      return;  // EAGAIN: accepted everything pending
    }
    std::string ip, peer_text;
    PeerAddress(peer, &ip, &peer_text);
    // An address holding its share is refused before anyone makes room.
    if (options_.max_connections_per_address > 0) {
      auto held = per_address_.find(ip);
      if (held != per_address_.end() && held->second >= options_.max_connections_per_address) {
        close(fd);
        Closed(ConnectionClose::kAddressCap);
        ++refused_per_address_.count;
        refused_peer_ = std::move(peer_text);
        continue;
      }
    }
    // At the cap, the oldest connection that has not opened a stream (no
    // preface yet, only a preface, or held) makes room: idle junk cannot
    // lock legitimate clients out. With none such, the new one is closed.
    if (Open() >= options_.max_connections) {
      const bool evict = !idle_.empty();
      if (evict) {
        // Finish()ed, it stays in conns_ (and in done_) until this pass of
        // the loop ends, like every finished connection: the count above
        // is conns_ less done_.
        Closed(ConnectionClose::kEvictedIdle);
        Finish(conns_.at(*idle_.begin()).get());
        ++evicted_at_cap_;
      } else {
        close(fd);
        Closed(ConnectionClose::kConnectionCap);
        ++refused_at_cap_;
      }
      const Clock::time_point now = Clock::now();
      if (now - cap_logged_ >= std::chrono::seconds(10)) {
        spdlog::warn(
            "{}: connection cap reached: {} connections open ({}); since the last such line {} "
            "idle connection(s) (no stream opened) closed for new ones, {} new connection(s) "
            "closed at once",
            options_.name, Open(), options_.cap_setting, evicted_at_cap_, refused_at_cap_);
        evicted_at_cap_ = refused_at_cap_ = 0;
        cap_logged_ = now;
      }
      if (!evict) continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const Clock::time_point now = Clock::now();
    std::shared_ptr<ResetBudget>& budget = reset_budgets_[ip];
    if (!budget) budget = std::make_shared<ResetBudget>(options_.http2.premature_reset_rate);
    auto c = std::make_unique<Conn>(options_.http2, budget);
    c->gate = std::make_unique<CallGate>(&options_.screen, &incomplete_);
    if (options_.tls) c->tls = std::make_unique<TlsSession>(options_.tls);
    c->id = next_id_++;
    c->client = fd;
    c->ip = std::move(ip);
    c->peer = std::move(peer_text);
    c->accepted = now;
    // An address whose connection was closed for abuse lately, or that opens
    // connections faster than kNewPerAddressPerSecond: its new connections
    // wait options_.tarpit before a byte is read, so reconnecting costs an attacker
    // time and the server nothing.
    const bool abuser = abusers_.count(c->ip) > 0 && now - abusers_[c->ip] < kAbuserMemory;
    NewConnections& rate = new_connections_[c->ip];
    if (now - rate.since >= std::chrono::seconds(1)) rate = {now, 0};
    const bool churning = ++rate.count > kNewPerAddressPerSecond;
    if (abuser || churning) {
      c->held_until = now + options_.tarpit;
      c->was_held = true;
    }
    epoll_event ev{};
    ev.events = c->client_events = abuser || churning ? 0 : EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = Key(c->id, false);
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->client, &ev) != 0) {
      close(fd);
      continue;
    }
    idle_.insert(c->id);
    if (options_.max_connections_per_address > 0) ++per_address_[c->ip];
    conns_.emplace(c->id, std::move(c));
    ReportOpen();
  }
}

bool ConnectionGuard::Loop::Attach(Conn* c) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) {
    spdlog::warn("connection guard: socketpair: {}", std::strerror(errno));
    return false;
  }
  c->server = pair[0];
  epoll_event ev{};
  ev.events = c->server_events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = Key(c->id, true);
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->server, &ev) != 0) {
    close(pair[1]);
    return false;  // Finish closes pair[0]
  }
  // gRPC names the connection after its fd (the peer string the screen gets).
  c->gate->set_peer("fd:" + std::to_string(pair[1]));
  // Handed to gRPC once the bytes read with the preface are through the
  // guard (HandOver): a client whose preface and abuse come in one read
  // never reaches gRPC.
  c->grpc_end = pair[1];
  return true;
}

void ConnectionGuard::Loop::HandOver(Conn* c) {
  if (c->grpc_end < 0) return;
  const int fd = c->grpc_end;
  c->grpc_end = -1;
  if (c->abusive || c->server < 0) {
    close(fd);
    return;
  }
  // gRPC's end stays non-blocking: its event engine expects that.
  attach_(fd);
}

ssize_t ConnectionGuard::Loop::RecvClient(Conn* c) {
  const ssize_t n = recv(c->client, scratch_.data(), scratch_.size(), 0);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
    c->client_eof = true;
  return n;
}

void ConnectionGuard::Loop::OnClient(Conn* c, uint32_t events) {
  if (c->held_until != Clock::time_point()) {
    if (events & (EPOLLHUP | EPOLLERR)) Finish(c);  // gave up while held
    return;
  }
  if ((events & EPOLLERR) || ((events & EPOLLHUP) && !c->client_shut)) {
    // The client is gone both ways (a reset or a full close): nothing more
    // can reach it, and what it sent last would answer no one. (Once our
    // side is ended, EPOLLHUP is only the client ending its own, which a
    // client may do while still reading: closed with its last bytes unread,
    // the connection would be reset and what it had not read dropped. Its
    // bytes are read to the end first, below.)
    return Finish(c);
  }
  int pending = 0;
  if (c->tls && c->tls->handshake_bytes() == 0 && (events & EPOLLRDHUP) &&
      ioctl(c->client, FIONREAD, &pending) == 0 && pending > 0) {
    // A ClientHello sent and left: the client ended its side before the
    // session read a byte, so before the server's first flight went out,
    // and it can never send the Finished that answers it. Closed unread, no
    // key exchange or signature made for it (a flood of these:
    // loadtest/scripts/tls_handshake_flood.py). A connection that sent
    // nothing before its end (a TCP probe) goes the usual way below.
    spdlog::debug("closing the connection from {}: gone before its TLS handshake", c->peer);
    Closed(ConnectionClose::kTls);
    // Not once more for an address already held for opening too many.
    if (!c->was_held) abusers_[c->ip] = Clock::now();
    return Finish(c);
  }
  if ((c->client_shut || c->server_eof) && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP))) {
    // gRPC is gone (and all it sent is out, or being flushed): the client's
    // bytes answer no one and are dropped until its end (Update). Relayed,
    // they would find no gRPC end: one more connection to gRPC (Attach),
    // or, draining, the connection closed with its answers still queued.
    for (int reads = 0; reads < kReadsPerEvent && !c->client_eof; ++reads) {
      if (RecvClient(c) <= 0) break;
    }
    return Update(c);
  }
  if (events & (EPOLLIN | EPOLLRDHUP)) {
    // At most kReadsPerEvent reads per event, so that one client sending
    // faster than the loop handles it (TLS records that decrypt to nothing,
    // tiny records) cannot keep the loop from every other connection: the
    // rest is read on the loop's next pass (epoll is level-triggered).
    for (int reads = 0;
         reads < kReadsPerEvent && !c->client_eof && !c->abusive && ClientReadable(*c); ++reads) {
      const ssize_t n = RecvClient(c);
      if (n <= 0) break;
      const char* got = scratch_.data();
      size_t got_n = static_cast<size_t>(n);
      if (c->tls) {
        plain_.clear();
        tls_out_.clear();
        const bool ok = c->tls->FromClient(got, got_n, &plain_, &tls_out_);
        c->to_client.Append(tls_out_.data(), tls_out_.size());
        if (!ok) {
          // A plaintext client on a TLS port, a client certificate refused,
          // a record that does not decrypt: the alert goes out if it can.
          spdlog::debug("closing the connection from {}: {}", c->peer, c->tls->error());
          Closed(ConnectionClose::kTls);
          // Its address's next connections wait the tarpit, as an abuser's:
          // each failed handshake cost the loop a private-key operation.
          abusers_[c->ip] = Clock::now();
          (void)FlushToClient(c);
          return Finish(c);
        }
        // A close_notify: what came before it is relayed, then the end.
        if (c->tls->client_closed()) c->client_eof = true;
        got = plain_.data();
        got_n = plain_.size();
        if (got_n == 0) continue;
      }
      if (!FeedClient(c, got, got_n)) return;
    }
  }
  if (events & EPOLLOUT || !c->to_client.empty()) {
    if (!FlushToClient(c)) {
      Finish(c);
      return;
    }
  }
  Update(c);
}

bool ConnectionGuard::Loop::FeedClient(Conn* c, const char* data, size_t n) {
  while (n > 0 && Room(*c) > 0) {
    const size_t slice = std::min(
        c->guard.ClientToFrameEnd(reinterpret_cast<const uint8_t*>(data), n), kMaxSliceBytes);
    if (!RelayFromClient(c, data, slice)) return false;
    data += slice;
    n -= slice;
  }
  c->held.append(data, n);
  // The buffers only grew meanwhile (nothing was written): their peak.
  NotePeak(*c);
  return true;
}

bool ConnectionGuard::Loop::RelayFromClient(Conn* c, const char* got, size_t got_n) {
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(got);
  const size_t preface = std::min(c->guard.preface_left(), got_n);
  const Http2Verdict verdict = c->guard.FromClient(bytes, got_n, Clock::now());
  if (verdict != Http2Verdict::kOk) {
    Abuse(c, verdict);
    return false;
  }
  if (c->guard.not_http2()) {
    spdlog::debug("closing the connection from {}: not HTTP/2", c->peer);
    Closed(ConnectionClose::kBadPreface);
    Finish(c);
    return false;
  }
  // gRPC sees a connection only once its client sent the preface.
  if (c->server < 0 && c->guard.preface_received() && (!accepting_ || !Attach(c))) {
    Finish(c);
    return false;
  }
  relay_.assign(got, preface);
  c->gate->FromClient(bytes + preface, got_n - preface, &relay_);
  c->to_server.Append(relay_.data(), relay_.size());
  const std::vector<uint32_t> answered = c->gate->TakeAnswered();
  for (uint32_t stream : answered) c->guard.Ended(stream);
  const int64_t refused = c->gate->TakeRefusedIncomplete();
  if (metrics_) {
    for (size_t i = static_cast<size_t>(refused); i < answered.size(); ++i)
      metrics_->ObserveAnsweredByGuard();
    for (int64_t i = 0; i < refused; ++i) metrics_->ObserveRefusedIncomplete();
  }
  relay_.clear();
  c->gate->Flush(&relay_);
  ToClient(c, relay_.data(), relay_.size());
  if (!CountWhileOff(c)) return false;
  if (c->gate->broken()) {
    spdlog::debug("closing the connection from {}: its header blocks can no longer be followed",
                  c->peer);
    Closed(ConnectionClose::kBadHeaders);
    Finish(c);
    return false;
  }
  if (c->guard.streams() > 0) idle_.erase(c->id);
  return true;
}

void ConnectionGuard::Loop::FeedHeld(Conn* c) {
  if (c->held.empty() || c->client < 0 || c->abusive) return;
  const std::string held = std::move(c->held);
  c->held.clear();
  if (!FeedClient(c, held.data(), held.size())) return;
  Update(c);
}

void ConnectionGuard::Loop::OnServer(Conn* c, uint32_t events) {
  if (c->abusive || c->server < 0) return;
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    ReadServer(c, events & (EPOLLHUP | EPOLLERR));
    if (!CountWhileOff(c)) return;
  }
  if (!c->server_eof && (events & EPOLLOUT || !c->to_server.empty())) FlushToServer(c);
  Update(c);
}

void ConnectionGuard::Loop::ReadServer(Conn* c, bool closed) {
  while (!c->server_eof && (closed || c->to_client.size() < options_.buffer_bytes)) {
    const ssize_t n = recv(c->server, scratch_.data(), scratch_.size(), 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      c->server_eof = true;
      break;
    }
    if (n < 0) break;
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(scratch_.data());
    c->guard.FromServer(bytes, static_cast<size_t>(n));
    if (c->goaway_at == Clock::time_point() && c->guard.server_goaway())
      c->goaway_at = Clock::now();
    relay_.clear();
    c->gate->FromServer(bytes, static_cast<size_t>(n), &relay_);
    ToClient(c, relay_.data(), relay_.size());
  }
}

// Flushes what can be flushed and sets what each fd is watched for. The
// client's end of stream is passed on to gRPC once everything before it is;
// once gRPC's end closes, what it sent is flushed and the connection closes.
void ConnectionGuard::Loop::Update(Conn* c) {
  if (c->client < 0) return;
  if (c->tls && c->tls->failed()) {
    spdlog::debug("closing the connection from {}: {}", c->peer, c->tls->error());
    Closed(ConnectionClose::kTls);
    return Finish(c);
  }
  NotePeak(*c);
  HandOver(c);
  if (c->abusive || c->server_eof) EndTls(c);  // flushed with the rest
  if (!c->to_client.empty() && !FlushToClient(c)) return Finish(c);
  if (c->abusive || c->server_eof) {
    c->held = std::string();  // answers no one now
    if (c->abusive && c->to_client.empty()) return Finish(c);
    if (c->server >= 0) {  // gRPC is done: flush to the client, for a while
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->server, nullptr);
      close(c->server);
      c->server = -1;
      ServerGone(c);
      c->close_by = Clock::now() + kFlushAfterClose;
    }
    if (!c->to_client.empty()) {
      SetInterest(c->client, Key(c->id, false), EPOLLOUT, &c->client_events);
      return;
    }
    // All of gRPC's bytes are with the kernel. Closing now, with bytes from
    // the client unread (a WINDOW_UPDATE, a PING sent while it read), would
    // send RST and drop what the kernel still queues for it: end our side
    // instead, and read (and drop) the client's bytes until its end, until
    // kAckedLinger after the client's kernel has acknowledged everything
    // (Sweep), or until close_by.
    if (!c->client_shut) {
      shutdown(c->client, SHUT_WR);
      c->client_shut = true;
      c->acked_since = Clock::time_point();  // the FIN's acknowledgement counts
    }
    if (c->client_eof) return Finish(c);
    SetInterest(c->client, Key(c->id, false), EPOLLIN | EPOLLRDHUP, &c->client_events);
    return;
  }
  if (c->server < 0) {  // not attached yet: reading the preface
    if (c->client_eof && c->held.empty()) return Finish(c);
    QueueHeld(*c);
    // With TLS the server's handshake records go out before the preface
    // comes: what did not fit in the socket waits for EPOLLOUT.
    SetInterest(c->client, Key(c->id, false),
                (ClientReadable(*c) ? EPOLLIN | EPOLLRDHUP : 0) |
                    (c->to_client.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT)),
                &c->client_events);
    return;
  }
  if (!c->to_server.empty()) {
    FlushToServer(c);
    if (c->server_eof) return Update(c);
  }
  if (c->client_eof && c->to_server.empty() && c->held.empty() && !c->server_shut) {
    shutdown(c->server, SHUT_WR);
    c->server_shut = true;
  }
  uint32_t client = 0;
  if (!c->client_eof && ClientReadable(*c)) client |= EPOLLIN | EPOLLRDHUP;
  if (!c->to_client.empty()) client |= EPOLLOUT;
  uint32_t server = 0;
  if (c->to_client.size() < options_.buffer_bytes) server |= EPOLLIN | EPOLLRDHUP;
  if (!c->to_server.empty()) server |= EPOLLOUT;
  SetInterest(c->client, Key(c->id, false), client, &c->client_events);
  SetInterest(c->server, Key(c->id, true), server, &c->server_events);
  QueueHeld(*c);
}

void ConnectionGuard::Loop::Abuse(Conn* c, Http2Verdict verdict) {
  spdlog::warn(
      "{}: closing the connection from {}: {} ({} streams opened, {} reset within {} ms of "
      "opening, faster than {}/s; {} open, {} of them with their requests incomplete)",
      options_.name, c->peer, Http2VerdictName(verdict), c->guard.streams(),
      c->guard.premature_resets(), options_.http2.premature_reset_lifetime.count(),
      options_.http2.premature_reset_rate, c->guard.open_streams(), c->guard.incomplete_requests());
  Closed(verdict == Http2Verdict::kRapidReset           ? ConnectionClose::kRapidReset
         : verdict == Http2Verdict::kTooManyStreams     ? ConnectionClose::kTooManyStreams
         : verdict == Http2Verdict::kIncompleteRequests ? ConnectionClose::kIncompleteRequests
                                                        : ConnectionClose::kOversizedHeaders);
  abusers_[c->ip] = Clock::now();
  // gRPC sees its end close and cancels every call of the connection.
  if (c->server >= 0) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->server, nullptr);
    close(c->server);
    c->server = -1;
  }
  ServerGone(c);
  c->abusive = true;
  c->close_by = Clock::now() + kFlushAfterAbuse;
  c->to_server = Buffer{};
  if (c->guard.server_at_frame_boundary()) {
    // A server's first frame must be its SETTINGS: an empty one goes first
    // when gRPC has sent nothing yet.
    std::string goaway = c->guard.server_frames() > 0 ? "" : std::string("\0\0\0\x04\0\0\0\0\0", 9);
    goaway += GoAwayFrame(c->guard.last_client_stream(), kEnhanceYourCalm);
    ToClient(c, goaway.data(), goaway.size());
  }
  Update(c);
}

bool ConnectionGuard::Loop::CountWhileOff(Conn* c) {
  if (!c->gate->off() || c->abusive || c->server < 0) return true;
  const int64_t held = c->guard.incomplete_requests();
  incomplete_.open += held - c->off_counted;
  c->off_counted = held;
  const IncompleteRequestLimits& limits = incomplete_.limits;
  if (c->guard.too_many_incomplete_requests() ||
      (incomplete_.open > limits.total && held >= limits.fair_share)) {
    Abuse(c, Http2Verdict::kIncompleteRequests);
    return false;
  }
  return true;
}

void ConnectionGuard::Loop::Sweep(Clock::time_point now) {
  if (accept_paused_until_ != Clock::time_point() && now >= accept_paused_until_ &&
      listen_fd_ >= 0) {
    accept_paused_until_ = Clock::time_point();
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListen;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  }
  if (incomplete_.refused > incomplete_refusals_logged_ &&
      now - incomplete_logged_ >= std::chrono::seconds(10)) {
    const IncompleteRequestLimits& limits = incomplete_.limits;
    spdlog::warn(
        "{}: refused {} new call(s) since the last such line: their connection held {} calls "
        "whose requests had not fully arrived, or all connections {} and it {} or more ({} such "
        "calls held now)",
        options_.name, incomplete_.refused - incomplete_refusals_logged_, limits.per_connection,
        limits.total, limits.fair_share, incomplete_.open);
    incomplete_refusals_logged_ = incomplete_.refused;
    incomplete_logged_ = now;
  }
  int64_t n = 0;
  if (send_timeouts_.Due(now, &n)) {
    spdlog::warn(
        "{}: closed {} connection(s) since the last such line whose client did not take what "
        "was queued for it within {} ms (listen.send_timeout_s): it stopped reading, or reads "
        "a trickle",
        options_.name, n, options_.send_timeout.count());
  }
  if (refused_per_address_.Due(now, &n)) {
    spdlog::warn(
        "{}: refused {} new connection(s) since the last such line from addresses holding {} "
        "already (listen.max_connections_per_address), the last from {}",
        options_.name, n, options_.max_connections_per_address, refused_peer_);
  }
  for (auto it = abusers_.begin(); it != abusers_.end();)
    it = now - it->second >= kAbuserMemory ? abusers_.erase(it) : std::next(it);
  for (auto it = new_connections_.begin(); it != new_connections_.end();)
    it = now - it->second.since >= std::chrono::seconds(1) ? new_connections_.erase(it)
                                                           : std::next(it);
  // A budget no connection holds, and full again, is forgotten.
  for (auto it = reset_budgets_.begin(); it != reset_budgets_.end();)
    it = it->second.use_count() == 1 && it->second->Full(now) ? reset_budgets_.erase(it)
                                                              : std::next(it);
  for (auto& [id, conn] : conns_) {
    Conn* c = conn.get();
    if (c->client < 0) continue;
    if (c->held_until != Clock::time_point()) {
      if (now >= c->held_until) {
        c->held_until = Clock::time_point();
        SetInterest(c->client, Key(c->id, false), EPOLLIN | EPOLLRDHUP, &c->client_events);
      }
      continue;
    }
    // How long the client's kernel has held all it was sent: once our side is
    // ended, and while draining from the start (Drained below).
    const Clock::duration acked =
        c->client_shut || draining_.load() ? AckedFor(c, now) : Clock::duration::zero();
    if ((c->abusive || c->server_eof) && now >= c->close_by) {
      Finish(c);
    } else if (c->client_shut && acked >= kAckedLinger) {
      Finish(c);
    } else if (Drained(*c, now)) {
      if (acked >= kAckedLinger) {
        // All it was sent has been with its kernel for kAckedLinger (an
        // idle connection: a grpcio channel does not close on a FIN for
        // seconds): closed at once.
        spdlog::debug("closing the connection from {}: drained", c->peer);
        // Its close_notify goes with the close: the kernel's queue for it is
        // empty, so the few bytes fit.
        EndTls(c);
        if (!c->to_client.empty()) FlushToClient(c);
        Finish(c);
      } else if (acked == Clock::duration::zero()) {
        // Bytes still on their way: as if gRPC had closed its end (Update).
        // Closing with the client's latest bytes unread (a WINDOW_UPDATE
        // for what it just read) would send RST and drop what the kernel
        // still queues for it. Our side ends instead, and the connection
        // closes at the client's end, kAckedLinger after the client's
        // kernel has it all, or at close_by.
        spdlog::debug("closing the connection from {}: drained", c->peer);
        c->server_eof = true;
        Update(c);
      }  // else acknowledged lately: closed at a later sweep
    } else if (!c->abusive && !c->server_eof && options_.send_timeout.count() > 0 &&
               OwesTooLong(c, now)) {
      // (Once gRPC's end closed, close_by bounds the flush instead; and
      // after our SHUT_WR the kernel's queue counts the FIN as a byte.)
      spdlog::debug(
          "closing the connection from {}: it did not take what was queued for it in {} "
          "ms ({} bytes waiting in the guard)",
          c->peer, options_.send_timeout.count(), c->to_client.size());
      Closed(ConnectionClose::kSendTimeout);
      ++send_timeouts_.count;
      // Reset, not closed: what the kernel still queues for the client is
      // dropped at once (closed, it would stay queued for as long as the
      // client keeps reading a trickle).
      const linger reset{1, 0};
      setsockopt(c->client, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
      Finish(c);
    } else if (!c->abusive && !c->guard.preface_received() &&
               now - c->accepted >= options_.preface_timeout) {
      spdlog::debug("closing the connection from {}: no HTTP/2 preface within {} ms", c->peer,
                    options_.preface_timeout.count());
      Closed(ConnectionClose::kPrefaceTimeout);
      Finish(c);
    }
  }
}

int ConnectionsTheFdLimitAllows(uint64_t fd_limit, int others_connections) {
  const uint64_t reserved = kSpareFds + uint64_t{kFdsPerConnection} *
                                            static_cast<uint64_t>(std::max(others_connections, 0));
  const uint64_t room = fd_limit > reserved ? fd_limit - reserved : 0;
  return static_cast<int>(std::min<uint64_t>(room / kFdsPerConnection, 1 << 30));
}

StatusOr<std::unique_ptr<ConnectionGuard>> ConnectionGuard::Start(
    const std::string& address, int port, std::function<void(int fd)> attach,
    ConnectionGuardOptions options, ServingMetrics* metrics) {
  // Each connection needs three fds: raise the soft limit to the hard one,
  // and lower the cap to what that allows.
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    if (limit.rlim_cur < limit.rlim_max) {
      limit.rlim_cur = limit.rlim_max;
      setrlimit(RLIMIT_NOFILE, &limit);
      getrlimit(RLIMIT_NOFILE, &limit);
    }
    if (limit.rlim_cur != RLIM_INFINITY) {
      const int fits = ConnectionsTheFdLimitAllows(static_cast<uint64_t>(limit.rlim_cur),
                                                   options.others_connections);
      if (fits < options.max_connections) {
        spdlog::warn(
            "{}: {} lowered from {} to {}: the fd limit is {} (ulimit -n) and each connection "
            "takes {}",
            options.name, options.cap_setting, options.max_connections, fits, limit.rlim_cur,
            kFdsPerConnection);
        options.max_connections = std::max(fits, 1);
      }
    }
  }
  int bound_port = 0;
  ASSIGN_OR_RETURN(const int fd, ListenTcp(address, port, 1024, &bound_port));
  std::unique_ptr<ConnectionGuard> guard(new ConnectionGuard(bound_port, options));
  guard->loop_ = std::make_unique<Loop>(fd, std::move(attach), guard->options_, metrics);
  if (!guard->loop_->ok()) return Internal("connection guard: epoll or eventfd failed");
  guard->thread_ = std::thread([g = guard.get()] { g->loop_->Run(); });
  return guard;
}

ConnectionGuard::ConnectionGuard(int port, ConnectionGuardOptions options)
    : port_(port), options_(options) {}

void ConnectionGuard::Drain() {
  if (loop_) loop_->Drain();
}

uint64_t ConnectionGuard::wakeups() const { return loop_ ? loop_->wakeups() : 0; }

uint64_t ConnectionGuard::peak_buffered_bytes() const {
  return loop_ ? loop_->peak_buffered_bytes() : 0;
}

void ConnectionGuard::StopAccepting() {
  if (loop_) loop_->StopAccepting();
}

bool ConnectionGuard::AwaitClosed(std::chrono::steady_clock::time_point deadline) {
  return !loop_ || loop_->AwaitClosed(deadline);
}

ConnectionGuard::~ConnectionGuard() {
  if (loop_) loop_->Stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace encoderd::server
