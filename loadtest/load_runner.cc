#include "loadtest/load_runner.h"

#include <sys/resource.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <thread>

#include "loadtest/arrival_process.h"
#include "loadtest/call_sink.h"

namespace encoderd::loadtest {
namespace {

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Shared state of one run; completions arrive on gRPC / stream threads.
class Run {
 public:
  Run(const LoadOptions& options, int64_t start_ns)
      : options_(options),
        warmup_end_ns_(start_ns + static_cast<int64_t>(options.warmup_s * 1e9)),
        end_ns_(options.duration_s > 0
                    ? warmup_end_ns_ + static_cast<int64_t>(options.duration_s * 1e9)
                    : std::numeric_limits<int64_t>::max()),
        recorder_(warmup_end_ns_) {}

  void set_sink(CallSink* sink) { sink_ = sink; }
  int64_t end_ns() const { return end_ns_; }

  // Claims the next request intended at `intended_ns`; false once the run's
  // duration or request budget is used up (then nothing more is sent).
  bool Claim(int64_t intended_ns, int slot, CallTicket* ticket) {
    if (intended_ns >= end_ns_ || done_.load()) return false;
    ticket->counted = intended_ns >= warmup_end_ns_;
    if (ticket->counted && options_.requests > 0 && counted_.fetch_add(1) >= options_.requests) {
      done_.store(true);
      return false;
    }
    ticket->index = next_index_.fetch_add(1);
    ticket->slot = slot;
    ticket->intended_ns = intended_ns;
    return true;
  }

  void Send(const CallTicket& ticket) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++in_flight_;
    }
    sink_->Submit(ticket);
  }

  // Closed loop: a client's next request, intended now.
  void SendNext(int slot) {
    CallTicket ticket;
    if (Claim(NowNanos(), slot, &ticket)) Send(ticket);
  }

  void OnComplete(const CallTicket& ticket, const CallOutcome& outcome) {
    if (ticket.counted) recorder_.Record(outcome);
    if (options_.mode == LoadMode::kClosed) SendNext(ticket.slot);
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
    cv_.notify_all();
  }

  // Open loop: blocks while the in-flight cap is reached.
  void WaitForRoom() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return in_flight_ < options_.max_in_flight; });
  }

  void WaitUntilIdle() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return in_flight_ == 0; });
  }

  RunStats Stats() const { return recorder_.Snapshot(); }

 private:
  const LoadOptions& options_;
  const int64_t warmup_end_ns_;
  const int64_t end_ns_;
  CallSink* sink_ = nullptr;
  std::atomic<uint64_t> next_index_{0};
  std::atomic<int64_t> counted_{0};
  std::atomic<bool> done_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t in_flight_ = 0;  // guarded by mu_
  Recorder recorder_;
};

}  // namespace

RunStats RunLoad(std::shared_ptr<grpc::Channel> channel, const LoadOptions& options,
                 const Workload& workload, double open_rate) {
  const double cpu_start = ProcessCpuSeconds();
  const int64_t start_ns = NowNanos();
  Run run(options, start_ns);
  CompletionFn done = [&run](const CallTicket& t, const CallOutcome& o) { run.OnComplete(t, o); };
  std::unique_ptr<CallSink> sink = options.rpc == RpcKind::kEmbedStream
                                       ? MakeStreamSink(channel, options, workload, done)
                                       : MakeUnarySink(channel, options, workload, done);
  run.set_sink(sink.get());

  if (options.mode == LoadMode::kClosed) {
    for (int slot = 0; slot < options.concurrency; ++slot) run.SendNext(slot);
  } else {
    // Seeded per rate too, so the runs of a sweep are not one scaled sequence.
    ArrivalProcess arrivals(
        options.arrival, open_rate,
        options.workload.seed * 1000003 + static_cast<uint64_t>(std::llround(open_rate * 1000)));
    for (uint64_t i = 0;; ++i) {
      const int64_t intended = start_ns + arrivals.NextOffsetNanos();
      CallTicket ticket;
      if (!run.Claim(intended, static_cast<int>(i % static_cast<uint64_t>(options.concurrency)),
                     &ticket)) {
        break;
      }
      const int64_t wait = intended - NowNanos();
      if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
      run.WaitForRoom();
      run.Send(ticket);
    }
  }
  run.WaitUntilIdle();
  sink->Shutdown();
  RunStats stats = run.Stats();
  stats.client_cpu_s = ProcessCpuSeconds() - cpu_start;
  stats.client_wall_s = static_cast<double>(NowNanos() - start_ns) * 1e-9;
  return stats;
}

}  // namespace encoderd::loadtest
