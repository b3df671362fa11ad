// EmbedStream: one bidirectional stream per slot (sync API). Each stream has
// a writer thread (takes tickets from its queue, sends them) and a reader
// thread (matches each reply, which the server sends in order, to the oldest
// unanswered ticket). A broken stream fails its outstanding and later tickets
// with the stream's final status.
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
      : options_(options), workload_(workload), done_(done) {
    // The stream lives for the whole run; per-message deadlines are not part
    // of the streaming API, so the stream deadline is generous.
    context_.set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::duration_cast<std::chrono::seconds>(
            std::chrono::duration<double>(options.warmup_s + options.duration_s + 3600)) +
        std::chrono::milliseconds(options.timeout_ms));
    stream_ = stub->EmbedStream(&context_);
    writer_ = std::thread([this] { WriteLoop(); });
    reader_ = std::thread([this] { ReadLoop(); });
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
    writer_.join();
    reader_.join();
  }

 private:
  void WriteLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock,
               [&] { return !queue_.empty() || (closing_ && in_flight_.empty()) || broken_; });
      if (broken_) break;
      if (queue_.empty()) break;  // closing and everything answered
      CallTicket ticket = queue_.front();
      queue_.pop_front();
      v1::EmbedRequest request;
      for (auto& text : workload_.Texts(ticket.index)) request.add_texts(std::move(text));
      request.set_model(options_.model);
      request.set_truncate(options_.truncate);
      in_flight_.push_back({ticket, NowNanos(), request.texts_size()});
      lock.unlock();
      const bool ok = stream_->Write(request);
      lock.lock();
      if (!ok) broken_ = true;
    }
    const bool broken = broken_;
    lock.unlock();
    if (!broken) stream_->WritesDone();
    lock.lock();
    cv_.wait(lock, [&] { return reader_done_; });
    lock.unlock();
    const grpc::Status status = stream_->Finish();
    int code = static_cast<int>(status.error_code());
    if (code == 0) code = static_cast<int>(grpc::StatusCode::UNAVAILABLE);  // ended early
    // Fail whatever is left, including tickets submitted from now on.
    lock.lock();
    while (true) {
      cv_.wait(lock, [&] { return !queue_.empty() || !in_flight_.empty() || closing_; });
      std::deque<Pending> failed;
      failed.swap(in_flight_);
      for (const auto& t : queue_) failed.push_back({t, NowNanos(), 0});
      queue_.clear();
      if (failed.empty() && closing_) break;
      lock.unlock();
      for (const auto& p : failed) Complete(p, code, nullptr);
      lock.lock();
    }
  }

  void ReadLoop() {
    v1::EmbedResponse response;
    while (stream_->Read(&response)) {
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
    reader_done_ = true;
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

  const LoadOptions& options_;
  const Workload& workload_;
  const CompletionFn& done_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::EmbedRequest, v1::EmbedResponse>> stream_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<CallTicket> queue_;   // guarded by mu_
  std::deque<Pending> in_flight_;  // guarded by mu_; sent, not answered
  bool closing_ = false;           // guarded by mu_
  bool broken_ = false;            // guarded by mu_
  bool reader_done_ = false;       // guarded by mu_
  std::thread writer_;
  std::thread reader_;
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
