// Unary Embed / Classify / Rerank over the gRPC callback API: Submit starts
// the call and returns; the reply arrives on a gRPC thread.
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "loadtest/arrival_process.h"
#include "loadtest/call_sink.h"
#include "proto/encoderd.grpc.pb.h"

namespace encoderd::loadtest {
namespace {

namespace v1 = ::encoderd::v1;

// Rerank's query: the first `kQueryWords` words of the request's first text.
constexpr int kQueryWords = 8;

std::string QueryOf(const std::string& text) {
  std::istringstream words(text);
  std::string query, word;
  for (int i = 0; i < kQueryWords && words >> word; ++i) query += (i ? " " : "") + word;
  return query.empty() ? text : query;
}

template <typename Request>
void AddTexts(std::vector<std::string> texts, Request* request) {
  for (auto& text : texts) request->add_texts(std::move(text));
}

void AddTexts(std::vector<std::string> texts, v1::RerankRequest* request) {
  if (!texts.empty()) request->set_query(QueryOf(texts.front()));
  for (auto& text : texts) request->add_texts(std::move(text));
}

template <typename Request, typename Response>
struct UnaryCall {
  grpc::ClientContext context;
  Request request;
  Response response;
  CallTicket ticket;
  int64_t sent_ns = 0;
};

class UnarySink : public CallSink {
 public:
  UnarySink(std::shared_ptr<grpc::Channel> channel, const LoadOptions& options,
            const Workload& workload, CompletionFn done)
      : stub_(v1::Encoder::NewStub(channel)),
        options_(options),
        workload_(workload),
        done_(std::move(done)) {}

  void Submit(const CallTicket& ticket) override {
    if (options_.rpc == RpcKind::kClassify) {
      Start<v1::ClassifyRequest, v1::ClassifyResponse>(ticket, [this](auto&&... args) {
        stub_->async()->Classify(std::forward<decltype(args)>(args)...);
      });
    } else if (options_.rpc == RpcKind::kRerank) {
      Start<v1::RerankRequest, v1::RerankResponse>(ticket, [this](auto&&... args) {
        stub_->async()->Rerank(std::forward<decltype(args)>(args)...);
      });
    } else {
      Start<v1::EmbedRequest, v1::EmbedResponse>(ticket, [this](auto&&... args) {
        stub_->async()->Embed(std::forward<decltype(args)>(args)...);
      });
    }
  }

  // Completions are counted by the runner; nothing is owned here.
  void Shutdown() override {}

 private:
  template <typename Request, typename Response, typename Invoke>
  void Start(const CallTicket& ticket, Invoke invoke) {
    auto* call = new UnaryCall<Request, Response>;
    call->ticket = ticket;
    AddTexts(workload_.Texts(ticket.index), &call->request);
    call->request.set_model(options_.model);
    call->request.set_truncate(options_.truncate);
    call->request.set_prompt_name(options_.prompt_name);
    call->sent_ns = NowNanos();
    if (options_.timeout_ms > 0) {
      call->context.set_deadline(DeadlineFromIntended(ticket.intended_ns, call->sent_ns,
                                                      options_.timeout_ms,
                                                      std::chrono::system_clock::now()));
    }
    invoke(&call->context, &call->request, &call->response,
           std::function<void(grpc::Status)>([this, call](grpc::Status status) {
             std::unique_ptr<UnaryCall<Request, Response>> owned(call);
             CallOutcome out;
             out.done_ns = NowNanos();
             out.status_code = static_cast<int>(status.error_code());
             out.intended_ns = call->ticket.intended_ns;
             out.sent_ns = call->sent_ns;
             out.sent_past_deadline =
                 options_.timeout_ms > 0 &&
                 call->sent_ns - call->ticket.intended_ns >= options_.timeout_ms * 1'000'000;
             out.texts = call->request.texts_size();
             const auto& r = call->response;
             out.token_count = r.token_count();
             out.tokenize_us = r.timing().tokenize_us();
             out.queue_us = r.timing().queue_us();
             out.inference_us = r.timing().inference_us();
             out.server_total_us = r.timing().total_us();
             const CallTicket ticket = call->ticket;
             // The call is gone before the run learns of its end: the last
             // completion lets the program tear the channel down and exit.
             owned.reset();
             done_(ticket, out);
           }));
  }

  std::unique_ptr<v1::Encoder::Stub> stub_;
  const LoadOptions& options_;
  const Workload& workload_;
  CompletionFn done_;
};

}  // namespace

std::unique_ptr<CallSink> MakeUnarySink(std::shared_ptr<grpc::Channel> channel,
                                        const LoadOptions& options, const Workload& workload,
                                        CompletionFn done) {
  return std::make_unique<UnarySink>(std::move(channel), options, workload, std::move(done));
}

}  // namespace encoderd::loadtest
