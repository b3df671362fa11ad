// encoderd-loadtest: a gRPC load generator for `encoderd serve`.
// See `encoderd-loadtest --help` and loadtest/README.md.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "loadtest/load_options.h"
#include "loadtest/load_runner.h"
#include "loadtest/report_format.h"
#include "loadtest/workload.h"

namespace encoderd::loadtest {
namespace {

// A report as JSON text; bytes that are not UTF-8 (a corpus line, a file
// name) become U+FFFD instead of making dump() throw (uncaught, the tool
// aborted). The load tool uses nothing of the daemon's core/
// (scripts/check_layers.py), so this is its own.
std::string ReportText(const nlohmann::json& json, int indent = -1) {
  return json.dump(indent, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

int DumpWorkload(const LoadOptions& options, const Workload& workload) {
  for (int64_t i = 0; i < options.requests; ++i) {
    nlohmann::json line = {{"index", i}, {"texts", workload.Texts(static_cast<uint64_t>(i))}};
    std::cout << ReportText(line) << "\n";
  }
  return 0;
}

bool WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  out.close();
  if (!out) {
    std::fprintf(stderr, "encoderd-loadtest: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

int Sweep(std::shared_ptr<grpc::Channel> channel, const LoadOptions& options,
          const Workload& workload) {
  std::string csv = SweepCsvHeader();
  nlohmann::json runs = nlohmann::json::array();
  for (double rate : options.sweep_rates) {
    RunStats stats = RunLoad(channel, options, workload, rate);
    std::cout << FormatReportText(options, rate, stats) << std::flush;
    csv += SweepCsvRow(rate, stats);
    runs.push_back(ReportJson(options, rate, stats));
    if (!WriteFile(options.sweep_csv, csv)) return 1;
    if (IsSaturated(stats)) {
      std::cout << "saturated at offered " << rate << " req/s; sweep stops\n";
      break;
    }
  }
  if (options.json) std::cout << ReportText(runs, 2) << "\n";
  if (!options.json_file.empty() && !WriteFile(options.json_file, ReportText(runs, 2) + "\n"))
    return 1;
  std::cout << "wrote " << options.sweep_csv << "\n";
  return 0;
}

int Main(int argc, char** argv) {
  LoadOptions options;
  if (std::string error = ParseLoadOptions(argc, argv, &options); !error.empty()) {
    std::fprintf(stderr, "encoderd-loadtest: %s\n(see --help)\n", error.c_str());
    return 2;
  }
  if (options.help) {
    std::cout << LoadOptionsUsage();
    return 0;
  }
  const Workload workload(options.workload);
  if (options.dump_workload) return DumpWorkload(options, workload);

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options.tls_ca_file.empty()) {
    std::ifstream in(options.tls_ca_file, std::ios::binary);
    std::stringstream ca;
    ca << in.rdbuf();
    if (!in || ca.str().empty()) {
      std::fprintf(stderr, "encoderd-loadtest: cannot read --tls-ca %s\n",
                   options.tls_ca_file.c_str());
      return 2;
    }
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ca.str();
    credentials = grpc::SslCredentials(ssl);
    if (!options.tls_name.empty()) args.SetSslTargetNameOverride(options.tls_name);
  }
  auto channel = grpc::CreateCustomChannel(options.target, credentials, args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
    std::fprintf(stderr, "encoderd-loadtest: cannot connect to %s within 10 s\n",
                 options.target.c_str());
    return 1;
  }
  if (!options.sweep_rates.empty()) return Sweep(channel, options, workload);

  RunStats stats = RunLoad(channel, options, workload, options.rate);
  const double offered = options.mode == LoadMode::kOpen ? options.rate : 0;
  std::cout << FormatReportText(options, offered, stats);
  const nlohmann::json report = ReportJson(options, offered, stats);
  if (options.json) std::cout << ReportText(report, 2) << "\n";
  if (!options.json_file.empty() && !WriteFile(options.json_file, ReportText(report, 2) + "\n"))
    return 1;
  if (!options.per_second_csv.empty() && !WriteFile(options.per_second_csv, PerSecondCsv(stats)))
    return 1;
  return stats.ok > 0 ? 0 : 1;
}

}  // namespace
}  // namespace encoderd::loadtest

int main(int argc, char** argv) { return encoderd::loadtest::Main(argc, argv); }
