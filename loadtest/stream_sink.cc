// EmbedStream: bidirectional streams, one at a time per slot (sync API). A
// slot's worker thread sends its tickets on the stream; a reader thread
// matches each reply, which the server sends in order, to the oldest
// unanswered ticket. The server ends a stream at the first message it fails
// (its status is the stream's): that ticket fails with it, and the ones
// sent after it, which the server never read, are sent again on a new
// stream. (Until 2026-12-04 a failed message failed every later ticket of
// the slot at once, never sent: millions of errors the server never saw.)
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "loadtest/call_sink.h"
#include "proto/encoderd.grpc.pb.h"

namespace encoderd::loadtest {
namespace {

namespace v1 = ::encoderd::v1;

struct Pending {
  CallTicket ticket;
  int64_t sent_ns = 0;
  int64_t texts = 0;
};

class EmbedStreamClient {
 public:
  EmbedStreamClient(v1::Encoder::Stub* stub, const LoadOptions& options, const Workload& workload,
                    const CompletionFn& done)
      : stub_(stub), options_(options), workload_(workload), done_(done) {
    worker_ = std::thread([this] { Run(); });
  }

  void Submit(const CallTicket& ticket) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(ticket);
    cv_.notify_all();
  }

  // Waits for every submitted ticket to complete, then closes the stream.
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
      cv_.notify_all();
    }
    worker_.join();
  }

 private:
  // Streams, one after another, while tickets come.
  void Run() {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty() || closing_; });
        if (queue_.empty()) return;  // closing, everything answered
      }
      RunStream();
    }
  }

  // One stream: sends queued tickets until it breaks, or until the run
  // closes and every ticket is answered.
  void RunStream() {
    grpc::ClientContext context;
    // Per-message deadlines are not part of the streaming API, so the
    // stream's deadline is generous.
    context.set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::duration_cast<std::chrono::seconds>(
            std::chrono::duration<double>(options_.warmup_s + options_.duration_s + 3600)) +
        std::chrono::milliseconds(options_.timeout_ms));
    std::unique_ptr<grpc::ClientReaderWriter<v1::EmbedRequest, v1::EmbedResponse>> stream =
        stub_->EmbedStream(&context);
    std::unique_lock<std::mutex> lock(mu_);
    broken_ = false;
    lock.unlock();
    std::thread reader([this, &stream] { ReadLoop(stream.get()); });
    lock.lock();
    while (true) {
      cv_.wait(lock,
               [&] { return !queue_.empty() || (closing_ && in_flight_.empty()) || broken_; });
      if (broken_ || queue_.empty()) break;
      CallTicket ticket = queue_.front();
      queue_.pop_front();
      v1::EmbedRequest request;
      for (auto& text : workload_.Texts(ticket.index)) request.add_texts(std::move(text));
      request.set_model(options_.model);
      request.set_truncate(options_.truncate);
      request.set_prompt_name(options_.prompt_name);
      in_flight_.push_back({ticket, NowNanos(), request.texts_size()});
      lock.unlock();
      const bool ok = stream->Write(request);
      lock.lock();
      if (!ok) broken_ = true;
    }
    const bool broken = broken_;
    lock.unlock();
    if (!broken) stream->WritesDone();
    reader.join();
    const grpc::Status status = stream->Finish();
    // The oldest unanswered ticket is the one the stream ended at; those
    // after it were not read.
    lock.lock();
    std::deque<Pending> unanswered;
    unanswered.swap(in_flight_);
    for (size_t i = unanswered.size(); i-- > 1;) queue_.push_front(unanswered[i].ticket);
    lock.unlock();
    if (!unanswered.empty()) {
      int code = static_cast<int>(status.error_code());
      if (code == 0) code = static_cast<int>(grpc::StatusCode::UNAVAILABLE);  // ended early
      Complete(unanswered.front(), code, nullptr);
    }
  }

  void ReadLoop(grpc::ClientReaderWriter<v1::EmbedRequest, v1::EmbedResponse>* stream) {
    v1::EmbedResponse response;
    while (stream->Read(&response)) {
      Pending p;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (in_flight_.empty()) break;  // a reply nobody asked for
        p = in_flight_.front();
        in_flight_.pop_front();
      }
      Complete(p, 0, &response);
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    cv_.notify_all();
  }

  void Complete(const Pending& p, int code, const v1::EmbedResponse* response) {
    CallOutcome out;
    out.done_ns = NowNanos();
    out.status_code = code;
    out.intended_ns = p.ticket.intended_ns;
    out.sent_ns = p.sent_ns;
    out.texts = p.texts;
    if (response) {
      out.token_count = response->token_count();
      out.tokenize_us = response->timing().tokenize_us();
      out.queue_us = response->timing().queue_us();
      out.inference_us = response->timing().inference_us();
      out.server_total_us = response->timing().total_us();
    }
    done_(p.ticket, out);
  }

  v1::Encoder::Stub* stub_;
  const LoadOptions& options_;
  const Workload& workload_;
  const CompletionFn& done_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<CallTicket> queue_;   // guarded by mu_
  std::deque<Pending> in_flight_;  // guarded by mu_; sent, not answered
  bool closing_ = false;           // guarded by mu_
  bool broken_ = false;            // guarded by mu_; the stream's reads ended
  std::thread worker_;
};

class StreamSink : public CallSink {
 public:
  StreamSink(std::shared_ptr<grpc::Channel> channel, const LoadOptions& options,
             const Workload& workload, CompletionFn done)
      : stub_(v1::Encoder::NewStub(channel)), done_(std::move(done)) {
    for (int i = 0; i < options.concurrency; ++i) {
      streams_.push_back(
          std::make_unique<EmbedStreamClient>(stub_.get(), options, workload, done_));
    }
  }

  void Submit(const CallTicket& ticket) override {
    streams_[static_cast<size_t>(ticket.slot) % streams_.size()]->Submit(ticket);
  }

  void Shutdown() override {
    for (auto& s : streams_) s->Close();
  }

 private:
  std::unique_ptr<v1::Encoder::Stub> stub_;
  CompletionFn done_;
  std::vector<std::unique_ptr<EmbedStreamClient>> streams_;
};

}  // namespace

std::unique_ptr<CallSink> MakeStreamSink(std::shared_ptr<grpc::Channel> channel,
                                         const LoadOptions& options, const Workload& workload,
                                         CompletionFn done) {
  return std::make_unique<StreamSink>(std::move(channel), options, workload, std::move(done));
}

}  // namespace encoderd::loadtest
