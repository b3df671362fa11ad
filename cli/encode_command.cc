#include "cli/encode_command.h"

#include <chrono>
#include <cstdio>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/flags.h"
#include "core/json_text.h"
#include "engine/runtime/encoder.h"
#include "engine/runtime/packed_batch.h"
#include "server/config/model_card_yaml.h"
#include "server/core/request_validation.h"

namespace encoderd::server {
namespace {

constexpr char kUsage[] =
    "usage: encoderd encode MODEL_DIR --text TEXT [--text TEXT ...]\n"
    "         [--pooling cls|mean|max|mean_sqrt_len|weighted_mean|last_token]\n"
    "         [--normalize] [--dimensions N] [--prompt-name NAME] [--device cpu|cuda]\n"
    "         [--dtype fp32|fp16|bf16|int8] [--threads N] [--no-truncate] [--json]\n"
    "--dtype defaults to fp32 on cpu and fp16 on cuda. --prompt-name: one of the\n"
    "folder's prompts (encoderd inspect lists them) before each text; without\n"
    "it, the default prompt where the folder has one. --dimensions: only the first N\n"
    "values of each embedding, unit length again where it is normalized.\n"
    "Prints label probabilities when the model has a classification head and no\n"
    "--pooling is given, otherwise one pooled embedding per text.\n";

struct EncodeArgs {
  std::string model_dir;
  std::vector<std::string> texts;
  std::optional<Pooling> pooling;
  bool normalize = false;
  int dimensions = 0;  // 0: all
  std::string prompt_name;
  Device device = Device::kCpu;
  std::optional<DType> dtype;  // unset: the device's default
  int threads = 0;
  bool truncate = true;
  bool json = false;
};

// Parses `args`; returns an error message, empty on success.
std::string Parse(const std::vector<std::string>& args, EncodeArgs* out) {
  Flags flags;
  flags.Positional("MODEL_DIR", &out->model_dir);
  flags.Strings("--text", &out->texts);
  flags.String("--prompt-name", &out->prompt_name);
  flags.Value("--pooling", "cls, mean, max, mean_sqrt_len, weighted_mean, last_token",
              [out](const std::string& v) {
                out->pooling = ParsePooling(v);
                return out->pooling.has_value();
              });
  flags.Value("--dtype", "fp32, fp16, bf16 or int8", [out](const std::string& v) {
    const auto dtype = ParseDType(v);
    if (!dtype || (*dtype != DType::kFloat32 && *dtype != DType::kFloat16 &&
                   *dtype != DType::kBFloat16 && *dtype != DType::kInt8)) {
      return false;
    }
    out->dtype = *dtype;
    return true;
  });
  flags.Value("--device", "cpu or cuda", [out](const std::string& v) {
    const auto device = ParseDevice(v);
    if (device) out->device = *device;
    return device.has_value();
  });
  flags.Int("--threads", &out->threads, 0);
  flags.Switch("--normalize", &out->normalize);
  flags.Int("--dimensions", &out->dimensions, 0);
  bool no_truncate = false;
  flags.Switch("--no-truncate", &no_truncate);
  flags.Switch("--json", &out->json);
  if (std::string error = flags.Parse(args); !error.empty()) return error;
  out->truncate = !no_truncate;
  if (out->texts.empty()) return "give at least one --text";
  return "";
}

int Fail(std::ostream& err, const Status& status) {
  err << "encoderd encode: " << status.ToString() << "\n";
  return 1;
}

}  // namespace

int RunEncodeCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    out << kUsage;
    return 0;
  }
  EncodeArgs a;
  if (const std::string error = Parse(args, &a); !error.empty()) {
    err << "encoderd encode: " << error << "\n" << kUsage;
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  auto bundle = LoadModelDirectory(a.model_dir);
  if (!bundle.ok()) return Fail(err, bundle.status());
  if (!bundle->tokenizer) {
    return Fail(err, FailedPrecondition(a.model_dir + " has no tokenizer"));
  }
  const EncoderConfig& config = bundle->config;
  const auto prompt =
      PromptNamed(bundle->prompts, bundle->default_prompt, a.prompt_name, a.model_dir);
  if (!prompt.ok()) return Fail(err, prompt.status());
  int32_t pool_start = 0;  // include_prompt = false: the prompt's tokens are not pooled
  if (!bundle->include_prompt) {
    auto start = PromptPoolStart(*bundle->tokenizer, *prompt, config.max_tokens);
    if (!start.ok()) return Fail(err, start.status().WithContext("the prompt"));
    pool_start = *start;
  }
  const bool classify = config.num_labels > 0 && !a.pooling;
  if (classify && a.dimensions > 0)
    return Fail(err, InvalidArgument("--dimensions is for embeddings: give --pooling as well"));
  const auto kept =
      KeptDimensions(a.dimensions, config.served_dimensions(), config.pooled_width(), a.model_dir);
  if (!kept.ok()) return Fail(err, kept.status());
  EncoderOptions options;
  options.device = a.device;
  options.dtype = a.dtype.value_or(a.device == Device::kCuda ? DType::kFloat16 : DType::kFloat32);
  options.num_threads = a.threads;
  // The encoder keeps what it needs; the checkpoint's own tensor map goes.
  bundle->checkpoint_tensors.clear();
  auto encoder = Encoder::Create(config, std::move(bundle->weights), options);
  if (!encoder.ok()) return Fail(err, encoder.status().WithContext(a.model_dir));
  const auto loaded = std::chrono::steady_clock::now();

  PackedBatchBuilder builder(config.position_rule, static_cast<int32_t>(config.pad_token_id));
  std::vector<int64_t> token_counts;
  for (size_t i = 0; i < a.texts.size(); ++i) {
    // Checked as given (as the server checks a text); the prompt goes in
    // front after, as the server puts it.
    if (Status text = CheckText(a.texts[i], i, "--text"); !text.ok()) return Fail(err, text);
    auto encoding =
        bundle->tokenizer->Encode(std::string(*prompt) + a.texts[i], config.max_tokens, a.truncate);
    if (!encoding.ok())
      return Fail(err, encoding.status().WithContext("text " + std::to_string(i)));
    token_counts.push_back(static_cast<int64_t>(encoding->ids.size()));
    Status added = builder.Add(encoding->ids, {}, {0, static_cast<int32_t>(i)}, pool_start);
    if (!added.ok()) return Fail(err, added);
  }
  const PackedBatch batch = builder.Build();
  // Only the pooled rows come back from the encoder (a GPU pools on the device).
  const Pooling pooling = classify ? Pooling::kCls : a.pooling.value_or(config.default_pooling);
  Encoder::Outputs outputs;
  outputs.poolings = {pooling};
  auto forward = (*encoder)->Forward(batch, outputs);
  if (!forward.ok()) return Fail(err, forward.status());
  const Tensor& rows = forward->pooled.at(pooling);
  const bool normalize = a.normalize || config.default_normalize;
  auto result = classify ? (*encoder)->ClassifyFromFirst(rows)
                         : (*encoder)->EmbeddingFromPooled(rows, normalize);
  if (!result.ok()) return Fail(err, result.status());
  const auto done = std::chrono::steady_clock::now();
  const int64_t width = result->size(1);
  const float* values = result->data<float>();

  nlohmann::json json = {
      {"model", a.model_dir},
      {"device", DeviceName(options.device)},
      {"dtype", std::string(DTypeName(options.dtype))},
      {"load_ms", std::chrono::duration<double, std::milli>(loaded - start).count()},
      {"inference_ms", std::chrono::duration<double, std::milli>(done - loaded).count()},
      {"results", nlohmann::json::array()}};
  if (classify) json["labels"] = config.labels;
  for (size_t i = 0; i < a.texts.size(); ++i) {
    const float* row = values + i * width;
    nlohmann::json r = {{"text", a.texts[i]}, {"tokens", token_counts[i]}};
    if (classify) {
      const int64_t best = std::max_element(row, row + width) - row;
      r["label"] = config.labels[best];
      r["scores"] = std::vector<float>(row, row + width);  // in json["labels"] order
    } else {
      r["embedding"] = KeptValues(row, width, *kept, normalize);
    }
    json["results"].push_back(r);
  }
  if (a.json) {
    out << JsonText(json, 2) << "\n";
    return 0;
  }
  out << std::fixed << std::setprecision(4);
  for (const auto& r : json["results"]) {
    out << r["text"].get<std::string>() << "\n  tokens: " << r["tokens"].get<int64_t>() << "\n";
    if (classify) {
      out << "  label:  " << r["label"].get<std::string>() << "\n  scores:";
      const auto& scores = r["scores"];
      for (size_t j = 0; j < scores.size(); ++j)
        out << " " << config.labels[j] << "=" << scores[j].get<float>();
      out << "\n";
    } else {
      const auto& e = r["embedding"];
      out << "  embedding[" << e.size() << "]:";
      for (size_t k = 0; k < std::min<size_t>(8, e.size()); ++k) out << " " << e[k].get<float>();
      out << (e.size() > 8 ? " ..." : "") << "\n";
    }
  }
  out << std::setprecision(1) << "load " << json["load_ms"].get<double>() << " ms, inference "
      << json["inference_ms"].get<double>() << " ms (" << DeviceName(options.device) << ", "
      << DTypeName(options.dtype) << ")\n";
  return 0;
}

}  // namespace encoderd::server
