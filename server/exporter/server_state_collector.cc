#include "server/exporter/server_state_collector.h"

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "engine/model/model_spec.h"
#include "server/core/admission_policy.h"
#include "server/core/concurrency_limiter.h"
#include "server/core/inference_request.h"
#include "server/metrics/process_stats.h"

namespace encoderd::server {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Family(const std::string& name, const std::string& help, MetricType type) {
  MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

void AddGauge(MetricFamily* f, std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f->type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f->metric.push_back(std::move(m));
}

}  // namespace

ServerStateCollector::ServerStateCollector(const ServerConfig& config,
                                           const ModelRegistry* registry, std::string version)
    : models_(config.models), registry_(registry), version_(std::move(version)) {}

std::vector<MetricFamily> ServerStateCollector::Collect() const {
  MetricFamily build =
      Family("encoderd_build_info", "Always 1; labels name the build.", MetricType::Gauge);
  AddGauge(&build, {{"version", version_}}, 1);

  MetricFamily ready =
      Family("encoderd_model_ready", "1 when the model is loaded and the daemon is not draining.",
             MetricType::Gauge);
  MetricFamily info = Family("encoderd_model_info",
                             "Always 1 for a loaded model; labels describe it.", MetricType::Gauge);
  MetricFamily depth =
      Family("encoderd_queue_depth", "Requests waiting in the model's queue.", MetricType::Gauge);
  MetricFamily capacity =
      Family("encoderd_queue_capacity", "Most requests the model's queue holds (max_queue_size).",
             MetricType::Gauge);
  MetricFamily standing = Family("encoderd_queue_standing",
                                 "1 while the model's queue stands (sustained overload: calls "
                                 "predicted to wait longer than overload_queue_time_us or one "
                                 "batch are refused at once), else 0.",
                                 MetricType::Gauge);
  MetricFamily pace = Family("encoderd_batch_slow_pace",
                             "The pace deadlines are judged at: of the model's last 64 batches of "
                             "this many tokens, the 90th percentile of each one's time over its "
                             "prediction; 1 until such a batch ran, at most 2.",
                             MetricType::Gauge);
  const auto loaded = registry_->Loaded();
  const bool draining = registry_->draining();
  for (const ModelConfig& config : models_) {
    std::shared_ptr<ServedModel> model;
    for (const auto& m : loaded)
      if (m->config().name == config.name) model = m;
    AddGauge(&ready, {{"model", config.name}}, model && !draining ? 1 : 0);
    AddGauge(&capacity, {{"model", config.name}}, static_cast<double>(config.max_queue_size));
    if (!model) continue;
    AddGauge(&depth, {{"model", config.name}}, static_cast<double>(model->batcher().queue_depth()));
    AddGauge(&standing, {{"model", config.name}}, model->batcher().standing() ? 1 : 0);
    const auto paces = model->batcher().slow_paces();
    for (int c = 0; c < ThroughputEstimate::kSizeClasses; ++c) {
      const std::string first = std::to_string(ThroughputEstimate::SizeClassFirst(c));
      const std::string tokens =
          c + 1 < ThroughputEstimate::kSizeClasses
              ? first + "-" + std::to_string(ThroughputEstimate::SizeClassFirst(c + 1) - 1)
              : first + "+";
      AddGauge(&pace, {{"model", config.name}, {"tokens", tokens}}, paces[c]);
    }
    AddGauge(&info,
             {{"model", config.name},
              {"family", ModelFamilyName(model->encoder_config().family)},
              {"device", DeviceName(config.device)},
              {"dtype", std::string(DTypeName(config.dtype))},
              {"replicas", std::to_string(config.replicas)}},
             1);
  }
  MetricFamily live = Family("encoderd_live_requests",
                             "InferenceRequest objects alive (queued, running, or still held "
                             "by a handler or a batch); 0 when idle.",
                             MetricType::Gauge);
  AddGauge(&live, {}, static_cast<double>(InferenceRequest::Live()));
  MetricFamily slots = Family("encoderd_concurrency_slots_in_use",
                              "Inference calls holding one of listen.max_concurrent_requests "
                              "slots.",
                              MetricType::Gauge);
  AddGauge(&slots, {}, static_cast<double>(ConcurrencyLimiter::HeldInProcess()));
  MetricFamily sending = Family("encoderd_answers_sending",
                                "Unary calls answered and not yet sent by gRPC that gave their "
                                "slot back for one of twice as many places (0 when idle).",
                                MetricType::Gauge);
  AddGauge(&sending, {},
           static_cast<double>(
               ConcurrencyLimiter::HeldInProcess(ConcurrencyLimiter::Kind::kAnswersSending)));
  std::vector<MetricFamily> families = {std::move(build), std::move(ready),    std::move(info),
                                        std::move(depth), std::move(capacity), std::move(standing)};
  families.push_back(std::move(pace));
  families.push_back(std::move(live));
  families.push_back(std::move(slots));
  families.push_back(std::move(sending));

  auto stats = ReadProcessStats();
  if (!stats.ok()) {
    spdlog::warn("metrics: {}", stats.status().ToString());
    return families;
  }
  MetricFamily rss = Family("encoderd_process_resident_memory_bytes",
                            "Resident set size of the daemon.", MetricType::Gauge);
  AddGauge(&rss, {}, static_cast<double>(stats->resident_bytes));
  MetricFamily cpu = Family("encoderd_process_cpu_seconds_total",
                            "User and system CPU time of the daemon.", MetricType::Counter);
  AddGauge(&cpu, {}, stats->cpu_seconds);
  MetricFamily threads =
      Family("encoderd_process_threads", "Threads of the daemon.", MetricType::Gauge);
  AddGauge(&threads, {}, static_cast<double>(stats->threads));
  families.push_back(std::move(rss));
  families.push_back(std::move(cpu));
  families.push_back(std::move(threads));
  return families;
}

}  // namespace encoderd::server
