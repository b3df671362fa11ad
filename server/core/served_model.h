// One served model: its bundle (config, tokenizer), the engine replicas
// behind a DynamicBatcher, and the request validation that needs the model
// (text count, empty or invalid texts, token limits; the checks themselves
// live in request_validation.h). Free of gRPC.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/model_spec.h"
#include "engine/text/tokenizer.h"
#include "server/config/config.h"
#include "server/core/dynamic_batcher.h"
#include "server/core/request_validation.h"

namespace encoderd::server {

class ServedModel {
 public:
  // Loads the directory, builds config.replicas engines, runs a warm-up batch
  // on each (every output kind the model supports), times a batch of each
  // size on the first (calibration.h; unless every rule that reads the
  // throughput is off) and starts the batcher with those rates.
  // `metrics` (may be null) must outlive the batcher's Stop().
  // `fair_queuing`: the queue is ordered fairly between client connections
  // (BatchLimits::fair_queuing).
  static StatusOr<std::unique_ptr<ServedModel>> Load(const ModelConfig& config,
                                                     ServingMetrics* metrics = nullptr,
                                                     bool fair_queuing = true);

  const ModelConfig& config() const { return config_; }
  const EncoderConfig& encoder_config() const { return encoder_config_; }
  // Longest sequence accepted: min(config.max_tokens, the model's own limit).
  int64_t max_tokens() const { return max_tokens_; }
  // What one request may ask of this model (server/core/request_validation.h).
  RequestLimits limits() const;

  // Checks the number of texts and each text (empty, NUL byte, invalid
  // UTF-8), then tokenizes every text (TokenizeTexts). INVALID_ARGUMENT names
  // the offending text ("texts[2]: ...").
  // With `pairs` non-empty, texts[i] and pairs[i] make one sequence
  // (TokenizeTextPairs, the bundle's pair_template); FAILED_PRECONDITION for
  // a model that defines no pair format. A model without a token type table
  // (or with one row) gets type 0 everywhere: its encodings carry no types.
  // The prompt `prompt_name` names (Prompt) goes in front of each text.
  StatusOr<std::vector<Encoding>> Tokenize(const std::vector<std::string>& texts,
                                           const std::vector<std::string>& pairs, bool truncate,
                                           const std::string& prompt_name) const;
  // Rerank's pairs (query, texts[i]) (TokenizeQueryPairs), with the same
  // rules as pairs in Tokenize; the prompt goes in front of the query.
  StatusOr<std::vector<Encoding>> TokenizeQueryPairs(const std::string& query,
                                                     const std::vector<std::string>& texts,
                                                     bool truncate,
                                                     const std::string& prompt_name) const;
  // The prompt a request's prompt_name names (PromptNamed over the model's
  // prompts and default prompt).
  StatusOr<std::string_view> Prompt(const std::string& prompt_name) const;
  // The first token a text's pooled row reads under that prompt
  // (OutputSpec::pool_start): 0, unless the model's Pooling module has
  // include_prompt false (ModelBundle::include_prompt) and the prompt is not
  // empty; then the length of the prompt's own encoding (computed at load,
  // within max_tokens), less its closing special token.
  StatusOr<int32_t> PoolStart(const std::string& prompt_name) const;
  // Whether the model reads text pairs: it has a tokenizer, and its family
  // defines how two texts are joined.
  bool reads_text_pairs() const { return encoder_config_.reads_text_pairs(tokenizer_ != nullptr); }
  bool serves_rerank() const { return encoder_config_.serves_rerank(tokenizer_ != nullptr); }
  const std::map<std::string, std::string>& prompts() const { return prompts_; }
  const std::string& default_prompt() const { return default_prompt_; }
  const std::string& default_prompt_name() const { return default_prompt_name_; }
  // The Pooling module's include_prompt (ModelBundle::include_prompt).
  bool include_prompt() const { return include_prompt_; }
  // Checks pre-tokenised sequences (ids in the vocabulary, within
  // max_tokens, pad tokens the model can mask).
  Status CheckTokenIds(const std::vector<std::vector<int32_t>>& sequences) const;
  // request_validation.h's CheckPadKeys over tokenized texts the model is
  // to run (a text's pad token: its special text written in it, `<pad>`);
  // not for the Tokenize RPC, which runs no model.
  Status CheckPadKeys(const std::vector<Encoding>& encodings) const;

  DynamicBatcher& batcher() { return *batcher_; }

 private:
  ServedModel(ModelConfig config, ModelBundle bundle);
  // FAILED_PRECONDITION without a tokenizer / unless reads_text_pairs().
  Status CheckHasTokenizer() const;
  Status CheckReadsPairs() const;
  // Fills pool_starts_ for every non-empty prompt (PoolStart), at load.
  Status CountPromptTokens();
  // Pair encodings as the model reads them: no token types without a type
  // table of at least two rows.
  std::vector<Encoding> AsModelReads(std::vector<Encoding> encodings) const;

  ModelConfig config_;
  EncoderConfig encoder_config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string tokenizer_note_;  // why a tokenizer file the directory has is not used
  std::string head_note_;       // why the checkpoint's task head is not served
  std::optional<PairTemplate> pair_template_;
  std::map<std::string, std::string> prompts_;
  std::string default_prompt_;
  std::string default_prompt_name_;
  bool include_prompt_ = true;
  std::map<std::string, int32_t> pool_starts_;  // by prompt text: PoolStart's, where not 0
  int64_t max_tokens_ = 0;
  std::unique_ptr<DynamicBatcher> batcher_;
};

}  // namespace encoderd::server
