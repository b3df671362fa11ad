#include "engine/model/model_directory.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/io/checkpoint_reader.h"
#include "engine/model/hf_config.h"
#include "engine/model/json_file.h"
#include "engine/model/model_tokenizer.h"
#include "engine/model/sentence_transformers.h"
#include "engine/model/weight_mapper.h"
#include "engine/model/weight_mapping.h"

namespace encoderd {
namespace {

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

StatusOr<std::string> FindCheckpoint(const std::string& dir, const std::optional<ModelCard>& card) {
  if (card && !card->checkpoint.empty()) {
    const std::string path = dir + "/" + card->checkpoint;
    if (!IsFile(path)) {
      return NotFound(card->source + ": checkpoint '" + card->checkpoint + "' does not exist in " +
                      dir);
    }
    return path;
  }
  std::string tried;
  for (const char* name : kDefaultCheckpointNames) {
    if (IsFile(dir + "/" + name)) return dir + "/" + name;
    tried += tried.empty() ? name : std::string(", ") + name;
  }
  return NotFound(dir + ": no checkpoint file (looked for " + tried + ")");
}

bool IsShardIndex(const std::string& path) {
  constexpr std::string_view kSuffix = ".index.json";
  return path.size() > kSuffix.size() &&
         path.compare(path.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

// A sharded checkpoint: every shard its index names (each a file beside
// the index, read as ReadCheckpoint reads one), their tensors together. Each
// tensor the index names must be in the shard it names, and no tensor in two
// shards; the shards share a format. `files`: how many shards.
StatusOr<Checkpoint> ReadShardedCheckpoint(const std::string& index_path, int64_t* files) {
  const std::string dir = index_path.substr(0, index_path.find_last_of('/'));
  ASSIGN_OR_RETURN(const nlohmann::json index, ReadJsonFile(index_path));
  const auto map = index.is_object() ? index.find("weight_map") : index.end();
  if (map == index.end() || !map->is_object() || map->empty()) {
    return InvalidArgument(index_path + ": no weight_map of tensor names to shard files");
  }
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : map->items()) {
    if (!shard.is_string()) {
      return InvalidArgument(index_path + ": weight_map gives \"" + tensor + "\" no file name");
    }
    const std::string name = shard.get<std::string>();
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos) {
      return InvalidArgument(index_path + ": weight_map names the shard \"" + name +
                             "\", not a file of the folder");
    }
    shards.insert(name);
  }
  Checkpoint merged;
  std::map<std::string, std::string> shard_of;  // tensor -> the shard it came from
  std::set<std::string> globals;
  for (const std::string& name : shards) {  // in the order of their names
    StatusOr<Checkpoint> read = ReadCheckpoint(dir + "/" + name);
    if (!read.ok()) {
      return Status(read.status().code(), index_path + ": " + read.status().message());
    }
    Checkpoint& shard = *read;
    if (name == *shards.begin()) merged.format = shard.format;
    if (shard.format != merged.format) {
      return InvalidArgument(index_path + ": the shard " + name + " is " +
                             CheckpointFormatName(shard.format) + ", " + *shards.begin() + " " +
                             CheckpointFormatName(merged.format));
    }
    for (auto& [tensor_name, tensor] : shard.tensors) {
      const auto [it, added] = shard_of.emplace(tensor_name, name);
      if (!added) {
        return InvalidArgument(index_path + ": the tensor " + tensor_name + " is in both " +
                               it->second + " and " + name);
      }
      merged.tensors.emplace(tensor_name, std::move(tensor));
    }
    for (std::string& g : shard.placeholder_globals) {
      if (globals.insert(g).second) merged.placeholder_globals.push_back(std::move(g));
    }
    merged.fairseq_args.insert(shard.fairseq_args.begin(), shard.fairseq_args.end());
    merged.fairseq_text_args.insert(shard.fairseq_text_args.begin(), shard.fairseq_text_args.end());
  }
  for (const auto& [tensor, shard] : map->items()) {
    const auto it = shard_of.find(tensor);
    if (it == shard_of.end() || it->second != shard.get<std::string>()) {
      return InvalidArgument(index_path + ": weight_map puts " + tensor + " in " +
                             shard.get<std::string>() + ", which does not hold it");
    }
  }
  *files = static_cast<int64_t>(shards.size());
  return merged;
}

// config.json's value for a size the tensor shapes also give must agree.
Status CrossCheck(const std::string& config_path, const char* key,
                  const std::optional<int64_t>& declared, int64_t inferred,
                  const std::string& checkpoint) {
  if (!declared || *declared == inferred) return Status::Ok();
  return InvalidArgument(config_path + ": " + key + " = " + std::to_string(*declared) +
                         " does not match the tensors in " + checkpoint + ", which give " +
                         std::to_string(inferred));
}

// DeBERTa-v2's attention and embeddings as transformers builds them from
// config.json (HfConfig's defaults), checked against what
// MapDebertaWeights found in the checkpoint.
Status ApplyDebertaConfig(const HfConfig& hf, const std::string& path,
                          const std::string& checkpoint, EncoderConfig* c) {
  const auto refuse = [&path](const std::string& why) {
    return InvalidArgument(path + ": " + why);
  };
  c->layer_norm_eps = hf.layer_norm_eps.value_or(1e-7f);
  c->pad_token_id = hf.pad_token_id.value_or(0);
  const bool biased = hf.position_biased_input.value_or(true);
  if (biased && c->max_positions == 0) {
    return refuse("position_biased_input is true but " + checkpoint +
                  " has no embeddings.position_embeddings");
  }
  // A position table beside position_biased_input false is not read, as
  // transformers ignores it (_keys_to_ignore_on_load_unexpected): some
  // checkpoints carry one (LoadModelBundle drops it).
  if (!biased) c->max_positions = 0;
  c->position_rule = biased ? PositionRule::kFromZero : PositionRule::kNone;
  if (hf.attention_head_size && *hf.attention_head_size * c->num_heads != c->hidden_size) {
    return refuse("attention_head_size = " + std::to_string(*hf.attention_head_size) +
                  " is not hidden_size / num_attention_heads (" +
                  std::to_string(c->hidden_size / c->num_heads) + "), which encoderd needs");
  }
  if (hf.conv_kernel_size.value_or(0) > 0) {
    return refuse("conv_kernel_size = " + std::to_string(*hf.conv_kernel_size) +
                  ": the convolution beside the first layer is not supported");
  }
  // ContextPooler: dense, then ACT2FN[pooler_hidden_act] (default gelu).
  const std::string act = hf.pooler_hidden_act.empty() ? "gelu" : hf.pooler_hidden_act;
  if (act == "gelu") {
    c->head_activation = Activation::kGelu;
  } else if (act == "tanh") {
    c->head_activation = Activation::kTanh;
  } else if (act == "relu") {
    c->head_activation = Activation::kRelu;
  } else {
    return refuse("pooler_hidden_act \"" + act + "\" is not supported (gelu, tanh or relu)");
  }
  if (hf.pooler_hidden_size && *hf.pooler_hidden_size != c->hidden_size) {
    return refuse("pooler_hidden_size = " + std::to_string(*hf.pooler_hidden_size) +
                  " is not hidden_size (" + std::to_string(c->hidden_size) + ")");
  }
  if (!hf.relative_attention.value_or(false)) {
    if (c->attention_span > 0) {
      return refuse("relative_attention is not true but " + checkpoint +
                    " has encoder.rel_embeddings");
    }
    // transformers still divides the scores by sqrt(head_dim x (1 +
    // len(pos_att_type))), with no term to add.
    if (!hf.pos_att_type.empty()) {
      return refuse(
          "pos_att_type names terms but relative_attention is not true (transformers "
          "then scales the scores for terms it does not add), which is not supported");
    }
    return Status::Ok();
  }
  if (c->attention_span == 0) {
    return refuse("relative_attention is true but " + checkpoint +
                  " has no encoder.rel_embeddings");
  }
  for (const std::string& term : hf.pos_att_type) {
    bool* seen = term == "c2p"   ? &c->content_to_position
                 : term == "p2c" ? &c->position_to_content
                                 : nullptr;
    if (seen == nullptr || *seen) {
      return refuse("pos_att_type has \"" + term +
                    "\" (encoderd reads c2p and p2c, each once; DeBERTa-v2 computes no other)");
    }
    *seen = true;
  }
  if (!c->content_to_position && !c->position_to_content)
    return refuse("pos_att_type names neither c2p nor p2c: the relative embeddings do nothing");
  if (!hf.share_att_key.value_or(false)) {
    return refuse(
        "share_att_key is not true: separate position projections (pos_key_proj, "
        "pos_query_proj) are not supported");
  }
  int64_t max_relative = hf.max_relative_positions.value_or(-1);
  if (max_relative < 1) max_relative = hf.max_position_embeddings.value_or(512);
  const int64_t buckets = hf.position_buckets.value_or(-1);
  const int64_t span = buckets > 0 ? buckets : max_relative;
  if (span != c->attention_span) {
    return refuse(std::string(buckets > 0 ? "position_buckets" : "max_relative_positions") +
                  " gives an attention span of " + std::to_string(span) + " but " + checkpoint +
                  "'s encoder.rel_embeddings has " + std::to_string(2 * c->attention_span) +
                  " rows");
  }
  c->position_buckets = buckets > 0 ? buckets : 0;
  c->max_relative_positions = max_relative;
  const bool norm = std::find(hf.norm_rel_ebd.begin(), hf.norm_rel_ebd.end(), "layer_norm") !=
                    hf.norm_rel_ebd.end();
  if (norm != c->relative_norm) {
    return refuse(std::string("norm_rel_ebd ") + (norm ? "names" : "does not name") +
                  " layer_norm but " + checkpoint + (norm ? " has no" : " has") +
                  " encoder.LayerNorm");
  }
  return Status::Ok();
}

// Hyperparameters of the Hugging Face families: config.json, checked against
// the shapes already in `c`. `cross_encoder`: the folder is a
// sentence-transformers CrossEncoder (5.4+'s modules.json), whose scores are
// CrossEncoder's whatever the head's width.
Status ApplyHfConfig(const HfConfig& hf, const std::string& path, const std::string& checkpoint,
                     bool cross_encoder, EncoderConfig* c) {
  RETURN_IF_ERROR(CrossCheck(path, "vocab_size", hf.vocab_size, c->vocab_size, checkpoint));
  const HfKeys& keys = HfKeysFor(c->family);
  RETURN_IF_ERROR(CrossCheck(path, keys.hidden_size, hf.hidden_size, c->hidden_size, checkpoint));
  RETURN_IF_ERROR(
      CrossCheck(path, keys.num_hidden_layers, hf.num_hidden_layers, c->num_layers, checkpoint));
  RETURN_IF_ERROR(CrossCheck(path, keys.intermediate_size, hf.intermediate_size,
                             c->intermediate_size, checkpoint));
  // (DeBERTa's relative attention may leave the table out: ApplyDebertaConfig.)
  if (c->family != ModelFamily::kDeberta || c->max_positions > 0) {
    RETURN_IF_ERROR(CrossCheck(path, "max_position_embeddings", hf.max_position_embeddings,
                               c->max_positions, checkpoint));
  }
  RETURN_IF_ERROR(
      CrossCheck(path, "type_vocab_size", hf.type_vocab_size, c->type_vocab_size, checkpoint));
  if (c->family == ModelFamily::kMpnet) {
    RETURN_IF_ERROR(CrossCheck(path, "relative_attention_num_buckets",
                               hf.relative_attention_num_buckets, c->relative_attention_buckets,
                               checkpoint));
    // MPNetEmbeddings counts positions from its padding_idx, 1, whatever
    // pad_token_id says: another pad id would move every position.
    if (hf.pad_token_id && *hf.pad_token_id != 1) {
      return InvalidArgument(path + ": pad_token_id = " + std::to_string(*hf.pad_token_id) +
                             ", but transformers' MPNet counts positions from padding index 1");
    }
  }
  if (!hf.num_attention_heads) {
    return InvalidArgument(path + ": " + keys.num_attention_heads + " is missing");
  }
  c->num_heads = *hf.num_attention_heads;
  if (c->hidden_size % c->num_heads != 0) {
    return InvalidArgument(path + ": " + keys.num_attention_heads + " = " +
                           std::to_string(c->num_heads) + " does not divide hidden_size " +
                           std::to_string(c->hidden_size));
  }
  const bool electra = c->family == ModelFamily::kElectra;
  RETURN_IF_ERROR(
      CrossCheck(path, "embedding_size", hf.embedding_size, c->embedding_width(), checkpoint));
  const bool distil = c->family == ModelFamily::kDistilbert;
  const bool bert = c->family == ModelFamily::kBert || distil || electra;
  // transformers' DistilBERT builds its LayerNorms with eps 1e-12 whatever
  // config.json says (a layer_norm_eps there was read until 2026-12-04).
  c->layer_norm_eps = distil ? 1e-12f : hf.layer_norm_eps.value_or(1e-12f);
  c->activation = hf.hidden_act.value_or(Activation::kGelu);
  // (RoBERTa-PreLayerNorm's layers alone normalize first.)
  c->norm_first = c->family == ModelFamily::kRobertaPreLayerNorm;
  c->pad_token_id = hf.pad_token_id.value_or(bert ? 0 : 1);
  c->position_rule = bert ? PositionRule::kFromZero : PositionRule::kAfterPaddingIdx;
  // DistilBertForSequenceClassification: pre_classifier, ReLU, classifier;
  // ElectraClassificationHead: dense, GELU, out_proj; MPNet's, RoBERTa's:
  // dense, tanh, out_proj.
  c->head_activation = distil ? Activation::kRelu : electra ? Activation::kGelu : Activation::kTanh;
  if (!hf.labels.empty() && c->num_labels > 0) {
    if (static_cast<int64_t>(hf.labels.size()) != c->num_labels) {
      return InvalidArgument(path + ": id2label has " + std::to_string(hf.labels.size()) +
                             " labels but the classifier in " + checkpoint + " has " +
                             std::to_string(c->num_labels) + " outputs");
    }
    c->labels = hf.labels;
  }
  c->problem_type = hf.problem_type;
  // A cross-encoder scores as sentence-transformers' CrossEncoder does with
  // the activation its config.json names (the ms-marco models name Identity:
  // their scores are the raw logits); in a plain Hugging Face folder a head
  // with more outputs keeps the pipeline's rule (EncoderConfig::head_output).
  // A CrossEncoder's folder gets CrossEncoder's rule for every head: the
  // activation on each output, by default the sigmoid of one output and the
  // raw logits of more.
  // sentence-transformers imports any name under torch., so torch.nn.Identity
  // names the same class as torch.nn.modules.linear.Identity.
  if (cross_encoder && hf.cross_encoder_activation.empty()) {
    c->score_output = c->num_labels == 1 ? HeadOutput::kSigmoid : HeadOutput::kLogits;
  }
  if (c->family == ModelFamily::kDeberta)
    RETURN_IF_ERROR(ApplyDebertaConfig(hf, path, checkpoint, c));
  if ((c->num_labels == 1 || cross_encoder) && !hf.cross_encoder_activation.empty()) {
    const std::string& name = hf.cross_encoder_activation;
    const std::string kind = name.substr(name.find_last_of('.') + 1);
    const bool torch_nn = name.rfind("torch.nn.", 0) == 0;
    if (torch_nn && kind == "Identity") {
      c->score_output = HeadOutput::kLogits;
    } else if (torch_nn && kind == "Sigmoid") {
      c->score_output = HeadOutput::kSigmoid;
    } else if (torch_nn && kind == "Tanh") {
      c->score_output = HeadOutput::kTanh;
    } else {
      return InvalidArgument(hf.cross_encoder_activation_from + " \"" + name +
                             "\" is not one that encoderd applies to a cross-encoder's score "
                             "(torch.nn.modules.linear.Identity, "
                             "torch.nn.modules.activation.Sigmoid or .Tanh)");
    }
  }
  return Status::Ok();
}

// What a fairseq checkpoint records of its model (Checkpoint::fairseq_args
// and fairseq_text_args) that the weights do not say, and the checkpoint,
// for messages.
struct RecordedArgs {
  std::optional<int64_t> heads;
  std::string activation_fn;         // the layers'; "" where not recorded
  std::string pooler_activation_fn;  // the classification heads'
  std::string checkpoint;
};

// fairseq's activation `name` as encoderd runs it: gelu (erf) and relu in
// the layers, tanh as well in a head; fairseq's others (gelu_accurate and
// gelu_fast, tanh approximations, linear, tanh in the layers) are refused.
StatusOr<Activation> RecordedActivation(const RecordedArgs& recorded, const char* key,
                                        const std::string& name, bool head) {
  const std::optional<Activation> a = ParseActivation(name);
  if (!a || (*a == Activation::kTanh && !head)) {
    return InvalidArgument(recorded.checkpoint + ": its " + key + " \"" + name +
                           "\" is not supported (expected gelu or relu" +
                           (head ? std::string(" or tanh") : std::string()) + ")");
  }
  return *a;
}

// Defaults of the families described only by a card (and, for fairseq, the
// heads its checkpoint records).
Status ApplyCardFamilyDefaults(const ModelCard& card, const RecordedArgs& recorded,
                               EncoderConfig* c) {
  if (card.num_heads && recorded.heads && *card.num_heads != *recorded.heads) {
    return InvalidArgument(card.source + ": num_heads = " + std::to_string(*card.num_heads) +
                           " contradicts encoder_attention_heads = " +
                           std::to_string(*recorded.heads) + " recorded in " + recorded.checkpoint);
  }
  const std::optional<int64_t> heads = card.num_heads ? card.num_heads : recorded.heads;
  if (!heads) {
    return InvalidArgument(card.source + ": num_heads is required for family " +
                           std::string(ModelFamilyName(c->family)) +
                           (c->family == ModelFamily::kFairseqRoberta
                                ? " (the checkpoint records no encoder_attention_heads)"
                                : ""));
  }
  c->num_heads = *heads;
  if (c->num_heads <= 0 || c->hidden_size % c->num_heads != 0) {
    const std::string named = card.num_heads
                                  ? card.source + ": num_heads"
                                  : recorded.checkpoint + ": its encoder_attention_heads";
    return InvalidArgument(named + " = " + std::to_string(c->num_heads) +
                           " does not divide hidden_size " + std::to_string(c->hidden_size));
  }
  const bool torchtext = c->family == ModelFamily::kTorchtextRoberta;
  const bool roberta = torchtext || c->family == ModelFamily::kFairseqRoberta;
  c->layer_norm_eps = 1e-5f;  // nn.LayerNorm / nn.TransformerEncoderLayer default, and fairseq's
  c->activation = roberta ? Activation::kGelu : Activation::kRelu;
  c->pad_token_id = roberta ? 1 : 0;
  c->mask_pad_keys = roberta;
  c->zero_pad_embeddings = c->family == ModelFamily::kFairseqRoberta;
  // torchtext's RobertaClassificationHead: ReLU; fairseq's: pooler_activation_fn, tanh.
  c->head_activation = torchtext ? Activation::kRelu : Activation::kTanh;
  // What a fairseq checkpoint records over those defaults (read since
  // 2026-12-04: activation_fn relu was run as gelu); a card contradicting it
  // is an error, as for the head count.
  if (!recorded.activation_fn.empty()) {
    ASSIGN_OR_RETURN(c->activation, RecordedActivation(recorded, "activation_fn",
                                                       recorded.activation_fn, /*head=*/false));
    if (card.activation && *card.activation != c->activation) {
      return InvalidArgument(card.source + ": activation = " + ActivationName(*card.activation) +
                             " contradicts activation_fn = " + recorded.activation_fn +
                             " recorded in " + recorded.checkpoint);
    }
  }
  if (!recorded.pooler_activation_fn.empty()) {
    ASSIGN_OR_RETURN(c->head_activation,
                     RecordedActivation(recorded, "pooler_activation_fn",
                                        recorded.pooler_activation_fn, /*head=*/true));
    if (card.head_activation && *card.head_activation != c->head_activation) {
      return InvalidArgument(
          card.source + ": head_activation = " + ActivationName(*card.head_activation) +
          " contradicts pooler_activation_fn = " + recorded.pooler_activation_fn + " recorded in " +
          recorded.checkpoint);
    }
  }
  if (roberta) {
    c->position_rule = PositionRule::kAfterPaddingIdx;
  } else {
    c->position_rule = c->max_positions ? PositionRule::kFromZero : PositionRule::kNone;
  }
  return Status::Ok();
}

// What the card says overrides inferred values and family defaults.
void ApplyCardOverrides(const ModelCard& card, EncoderConfig* c) {
  if (card.layer_norm_eps) c->layer_norm_eps = *card.layer_norm_eps;
  if (card.activation) c->activation = *card.activation;
  if (card.norm_first) c->norm_first = *card.norm_first;
  if (card.pad_token_id) c->pad_token_id = *card.pad_token_id;
  if (card.mask_pad_keys) c->mask_pad_keys = *card.mask_pad_keys;
  if (card.position_rule) c->position_rule = *card.position_rule;
  if (card.pooling) c->default_pooling = *card.pooling;
  if (card.head_activation) c->head_activation = *card.head_activation;
  if (!card.labels.empty()) c->labels = card.labels;
}

// The longest sequence the position table allows.
int64_t PositionLimit(const EncoderConfig& c) {
  switch (c.position_rule) {
    case PositionRule::kNone:
      return 512;
    case PositionRule::kFromZero:
      return c.max_positions;
    case PositionRule::kAfterPaddingIdx:
      return c.max_positions - c.pad_token_id - 1;
  }
  return 0;
}

// A sentence-transformers Dense module's weights (linear.weight [out, in],
// linear.bias [out]) as pool_dense.<index>.*, also listed among the
// checkpoint's tensors under the module's folder name.
Status LoadDenseModule(const std::string& folder, const std::string& dir,
                       const EncoderConfig::PoolDense& dense, size_t index, ModelBundle* bundle) {
  ASSIGN_OR_RETURN(const std::string path, FindCheckpoint(dir, std::nullopt));
  ASSIGN_OR_RETURN(Checkpoint checkpoint, ReadCheckpoint(path));
  const std::string rel = dir.size() > folder.size() ? dir.substr(folder.size() + 1) : dir;
  const std::string name = "pool_dense." + std::to_string(index);
  struct Part {
    const char* key;
    std::vector<int64_t> shape;
    bool needed;
  };
  for (const Part& part : {Part{"linear.weight", {dense.out, dense.in}, true},
                           Part{"linear.bias", {dense.out}, dense.bias}}) {
    const auto it = checkpoint.tensors.find(part.key);
    if (it == checkpoint.tensors.end()) {
      if (!part.needed) continue;
      return NotFound(path + ": no " + part.key);
    }
    if (it->second.shape() != part.shape) {
      return InvalidArgument(path + ": " + part.key + " is " + ShapeToString(it->second.shape()) +
                             " but config.json says " + ShapeToString(part.shape));
    }
    const std::string suffix = std::string(part.key).substr(std::string("linear").size());
    bundle->weights[name + suffix] = it->second;
    bundle->checkpoint_tensors[rel + "/" + part.key] = it->second;
  }
  return Status::Ok();
}

// Why a Hugging Face checkpoint's classifier is not served ("" when it has
// none): until 2026-12-04 a token-classification or multiple-choice BERT
// with a pooler was served as a sequence classifier, and other families'
// token classifiers were dropped without a word.
std::string UnservedHeadNote(const TensorMap& tensors, const HfConfig& hf) {
  std::string keys;
  for (const char* key : {"classifier.weight", "classifier.out_proj.weight", "qa_outputs.weight"}) {
    if (tensors.count(key)) keys += (keys.empty() ? "" : ", ") + std::string(key);
  }
  if (keys.empty()) return "";
  if (!ArchitecturesServeASequenceHead(hf)) {
    return "config.json's architectures names " + hf.architectures.front() + ", whose head (" +
           keys + ") does not give a text's labels: not served";
  }
  return "its " + keys + " is no sequence classification head of a " + hf.model_type +
         " model: not served";
}

// `sequence_head`: the Hugging Face families' (ArchitecturesServeASequenceHead).
Status MapWeights(WeightMapper& mapper, const std::optional<ModelCard>& card, bool sequence_head,
                  EncoderConfig* config) {
  switch (config->family) {
    case ModelFamily::kBert:
      return MapBertWeights(mapper, sequence_head, config);
    case ModelFamily::kRoberta:
    case ModelFamily::kXlmRoberta:
    case ModelFamily::kCamembert:
    case ModelFamily::kData2VecText:
      return MapRobertaWeights(mapper, sequence_head, config);
    case ModelFamily::kRobertaPreLayerNorm:
      return MapRobertaPreLayerNormWeights(mapper, sequence_head, config);
    case ModelFamily::kDistilbert:
      return MapDistilbertWeights(mapper, sequence_head, config);
    case ModelFamily::kElectra:
      return MapElectraWeights(mapper, sequence_head, config);
    case ModelFamily::kMpnet:
      return MapMpnetWeights(mapper, sequence_head, config);
    case ModelFamily::kDeberta:
      return MapDebertaWeights(mapper, sequence_head, config);
    case ModelFamily::kTorchtextRoberta:
      return MapTorchtextRobertaWeights(mapper, config);
    case ModelFamily::kFairseqRoberta: {
      RETURN_IF_ERROR(MapFairseqRobertaWeights(mapper, card->classification_head, config));
      if (card->norm_first && *card->norm_first != config->norm_first) {
        return InvalidArgument(card->source +
                               ": norm_first = " + (*card->norm_first ? "true" : "false") +
                               " contradicts " + mapper.file() + ", which " +
                               (config->norm_first ? "has a" : "has no") +
                               " final layer_norm (fairseq's encoder_normalize_before)");
      }
      return Status::Ok();
    }
    case ModelFamily::kTransformerEncoder:
      return MapTransformerEncoderWeights(mapper, card->weights, config).WithContext(card->source);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ModelBundle> LoadModelBundle(const std::string& folder,
                                      const std::optional<ModelCard>& card) {
  // A sentence-transformers folder may keep the model in a subfolder.
  ASSIGN_OR_RETURN(const std::optional<SentenceTransformersLayout> st,
                   ReadSentenceTransformers(folder));
  const std::string dir = st ? st->transformer_dir : folder;
  const std::string config_path = dir + "/config.json";
  std::optional<HfConfig> hf;
  if (IsFile(config_path)) {
    ASSIGN_OR_RETURN(hf, ReadHfConfig(config_path));
  }
  EncoderConfig config;
  if (card && card->family) {
    config.family = *card->family;
  } else if (hf) {
    config.family = hf->family;
  } else {
    return NotFound(dir + ": no config.json, and no encoderd.yaml naming the family");
  }
  if (IsHuggingFaceFamily(config.family)) {
    if (!hf)
      return NotFound(config_path + ": missing (needed for family " +
                      std::string(ModelFamilyName(config.family)) + ")");
    if (hf->family != config.family) {
      return InvalidArgument(card->source + ": family " + ModelFamilyName(config.family) +
                             " contradicts config.json model_type \"" + hf->model_type + "\"");
    }
  } else if (!card) {
    return NotFound(dir + "/encoderd.yaml: missing (needed for family " +
                    std::string(ModelFamilyName(config.family)) + ")");
  }

  if (card && !card->classification_head.empty() && config.family != ModelFamily::kFairseqRoberta) {
    return InvalidArgument(card->source +
                           ": classification_head applies to family fairseq-roberta only");
  }
  ModelBundle bundle;
  bundle.directory = folder;
  if (st) {
    bundle.sentence_transformers_modules = st->modules;
    bundle.prompts = st->prompts;
    bundle.default_prompt = st->default_prompt;
    bundle.default_prompt_name = st->default_prompt_name;
    bundle.include_prompt = st->include_prompt;
    if (!st->default_prompt.empty()) {
      bundle.default_prompt_source = folder + "/config_sentence_transformers.json prompts[\"" +
                                     st->default_prompt_name + "\"] (default_prompt_name)";
    }
  }
  ASSIGN_OR_RETURN(bundle.checkpoint_path, FindCheckpoint(dir, card));
  ReadOptions read_options;
  if (card) read_options.state_dict_key = card->state_dict_key;
  const bool sharded = IsShardIndex(bundle.checkpoint_path);
  if (sharded && !read_options.state_dict_key.empty()) {
    return InvalidArgument(card->source + ": state_dict_key does not apply to the sharded " +
                           bundle.checkpoint_path + " (its shards hold the state dict itself)");
  }
  ASSIGN_OR_RETURN(Checkpoint checkpoint,
                   sharded ? ReadShardedCheckpoint(bundle.checkpoint_path, &bundle.checkpoint_files)
                           : ReadCheckpoint(bundle.checkpoint_path, read_options));
  bundle.checkpoint_format = checkpoint.format;
  bundle.checkpoint_tensors = std::move(checkpoint.tensors);
  bundle.placeholder_globals = std::move(checkpoint.placeholder_globals);

  // fairseq checkpoints record their heads (their layer order the tensors
  // say: a final layer_norm); a card may still give them.
  RecordedArgs recorded;
  recorded.checkpoint = bundle.checkpoint_path;
  if (config.family == ModelFamily::kFairseqRoberta) {
    if (const auto it = checkpoint.fairseq_args.find("encoder_attention_heads");
        it != checkpoint.fairseq_args.end())
      recorded.heads = it->second;
    const auto text = [&checkpoint](const char* key) {
      const auto it = checkpoint.fairseq_text_args.find(key);
      return it == checkpoint.fairseq_text_args.end() ? std::string() : it->second;
    };
    recorded.activation_fn = text("activation_fn");
    recorded.pooler_activation_fn = text("pooler_activation_fn");
  }
  WeightMapper mapper(bundle.checkpoint_tensors, bundle.checkpoint_path);
  if (card && card->norm_first) config.norm_first = *card->norm_first;
  const bool sequence_head = !hf || ArchitecturesServeASequenceHead(*hf);
  if (Status mapped = MapWeights(mapper, card, sequence_head, &config); !mapped.ok()) {
    // Only a missing tensor can be one a placeholder stood in for (fairseq
    // checkpoints always name argparse's or omegaconf's globals).
    if (bundle.placeholder_globals.empty() || mapped.code() != StatusCode::kNotFound) return mapped;
    // A tensor the pickle meant to build with a global off the allow-list
    // (a hostile or foreign checkpoint) was never built: name the globals.
    std::string globals;
    for (const std::string& g : bundle.placeholder_globals)
      globals += (globals.empty() ? "" : ", ") + g;
    return Status(
        mapped.code(),
        mapped.message() + " (the pickle names globals the loader does not run: " + globals + ")");
  }
  bundle.weights = mapper.Release();
  if (IsHuggingFaceFamily(config.family) && config.num_labels == 0) {
    bundle.head_note = UnservedHeadNote(bundle.checkpoint_tensors, *hf);
  }

  if (st && st->cross_encoder) {
    if (config.num_labels == 0) {
      return InvalidArgument(folder +
                             ": a CrossEncoder (config_sentence_transformers.json, "
                             "modules.json), but " +
                             bundle.checkpoint_path + " has no sequence classifier to score with" +
                             (bundle.head_note.empty() ? "" : " (" + bundle.head_note + ")"));
    }
    // sentence-transformers 5.4+ reads the activation from
    // config_sentence_transformers.json before config.json's keys.
    if (hf && !st->activation_fn.empty()) {
      hf->cross_encoder_activation = st->activation_fn;
      hf->cross_encoder_activation_from =
          folder + "/config_sentence_transformers.json: activation_fn";
    }
  }
  if (hf && IsHuggingFaceFamily(config.family)) {
    RETURN_IF_ERROR(
        ApplyHfConfig(*hf, config_path, bundle.checkpoint_path, st && st->cross_encoder, &config));
    if (config.position_rule == PositionRule::kNone) bundle.weights.erase("embeddings.position");
  }
  if (st) {  // before the card: what encoderd.yaml says wins
    if (st->pooling) config.default_pooling = *st->pooling;
    config.default_normalize = st->normalize;
    for (const SentenceTransformersLayout::Dense& dense : st->dense) {
      RETURN_IF_ERROR(
          LoadDenseModule(folder, dense.dir, dense.shape, config.pool_dense.size(), &bundle));
      config.pool_dense.push_back(dense.shape);
    }
    // A truncate_dim at or past the embedding's width cuts nothing, as in
    // sentence-transformers (a slice past the end).
    if (st->truncate_dim && *st->truncate_dim < config.pooled_width())
      config.default_dimensions = *st->truncate_dim;
  }
  if (card) {
    if (!IsHuggingFaceFamily(config.family))
      RETURN_IF_ERROR(ApplyCardFamilyDefaults(*card, recorded, &config));
    if (card->num_heads && *card->num_heads != config.num_heads) {
      return InvalidArgument(card->source + ": num_heads = " + std::to_string(*card->num_heads) +
                             " contradicts config.json " +
                             HfKeysFor(config.family).num_attention_heads + " = " +
                             std::to_string(config.num_heads));
    }
    // A card fills in what config.json leaves out; it may not contradict
    // what config.json says (until 2026-12-04 `activation: relu` over
    // `hidden_act: gelu` ran relu without a word).
    if (hf && IsHuggingFaceFamily(config.family)) {
      if (card->activation && hf->hidden_act && *card->activation != *hf->hidden_act) {
        return InvalidArgument(card->source +
                               ": activation = " + ActivationName(*card->activation) +
                               " contradicts config.json " + HfKeysFor(config.family).hidden_act +
                               " = " + ActivationName(*hf->hidden_act));
      }
      // (DistilBERT's config.json eps is not read: the card's is.)
      if (card->layer_norm_eps && hf->layer_norm_eps && config.family != ModelFamily::kDistilbert &&
          *card->layer_norm_eps != *hf->layer_norm_eps) {
        const auto shown = [](float eps) {
          char text[32];
          std::snprintf(text, sizeof text, "%g", eps);
          return std::string(text);
        };
        return InvalidArgument(
            card->source + ": layer_norm_eps = " + shown(*card->layer_norm_eps) +
            " contradicts config.json layer_norm_eps = " + shown(*hf->layer_norm_eps));
      }
      // The family fixes the layer order (until 2026-12-07 a card's
      // norm_first ran a family's weights in the other order without a word).
      if (card->norm_first && *card->norm_first != config.norm_first) {
        return InvalidArgument(
            card->source + ": norm_first = " + (*card->norm_first ? "true" : "false") +
            " contradicts family " + ModelFamilyName(config.family) + ", whose layers are " +
            (config.norm_first ? "pre-norm" : "post-norm"));
      }
    }
    ApplyCardOverrides(*card, &config);
    config.zero_pad_embeddings = config.zero_pad_embeddings && config.mask_pad_keys;
    // The attention kernels take one bias on the scores (kernels::KeyBias).
    if (config.mask_pad_keys &&
        (config.relative_attention_buckets > 0 || config.attention_span > 0)) {
      return InvalidArgument(card->source +
                             ": mask_pad_keys beside a relative attention bias (MPNet) or "
                             "disentangled attention (DeBERTa) is not supported");
    }
  }
  int64_t limit = PositionLimit(config);
  if (st && st->max_seq_length) limit = std::min(limit, *st->max_seq_length);
  config.max_tokens = card && card->max_tokens ? *card->max_tokens : limit;
  if (config.labels.empty()) {
    for (int64_t i = 0; i < config.num_labels; ++i)
      config.labels.push_back("LABEL_" + std::to_string(i));
  }

  ASSIGN_OR_RETURN(ModelTokenizer tokenizer,
                   LoadModelTokenizer(dir, card ? card->tokenizer : std::nullopt, config));
  bundle.tokenizer = std::move(tokenizer.tokenizer);
  bundle.tokenizer_path = tokenizer.path;
  bundle.tokenizer_note = tokenizer.note;
  const std::optional<PairTemplate> family_pairs = TextPairTemplate(config.family);
  bundle.pair_template = family_pairs && tokenizer.pairs ? tokenizer.pairs : family_pairs;
  if (bundle.tokenizer) config.special_tokens = bundle.tokenizer->special_tokens();
  config.special_tokens.pad = static_cast<int32_t>(config.pad_token_id);

  const std::string source = card ? card->source : dir;
  RETURN_IF_ERROR(config.Validate().WithContext(source));
  bundle.config = std::move(config);
  return bundle;
}

}  // namespace encoderd
