#include "server/metrics/serving_metrics.h"

namespace encoderd::server {

const char* RpcName(Rpc rpc) {
  static const char* kNames[kNumRpcs] = {"Embed",     "Classify",    "Encode", "Tokenize",
                                         "ModelInfo", "EmbedStream", "Rerank"};
  return kNames[static_cast<int>(rpc)];
}

const char* DropReasonName(DropReason reason) {
  static const char* kNames[] = {
      "deadline_before_queue", "deadline_in_queue",       "deadline_while_running",
      "cancelled_in_queue",    "cancelled_while_running", "refused_predicted_late",
      "refused_queue_time",    "refused_standing_queue",  "refused_queue_full"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kNumDropReasons);
  return kNames[static_cast<int>(reason)];
}

const char* GuardPortName(GuardPort port) { return port == GuardPort::kGrpc ? "grpc" : "health"; }

const char* ConnectionCloseName(ConnectionClose reason) {
  static const char* kNames[] = {
      "rapid_reset",  "too_many_streams",  "preface_timeout", "connection_cap",      "evicted_idle",
      "bad_preface",  "oversized_headers", "bad_headers",     "incomplete_requests", "tls",
      "send_timeout", "address_cap"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kNumConnectionCloses);
  return kNames[static_cast<int>(reason)];
}

const char* FailureReason(int code) {
  switch (code) {
    case 0:
      return "";
    case 3:   // INVALID_ARGUMENT
    case 5:   // NOT_FOUND
    case 9:   // FAILED_PRECONDITION
    case 11:  // OUT_OF_RANGE
      return "invalid_argument";
    case 8:  // RESOURCE_EXHAUSTED
      return "overloaded";
    case 4:
      return "deadline";
    case 1:
      return "cancelled";
    case 14:
      return "unavailable";
    case 16:
      return "unauthenticated";
    default:
      return "internal";
  }
}

}  // namespace encoderd::server
