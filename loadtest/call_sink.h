// CallSink: sends request number `index` of the workload to the server and
// reports its outcome. Implementations: unary Embed/Classify over the gRPC
// callback API, and EmbedStream over one stream per slot.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "loadtest/load_options.h"
#include "loadtest/run_stats.h"
#include "loadtest/workload.h"

namespace encoderd::loadtest {

struct CallTicket {
  uint64_t index = 0;       // workload request number
  int slot = 0;             // closed-loop client / stream number
  int64_t intended_ns = 0;  // when the request should have been sent
  bool counted = false;     // false during warm-up
};

// Called exactly once per submitted ticket, on a gRPC or sink thread; it may
// Submit() again (closed loop).
using CompletionFn = std::function<void(const CallTicket&, const CallOutcome&)>;

class CallSink {
 public:
  virtual ~CallSink() = default;
  // Non-blocking for unary RPCs; enqueues for streams.
  virtual void Submit(const CallTicket& ticket) = 0;
  // Waits until every submitted ticket has completed and releases streams.
  virtual void Shutdown() = 0;
};

inline int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::unique_ptr<CallSink> MakeUnarySink(std::shared_ptr<grpc::Channel> channel,
                                        const LoadOptions& options, const Workload& workload,
                                        CompletionFn done);
std::unique_ptr<CallSink> MakeStreamSink(std::shared_ptr<grpc::Channel> channel,
                                         const LoadOptions& options, const Workload& workload,
                                         CompletionFn done);

}  // namespace encoderd::loadtest
