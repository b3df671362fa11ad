#include "engine/model/weight_mapping.h"

#include <algorithm>
#include <string>
#include <vector>

namespace encoderd {
namespace {

// Checkpoint names inside one encoder layer, relative to "<layers>.<i>.".
struct LayerKeys {
  // One key: q, k and v already stacked ([3H, H] / [3H]); three: q, k, v.
  std::vector<std::string> qkv_weight;
  std::vector<std::string> qkv_bias;
  std::string attention_out;  // Linear prefixes ...
  std::string ffn_in;
  std::string ffn_out;
  std::string norm1;  // ... and LayerNorm prefixes
  std::string norm2;
};

const LayerKeys kHuggingFaceLayer = {
    {"attention.self.query.weight", "attention.self.key.weight", "attention.self.value.weight"},
    {"attention.self.query.bias", "attention.self.key.bias", "attention.self.value.bias"},
    "attention.output.dense",
    "intermediate.dense",
    "output.dense",
    "attention.output.LayerNorm",
    "output.LayerNorm"};

// RobertaPreLayerNormLayer: BERT's names but for the LayerNorms, each in the
// block it comes before.
const LayerKeys kRobertaPreLayerNormLayer = [] {
  LayerKeys keys = kHuggingFaceLayer;
  keys.norm1 = "attention.LayerNorm";
  keys.norm2 = "intermediate.LayerNorm";
  return keys;
}();

const LayerKeys kDistilbertLayer = {
    {"attention.q_lin.weight", "attention.k_lin.weight", "attention.v_lin.weight"},
    {"attention.q_lin.bias", "attention.k_lin.bias", "attention.v_lin.bias"},
    "attention.out_lin",
    "ffn.lin1",
    "ffn.lin2",
    "sa_layer_norm",
    "output_layer_norm"};

const LayerKeys kMpnetLayer = {
    {"attention.attn.q.weight", "attention.attn.k.weight", "attention.attn.v.weight"},
    {"attention.attn.q.bias", "attention.attn.k.bias", "attention.attn.v.bias"},
    "attention.attn.o",
    "intermediate.dense",
    "output.dense",
    "attention.LayerNorm",
    "output.LayerNorm"};

// DeBERTa-v2's DebertaV2Layer.
const LayerKeys kDebertaLayer = {
    {"attention.self.query_proj.weight", "attention.self.key_proj.weight",
     "attention.self.value_proj.weight"},
    {"attention.self.query_proj.bias", "attention.self.key_proj.bias",
     "attention.self.value_proj.bias"},
    "attention.output.dense",
    "intermediate.dense",
    "output.dense",
    "attention.output.LayerNorm",
    "output.LayerNorm"};

// torch.nn.TransformerEncoderLayer.
const LayerKeys kTorchLayer = {{"self_attn.in_proj_weight"},
                               {"self_attn.in_proj_bias"},
                               "self_attn.out_proj",
                               "linear1",
                               "linear2",
                               "norm1",
                               "norm2"};

// torchtext < 0.12 (still accepted by its _load_from_state_dict).
const LayerKeys kOldTorchtextLayer = {{"attention.input_projection.weight"},
                                      {"attention.input_projection.bias"},
                                      "attention.output_projection",
                                      "residual_mlp.mlp.0",
                                      "residual_mlp.mlp.3",
                                      "attention_layer_norm",
                                      "final_layer_norm"};

// fairseq's TransformerSentenceEncoderLayer / TransformerEncoderLayer.
const LayerKeys kFairseqLayer = {
    {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"},
    {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"},
    "self_attn.out_proj",
    "fc1",
    "fc2",
    "self_attn_layer_norm",
    "final_layer_norm"};

// fairseq before q, k and v were split (its upgrade_state_dict_named splits
// in_proj_weight in that order).
const LayerKeys kOldFairseqLayer = {
    {"self_attn.in_proj_weight"}, {"self_attn.in_proj_bias"}, "self_attn.out_proj", "fc1", "fc2",
    "self_attn_layer_norm",       "final_layer_norm"};

std::vector<std::string> Prefixed(const std::string& prefix, const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const std::string& key : keys) out.push_back(prefix + key);
  return out;
}

// Sets vocab_size and hidden_size from the token embedding [V, H].
Status MapTokenEmbedding(WeightMapper& m, const std::string& key, EncoderConfig* c) {
  ASSIGN_OR_RETURN(Tensor word, m.Find(key, {kAnySize, kAnySize}));
  c->vocab_size = word.size(0);
  c->hidden_size = word.size(1);
  return m.Add("embeddings.word", key, word.shape());
}

Status MapPositionEmbedding(WeightMapper& m, const std::string& key, EncoderConfig* c) {
  ASSIGN_OR_RETURN(Tensor pos, m.Find(key, {kAnySize, c->embedding_width()}));
  c->max_positions = pos.size(0);
  return m.Add("embeddings.position", key, pos.shape());
}

// Sets num_layers and intermediate_size; maps every layer under `prefix`
// ("encoder.layer." including the trailing dot).
Status MapLayers(WeightMapper& m, const std::string& prefix, const LayerKeys& keys,
                 EncoderConfig* c) {
  const int64_t h = c->hidden_size;
  c->num_layers = m.CountIndexed(prefix);
  const std::string first = prefix + "0.";
  ASSIGN_OR_RETURN(Tensor ffn_in, m.Find(first + keys.ffn_in + ".weight", {kAnySize, h}));
  c->intermediate_size = ffn_in.size(0);
  const int64_t inter = c->intermediate_size;
  for (int64_t i = 0; i < c->num_layers; ++i) {
    const std::string p = prefix + std::to_string(i) + ".";
    auto name = [i](const std::string& suffix) { return LayerWeightName(i, suffix); };
    if (keys.qkv_weight.size() == 1) {
      RETURN_IF_ERROR(m.Add(name("attention.qkv.weight"), p + keys.qkv_weight[0], {3 * h, h}));
      RETURN_IF_ERROR(m.Add(name("attention.qkv.bias"), p + keys.qkv_bias[0], {3 * h}));
    } else {
      RETURN_IF_ERROR(
          m.AddConcat(name("attention.qkv.weight"), Prefixed(p, keys.qkv_weight), {h, h}));
      RETURN_IF_ERROR(m.AddConcat(name("attention.qkv.bias"), Prefixed(p, keys.qkv_bias), {h}));
    }
    RETURN_IF_ERROR(m.AddLinear(name("attention.out"), p + keys.attention_out, h, h));
    RETURN_IF_ERROR(m.AddNorm(name("norm1"), p + keys.norm1, h));
    RETURN_IF_ERROR(m.AddLinear(name("ffn.in"), p + keys.ffn_in, inter, h));
    RETURN_IF_ERROR(m.AddLinear(name("ffn.out"), p + keys.ffn_out, h, inter));
    RETURN_IF_ERROR(m.AddNorm(name("norm2"), p + keys.norm2, h));
  }
  return Status::Ok();
}

// Sets num_labels; head.dense <- dense [H, H], head.out <- out [L, H].
Status MapHead(WeightMapper& m, const std::string& dense, const std::string& out,
               EncoderConfig* c) {
  ASSIGN_OR_RETURN(Tensor out_weight, m.Find(out + ".weight", {kAnySize, c->hidden_size}));
  c->num_labels = out_weight.size(0);
  RETURN_IF_ERROR(m.AddLinear("head.dense", dense, c->hidden_size, c->hidden_size));
  return m.AddLinear("head.out", out, c->num_labels, c->hidden_size);
}

// The part BERT, RoBERTa and ELECTRA share: embeddings and layers under
// `prefix`, named by `layer` (RoBERTa-PreLayerNorm's differ). When the
// checkpoint has the Linear `project` (ELECTRA's embeddings_project), the
// embeddings are narrower than the layers and it maps them to the hidden
// size.
Status MapHuggingFaceBody(WeightMapper& m, const std::string& prefix, EncoderConfig* c,
                          const std::string& project = "",
                          const LayerKeys& layer = kHuggingFaceLayer) {
  RETURN_IF_ERROR(MapTokenEmbedding(m, prefix + "embeddings.word_embeddings.weight", c));
  if (!project.empty() && m.Has(project + ".weight")) {
    const int64_t table_width = c->hidden_size;  // as MapTokenEmbedding set it
    ASSIGN_OR_RETURN(Tensor w, m.Find(project + ".weight", {kAnySize, table_width}));
    c->hidden_size = w.size(0);
    c->embedding_size = table_width;
    RETURN_IF_ERROR(m.AddLinear("embeddings.project", project, c->hidden_size, table_width));
  }
  const int64_t width = c->embedding_width();
  RETURN_IF_ERROR(MapPositionEmbedding(m, prefix + "embeddings.position_embeddings.weight", c));
  const std::string token_type = prefix + "embeddings.token_type_embeddings.weight";
  ASSIGN_OR_RETURN(Tensor types, m.Find(token_type, {kAnySize, width}));
  c->type_vocab_size = types.size(0);
  RETURN_IF_ERROR(m.Add("embeddings.token_type", token_type, types.shape()));
  RETURN_IF_ERROR(m.AddNorm("embeddings.norm", prefix + "embeddings.LayerNorm", width));
  c->embedding_norm = true;
  c->final_norm = false;
  c->num_labels = 0;
  return MapLayers(m, prefix + "encoder.layer.", layer, c);
}

// DistilBERT's and MPNet's body under `prefix`: word and position
// embeddings (no token types) and their LayerNorm, then the layers under
// prefix + `layers` named by `keys`.
Status MapBodyWithoutTokenTypes(WeightMapper& m, const std::string& prefix,
                                const std::string& layers, const LayerKeys& keys,
                                EncoderConfig* c) {
  RETURN_IF_ERROR(MapTokenEmbedding(m, prefix + "embeddings.word_embeddings.weight", c));
  RETURN_IF_ERROR(MapPositionEmbedding(m, prefix + "embeddings.position_embeddings.weight", c));
  c->type_vocab_size = 0;
  RETURN_IF_ERROR(m.AddNorm("embeddings.norm", prefix + "embeddings.LayerNorm", c->hidden_size));
  c->embedding_norm = true;
  c->final_norm = false;
  c->num_labels = 0;
  return MapLayers(m, prefix + layers, keys, c);
}

// "bert." for *ForSequenceClassification checkpoints, "" for the base model.
std::string HuggingFacePrefix(const WeightMapper& m, const std::string& prefix) {
  return m.Has(prefix + "embeddings.word_embeddings.weight") ? prefix : "";
}

}  // namespace

Status MapBertWeights(WeightMapper& m, bool sequence_head, EncoderConfig* c) {
  const std::string prefix = HuggingFacePrefix(m, "bert.");
  RETURN_IF_ERROR(MapHuggingFaceBody(m, prefix, c));
  if (!sequence_head || !m.Has("classifier.weight")) return Status::Ok();
  return MapHead(m, prefix + "pooler.dense", "classifier", c);
}

Status MapRobertaWeights(WeightMapper& m, bool sequence_head, EncoderConfig* c) {
  // Data2VecTextFor*'s base model is data2vec_text, RoBERTa's layers.
  const std::string prefix =
      HuggingFacePrefix(m, c->family == ModelFamily::kData2VecText ? "data2vec_text." : "roberta.");
  RETURN_IF_ERROR(MapHuggingFaceBody(m, prefix, c));
  if (!sequence_head || !m.Has("classifier.out_proj.weight")) return Status::Ok();
  return MapHead(m, "classifier.dense", "classifier.out_proj", c);
}

Status MapRobertaPreLayerNormWeights(WeightMapper& m, bool sequence_head, EncoderConfig* c) {
  const std::string prefix = HuggingFacePrefix(m, "roberta_prelayernorm.");
  RETURN_IF_ERROR(MapHuggingFaceBody(m, prefix, c, "", kRobertaPreLayerNormLayer));
  // (norm_first: ApplyHfConfig's family rule.)
  c->final_norm = true;
  RETURN_IF_ERROR(m.AddNorm("final_norm", prefix + "LayerNorm", c->hidden_size));
  if (!sequence_head || !m.Has("classifier.out_proj.weight")) return Status::Ok();
  return MapHead(m, "classifier.dense", "classifier.out_proj", c);
}

Status MapDistilbertWeights(WeightMapper& m, bool sequence_head, EncoderConfig* c) {
  const std::string prefix = HuggingFacePrefix(m, "distilbert.");
  RETURN_IF_ERROR(MapBodyWithoutTokenTypes(m, prefix, "transformer.layer.", kDistilbertLayer, c));
  if (!sequence_head || !m.Has("classifier.weight")) return Status::Ok();
  return MapHead(m, "pre_classifier", "classifier", c);
}

Status MapMpnetWeights(WeightMapper& m, bool sequence_head, EncoderConfig* c) {
  const std::string prefix = HuggingFacePrefix(m, "mpnet.");
  RETURN_IF_ERROR(MapBodyWithoutTokenTypes(m, prefix, "encoder.layer.", kMpnetLayer, c));
  // compute_position_bias is called without num_buckets: 32, whatever
  // relative_attention_num_buckets (the table's rows) says.
  constexpr int64_t kBuckets = 32;
  const std::string bias = prefix + "encoder.relative_attention_bias.weight";
  ASSIGN_OR_RETURN(Tensor table, m.Find(bias, {kAnySize, kAnySize}));
  if (table.size(0) != kBuckets) {
    return InvalidArgument(m.file() + ": " + bias + " has " + std::to_string(table.size(0)) +
                           " rows, but transformers' MPNet buckets relative positions into " +
                           std::to_string(kBuckets));
  }
  c->relative_attention_buckets = kBuckets;
  c->relative_attention_max_distance = 128;
  RETURN_IF_ERROR(m.Add("encoder.relative_attention_bias", bias, table.shape()));
  if (!sequence_head || !m.Has("classifier.out_proj.weight")) return Status::Ok();
  return MapHead(m, "classifier.dense", "classifier.out_proj", c);
}

Status MapDebertaWeights(WeightMapper& m, bool sequence_head, EncoderConfig* c) {
  const std::string prefix = HuggingFacePrefix(m, "deberta.");
  const std::string e = prefix + "embeddings.";
  RETURN_IF_ERROR(MapTokenEmbedding(m, e + "word_embeddings.weight", c));
  if (m.Has(e + "embed_proj.weight")) {
    return InvalidArgument(m.file() + ": " + e +
                           "embed_proj.weight: DeBERTa's embedding_size other than hidden_size "
                           "(a projection before the embeddings' LayerNorm) is not supported");
  }
  c->max_positions = 0;
  if (m.Has(e + "position_embeddings.weight")) {
    RETURN_IF_ERROR(MapPositionEmbedding(m, e + "position_embeddings.weight", c));
  }
  c->type_vocab_size = 0;
  if (m.Has(e + "token_type_embeddings.weight")) {
    ASSIGN_OR_RETURN(Tensor types,
                     m.Find(e + "token_type_embeddings.weight", {kAnySize, c->hidden_size}));
    c->type_vocab_size = types.size(0);
    RETURN_IF_ERROR(
        m.Add("embeddings.token_type", e + "token_type_embeddings.weight", types.shape()));
  }
  RETURN_IF_ERROR(m.AddNorm("embeddings.norm", e + "LayerNorm", c->hidden_size));
  c->embedding_norm = true;
  c->final_norm = false;
  c->num_labels = 0;
  const std::string encoder = prefix + "encoder.";
  if (m.Has(encoder + "conv.conv.weight")) {
    return InvalidArgument(m.file() + ": " + encoder +
                           "conv.*: DeBERTa's convolution beside the first layer "
                           "(conv_kernel_size > 0) is not supported");
  }
  if (m.Has(encoder + "layer.0.attention.self.pos_key_proj.weight") ||
      m.Has(encoder + "layer.0.attention.self.pos_query_proj.weight")) {
    return InvalidArgument(m.file() + ": " + encoder +
                           "layer.0.attention.self.pos_*_proj: separate position projections "
                           "(share_att_key false) are not supported");
  }
  RETURN_IF_ERROR(MapLayers(m, encoder + "layer.", kDebertaLayer, c));
  const std::string rel = encoder + "rel_embeddings.weight";
  if (m.Has(rel)) {
    ASSIGN_OR_RETURN(Tensor table, m.Find(rel, {kAnySize, c->hidden_size}));
    if (table.size(0) % 2 != 0 || table.size(0) == 0) {
      return InvalidArgument(m.file() + ": " + rel + " has " + std::to_string(table.size(0)) +
                             " rows, not 2 x the attention span");
    }
    c->attention_span = table.size(0) / 2;
    RETURN_IF_ERROR(m.Add("encoder.rel_embeddings", rel, table.shape()));
    c->relative_norm = m.Has(encoder + "LayerNorm.weight");
    if (c->relative_norm) {
      RETURN_IF_ERROR(m.AddNorm("encoder.rel_norm", encoder + "LayerNorm", c->hidden_size));
    }
  }
  if (!sequence_head || !m.Has("classifier.weight")) return Status::Ok();
  return MapHead(m, "pooler.dense", "classifier", c);
}

Status MapElectraWeights(WeightMapper& m, bool sequence_head, EncoderConfig* c) {
  const std::string prefix = HuggingFacePrefix(m, "electra.");
  RETURN_IF_ERROR(MapHuggingFaceBody(m, prefix, c, prefix + "embeddings_project"));
  if (!sequence_head || !m.Has("classifier.out_proj.weight")) return Status::Ok();
  return MapHead(m, "classifier.dense", "classifier.out_proj", c);
}

Status MapTorchtextRobertaWeights(WeightMapper& m, EncoderConfig* c) {
  const std::string p = "encoder.transformer.";
  RETURN_IF_ERROR(MapTokenEmbedding(m, p + "token_embedding.weight", c));
  RETURN_IF_ERROR(MapPositionEmbedding(m, p + "positional_embedding.embedding.weight", c));
  c->type_vocab_size = 0;
  c->embedding_norm = !c->norm_first;
  c->final_norm = c->norm_first;
  RETURN_IF_ERROR(m.AddNorm(c->norm_first ? "final_norm" : "embeddings.norm",
                            p + "embedding_layer_norm", c->hidden_size));
  const bool old_names = !m.Has(p + "layers.layers.0.self_attn.in_proj_weight") &&
                         m.Has(p + "layers.0.attention.input_projection.weight");
  RETURN_IF_ERROR(old_names ? MapLayers(m, p + "layers.", kOldTorchtextLayer, c)
                            : MapLayers(m, p + "layers.layers.", kTorchLayer, c));
  c->num_labels = 0;
  if (!m.Has("head.out_proj.weight")) return Status::Ok();
  return MapHead(m, "head.dense", "head.out_proj", c);
}

Status MapFairseqRobertaWeights(WeightMapper& m, const std::string& chosen, EncoderConfig* c) {
  // fairseq 0.9 and before named RobertaModel's encoder "decoder"; later
  // releases rename it when they load such a checkpoint.
  const bool encoder = m.Has("encoder.sentence_encoder.embed_tokens.weight");
  const bool decoder = m.Has("decoder.sentence_encoder.embed_tokens.weight");
  if (encoder && decoder) {
    return InvalidArgument(m.file() +
                           ": both encoder.sentence_encoder.* and decoder.sentence_encoder.* "
                           "(fairseq saves one or the other): which to serve is not clear");
  }
  const std::string root = decoder ? "decoder." : "encoder.";
  const std::string p = root + "sentence_encoder.";
  RETURN_IF_ERROR(MapTokenEmbedding(m, p + "embed_tokens.weight", c));
  RETURN_IF_ERROR(MapPositionEmbedding(m, p + "embed_positions.weight", c));
  if (m.Has(p + "segment_embeddings.weight")) {
    return InvalidArgument(m.file() + ": '" + p +
                           "segment_embeddings.weight': segment embeddings (num_segments > 0) "
                           "are not RoBERTa's and encoderd does not read them");
  }
  c->type_vocab_size = 0;
  const std::string embedding_norm =
      p + (m.Has(p + "layernorm_embedding.weight") ? "layernorm_embedding" : "emb_layer_norm");
  c->embedding_norm = m.Has(embedding_norm + ".weight");
  if (c->embedding_norm) {
    RETURN_IF_ERROR(m.AddNorm("embeddings.norm", embedding_norm, c->hidden_size));
  }
  c->final_norm = m.Has(p + "layer_norm.weight");
  c->norm_first = c->final_norm;
  if (c->final_norm) RETURN_IF_ERROR(m.AddNorm("final_norm", p + "layer_norm", c->hidden_size));
  const bool stacked = !m.Has(p + "layers.0.self_attn.q_proj.weight") &&
                       m.Has(p + "layers.0.self_attn.in_proj_weight");
  RETURN_IF_ERROR(MapLayers(m, p + "layers.", stacked ? kOldFairseqLayer : kFairseqLayer, c));
  c->num_labels = 0;
  const std::vector<std::string> heads = m.ChildNames("classification_heads.");
  std::string names;
  for (const std::string& h : heads) names += (names.empty() ? "" : ", ") + h;
  if (!chosen.empty()) {
    if (std::find(heads.begin(), heads.end(), chosen) == heads.end()) {
      return InvalidArgument(m.file() + ": no classification head '" + chosen + "' (" +
                             (heads.empty() ? "it has none" : "it has " + names) +
                             "), which the card's classification_head names");
    }
  } else if (heads.size() > 1) {
    return InvalidArgument(m.file() + ": " + std::to_string(heads.size()) +
                           " classification heads (" + names +
                           "); the card's classification_head names the one to serve");
  }
  if (heads.empty()) return Status::Ok();
  const std::string head = "classification_heads." + (chosen.empty() ? heads[0] : chosen) + ".";
  return MapHead(m, head + "dense", head + "out_proj", c);
}

Status MapTransformerEncoderWeights(WeightMapper& m, const WeightPrefixes& w, EncoderConfig* c) {
  if (w.token_embedding.empty() || w.layers.empty()) {
    return InvalidArgument(
        "the model card must name weights.token_embedding and weights.layers for family "
        "transformer-encoder");
  }
  if (w.head_dense.empty() != w.head_out.empty()) {
    return InvalidArgument("the model card must name both weights.head_dense and weights.head_out");
  }
  RETURN_IF_ERROR(MapTokenEmbedding(m, w.token_embedding + ".weight", c));
  c->max_positions = 0;
  if (!w.position_embedding.empty()) {
    RETURN_IF_ERROR(MapPositionEmbedding(m, w.position_embedding + ".weight", c));
  }
  c->type_vocab_size = 0;
  c->embedding_norm = !w.embedding_norm.empty();
  if (c->embedding_norm) {
    RETURN_IF_ERROR(m.AddNorm("embeddings.norm", w.embedding_norm, c->hidden_size));
  }
  RETURN_IF_ERROR(MapLayers(m, w.layers + ".", kTorchLayer, c));
  c->final_norm = !w.final_norm.empty();
  if (c->final_norm) RETURN_IF_ERROR(m.AddNorm("final_norm", w.final_norm, c->hidden_size));
  c->num_labels = 0;
  if (w.head_out.empty()) return Status::Ok();
  return MapHead(m, w.head_dense, w.head_out, c);
}

}  // namespace encoderd
