#include "server/core/served_model.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "core/dtype.h"
#include "engine/runtime/encoder.h"
#include "server/config/model_card_yaml.h"
#include "server/core/calibration.h"
#include "server/core/cpu_quota.h"
#include "server/core/encoder_batch_engine.h"

namespace encoderd::server {
namespace {

// Runs one tiny batch through `engine` for every output kind the model has.
Status WarmUp(BatchEngine* engine, const EncoderConfig& config) {
  const SpecialTokens& special = config.special_tokens;
  PackedBatchBuilder builder(config.position_rule, static_cast<int32_t>(config.pad_token_id));
  std::vector<OutputSpec> specs;
  specs.push_back({OutputKind::kEmbedding, config.default_pooling, false});
  if (config.num_labels > 0) specs.push_back({OutputKind::kClassification, Pooling::kCls, false});
  specs.push_back({OutputKind::kHiddenStates, Pooling::kCls, false});
  for (size_t i = 0; i < specs.size(); ++i)
    RETURN_IF_ERROR(builder.Add({special.bos, special.eos}, {}, {0, static_cast<int32_t>(i)}));
  ASSIGN_OR_RETURN(auto outputs, engine->Run(builder.Build(), specs, {}));
  if (outputs.size() != specs.size()) return Internal("warm-up returned the wrong result count");
  return Status::Ok();
}

// The longest sequence the model serves: the config's max_tokens, when set,
// within the model's own limit.
int64_t MaxTokens(const ModelConfig& config, const EncoderConfig& model) {
  return config.max_tokens > 0 ? std::min(config.max_tokens, model.max_tokens) : model.max_tokens;
}

}  // namespace

ServedModel::ServedModel(ModelConfig config, ModelBundle bundle)
    : config_(std::move(config)),
      encoder_config_(bundle.config),
      tokenizer_(std::move(bundle.tokenizer)),
      tokenizer_note_(std::move(bundle.tokenizer_note)),
      head_note_(std::move(bundle.head_note)),
      pair_template_(bundle.pair_template),
      prompts_(std::move(bundle.prompts)),
      default_prompt_(std::move(bundle.default_prompt)),
      default_prompt_name_(std::move(bundle.default_prompt_name)),
      include_prompt_(bundle.include_prompt) {
  max_tokens_ = MaxTokens(config_, encoder_config_);
}

StatusOr<std::unique_ptr<ServedModel>> ServedModel::Load(const ModelConfig& config,
                                                         ServingMetrics* metrics,
                                                         bool fair_queuing) {
  const auto start = std::chrono::steady_clock::now();
  const std::string context = "model '" + config.name + "' (" + config.directory + ")";
  auto bundle = LoadModelDirectory(config.directory);
  if (!bundle.ok()) return bundle.status().WithContext(context);

  EncoderOptions options;
  options.device = config.device;
  options.dtype = config.dtype;
  options.num_threads = config.num_threads;
  ASSIGN_OR_RETURN(options.fp32_linears, ParseFp32Linears(config.int8_fp32_linears));
  if (options.device == Device::kCpu && options.num_threads == 0) {
    const CpuBudget budget = ReadCpuBudget();
    options.num_threads = std::max(1, budget.cpus / std::max(1, config.replicas));
    spdlog::info("model '{}': {} threads per executor: {} for {} executor(s)", config.name,
                 options.num_threads, budget.Describe(), config.replicas);
  }

  std::vector<std::unique_ptr<BatchEngine>> replicas;
  for (int r = 0; r < config.replicas; ++r) {
    auto encoder = Encoder::Create(bundle->config, bundle->weights, options);
    if (!encoder.ok()) return encoder.status().WithContext(context);
    replicas.push_back(std::make_unique<EncoderBatchEngine>(std::move(encoder).value()));
    Status warm = WarmUp(replicas.back().get(), bundle->config);
    if (!warm.ok()) return warm.WithContext(context + ": warm-up");
  }
  BatchLimits limits;
  limits.max_batch_tokens = config.max_batch_tokens;
  limits.max_batch_sequences = config.max_batch_sequences;
  limits.max_batch_time_us = config.max_batch_time_us;
  limits.max_queue_delay_us = config.max_queue_delay_us;
  limits.max_queue_size = config.max_queue_size;
  limits.fair_queuing = fair_queuing;
  limits.admission.predict_deadlines = config.predict_deadlines;
  limits.admission.max_queue_time_us = config.max_queue_time_us;
  limits.admission.overload_queue_time_us = config.overload_queue_time_us;
  // Every rule that reads the measured throughput has it from the first call.
  Calibration calibration;
  if (config.calibration_budget_ms > 0 &&
      (limits.admission.predict_deadlines || limits.admission.max_queue_time_us > 0 ||
       limits.admission.overload_queue_time_us > 0 || limits.max_batch_time_us > 0)) {
    CalibrationOptions calibrating;
    calibrating.budget = std::chrono::milliseconds(config.calibration_budget_ms);
    auto runs =
        RunCalibration(replicas.front().get(), bundle->config,
                       CalibrationBatches(limits, MaxTokens(config, bundle->config)), calibrating);
    if (!runs.ok()) return runs.status().WithContext(context);
    calibration = std::move(runs).value();
  }
  const std::string default_prompt_source = bundle->default_prompt_source;
  std::unique_ptr<ServedModel> model(new ServedModel(config, std::move(bundle).value()));
  PackingRule rule{model->encoder_config_.position_rule,
                   static_cast<int32_t>(model->encoder_config_.pad_token_id)};
  model->batcher_ =
      std::make_unique<DynamicBatcher>(limits, rule, std::move(replicas), metrics, config.name);
  std::string calibrated;
  const auto ms = [](Clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };
  for (const CalibrationRun& run : calibration.runs) {
    model->batcher_->Calibrate(run.tokens, run.took);
    calibrated += fmt::format("{}{} tokens in {:.1f} ms", calibrated.empty() ? "" : ", ",
                              run.tokens, ms(run.took));
  }
  std::string estimated;
  for (const CalibrationRun& run : calibration.estimated) {
    model->batcher_->Calibrate(run.tokens, run.took);
    estimated += fmt::format("{}{} tokens at {:.1f} ms", estimated.empty() ? "" : ", ", run.tokens,
                             ms(run.took));
  }
  if (!estimated.empty()) {
    calibrated += fmt::format(
        "; past calibration_budget_ms {}, estimated until calls of their size have run: {}",
        config.calibration_budget_ms, estimated);
  }
  if (!calibrated.empty()) {
    spdlog::info("model '{}': throughput calibrated on one batch of each size: {}", config.name,
                 calibrated);
  }

  if (!model->head_note_.empty()) {
    spdlog::warn("model '{}' serves embeddings, no labels: {}", config.name, model->head_note_);
  }
  if (!model->tokenizer_note_.empty() && !model->tokenizer_) {
    spdlog::warn("model '{}' has no tokenizer, so it takes token ids only: {}", config.name,
                 model->tokenizer_note_);
  } else if (!model->tokenizer_note_.empty()) {
    // A tokenizer.json whose pipeline encoderd does not reproduce beside
    // the slow tokenizer's files.
    spdlog::info("model '{}' tokenizes with its slow tokenizer's files, not its tokenizer.json: {}",
                 config.name, model->tokenizer_note_);
  }
  if (!model->default_prompt_.empty()) {
    spdlog::info(
        "model '{}' puts its default prompt \"{}\" in front of every text whose request names "
        "no prompt ({})",
        config.name, model->default_prompt_, default_prompt_source);
  }
  if (!model->prompts_.empty()) {
    std::string names;
    for (const auto& entry : model->prompts_) names += (names.empty() ? "" : ", ") + entry.first;
    spdlog::info("model '{}' has the prompts a request may name: {}", config.name, names);
  }
  if (!model->include_prompt_ && model->tokenizer_) {
    Status counted = model->CountPromptTokens();
    if (!counted.ok()) return counted.WithContext(context);
  }
  if (const int64_t kept = model->encoder_config_.default_dimensions; kept > 0) {
    spdlog::info(
        "model '{}' serves the first {} of its embeddings' {} values (its truncate_dim) unless a "
        "request asks for another number",
        config.name, kept, model->encoder_config_.pooled_width());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info(
      "loaded model '{}' from {} in {:.3f} s: family={} hidden={} layers={} labels={} "
      "max_tokens={} device={} dtype={} replicas={}",
      config.name, config.directory, seconds, ModelFamilyName(model->encoder_config_.family),
      model->encoder_config_.hidden_size, model->encoder_config_.num_layers,
      model->encoder_config_.num_labels, model->max_tokens_, DeviceName(config.device),
      DTypeName(config.dtype), config.replicas);
  return model;
}

RequestLimits ServedModel::limits() const {
  RequestLimits limits{config_.max_client_batch_size, max_tokens_, encoder_config_.vocab_size};
  if (encoder_config_.mask_pad_keys) {
    limits.masked_pad_id = encoder_config_.pad_token_id;
    limits.pad_keys_unmasked = config_.device != Device::kCpu;  // kernels::KeyBias
  }
  return limits;
}

StatusOr<std::string_view> ServedModel::Prompt(const std::string& prompt_name) const {
  return PromptNamed(prompts_, default_prompt_, prompt_name, "model '" + config_.name + "'");
}

StatusOr<int32_t> ServedModel::PoolStart(const std::string& prompt_name) const {
  if (include_prompt_) return 0;
  ASSIGN_OR_RETURN(const std::string_view prompt, Prompt(prompt_name));
  const auto it = pool_starts_.find(std::string(prompt));
  return it == pool_starts_.end() ? 0 : it->second;
}

Status ServedModel::CountPromptTokens() {
  std::string counts;
  for (const auto& [name, prompt] : prompts_) {
    if (prompt.empty() || pool_starts_.count(prompt)) continue;
    auto tokens = PromptPoolStart(*tokenizer_, prompt, max_tokens_);
    if (!tokens.ok()) return tokens.status().WithContext("prompt \"" + name + "\"");
    pool_starts_[prompt] = *tokens;
    counts += fmt::format("{}{} ({} tokens)", counts.empty() ? "" : ", ", name, *tokens);
  }
  spdlog::info(
      "model '{}' leaves a prompt's tokens out of its pooled embeddings (include_prompt false): {}",
      config_.name, counts.empty() ? std::string("it has no non-empty prompt") : counts);
  return Status::Ok();
}

StatusOr<std::vector<Encoding>> ServedModel::Tokenize(const std::vector<std::string>& texts,
                                                      const std::vector<std::string>& pairs,
                                                      bool truncate,
                                                      const std::string& prompt_name) const {
  RETURN_IF_ERROR(pairs.empty() ? CheckHasTokenizer() : CheckReadsPairs());
  ASSIGN_OR_RETURN(const std::string_view prompt, Prompt(prompt_name));
  if (pairs.empty()) return TokenizeTexts(*tokenizer_, texts, limits(), truncate, prompt);
  ASSIGN_OR_RETURN(
      std::vector<Encoding> encodings,
      TokenizeTextPairs(*tokenizer_, *pair_template_, texts, pairs, limits(), truncate, prompt));
  return AsModelReads(std::move(encodings));
}

Status ServedModel::CheckPadKeys(const std::vector<Encoding>& encodings) const {
  const RequestLimits checked = limits();
  for (size_t i = 0; i < encodings.size(); ++i)
    RETURN_IF_ERROR(server::CheckPadKeys(encodings[i].ids, checked, "tokenized texts", i));
  return Status::Ok();
}

StatusOr<std::vector<Encoding>> ServedModel::TokenizeQueryPairs(
    const std::string& query, const std::vector<std::string>& texts, bool truncate,
    const std::string& prompt_name) const {
  RETURN_IF_ERROR(CheckReadsPairs());
  ASSIGN_OR_RETURN(const std::string_view prompt, Prompt(prompt_name));
  ASSIGN_OR_RETURN(std::vector<Encoding> encodings,
                   server::TokenizeQueryPairs(*tokenizer_, *pair_template_, query, texts, limits(),
                                              truncate, prompt));
  return AsModelReads(std::move(encodings));
}

Status ServedModel::CheckHasTokenizer() const {
  if (!tokenizer_) {
    // The note names server paths: it goes to the log at load, not to clients.
    return FailedPrecondition("model '" + config_.name + "' has no tokenizer" +
                              (tokenizer_note_.empty()
                                   ? ""
                                   : " (its tokenizer file is not one encoderd reads; the "
                                     "server's log says why)") +
                              "; send token_ids");
  }
  return Status::Ok();
}

Status ServedModel::CheckReadsPairs() const {
  RETURN_IF_ERROR(CheckHasTokenizer());
  if (!pair_template_) {
    return FailedPrecondition("model '" + config_.name + "' (family " +
                              ModelFamilyName(encoder_config_.family) +
                              ") defines no text-pair format; send single texts");
  }
  return Status::Ok();
}

std::vector<Encoding> ServedModel::AsModelReads(std::vector<Encoding> encodings) const {
  if (!encoder_config_.reads_token_types())
    for (Encoding& e : encodings) e.token_types.clear();
  return encodings;
}

Status ServedModel::CheckTokenIds(const std::vector<std::vector<int32_t>>& sequences) const {
  return server::CheckTokenIds(sequences, limits());
}

}  // namespace encoderd::server
