// What the engine needs to know about an encoder, independent of where its
// weights came from: hyperparameters (EncoderConfig) and the weights under
// canonical names (see kCanonicalNames below). The per-family mapping from
// checkpoint names to canonical names lives in weight_mapping.{h,cc}.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/op_types.h"
#include "core/status.h"
#include "core/tensor.h"
#include "engine/io/checkpoint_reader.h"
#include "engine/text/text_pair.h"
#include "engine/text/tokenizer.h"

namespace encoderd {

enum class ModelFamily {
  kBert,                 // Hugging Face BertModel / BertForSequenceClassification
  kRoberta,              // Hugging Face RobertaModel / RobertaForSequenceClassification
  kXlmRoberta,           // Hugging Face XLMRobertaModel / ...ForSequenceClassification
  kCamembert,            // Hugging Face CamembertModel / ...ForSequenceClassification (RoBERTa's)
  kData2VecText,         // Hugging Face Data2VecTextModel / ...ForSequenceClassification
  kRobertaPreLayerNorm,  // Hugging Face RobertaPreLayerNormModel / ...ForSequenceClassification
  kDistilbert,           // Hugging Face DistilBertModel / DistilBertForSequenceClassification
  kElectra,              // Hugging Face ElectraModel / ElectraForSequenceClassification
  kMpnet,                // Hugging Face MPNetModel / MPNetForSequenceClassification
  kDeberta,              // Hugging Face DebertaV2Model / ...ForSequenceClassification (v2, v3)
  kTorchtextRoberta,     // torchtext.models.RobertaModel (XLM-R / RoBERTa bundles)
  kFairseqRoberta,       // fairseq's RobertaModel checkpoints (RoBERTa, XLM-R)
  kTransformerEncoder,   // any nn.Embedding + nn.TransformerEncoder stack
};
enum class Activation { kGelu, kRelu, kTanh };
// Hugging Face config.json's problem_type: what the head was trained for.
enum class ProblemType { kUnspecified, kSingleLabel, kMultiLabel, kRegression };
// What Classify makes of the head's logits.
enum class HeadOutput { kSoftmax, kSigmoid, kLogits, kTanh };
// How position ids are assigned to the tokens of a sequence.
enum class PositionRule {
  kNone,             // no position embeddings
  kFromZero,         // BERT: 0, 1, 2, ...
  kAfterPaddingIdx,  // RoBERTa/XLM-R: pad_token_id + 1, + 2, ...; a pad token's: pad_token_id
};

// Names as written in encoderd.yaml and printed by `encoderd inspect`:
// "bert", "roberta", "xlm-roberta", "camembert", "data2vec-text", "roberta-prelayernorm",
// "distilbert", "electra", "mpnet", "deberta-v2", "torchtext-roberta", "fairseq-roberta",
// "transformer-encoder";
// "gelu", "relu", "tanh"; "cls", "mean"; "none", "from_zero", "after_padding_idx".
// The families described by a Hugging Face config.json (and tokenizer files).
bool IsHuggingFaceFamily(ModelFamily family);
// How the family joins two texts into one sequence: BERT's template for BERT,
// DistilBERT, ELECTRA and DeBERTa, RoBERTa's for RoBERTa, XLM-R, CamemBERT, data2vec-text,
// RoBERTa-PreLayerNorm, MPNet and torchtext's and fairseq's RoBERTa; none for generic
// nn.TransformerEncoder stacks, which define no pair format.
std::optional<PairTemplate> TextPairTemplate(ModelFamily family);
const char* ModelFamilyName(ModelFamily family);
const char* ActivationName(Activation activation);
const char* PoolingName(Pooling pooling);
const char* PositionRuleName(PositionRule rule);
// "softmax", "sigmoid", "logits", "tanh".
const char* HeadOutputName(HeadOutput output);
// config.json's spelling: "single_label_classification",
// "multi_label_classification", "regression".
std::optional<ProblemType> ParseProblemType(const std::string& name);
std::optional<ModelFamily> ParseModelFamily(const std::string& name);
std::optional<Activation> ParseActivation(const std::string& name);
std::optional<Pooling> ParsePooling(const std::string& name);
std::optional<PositionRule> ParsePositionRule(const std::string& name);

// The largest max_tokens a model may have.
inline constexpr int64_t kMaxTokensLimit = int64_t{1} << 20;
// The most values (heads x distances) of a relative attention bias table.
inline constexpr int64_t kMaxRelativeBiasValues = int64_t{1} << 26;
// The longest sequence a model with disentangled attention (DeBERTa) takes:
// its attention holds the bias rows of a block of queries over every key
// (kernels::DisentangledBias), and its relative embeddings reach no further
// than max_relative_positions (512 in DeBERTa-v3) anyway.
inline constexpr int64_t kMaxDisentangledTokens = 8192;

struct EncoderConfig {
  ModelFamily family = ModelFamily::kBert;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  // Width of the embedding tables and their LayerNorm when it is not
  // hidden_size: a Linear ("embeddings.project") then maps it to hidden_size
  // (ELECTRA's embeddings_project). 0: the embeddings are hidden_size wide.
  int64_t embedding_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t intermediate_size = 0;
  // Rows of the position table (0 when PositionRule::kNone).
  int64_t max_positions = 0;
  // Longest sequence the model accepts, special tokens included.
  int64_t max_tokens = 512;
  // Rows of the token-type table; 0 when the model has none.
  int64_t type_vocab_size = 0;
  // MPNet's relative attention bias: every layer's scores of query i and key
  // j get "encoder.relative_attention_bias" [buckets, heads] at the row
  // RelativePositionBucket(j - i, buckets, max_distance). 0: no such bias.
  int64_t relative_attention_buckets = 0;
  int64_t relative_attention_max_distance = 128;
  // DeBERTa-v2/-v3's disentangled attention: 0, or the relative positions
  // on each side of a query that "encoder.rel_embeddings" [2 *
  // attention_span, hidden] has rows for. Every layer adds to the score of
  // query i and key j q_i . Kr[c] (content_to_position) and k_j . Qr[c]
  // (position_to_content), where Kr and Qr are the layer's own key and query
  // projections of the relative embeddings (LayerNorm'd by
  // "encoder.rel_norm" first when relative_norm) and c =
  // DisentangledColumn(i - j, ...); the scores are divided by
  // sqrt(head_dim x (1 + the terms)) instead of sqrt(head_dim).
  int64_t attention_span = 0;
  // > 0: relative positions beyond position_buckets / 2 share rows on a log
  // scale reaching max_relative_positions (DeBERTa-v3: 256 and 512); 0: each
  // relative position has its own row up to the span.
  int64_t position_buckets = 0;
  int64_t max_relative_positions = 0;
  bool content_to_position = false;
  bool position_to_content = false;
  bool relative_norm = false;
  float layer_norm_eps = 1e-12f;
  Activation activation = Activation::kGelu;
  // Pre-norm layers (nn.TransformerEncoderLayer(norm_first=True)).
  bool norm_first = false;
  // LayerNorm applied to the summed embeddings (BERT, RoBERTa, torchtext).
  bool embedding_norm = true;
  // LayerNorm after the last layer (TransformerEncoder(norm=...)).
  bool final_norm = false;
  int64_t pad_token_id = 0;
  // The pad token is masked as a key wherever it is in a sequence (fairseq's
  // and torchtext's RoBERTa: their key padding mask of tokens ==
  // padding_idx): the other tokens' states are those of the sequence
  // without its pad tokens, and a pad token's own state is its query over
  // the other keys (PyTorch's slow path; the nested fastpath gives 0
  // there). A sequence of pad tokens alone has no key to attend to and is
  // refused (request_validation.h). Hugging Face's families attend to them,
  // as transformers does without an attention mask.
  bool mask_pad_keys = false;
  // Where pad keys are masked, a pad token's embedding (after the
  // embeddings' LayerNorm) is zeroed before the layers, as fairseq's
  // RobertaEncoder does (torchtext's does not).
  bool zero_pad_embeddings = false;
  PositionRule position_rule = PositionRule::kFromZero;
  SpecialTokens special_tokens;
  Pooling default_pooling = Pooling::kCls;
  // Linear layers applied to every pooled embedding, in order, before any
  // normalization (sentence-transformers Dense modules); weights
  // "pool_dense.<i>.weight" [out, in] and ".bias" [out] when `bias`.
  struct PoolDense {
    int64_t in = 0, out = 0;
    bool bias = true;
    bool tanh = false;  // else identity
  };
  std::vector<PoolDense> pool_dense;
  // Embeddings are scaled to unit length even when the request does not ask
  // (a sentence-transformers folder with a Normalize module).
  bool default_normalize = false;
  // The values an embedding keeps when the request asks for no other
  // number (its `dimensions`): 0 all pooled_width() of them, else the first
  // default_dimensions (< pooled_width(); a sentence-transformers folder's
  // truncate_dim).
  int64_t default_dimensions = 0;
  // Classification head: present when num_labels > 0. Its math is
  // out(act(dense(hidden[first token]))) (BERT pooler + classifier, RoBERTa
  // and torchtext RobertaClassificationHead all reduce to this).
  int64_t num_labels = 0;
  Activation head_activation = Activation::kTanh;
  std::vector<std::string> labels;  // num_labels names ("LABEL_0".. when unknown)
  ProblemType problem_type = ProblemType::kUnspecified;
  // The head's scores as sentence-transformers' CrossEncoder gives them: a
  // one-output head whose config.json names its activation_fn, or any head
  // of a CrossEncoder's folder (5.4+); unset: the pipeline's rule below.
  std::optional<HeadOutput> score_output;

  int64_t head_dim() const { return num_heads ? hidden_size / num_heads : 0; }
  // A head with a CrossEncoder activation scores as sentence-transformers
  // does (score_output); otherwise Hugging
  // Face's text-classification pipeline rule: the raw logits for regression,
  // a sigmoid per output for multi-label heads and heads with one output
  // (cross-encoders' relevance scores), softmax otherwise.
  HeadOutput head_output() const {
    if (score_output) return *score_output;
    if (problem_type == ProblemType::kRegression) return HeadOutput::kLogits;
    if (problem_type == ProblemType::kMultiLabel || num_labels == 1) return HeadOutput::kSigmoid;
    return HeadOutput::kSoftmax;
  }
  // Whether the model, given a tokenizer, reads text pairs (its family defines
  // a pair format), whether Rerank serves it (a pair reader with a one-output
  // head: a cross-encoder's relevance score), and whether the second text of a
  // pair gets token type 1 (else every token is type 0).
  bool reads_text_pairs(bool has_tokenizer) const {
    return has_tokenizer && TextPairTemplate(family).has_value();
  }
  bool serves_rerank(bool has_tokenizer) const {
    return reads_text_pairs(has_tokenizer) && num_labels == 1;
  }
  bool reads_token_types() const { return type_vocab_size >= 2; }
  bool projects_embeddings() const { return embedding_size != 0 && embedding_size != hidden_size; }
  int64_t embedding_width() const { return projects_embeddings() ? embedding_size : hidden_size; }
  // Width of a pooled embedding (after the pool_dense layers).
  int64_t pooled_width() const { return pool_dense.empty() ? hidden_size : pool_dense.back().out; }
  // The values of a pooled embedding a request that asks for no other
  // number gets (ModelInfo's embedding_size).
  int64_t served_dimensions() const {
    return default_dimensions > 0 ? default_dimensions : pooled_width();
  }
  // Checks internal consistency (head count divides hidden size, ...).
  Status Validate() const;
};

// Canonical weight names, all Linear weights in PyTorch's [out, in] layout:
//   embeddings.word [V,H]  embeddings.position [P,H]  embeddings.token_type [T,H]
//   embeddings.norm.{weight,bias} [H]
//   layers.N.attention.qkv.{weight [3H,H], bias [3H]}   (q, k, v stacked in that order)
//   layers.N.attention.out.{weight [H,H], bias [H]}
//   layers.N.norm1.{weight,bias}  after attention (post-norm) / before it (pre-norm)
//   layers.N.ffn.in.{weight [I,H], bias [I]}   layers.N.ffn.out.{weight [H,I], bias [H]}
//   layers.N.norm2.{weight,bias}  after the FFN (post-norm) / before it (pre-norm)
//   final_norm.{weight,bias}
//   head.dense.{weight [H,H], bias}   head.out.{weight [L,H], bias [L]}
//   encoder.relative_attention_bias [buckets, heads]  (MPNet; shared by the layers)
//   encoder.rel_embeddings [2 x attention_span, H]  encoder.rel_norm.{weight,bias} [H]
//                                                   (DeBERTa; shared by the layers)
std::string LayerWeightName(int64_t layer, const std::string& suffix);

// The row of the relative attention bias for key j of query i (relative =
// j - i), as transformers' MPNet computes it (relative_position_bucket):
// half the buckets for keys after the query, half for those at or before
// it; distances under buckets / 4 exactly, longer ones on a log scale up to
// max_distance, in float32 as PyTorch computes them.
int64_t RelativePositionBucket(int64_t relative, int64_t buckets, int64_t max_distance);

// The row of the relative embeddings DeBERTa's attention reads for query i
// and key j (relative = i - j): transformers' make_log_bucket_position
// (relative positions within position_buckets / 2 as they are, longer ones
// on a log scale reaching max_relative_positions, in float32 as PyTorch
// computes it) when c.position_buckets > 0, plus c.attention_span, clamped
// to [0, 2 x attention_span).
int64_t DisentangledColumn(int64_t relative, const EncoderConfig& c);

// Everything needed to build an engine for one model directory.
struct ModelBundle {
  std::string directory;
  // The checkpoint file, or a sharded checkpoint's index
  // (model.safetensors.index.json, pytorch_model.bin.index.json).
  std::string checkpoint_path;
  CheckpointFormat checkpoint_format = CheckpointFormat::kTorchZip;
  // The files the tensors came from: 1, or a sharded checkpoint's shards.
  int64_t checkpoint_files = 1;
  EncoderConfig config;
  // Tensors as stored in the checkpoint, by their original names.
  TensorMap checkpoint_tensors;
  // The same tensors (shared storage, no copies except where q/k/v had to be
  // concatenated) under canonical names, shape-checked against `config`.
  TensorMap weights;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the directory has none
  std::string tokenizer_path;
  // Why a tokenizer file the directory has is not used (another may be:
  // ModelTokenizer::note); empty otherwise.
  std::string tokenizer_note;
  // Why the checkpoint's task head is not served (a token-classification
  // head, say): the model serves embeddings only. Empty otherwise.
  std::string head_note;
  // How a text pair is joined: as the tokenizer's own files join one
  // (ModelTokenizer::pairs), else the family's way (TextPairTemplate); none
  // for a family that defines no pair format.
  std::optional<PairTemplate> pair_template;
  std::vector<std::string> placeholder_globals;
  // The modules of a sentence-transformers folder, one line each (empty for
  // other layouts).
  std::vector<std::string> sentence_transformers_modules;
  // A sentence-transformers folder's prompts by name
  // (config_sentence_transformers.json), which a request may name to have
  // that prompt prepended to each of its texts (a pair's first text,
  // Rerank's query); empty for other layouts.
  std::map<std::string, std::string> prompts;
  // The prompt prepended where a request names none (default_prompt_name's);
  // empty: none.
  std::string default_prompt;
  std::string default_prompt_name;
  std::string default_prompt_source;  // where it came from, for inspect and logs
  // A sentence-transformers Pooling module's include_prompt. false: a
  // text's pooled row leaves out the tokens of the prompt in front of it
  // (the reducing modes; kernels::Pool's pool_start), as
  // sentence-transformers 5.4+ does: the prompt's own encoding's length, less
  // a closing special token, and only for a non-empty prompt.
  bool include_prompt = true;
};

}  // namespace encoderd
