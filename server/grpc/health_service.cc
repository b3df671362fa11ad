#include "server/grpc/health_service.h"

#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/impl/codegen/server_callback_handlers.h>
#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/support/slice.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>

namespace encoderd::server {
namespace {

// Longer service names are refused, as gRPC's default health service does.
constexpr size_t kMaxServiceName = 200;

// The service name of a HealthCheckRequest (field 1, a string; other fields
// are skipped); nullopt if the bytes are not such a message.
std::optional<std::string> ServiceName(const grpc::ByteBuffer& request) {
  grpc::Slice bytes;
  if (!request.DumpToSingleSlice(&bytes).ok()) return std::nullopt;
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromArray(bytes.begin(), static_cast<int>(bytes.size()))) return std::nullopt;
  std::string name;
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField& field = fields.field(i);
    // Field 1 of another wire type is an unknown field to protobuf too.
    if (field.number() != 1 ||
        field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    name = field.length_delimited();  // the last one, as protobuf reads it
  }
  if (name.size() > kMaxServiceName) return std::nullopt;
  return name;
}

// HealthCheckResponse{status}: field 1, a varint under 128.
grpc::ByteBuffer Response(HealthService::ServingStatus status) {
  const char bytes[] = {0x08, static_cast<char>(status)};
  grpc::Slice slice(bytes, sizeof(bytes));
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

// One Watch stream: writes its service's status whenever it differs from
// the last one written (one write at a time; a status set meanwhile is
// written after it, intermediate ones skipped), and once ended, finishes
// after the last status is written. Lock order: the service's mu_, then
// the Watch's.
class HealthService::Watch final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  Watch(HealthService* service, std::string name, std::string peer)
      : service_(service), name_(std::move(name)), peer_(std::move(peer)) {}

  const std::string& name() const { return name_; }
  const std::string& peer() const { return peer_; }

  void Send(ServingStatus status) {
    std::lock_guard<std::mutex> lock(mu_);
    wanted_ = status;
    if (!writing_) WriteLocked();
  }

  void End() {
    std::lock_guard<std::mutex> lock(mu_);
    ending_ = true;
    if (!writing_) WriteLocked();
  }

  // Finishes at once (a request that does not parse).
  void Refuse(const grpc::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(status);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the write failed"));
      return;
    }
    WriteLocked();
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    {
      std::lock_guard<std::mutex> lock(service_->mu_);
      if (service_->watches_.erase(this) > 0) {
        auto it = service_->watches_of_peer_.find(peer_);
        if (it != service_->watches_of_peer_.end() && --it->second == 0)
          service_->watches_of_peer_.erase(it);
      }
    }
    delete this;
  }

 private:
  // Writes the wanted status if it is not the last one written; else, when
  // ending, finishes.
  void WriteLocked() {
    if (finished_) return;
    if (wanted_ != written_) {
      written_ = wanted_;
      response_ = Response(static_cast<ServingStatus>(written_));
      writing_ = true;
      StartWrite(&response_);
    } else if (ending_) {
      ++service_->ended_;
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down"));
    }
  }

  void FinishLocked(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  HealthService* const service_;
  const std::string name_;
  const std::string peer_;
  std::mutex mu_;
  int wanted_ = 0;
  int written_ = 0;  // none yet
  bool writing_ = false;
  bool ending_ = false;
  bool finished_ = false;
  grpc::ByteBuffer response_;
};

HealthService::HealthService(int64_t max_watches, int max_watches_per_connection)
    : max_watches_(static_cast<size_t>(max_watches > 0 ? max_watches : 0)),
      max_watches_per_connection_(max_watches_per_connection > 0 ? max_watches_per_connection : 0) {
  AddMethod(new grpc::internal::RpcServiceMethod("/grpc.health.v1.Health/Check",
                                                 grpc::internal::RpcMethod::NORMAL_RPC, nullptr));
  MarkMethodRawCallback(
      0, new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
             [this](grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                    grpc::ByteBuffer* response) { return Check(context, request, response); }));
  AddMethod(new grpc::internal::RpcServiceMethod(
      "/grpc.health.v1.Health/Watch", grpc::internal::RpcMethod::SERVER_STREAMING, nullptr));
  MarkMethodRawCallback(
      1, new grpc::internal::CallbackServerStreamingHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
             [this](grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
               return StartWatch(context, request);
             }));
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* HealthService::StartWatch(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  std::optional<std::string> name = ServiceName(*request);
  auto* watch = new Watch(this, name.value_or(""), context->peer());
  if (!name) {
    watch->Refuse(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "not a grpc.health.v1.HealthCheckRequest"));
    return watch;
  }
  std::lock_guard<std::mutex> lock(mu_);
  int& of_peer = watches_of_peer_[watch->peer()];
  // While the drain ends them, a Watch is answered and ended at once: the
  // limits do not apply.
  const bool per_connection = of_peer >= max_watches_per_connection_;
  if (!ending_ && (per_connection || watches_.size() >= max_watches_)) {
    if (of_peer == 0) watches_of_peer_.erase(watch->peer());
    ++refused_;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_refusal_log_ >= std::chrono::seconds(10)) {
      last_refusal_log_ = now;
      spdlog::warn("health: refused a Watch stream from {} ({}; {} refused so far)", watch->peer(),
                   per_connection
                       ? std::to_string(max_watches_per_connection_) + " open on its connection"
                       : std::to_string(max_watches_) + " open in all",
                   refused_);
    }
    watch->Refuse(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        per_connection
            ? "too many health Watch streams open on this connection (" +
                  std::to_string(max_watches_per_connection_) + "); Check answers without a stream"
            : "too many health Watch streams open (" + std::to_string(max_watches_) +
                  "); Check answers without a stream"));
    return watch;
  }
  ++of_peer;
  watches_.insert(watch);
  watch->Send(StatusLocked(*name));
  if (ending_) watch->End();
  return watch;
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* context,
                                               const grpc::ByteBuffer* request,
                                               grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const std::optional<std::string> name = ServiceName(*request);
  if (!name) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "not a grpc.health.v1.HealthCheckRequest"));
    return reactor;
  }
  ServingStatus status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    status = StatusLocked(*name);
  }
  if (status == kServiceUnknown) {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service"));
    return reactor;
  }
  *response = Response(status);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

HealthService::ServingStatus HealthService::StatusLocked(const std::string& service) const {
  auto it = serving_.find(service);
  if (it == serving_.end()) return kServiceUnknown;
  return it->second ? kServing : kNotServing;
}

void HealthService::SetServingStatus(const std::string& service, bool serving) {
  std::lock_guard<std::mutex> lock(mu_);
  serving_[service] = serving;
  for (Watch* watch : watches_) {
    if (watch->name() == service) watch->Send(serving ? kServing : kNotServing);
  }
}

void HealthService::EndWatches() {
  std::lock_guard<std::mutex> lock(mu_);
  ending_ = true;
  for (Watch* watch : watches_) watch->End();
}

int HealthService::open_watches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(watches_.size());
}

}  // namespace encoderd::server
