#include "cli/bench_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "cli/flags.h"
#include "core/file.h"
#include "core/json_text.h"
#include "engine/runtime/encoder.h"
#include "engine/runtime/packed_batch.h"
#include "engine/runtime/random_weights.h"
#include "kernels/cpu_features.h"
#include "server/config/model_card_yaml.h"
#ifdef ENCODERD_WITH_TORCH
#include "engine/torch/torch_encoder_baseline.h"
#endif

namespace encoderd::server {
namespace {

constexpr char kUsage[] =
    "usage: encoderd bench [--workloads W1,W2,W3,W4,W5] [--threads N] [--min-seconds S]\n"
    "         [--engines encoderd,pytorch] [--dtypes float32,bfloat16,int8,float16]\n"
    "         [--device cpu|cuda]\n"
    "         [--model DIR] [--inputs WORKLOADS_JSON] [--outputs DIR]\n"
    "         [--int8-fp32-linears LIST]\n"
    "         [--layers N] [--hidden H] [--heads A] [--ffn F] [--skip-slow]\n"
    "         [--all-bf16-paths] [--pooled MODE] [--op-profile] [--json]\n"
    "Runs every workload with encoderd and (engine pytorch, LibTorch in this process)\n"
    "PyTorch's slow path, fastpath and nested fastpath in fp32 and its nested fastpath in\n"
    "bf16 (all three with --all-bf16-paths), on the same weights and token ids: seeded\n"
    "random BERT-base-shaped weights (--layers ... change the shape) and the seeded\n"
    "workloads, or a model directory (--model) and the token ids of bench/make_inputs.py\n"
    "(--inputs). --outputs writes encoderd's last hidden states, float32, valid rows of\n"
    "each sequence in order, to DIR/<dtype>/<workload>.f32. The peers in their own\n"
    "processes are bench/run_peers.py's. --device cuda runs encoderd alone on the GPU\n"
    "(float16 and bfloat16, the default there); PyTorch on the GPU is\n"
    "bench/peer_pytorch_gpu.py's. A timed forward ends with the last hidden states in\n"
    "host memory as float32, on every device. --pooled MODE (cls, mean, max,\n"
    "mean_sqrt_len, weighted_mean, last_token) also times encoderd's forward that ends\n"
    "with only each sequence's pooled row in host memory (engine \"encoderd pooled MODE\";\n"
    "what an Embed call reads: a GPU pools where the hidden states are).\n"
    "--op-profile (CPU) times encoderd's forwards once more with each op's wall time\n"
    "recorded, and adds a table of ms per forward, share and GFLOP/s per op.\n";

struct BenchArgs {
  std::vector<std::string> workloads = {"W1", "W2", "W3", "W4"};
  std::vector<std::string> engines = {"encoderd", "pytorch"};
  std::vector<DType> dtypes = {DType::kFloat32, DType::kBFloat16};
  bool dtypes_given = false, engines_given = false;
  Device device = Device::kCpu;
  int threads = 2;
  double min_seconds = 3.0;
  EncoderConfig config;
  std::string model_dir, inputs, outputs;
  std::vector<std::string> int8_fp32_linears;  // EncoderOptions::fp32_linears
  bool skip_slow = false;
  bool all_bf16_paths = false;
  bool json = false;
  bool op_profile = false;  // --op-profile
  // Also time encoderd's forward that returns only each sequence's row of
  // this pooling (what Embed calls read), as engine "encoderd pooled <mode>".
  std::optional<Pooling> pooled;
  bool runs(const std::string& engine) const {
    return std::find(engines.begin(), engines.end(), engine) != engines.end();
  }
};

using Sequences = std::vector<std::vector<int32_t>>;

// Sequences of each workload, with fixed seeds.
Sequences MakeWorkload(const std::string& name, int64_t vocab) {
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
  } else if (name == "W5") {
    std::uniform_int_distribution<int> len(16, 512);
    for (int i = 0; i < 256; ++i) lengths.push_back(len(rng));
  }
  std::uniform_int_distribution<int32_t> token(5, static_cast<int32_t>(vocab - 1));
  Sequences sequences;
  for (int l : lengths) {
    std::vector<int32_t> ids(l);
    for (auto& id : ids) id = token(rng);
    sequences.push_back(std::move(ids));
  }
  return sequences;
}

// The workloads of `a`: generated, or read from --inputs ({"W1": [[ids...],
// ...], ...}, as bench/make_inputs.py writes it), each id checked against the
// vocabulary.
StatusOr<std::map<std::string, Sequences>> LoadWorkloads(const BenchArgs& a) {
  std::map<std::string, Sequences> workloads;
  nlohmann::json file;
  if (!a.inputs.empty()) {
    // Any stream: --inputs <(...) works; a directory is named as one.
    ASSIGN_OR_RETURN(const std::string text,
                     ReadWholeFile(a.inputs, "the --inputs file", FileKind::kAnyStream));
    file = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!file.is_object()) return InvalidArgument(a.inputs + ": not a JSON object");
  }
  for (const std::string& name : a.workloads) {
    if (a.inputs.empty()) {
      workloads[name] = MakeWorkload(name, a.config.vocab_size);
      continue;
    }
    const auto it = file.find(name);
    if (it == file.end() || !it->is_array() || it->empty()) {
      return InvalidArgument(a.inputs + ": no workload " + name);
    }
    Sequences& sequences = workloads[name];
    for (const auto& row : *it) {
      if (!row.is_array() || row.empty()) {
        return InvalidArgument(a.inputs + ": " + name +
                               " has a sequence that is not a list of ids");
      }
      std::vector<int32_t> ids;
      for (const auto& id : row) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
            id.get<int64_t>() >= a.config.vocab_size) {
          return InvalidArgument(a.inputs + ": " + name + " has an id outside the vocabulary");
        }
        ids.push_back(id.get<int32_t>());
      }
      sequences.push_back(std::move(ids));
    }
  }
  return workloads;
}

struct Measurement {
  std::string workload, engine, dtype;
  int64_t tokens = 0;
  std::vector<double> runs_ms = {};  // every timed forward, in order
  double ms = 0;                     // their median
  double max_abs_diff = NAN;         // against the fp32 nested fastpath output
  double min_cosine = NAN;           // lowest per-token cosine similarity against it
  double tokens_per_s() const { return tokens / (ms / 1000.0); }
};

// Runs `fn` once to warm up, then until min_seconds have passed (at least 3
// times); records every time and the median in `m` (of an even count, the
// mean of the middle two, as the peers' scripts take it).
void Time(const std::function<void()>& fn, double min_seconds, Measurement* m) {
  fn();
  const auto start = std::chrono::steady_clock::now();
  while (m->runs_ms.size() < 3 ||
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
             min_seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    m->runs_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::vector<double> sorted = m->runs_ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  m->ms = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

// One op's share of encoderd's forwards (--op-profile).
struct OpRow {
  std::string workload, dtype, op;
  double ms = 0;      // per forward
  double share = 0;   // of the ops' total
  double gflops = 0;  // NAN for ops without matmuls
};

// Useful FLOPs (multiply-adds x 2, no padding) of `op` in one forward over
// `sequences`: the Linear layers' and attention's two matmuls; 0 for the
// others (and for embeddings without a projection).
double OpFlops(EncoderOp op, const EncoderConfig& c, const Sequences& sequences) {
  double tokens = 0, squares = 0;
  for (const auto& s : sequences) {
    tokens += static_cast<double>(s.size());
    squares += static_cast<double>(s.size()) * static_cast<double>(s.size());
  }
  const double h = static_cast<double>(c.hidden_size), layers = static_cast<double>(c.num_layers);
  switch (op) {
    case EncoderOp::kEmbed:
      return c.projects_embeddings() ? 2 * tokens * h * static_cast<double>(c.embedding_size) : 0;
    case EncoderOp::kQkv:
      return layers * 2 * tokens * h * 3 * h;
    case EncoderOp::kAttention:
      return layers * 4 * squares * h;
    case EncoderOp::kOut:
      return layers * 2 * tokens * h * h;
    case EncoderOp::kNorm:
      return 0;
    case EncoderOp::kFeedForward:
      break;
  }
  return layers * 4 * tokens * h * static_cast<double>(c.intermediate_size);
}

std::vector<OpRow> OpRows(const OpProfile& profile, const EncoderConfig& c,
                          const Sequences& sequences, const std::string& workload,
                          const std::string& dtype) {
  double total = 0;
  for (double s : profile.seconds) total += s;
  std::vector<OpRow> rows;
  for (int i = 0; i < kNumEncoderOps; ++i) {
    if (profile.calls[i] == 0) continue;
    const auto op = static_cast<EncoderOp>(i);
    const double seconds = profile.seconds[i] / static_cast<double>(profile.forwards);
    const double flops = OpFlops(op, c, sequences);
    rows.push_back({workload, dtype, EncoderOpName(op), seconds * 1e3, profile.seconds[i] / total,
                    flops > 0 ? flops / seconds / 1e9 : NAN});
  }
  return rows;
}

// Writes the rows of `t` (float32) to `path`.
Status WriteRows(const Tensor& t, const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(t.data<float>()),
            static_cast<std::streamsize>(t.numel() * sizeof(float)));
  if (!out) return Internal("cannot write " + path.string());
  return Status::Ok();
}

// The largest absolute difference; infinite where a value is not finite
// (std::max passes NaN by unseen).
double MaxAbsDiff(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return INFINITY;
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]);
    if (!std::isfinite(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

// Lowest cosine similarity between a row (one token's state) of a and the
// same row of b; NaN where a value is not finite or a row is all zeros.
// (Until 2026-12-02 one cosine per sequence, in which one bad token of 256
// moved it by ~2e-4, and NaN passed std::min by unseen.)
double MinTokenCosine(const Tensor& a, const Tensor& b, int64_t hidden) {
  if (a.numel() != b.numel()) return NAN;
  double lowest = 1.0;
  for (int64_t row = 0; row < a.numel() / hidden; ++row) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t i = row * hidden; i < (row + 1) * hidden; ++i) {
      const double x = a.data<float>()[i], y = b.data<float>()[i];
      ab += x * y;
      aa += x * x;
      bb += y * y;
    }
    const double cosine = ab / std::sqrt(aa * bb);
    if (!std::isfinite(cosine)) return NAN;
    lowest = std::min(lowest, cosine);
  }
  return lowest;
}

// A comma-separated list, each item accepted by `item`.
std::function<bool(const std::string&)> ListOf(const std::function<bool(const std::string&)>& item,
                                               std::function<void()> clear) {
  return [item, clear](const std::string& v) {
    clear();
    std::stringstream s(v);
    bool any = false;
    for (std::string w; std::getline(s, w, ',');) {
      if (!item(w)) return false;
      any = true;
    }
    return any;
  };
}

std::string Parse(const std::vector<std::string>& args, BenchArgs* a) {
  a->config = BertBaseConfig();
  Flags flags;
  flags.Value("--workloads", "a list of W1, W2, W3, W4, W5",
              ListOf(
                  [a](const std::string& w) {
                    if (w != "W1" && w != "W2" && w != "W3" && w != "W4" && w != "W5") return false;
                    a->workloads.push_back(w);
                    return true;
                  },
                  [a] { a->workloads.clear(); }));
  flags.Value("--engines", "a list of encoderd, pytorch",
              ListOf(
                  [a](const std::string& e) {
                    if (e != "encoderd" && e != "pytorch") return false;
                    a->engines.push_back(e);
                    return true;
                  },
                  [a] {
                    a->engines.clear();
                    a->engines_given = true;
                  }));
  flags.Value("--dtypes", "a list of float32, bfloat16, int8, float16",
              ListOf(
                  [a](const std::string& d) {
                    const auto dtype = ParseDType(d);
                    if (dtype != DType::kFloat32 && dtype != DType::kBFloat16 &&
                        dtype != DType::kInt8 && dtype != DType::kFloat16) {
                      return false;
                    }
                    a->dtypes.push_back(*dtype);
                    return true;
                  },
                  [a] {
                    a->dtypes.clear();
                    a->dtypes_given = true;
                  }));
  flags.Value("--device", "cpu or cuda", [a](const std::string& v) {
    const auto device = ParseDevice(v);
    if (device) a->device = *device;
    return device.has_value();
  });
  flags.Int("--threads", &a->threads, 1);
  flags.Number("--min-seconds", &a->min_seconds, 0);
  flags.String("--model", &a->model_dir);
  flags.String("--inputs", &a->inputs);
  flags.String("--outputs", &a->outputs);
  flags.Value("--int8-fp32-linears",
              "a list of Linear layers (attention.qkv, attention.out, ffn.in, ffn.out, "
              "embeddings.project, or layers.N.<one of the first four>)",
              [a](const std::string& v) {
                auto names = ParseFp32Linears(v);
                if (names.ok()) a->int8_fp32_linears = std::move(*names);
                return names.ok();
              });
  flags.Int("--layers", &a->config.num_layers, 1);
  flags.Int("--hidden", &a->config.hidden_size, 1);
  flags.Int("--heads", &a->config.num_heads, 1);
  flags.Int("--ffn", &a->config.intermediate_size, 1);
  flags.Switch("--skip-slow", &a->skip_slow);
  flags.Switch("--all-bf16-paths", &a->all_bf16_paths);
  flags.Switch("--json", &a->json);
  flags.Switch("--op-profile", &a->op_profile);
  flags.Value("--pooled",
              "a pooling mode (cls, mean, max, mean_sqrt_len, weighted_mean, last_token)",
              [a](const std::string& v) {
                a->pooled = ParsePooling(v);
                return a->pooled.has_value();
              });
  if (std::string error = flags.Parse(args); !error.empty()) return error;
  const EncoderConfig base = BertBaseConfig();
  if (!a->model_dir.empty() &&
      (a->config.num_layers != base.num_layers || a->config.hidden_size != base.hidden_size ||
       a->config.num_heads != base.num_heads ||
       a->config.intermediate_size != base.intermediate_size)) {
    return "--model takes the shape from the model; leave out --layers, --hidden, --heads, --ffn";
  }
  Status valid = a->config.Validate();
  if (!valid.ok()) return valid.message();
  if (a->device == Device::kCuda) {
    if (!a->dtypes_given) a->dtypes = {DType::kFloat16, DType::kBFloat16};
    if (!a->engines_given) a->engines = {"encoderd"};
    if (a->runs("pytorch")) {
      return "--device cuda runs encoderd alone (--engines encoderd); PyTorch on the GPU is "
             "bench/peer_pytorch_gpu.py";
    }
  }
  for (DType dtype : a->dtypes) {
    if (Status ok = CheckDeviceDType(a->device, dtype); !ok.ok()) return ok.message();
  }
  // fp32 first: its PyTorch output is the reference the bf16 rows compare with.
  std::stable_sort(a->dtypes.begin(), a->dtypes.end(),
                   [](DType x, DType y) { return x == DType::kFloat32 && y != DType::kFloat32; });
#ifndef ENCODERD_WITH_TORCH
  if (a->runs("pytorch")) {
    return "engine pytorch needs LibTorch (rebuild with -DENCODERD_WITH_TORCH=ON, Debian package "
           "libtorch-dev); --engines encoderd runs without it";
  }
#endif
  return "";
}

}  // namespace

int RunBenchCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (std::find(args.begin(), args.end(), "--help") != args.end()) {
    out << kUsage;
    return 0;
  }
  BenchArgs a;
  if (const std::string error = Parse(args, &a); !error.empty()) {
    err << "encoderd bench: " << error << "\n" << kUsage;
    return 2;
  }
  auto fail = [&err](const Status& status) {
    err << "encoderd bench: " << status.ToString() << "\n";
    return 1;
  };
  TensorMap weights;
  if (a.model_dir.empty()) {
    weights = RandomEncoderWeights(a.config, /*seed=*/42);
  } else {
    auto bundle = LoadModelDirectory(a.model_dir);
    if (!bundle.ok()) return fail(bundle.status().WithContext(a.model_dir));
    a.config = bundle->config;
    weights = std::move(bundle->weights);
  }
  const EncoderConfig& config = a.config;
  auto workloads = LoadWorkloads(a);
  if (!workloads.ok()) return fail(workloads.status());
  std::string torch_setup = "PyTorch not run";
#ifdef ENCODERD_WITH_TORCH
  if (a.runs("pytorch")) torch_setup = ConfigureTorchThreads(a.threads);
  std::map<std::string, std::unique_ptr<TorchEncoderBaseline>> baselines;
#endif
  const auto& cpu = kernels::GetCpuFeatures();
  std::vector<Measurement> results;
  std::vector<OpRow> op_rows;
  std::map<std::string, std::unique_ptr<Encoder>> encoders;
  for (DType dtype : a.dtypes) {
    const std::string name(DTypeName(dtype));
#ifdef ENCODERD_WITH_TORCH
    if (a.runs("pytorch") && dtype != DType::kInt8) {  // quantize_dynamic: bench/peer_pytorch.py
      auto baseline = TorchEncoderBaseline::Create(config, weights, dtype);
      if (!baseline.ok()) return fail(baseline.status());
      baselines[name] = std::move(*baseline);
    }
#endif
    if (a.runs("encoderd")) {
      EncoderOptions options;
      options.device = a.device;
      options.dtype = dtype;
      options.num_threads = a.threads;
      options.fp32_linears = a.int8_fp32_linears;
      auto encoder = Encoder::Create(config, weights, options);
      if (!encoder.ok()) return fail(encoder.status());
      encoders[name] = std::move(*encoder);
    }
  }
  for (const std::string& workload : a.workloads) {
    const Sequences& sequences = workloads->at(workload);
    for (const auto& sequence : sequences) {
      if (static_cast<int64_t>(sequence.size()) > config.max_tokens) {
        return fail(InvalidArgument(workload + " has a sequence of " +
                                    std::to_string(sequence.size()) + " tokens; the model takes " +
                                    std::to_string(config.max_tokens)));
      }
    }
    PackedBatchBuilder builder(config.position_rule, static_cast<int32_t>(config.pad_token_id));
    for (size_t i = 0; i < sequences.size(); ++i) {
      if (Status added = builder.Add(sequences[i], {}, {0, static_cast<int32_t>(i)}); !added.ok()) {
        return fail(added.WithContext(workload));
      }
    }
    const PackedBatch batch = builder.Build();
    Tensor reference;  // PyTorch's fp32 nested fastpath, when it runs
    auto compare = [&](const Tensor& output, Measurement* m) {
      if (!reference.defined()) return;
      m->max_abs_diff = MaxAbsDiff(output, reference);
      m->min_cosine = MinTokenCosine(output, reference, config.hidden_size);
    };
    for (DType dtype : a.dtypes) {
      const std::string name(DTypeName(dtype));
#ifdef ENCODERD_WITH_TORCH
      for (auto mode : {TorchBaselineMode::kNestedFastpath, TorchBaselineMode::kFastpath,
                        TorchBaselineMode::kSlowPath}) {
        if (!a.runs("pytorch") || dtype == DType::kInt8) break;
        if (a.skip_slow && mode == TorchBaselineMode::kSlowPath) continue;
        // In bf16 only the nested fastpath is a baseline: the padded paths add
        // minutes on CPUs whose bf16 GEMMs are emulated and compare nothing new.
        if (dtype == DType::kBFloat16 && mode != TorchBaselineMode::kNestedFastpath &&
            !a.all_bf16_paths) {
          continue;
        }
        Measurement m{workload, std::string("pytorch ") + TorchBaselineModeName(mode), name,
                      batch.num_tokens()};
        auto first = baselines[name]->Forward(mode, sequences);  // checked once, then timed
        if (!first.ok()) return fail(first.status().WithContext(workload));
        Tensor output = *first;
        Time([&] { output = *baselines[name]->Forward(mode, sequences); }, a.min_seconds, &m);
        if (dtype == DType::kFloat32 && mode == TorchBaselineMode::kNestedFastpath) {
          reference = output;
        }
        compare(output, &m);
        results.push_back(m);
      }
#endif
      if (!a.runs("encoderd")) continue;
      Measurement m{workload, "encoderd", name, batch.num_tokens()};
      auto first = encoders[name]->Forward(batch);  // checked once, then timed
      if (!first.ok()) return fail(first.status().WithContext(workload));
      Tensor output = *first;
      Time([&] { output = *encoders[name]->Forward(batch); }, a.min_seconds, &m);
      compare(output, &m);
      if (!a.outputs.empty()) {
        const Status written =
            WriteRows(output, std::filesystem::path(a.outputs) / name / (workload + ".f32"));
        if (!written.ok()) return fail(written);
      }
      results.push_back(m);
      if (a.op_profile) {
        OpProfile profile;
        if (!encoders[name]->ProfileOps(&profile)) {
          return fail(InvalidArgument(std::string("--op-profile: the ") + DeviceName(a.device) +
                                      " encoder's ops cannot be timed apart"));
        }
        Measurement again{workload, "encoderd", name, batch.num_tokens()};
        Time([&] { output = *encoders[name]->Forward(batch); }, a.min_seconds, &again);
        encoders[name]->ProfileOps(nullptr);
        for (OpRow& row : OpRows(profile, config, sequences, workload, name))
          op_rows.push_back(std::move(row));
      }
      if (!a.pooled) continue;
      Encoder::Outputs outputs;
      outputs.poolings = {*a.pooled};
      Measurement p{workload, std::string("encoderd pooled ") + PoolingName(*a.pooled), name,
                    batch.num_tokens()};
      auto pooled = encoders[name]->Forward(batch, outputs);
      if (!pooled.ok()) return fail(pooled.status().WithContext(workload));
      Time([&] { pooled = encoders[name]->Forward(batch, outputs); }, a.min_seconds, &p);
      if (!pooled.ok()) return fail(pooled.status().WithContext(workload));
      results.push_back(p);
    }
  }

  nlohmann::json json = {{"shape",
                          {{"layers", config.num_layers},
                           {"hidden", config.hidden_size},
                           {"heads", config.num_heads},
                           {"ffn", config.intermediate_size}}},
                         {"threads", a.threads},
                         {"device", DeviceName(a.device)},
                         {"torch", torch_setup},
                         {"cpu", {{"avx512f", cpu.avx512f}, {"avx512_bf16", cpu.avx512_bf16}}},
                         {"cpu_features", kernels::DescribeCpuFeatures()},
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
                               {"runs_ms", m.runs_ms},
                               {"tokens_per_s", m.tokens_per_s()},
                               {"speedup_vs_nested", nested_ms(m) / m.ms},
                               {"max_abs_diff_vs_fp32_nested", m.max_abs_diff},
                               {"min_cosine_vs_fp32_nested", m.min_cosine}});
  }
  if (a.op_profile) json["op_profile"] = nlohmann::json::array();
  for (const auto& r : op_rows) {
    json["op_profile"].push_back({{"workload", r.workload},
                                  {"dtype", r.dtype},
                                  {"op", r.op},
                                  {"ms_per_forward", r.ms},
                                  {"share", r.share},
                                  {"gflops", r.gflops}});
  }
  if (a.json) {
    out << JsonText(json, 2) << "\n";
    return 0;
  }
  out << "shape: " << config.num_layers << " layers, hidden " << config.hidden_size << ", "
      << config.num_heads << " heads, ffn " << config.intermediate_size << "; threads " << a.threads
      << "\n"
      << torch_setup << "; "
      << (a.device == Device::kCuda ? std::string("encoderd on cuda: GEMM cuBLASLt")
                                    : "encoderd GEMM: oneDNN; " + kernels::DescribeCpuFeatures())
      << "\n\n";
  out << "| workload | engine | dtype | tokens | ms | tokens/s | vs nested | max abs diff "
         "| min cosine |\n"
      << "|---|---|---|---:|---:|---:|---:|---:|---:|\n";
  // A cell that was not measured (no PyTorch run, no nested fastpath in
  // that dtype) reads "-".
  auto cell = [](double value, std::ios_base::fmtflags format, int precision,
                 const char* suffix = "") {
    if (!std::isfinite(value)) return std::string("-");
    std::ostringstream text;
    text.flags(format);
    text << std::setprecision(precision) << value << suffix;
    return text.str();
  };
  out << std::fixed;
  for (const auto& m : results) {
    out << "| " << m.workload << " | " << m.engine << " | " << m.dtype << " | " << m.tokens << " | "
        << std::setprecision(1) << m.ms << " | " << std::setprecision(0) << m.tokens_per_s()
        << " | " << cell(nested_ms(m) / m.ms, std::ios::fixed, 2, "x") << " | "
        << cell(m.max_abs_diff, std::ios::scientific, 1) << " | "
        << cell(m.min_cosine, std::ios::fixed, 5) << " |\n";
  }
  if (op_rows.empty()) return 0;
  out << "\nencoderd's ops (--op-profile; GFLOP/s of their matmuls, no padding):\n\n"
      << "| workload | dtype | op | ms per forward | share | GFLOP/s |\n"
      << "|---|---|---|---:|---:|---:|\n";
  for (const auto& r : op_rows) {
    out << "| " << r.workload << " | " << r.dtype << " | " << r.op << " | " << std::setprecision(2)
        << r.ms << " | " << std::setprecision(1) << 100 * r.share << "% | "
        << cell(r.gflops, std::ios::fixed, 0) << " |\n";
  }
  return 0;
}

}  // namespace encoderd::server
