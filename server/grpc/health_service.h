// grpc.health.v1.Health (Check and Watch) on gRPC's callback API over raw
// bytes, in place of gRPC's default health service, which never ends a Watch
// stream: during a drain an open Watch held its connection, and the exit,
// until the grace ran out, and a grpcio channel with client-side health
// checking (`healthCheckConfig`) 4.1 s, where an idle connection is closed
// 1.2 s after SIGTERM (`loadtest/scripts/drain_time.py --watch` and
// `--health-checking`, docs/reliability.md). This one ends them once the
// drain has sent them NOT_SERVING (EndWatches).
#pragma once

#include <grpcpp/impl/service_type.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace encoderd::server {

class HealthService final : public grpc::Service {
 public:
  // The wire values of grpc.health.v1.HealthCheckResponse.ServingStatus.
  enum ServingStatus : int { kServing = 1, kNotServing = 2, kServiceUnknown = 3 };

  // Registers Check and Watch. Knows no service name until
  // SetServingStatus names it. At most `max_watches_per_connection` Watch
  // streams are open at once on one client connection (gRPC's peer), and
  // `max_watches` in all: each holds about 16 KB of the server's memory.
  // More are refused with RESOURCE_EXHAUSTED (logged at most every 10 s);
  // the limit per connection keeps one client from taking the others'
  // share. Must outlive the server it is registered with.
  HealthService(int64_t max_watches, int max_watches_per_connection);

  // Sets `service` ("" for the whole server) and sends the new status to
  // every Watch of it whose last status differs. Any thread.
  void SetServingStatus(const std::string& service, bool serving);

  // Ends every Watch stream, once the statuses it was sent are written,
  // with UNAVAILABLE ("the server is shutting down"); a Watch that starts
  // after this gets its service's status and is ended the same way. Check
  // answers as before. Any thread; for the drain.
  void EndWatches();

  // The Watch streams not done yet (a stream finished a moment ago may
  // still count).
  int open_watches() const;
  // The Watch streams EndWatches has finished so far.
  int ended_watches() const { return ended_.load(); }

 private:
  class Watch;

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request, grpc::ByteBuffer* response);
  grpc::ServerWriteReactor<grpc::ByteBuffer>* StartWatch(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request);
  // The status of `service` (kServiceUnknown if never set). Holds mu_.
  ServingStatus StatusLocked(const std::string& service) const;

  const size_t max_watches_;
  const int max_watches_per_connection_;
  mutable std::mutex mu_;
  std::map<std::string, bool> serving_;
  std::set<Watch*> watches_;
  std::map<std::string, int> watches_of_peer_;  // the open ones, by connection
  int64_t refused_ = 0;
  std::chrono::steady_clock::time_point last_refusal_log_{};
  bool ending_ = false;
  std::atomic<int> ended_{0};
};

}  // namespace encoderd::server
