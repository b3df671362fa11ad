#include "loadtest/report_format.h"

#include <cstdio>

namespace encoderd::loadtest {
namespace {

std::string Format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, a);
  return buf;
}

std::string Ms(int64_t us) { return Format("%.2f", static_cast<double>(us) / 1000.0); }

nlohmann::json HistJson(const LatencyHistogram& h) {
  return {{"count", h.Count()},
          {"mean_us", h.Mean()},
          {"p50_us", h.ValueAtQuantile(0.5)},
          {"p90_us", h.ValueAtQuantile(0.9)},
          {"p99_us", h.ValueAtQuantile(0.99)},
          {"p999_us", h.ValueAtQuantile(0.999)},
          {"max_us", h.Max()}};
}

std::string HistRow(const char* name, const LatencyHistogram& h) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "  %-24s %9.2f %9s %9s %9s %9s %9s\n", name, h.Mean() / 1000.0,
                Ms(h.ValueAtQuantile(0.5)).c_str(), Ms(h.ValueAtQuantile(0.9)).c_str(),
                Ms(h.ValueAtQuantile(0.99)).c_str(), Ms(h.ValueAtQuantile(0.999)).c_str(),
                Ms(h.Max()).c_str());
  return buf;
}

}  // namespace

std::string FormatReportText(const LoadOptions& o, double offered_rate, const RunStats& s) {
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf, "encoderd-loadtest: %s %s-loop against %s", RpcKindName(o.rpc),
                LoadModeName(o.mode), o.target.c_str());
  out += buf;
  if (o.mode == LoadMode::kOpen) {
    out += Format(", offered %.1f req/s", offered_rate);
    out += o.arrival == ArrivalKind::kPoisson ? " (Poisson)" : " (uniform)";
  } else {
    out += ", " + std::to_string(o.concurrency) + " clients";
  }
  out += "\n";
  std::snprintf(buf, sizeof buf,
                "  requests ok %lld, errors %lld over %.2f s; %lld texts, %lld tokens\n",
                static_cast<long long>(s.ok), static_cast<long long>(s.errors), s.ElapsedSeconds(),
                static_cast<long long>(s.texts), static_cast<long long>(s.tokens));
  out += buf;
  std::snprintf(buf, sizeof buf,
                "  throughput %.1f req/s, %.0f tokens/s; client CPU %.2f s (%.0f%% of one core)\n",
                s.RequestsPerSecond(), s.TokensPerSecond(), s.client_cpu_s,
                s.client_wall_s > 0 ? 100.0 * s.client_cpu_s / s.client_wall_s : 0.0);
  out += buf;
  if (o.mode == LoadMode::kOpen) {
    out += Format("  latency growth %.3f s per second of arrivals", s.LatencyGrowth());
    out += IsSaturated(s) ? " (not sustained)\n" : "\n";
  }
  for (const auto& [code, n] : s.errors_by_code) {
    std::snprintf(buf, sizeof buf, "  error %-20s %lld\n", GrpcCodeName(code),
                  static_cast<long long>(n));
    out += buf;
  }
  if (s.sent_past_deadline > 0) {
    std::snprintf(buf, sizeof buf,
                  "  %lld calls sent after their deadline: the load generator fell behind\n",
                  static_cast<long long>(s.sent_past_deadline));
    out += buf;
  }
  out += "  milliseconds                 mean       p50       p90       p99     p99.9       max\n";
  out += HistRow("latency (from intended)", s.latency_us);
  out += HistRow("  all calls, failed too", s.latency_all_us);
  out += HistRow("service (from send)", s.service_us);
  out += HistRow("client send lag", s.send_lag_us);
  out += HistRow("time to refusal", s.refusal_us);
  out += HistRow("server tokenize", s.tokenize_us);
  out += HistRow("server queue", s.queue_us);
  out += HistRow("server inference", s.inference_us);
  out += HistRow("server total", s.server_total_us);
  return out;
}

nlohmann::json ReportJson(const LoadOptions& o, double offered_rate, const RunStats& s) {
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& [code, n] : s.errors_by_code) errors[GrpcCodeName(code)] = n;
  return {{"target", o.target},
          {"rpc", RpcKindName(o.rpc)},
          {"mode", LoadModeName(o.mode)},
          // Open-loop unary calls take no slot: how many run at once is what
          // the server makes of the arrivals (null, not the unused flag).
          {"concurrency", o.mode == LoadMode::kClosed || o.rpc == RpcKind::kEmbedStream
                              ? nlohmann::json(o.concurrency)
                              : nlohmann::json()},
          {"offered_rate", offered_rate},
          {"texts_per_request", o.workload.texts_per_request},
          {"seed", o.workload.seed},
          {"requests_ok", s.ok},
          {"requests_error", s.errors},
          {"errors_by_code", errors},
          {"sent_past_deadline", s.sent_past_deadline},
          {"texts", s.texts},
          {"tokens", s.tokens},
          {"elapsed_s", s.ElapsedSeconds()},
          {"requests_per_s", s.RequestsPerSecond()},
          {"tokens_per_s", s.TokensPerSecond()},
          {"latency_growth", s.LatencyGrowth()},
          {"client_cpu_s", s.client_cpu_s},
          {"client_wall_s", s.client_wall_s},
          {"latency", HistJson(s.latency_us)},
          {"latency_all", HistJson(s.latency_all_us)},
          {"service", HistJson(s.service_us)},
          {"send_lag", HistJson(s.send_lag_us)},
          {"refusal", HistJson(s.refusal_us)},
          {"server",
           {{"tokenize", HistJson(s.tokenize_us)},
            {"queue", HistJson(s.queue_us)},
            {"inference", HistJson(s.inference_us)},
            {"total", HistJson(s.server_total_us)}}}};
}

std::string PerSecondCsv(const RunStats& stats) {
  std::string out = "second,ok,errors,p50_ms,p99_ms\n";
  for (size_t i = 0; i < stats.per_second.size(); ++i) {
    const SecondStats& s = stats.per_second[i];
    out += std::to_string(i) + "," + std::to_string(s.ok) + "," + std::to_string(s.errors) + "," +
           Ms(s.latency_us.ValueAtQuantile(0.5)) + "," + Ms(s.latency_us.ValueAtQuantile(0.99)) +
           "\n";
  }
  return out;
}

std::string SweepCsvHeader() {
  return "offered_rps,achieved_rps,tokens_per_s,ok,errors,p50_ms,p90_ms,p99_ms,p999_ms,max_ms,"
         "queue_mean_ms,inference_mean_ms,sustained,p99_all_ms\n";
}

std::string SweepCsvRow(double offered_rate, const RunStats& s) {
  char buf[512];
  const auto& h = s.latency_us;
  std::snprintf(buf, sizeof buf, "%.1f,%.1f,%.0f,%lld,%lld,%s,%s,%s,%s,%s,%.3f,%.3f,%d,%s\n",
                offered_rate, s.RequestsPerSecond(), s.TokensPerSecond(),
                static_cast<long long>(s.ok), static_cast<long long>(s.errors),
                Ms(h.ValueAtQuantile(0.5)).c_str(), Ms(h.ValueAtQuantile(0.9)).c_str(),
                Ms(h.ValueAtQuantile(0.99)).c_str(), Ms(h.ValueAtQuantile(0.999)).c_str(),
                Ms(h.Max()).c_str(), s.queue_us.Mean() / 1000.0, s.inference_us.Mean() / 1000.0,
                IsSaturated(s) ? 0 : 1, Ms(s.latency_all_us.ValueAtQuantile(0.99)).c_str());
  return buf;
}

bool IsSaturated(const RunStats& s) {
  const int64_t total = s.ok + s.errors;
  if (total == 0) return true;
  if (static_cast<double>(s.errors) > 0.01 * static_cast<double>(total)) return true;
  return s.LatencyGrowth() > 1.0 / 9.0;
}

}  // namespace encoderd::loadtest
