#include "server/served_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "engine/core/dtype.h"
#include "engine/runtime/encoder.h"
#include "server/encoder_batch_engine.h"
#include "server/model_card_yaml.h"

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
  ASSIGN_OR_RETURN(auto outputs, engine->Run(builder.Build(), specs));
  if (outputs.size() != specs.size()) return Internal("warm-up returned the wrong result count");
  return Status::Ok();
}

}  // namespace

ServedModel::ServedModel(ModelConfig config, ModelBundle bundle)
    : config_(std::move(config)),
      encoder_config_(bundle.config),
      tokenizer_(std::move(bundle.tokenizer)) {
  max_tokens_ = encoder_config_.max_tokens;
  if (config_.max_tokens > 0) max_tokens_ = std::min(max_tokens_, config_.max_tokens);
}

StatusOr<std::unique_ptr<ServedModel>> ServedModel::Load(const ModelConfig& config,
                                                         ServingMetrics* metrics) {
  const auto start = std::chrono::steady_clock::now();
  const std::string context = "model '" + config.name + "' (" + config.directory + ")";
  auto bundle = LoadModelDirectory(config.directory);
  if (!bundle.ok()) return bundle.status().WithContext(context);

  EncoderOptions options;
  options.device = config.device == "cuda" ? Device::kCuda : Device::kCpu;
  const auto dtype = ParseDType(config.dtype);
  if (!dtype) return InvalidArgument(context + ": unknown dtype '" + config.dtype + "'");
  options.dtype = *dtype;
  options.num_threads = config.num_threads;

  std::vector<std::unique_ptr<BatchEngine>> replicas;
  for (int r = 0; r < config.replicas; ++r) {
    auto encoder = Encoder::Create(bundle->config, bundle->weights, options);
    if (!encoder.ok()) return encoder.status().WithContext(context);
    replicas.push_back(std::make_unique<EncoderBatchEngine>(std::move(encoder).value()));
    Status warm = WarmUp(replicas.back().get(), bundle->config);
    if (!warm.ok()) return warm.WithContext(context + ": warm-up");
  }
  std::unique_ptr<ServedModel> model(new ServedModel(config, std::move(bundle).value()));
  BatchLimits limits;
  limits.max_batch_tokens = config.max_batch_tokens;
  limits.max_batch_sequences = config.max_batch_sequences;
  limits.max_queue_delay_us = config.max_queue_delay_us;
  limits.max_queue_size = config.max_queue_size;
  PackingRule rule{model->encoder_config_.position_rule,
                   static_cast<int32_t>(model->encoder_config_.pad_token_id)};
  model->batcher_ =
      std::make_unique<DynamicBatcher>(limits, rule, std::move(replicas), metrics, config.name);

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info(
      "loaded model '{}' from {} in {:.3f} s: family={} hidden={} layers={} labels={} "
      "max_tokens={} device={} dtype={} replicas={}",
      config.name, config.directory, seconds, ModelFamilyName(model->encoder_config_.family),
      model->encoder_config_.hidden_size, model->encoder_config_.num_layers,
      model->encoder_config_.num_labels, model->max_tokens_, config.device, config.dtype,
      config.replicas);
  return model;
}

Status ServedModel::CheckCount(size_t count) const {
  if (count == 0) return InvalidArgument("the request has no texts");
  if (static_cast<int64_t>(count) > config_.max_client_batch_size)
    return InvalidArgument("the request has " + std::to_string(count) + " texts; the limit is " +
                           std::to_string(config_.max_client_batch_size));
  return Status::Ok();
}

StatusOr<std::vector<Encoding>> ServedModel::Tokenize(const std::vector<std::string>& texts,
                                                      bool truncate) const {
  RETURN_IF_ERROR(CheckCount(texts.size()));
  if (!tokenizer_)
    return FailedPrecondition("model '" + config_.name + "' has no tokenizer; send token_ids");
  std::vector<Encoding> encodings;
  encodings.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string where = "texts[" + std::to_string(i) + "]";
    if (texts[i].empty()) return InvalidArgument(where + " is empty");
    auto encoding = tokenizer_->Encode(texts[i], max_tokens_, truncate);
    if (!encoding.ok()) return encoding.status().WithContext(where);
    encodings.push_back(std::move(encoding).value());
  }
  return encodings;
}

Status ServedModel::CheckTokenIds(const std::vector<std::vector<int32_t>>& sequences) const {
  RETURN_IF_ERROR(CheckCount(sequences.size()));
  for (size_t i = 0; i < sequences.size(); ++i) {
    const std::string where = "token_ids[" + std::to_string(i) + "]";
    const auto& ids = sequences[i];
    if (ids.empty()) return InvalidArgument(where + " is empty");
    if (static_cast<int64_t>(ids.size()) > max_tokens_)
      return InvalidArgument(where + " has " + std::to_string(ids.size()) +
                             " tokens; the limit is " + std::to_string(max_tokens_));
    for (int32_t id : ids)
      if (id < 0 || id >= encoder_config_.vocab_size)
        return InvalidArgument(where + ": token id " + std::to_string(id) +
                               " is outside the vocabulary (size " +
                               std::to_string(encoder_config_.vocab_size) + ")");
  }
  return Status::Ok();
}

}  // namespace encoderd::server
