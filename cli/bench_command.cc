#include "cli/bench_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "cli/flags.h"
#include "engine/runtime/encoder.h"
#include "engine/runtime/packed_batch.h"
#include "engine/runtime/random_weights.h"
#include "kernels/cpu_features.h"
#ifdef ENCODERD_WITH_TORCH
#include "engine/torch/torch_encoder_baseline.h"
#endif

namespace encoderd::server {
namespace {

constexpr char kUsage[] =
    "usage: encoderd bench [--workloads W1,W2,W3,W4] [--threads N] [--min-seconds S]\n"
    "         [--layers N] [--hidden H] [--heads A] [--ffn F] [--skip-slow]\n"
    "         [--all-bf16-paths] [--json]\n"
    "Runs every workload with PyTorch's slow path, fastpath and nested fastpath in fp32,\n"
    "PyTorch's nested fastpath in bf16 (all three with --all-bf16-paths), and encoderd in\n"
    "fp32 and bf16, on the same random BERT-base-shaped weights and token ids; prints\n"
    "tokens/s and the ratio to the nested fastpath of the same dtype.\n";

struct BenchArgs {
  std::vector<std::string> workloads = {"W1", "W2", "W3", "W4"};
  int threads = 2;
  double min_seconds = 3.0;
  EncoderConfig config;
  bool skip_slow = false;
  bool all_bf16_paths = false;
  bool json = false;
};

// Sequences of each workload of the issue, with fixed seeds.
std::vector<std::vector<int32_t>> MakeWorkload(const std::string& name, int64_t vocab) {
  std::mt19937 rng(1234);
  std::vector<int> lengths;
  if (name == "W1") {
    std::uniform_int_distribution<int> len(16, 256);
    for (int i = 0; i < 32; ++i) lengths.push_back(len(rng));
  } else if (name == "W2") {
    lengths = {4, 6};
  } else if (name == "W3") {
    lengths.assign(64, 128);
  } else if (name == "W4") {
    lengths.assign(4, 512);
  }
  std::uniform_int_distribution<int32_t> token(5, static_cast<int32_t>(vocab - 1));
  std::vector<std::vector<int32_t>> sequences;
  for (int l : lengths) {
    std::vector<int32_t> ids(l);
    for (auto& id : ids) id = token(rng);
    sequences.push_back(std::move(ids));
  }
  return sequences;
}

struct Measurement {
  std::string workload, engine, dtype;
  int64_t tokens = 0;
  double ms = 0;              // median wall time of one forward
  double max_abs_diff = NAN;  // against the fp32 nested fastpath output
  double min_cosine = NAN;    // lowest per-sequence cosine similarity against it
  double tokens_per_s() const { return tokens / (ms / 1000.0); }
};

// Runs `fn` once to warm up, then until min_seconds have passed (at least 3
// times); returns the median time in ms.
double TimeMedian(const std::function<void()>& fn, double min_seconds) {
  fn();
  std::vector<double> times;
  const auto start = std::chrono::steady_clock::now();
  while (times.size() < 3 ||
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
             min_seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double MaxAbsDiff(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return INFINITY;
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    m = std::max(m, std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]));
  }
  return m;
}

// Lowest cosine similarity between the rows of a and b belonging to one
// sequence (sequences packed end to end, `lengths` tokens each).
double MinSequenceCosine(const Tensor& a, const Tensor& b,
                         const std::vector<std::vector<int32_t>>& sequences, int64_t hidden) {
  if (a.numel() != b.numel()) return NAN;
  double lowest = 1.0;
  int64_t offset = 0;
  for (const auto& sequence : sequences) {
    const int64_t n = static_cast<int64_t>(sequence.size()) * hidden;
    double ab = 0, aa = 0, bb = 0;
    for (int64_t i = offset; i < offset + n; ++i) {
      const double x = a.data<float>()[i], y = b.data<float>()[i];
      ab += x * y;
      aa += x * x;
      bb += y * y;
    }
    lowest = std::min(lowest, ab / std::sqrt(aa * bb + 1e-30));
    offset += n;
  }
  return lowest;
}

std::string Parse(const std::vector<std::string>& args, BenchArgs* a) {
  a->config = BertBaseConfig();
  Flags flags;
  flags.Value("--workloads", "a list of W1, W2, W3, W4", [a](const std::string& v) {
    a->workloads.clear();
    std::stringstream s(v);
    for (std::string w; std::getline(s, w, ',');) {
      if (w != "W1" && w != "W2" && w != "W3" && w != "W4") return false;
      a->workloads.push_back(w);
    }
    return !a->workloads.empty();
  });
  flags.Int("--threads", &a->threads, 1);
  flags.Number("--min-seconds", &a->min_seconds, 0);
  flags.Int("--layers", &a->config.num_layers, 1);
  flags.Int("--hidden", &a->config.hidden_size, 1);
  flags.Int("--heads", &a->config.num_heads, 1);
  flags.Int("--ffn", &a->config.intermediate_size, 1);
  flags.Switch("--skip-slow", &a->skip_slow);
  flags.Switch("--all-bf16-paths", &a->all_bf16_paths);
  flags.Switch("--json", &a->json);
  if (std::string error = flags.Parse(args); !error.empty()) return error;
  Status valid = a->config.Validate();
  if (!valid.ok()) return valid.message();
  return "";
}

}  // namespace

int RunBenchCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  BenchArgs a;
  if (const std::string error = Parse(args, &a); !error.empty()) {
    err << "encoderd bench: " << error << "\n" << kUsage;
    return 2;
  }
#ifndef ENCODERD_WITH_TORCH
  err << "encoderd bench: the PyTorch baselines need LibTorch; rebuild with "
         "-DENCODERD_WITH_TORCH=ON (Debian package libtorch-dev)\n";
  return 1;
#else
  const EncoderConfig& config = a.config;
  const TensorMap weights = RandomEncoderWeights(config, /*seed=*/42);
  const std::string torch_setup = ConfigureTorchThreads(a.threads);
  const auto& cpu = kernels::GetCpuFeatures();
  std::vector<Measurement> results;
  std::map<std::string, std::unique_ptr<Encoder>> encoders;
  std::map<std::string, std::unique_ptr<TorchEncoderBaseline>> baselines;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const std::string name(DTypeName(dtype));
    EncoderOptions options;
    options.dtype = dtype;
    options.num_threads = a.threads;
    auto encoder = Encoder::Create(config, weights, options);
    auto baseline = TorchEncoderBaseline::Create(config, weights, dtype);
    if (!encoder.ok() || !baseline.ok()) {
      err << "encoderd bench: " << (!encoder.ok() ? encoder.status() : baseline.status()).ToString()
          << "\n";
      return 1;
    }
    encoders[name] = std::move(*encoder);
    baselines[name] = std::move(*baseline);
  }
  for (const std::string& workload : a.workloads) {
    const auto sequences = MakeWorkload(workload, config.vocab_size);
    PackedBatchBuilder builder(config.position_rule, static_cast<int32_t>(config.pad_token_id));
    for (size_t i = 0; i < sequences.size(); ++i) {
      (void)builder.Add(sequences[i], {}, {0, static_cast<int32_t>(i)});
    }
    const PackedBatch batch = builder.Build();
    Tensor reference;
    for (const char* dtype : {"float32", "bfloat16"}) {
      for (auto mode : {TorchBaselineMode::kNestedFastpath, TorchBaselineMode::kFastpath,
                        TorchBaselineMode::kSlowPath}) {
        if (a.skip_slow && mode == TorchBaselineMode::kSlowPath) continue;
        // In bf16 only the nested fastpath is a baseline: the padded paths add
        // minutes on CPUs whose bf16 GEMMs are emulated and compare nothing new.
        if (std::string(dtype) == "bfloat16" && mode != TorchBaselineMode::kNestedFastpath &&
            !a.all_bf16_paths) {
          continue;
        }
        Measurement m{workload, std::string("pytorch ") + TorchBaselineModeName(mode), dtype,
                      batch.num_tokens()};
        Tensor output;
        m.ms = TimeMedian([&] { output = *baselines[dtype]->Forward(mode, sequences); },
                          a.min_seconds);
        if (!reference.defined()) reference = output;
        m.max_abs_diff = MaxAbsDiff(output, reference);
        m.min_cosine = MinSequenceCosine(output, reference, sequences, config.hidden_size);
        results.push_back(m);
      }
      Measurement m{workload, "encoderd", dtype, batch.num_tokens()};
      Tensor output;
      m.ms = TimeMedian([&] { output = *encoders[dtype]->Forward(batch); }, a.min_seconds);
      m.max_abs_diff = MaxAbsDiff(output, reference);
      m.min_cosine = MinSequenceCosine(output, reference, sequences, config.hidden_size);
      results.push_back(m);
    }
  }

  nlohmann::json json = {{"shape",
                          {{"layers", config.num_layers},
                           {"hidden", config.hidden_size},
                           {"heads", config.num_heads},
                           {"ffn", config.intermediate_size}}},
                         {"threads", a.threads},
                         {"torch", torch_setup},
                         {"cpu", {{"avx512f", cpu.avx512f}, {"avx512_bf16", cpu.avx512_bf16}}},
                         {"results", nlohmann::json::array()}};
  auto nested_ms = [&](const Measurement& m) -> double {
    for (const auto& r : results) {
      if (r.workload == m.workload && r.dtype == m.dtype && r.engine == "pytorch nested fastpath") {
        return r.ms;
      }
    }
    return NAN;
  };
  for (const auto& m : results) {
    json["results"].push_back({{"workload", m.workload},
                               {"engine", m.engine},
                               {"dtype", m.dtype},
                               {"tokens", m.tokens},
                               {"ms", m.ms},
                               {"tokens_per_s", m.tokens_per_s()},
                               {"speedup_vs_nested", nested_ms(m) / m.ms},
                               {"max_abs_diff_vs_fp32_nested", m.max_abs_diff},
                               {"min_cosine_vs_fp32_nested", m.min_cosine}});
  }
  if (a.json) {
    out << json.dump(2) << "\n";
    return 0;
  }
  out << "shape: " << config.num_layers << " layers, hidden " << config.hidden_size << ", "
      << config.num_heads << " heads, ffn " << config.intermediate_size << "; threads " << a.threads
      << "\n"
      << torch_setup << "; encoderd GEMM: oneDNN; " << kernels::DescribeCpuFeatures() << "\n\n";
  out << "| workload | engine | dtype | tokens | ms | tokens/s | vs nested | max abs diff "
         "| min cosine |\n"
      << "|---|---|---|---:|---:|---:|---:|---:|---:|\n";
  out << std::fixed;
  for (const auto& m : results) {
    out << "| " << m.workload << " | " << m.engine << " | " << m.dtype << " | " << m.tokens << " | "
        << std::setprecision(1) << m.ms << " | " << std::setprecision(0) << m.tokens_per_s()
        << " | " << std::setprecision(2) << nested_ms(m) / m.ms << "x | " << std::scientific
        << std::setprecision(1) << m.max_abs_diff << std::fixed << " | " << std::setprecision(5)
        << m.min_cosine << " |\n";
  }
  return 0;
#endif
}

}  // namespace encoderd::server
