// Hugging Face config.json (and tokenizer_config.json): the fields encoderd
// uses, each optional as in the file. Values are checked for type and range;
// errors name the file and the key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/model/model_spec.h"
#include "engine/text/added_tokens.h"

namespace encoderd {

struct HfConfig {
  // From model_type: bert -> kBert, roberta -> kRoberta, xlm-roberta -> kXlmRoberta,
  // camembert -> kCamembert, data2vec-text -> kData2VecText,
  // roberta-prelayernorm -> kRobertaPreLayerNorm,
  // electra -> kElectra, mpnet -> kMpnet, deberta-v2 -> kDeberta (DeBERTa-v2 and -v3),
  // distilbert -> kDistilbert (whose keys dim, n_layers,
  // n_heads, hidden_dim and activation fill hidden_size, num_hidden_layers, num_attention_heads,
  // intermediate_size and hidden_act).
  ModelFamily family = ModelFamily::kBert;
  std::string model_type;
  std::optional<int64_t> vocab_size;
  std::optional<int64_t> hidden_size;
  std::optional<int64_t> embedding_size;  // ELECTRA
  std::optional<int64_t> num_hidden_layers;
  std::optional<int64_t> num_attention_heads;
  std::optional<int64_t> intermediate_size;
  std::optional<int64_t> max_position_embeddings;
  std::optional<int64_t> type_vocab_size;
  std::optional<int64_t> relative_attention_num_buckets;  // MPNet
  std::optional<int64_t> pad_token_id;
  std::optional<float> layer_norm_eps;
  std::optional<Activation> hidden_act;
  // DeBERTa-v2's keys (transformers reads each with getattr, so an absent
  // one is the attention's default: relative_attention, share_att_key and
  // position_buckets off; position_biased_input on; max_relative_positions
  // -1, that is max_position_embeddings). pos_att_type: the names in its
  // list or "|"-separated string, lower-cased; norm_rel_ebd likewise.
  std::optional<bool> relative_attention;
  std::optional<bool> position_biased_input;
  std::optional<bool> share_att_key;
  std::optional<int64_t> max_relative_positions;
  std::optional<int64_t> position_buckets;
  std::vector<std::string> pos_att_type;
  std::vector<std::string> norm_rel_ebd;
  std::optional<int64_t> conv_kernel_size;
  std::optional<int64_t> attention_head_size;
  std::optional<int64_t> pooler_hidden_size;
  // pooler_hidden_act as ACT2FN names it ("gelu", "tanh", ...); empty when absent.
  std::string pooler_hidden_act;
  // id2label ordered by id; empty when absent.
  std::vector<std::string> labels;
  // The transformers classes the checkpoint was saved from
  // ("BertForTokenClassification"); empty when absent.
  std::vector<std::string> architectures;
  ProblemType problem_type = ProblemType::kUnspecified;
  // The activation sentence-transformers' CrossEncoder applies to the
  // logits, as config.json names it ("torch.nn.modules.linear.Identity"):
  // sentence_transformers.activation_fn (its releases since 4.0), else
  // sbert_ce_default_activation_function (before); empty when neither is
  // given. `cross_encoder_activation_from` names the file and the key that
  // gave it, for messages.
  std::string cross_encoder_activation;
  std::string cross_encoder_activation_from;
};

// The config.json keys of the sizes and the activation in `family`
// (DistilBERT names them differently): for reading and for error messages.
struct HfKeys {
  const char* hidden_size;
  const char* num_hidden_layers;
  const char* num_attention_heads;
  const char* intermediate_size;
  const char* hidden_act;
};
const HfKeys& HfKeysFor(ModelFamily family);

// Whether a classifier in the checkpoint may be the head of a text's labels
// that encoderd serves: not where `architectures` names only classes of
// another task's head (*ForTokenClassification, *ForMultipleChoice,
// *ForQuestionAnswering); otherwise the weights decide, as
// AutoModelForSequenceClassification loads a classifier whatever else
// (BertModel, say) the list names.
bool ArchitecturesServeASequenceHead(const HfConfig& config);

StatusOr<HfConfig> ReadHfConfig(const std::string& path);

// The keys of tokenizer_config.json that encoderd reads, each nullopt when
// absent or null.
struct TokenizerConfig {
  std::optional<bool> do_lower_case;
  std::optional<bool> strip_accents;
  std::optional<bool> tokenize_chinese_chars;
  std::optional<bool> add_prefix_space;
  std::optional<bool> split_by_punct;  // DebertaV2Tokenizer
  std::optional<std::string> tokenizer_class;
};

// INVALID_ARGUMENT naming the file and the key when one of them has another
// type.
StatusOr<TokenizerConfig> ReadTokenizerConfig(const std::string& path);

// The added tokens a Hugging Face folder declares beside its slow
// tokenizer's files, as transformers reads them, by id: tokenizer_config.json's
// added_tokens_decoder; where it has none, the older added_tokens.json
// (content -> id), each token special where tokenizer_config.json or
// special_tokens_map.json names it a special token (its *_token or
// additional_special_tokens), and then not normalized, the others
// normalized. Each with the id its file gives; then the
// additional_special_tokens those two files name (id -1: the vocabulary's,
// not normalized), which the fast class adds where they are not added yet.
// *declared_in: the file of the first list ("" where neither is there).
// INVALID_ARGUMENT naming the file and the entry for a damaged one.
StatusOr<std::vector<AddedToken>> ReadDeclaredAddedTokens(const std::string& dir,
                                                          std::string* declared_in);

}  // namespace encoderd
