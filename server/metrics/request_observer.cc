#include "server/metrics/request_observer.h"

#include <spdlog/spdlog.h>

namespace encoderd::server {
namespace {

// Codes that mean the server failed rather than the client asking wrongly.
bool ServerSideError(int code) {
  return code == 2 /*UNKNOWN*/ || code == 12 /*UNIMPLEMENTED*/ || code == 13 /*INTERNAL*/ ||
         code == 15 /*DATA_LOSS*/;
}

}  // namespace

bool RequestObserver::SampleAccess() {
  if (access_log_sample_ <= 0) return false;
  const uint64_t n = answered_.fetch_add(1, std::memory_order_relaxed);
  return static_cast<uint64_t>(static_cast<double>(n + 1) * access_log_sample_) >
         static_cast<uint64_t>(static_cast<double>(n) * access_log_sample_);
}

void RequestObserver::Finish(uint64_t request_id, const std::string& model,
                             const RequestSample& sample, const std::string& error) {
  if (metrics_) metrics_->ObserveRequest(model, sample);
  const char* code = GrpcCodeName(sample.grpc_code);
  if (sample.grpc_code != 0) {
    const auto level =
        ServerSideError(sample.grpc_code) ? spdlog::level::err : spdlog::level::debug;
    spdlog::log(level, "request {} model={} rpc={} failed: {}: {}", request_id,
                model.empty() ? "-" : model, RpcName(sample.rpc), code, error);
  }
  if (SampleAccess()) {
    spdlog::info(
        "access id={} model={} rpc={} code={} sequences={} tokens={} total_us={} "
        "tokenize_us={} queue_us={} inference_us={}",
        request_id, model.empty() ? "-" : model, RpcName(sample.rpc), code, sample.sequences,
        sample.tokens, sample.total_us, sample.tokenize_us, sample.queue_us, sample.inference_us);
  }
}

}  // namespace encoderd::server
