#include "cli/inspect_command.h"

#include <cstdio>
#include <optional>
#include <sstream>

#include "cli/flags.h"
#include "core/json_text.h"
#include "server/config/model_card_yaml.h"

namespace encoderd::server {
namespace {

using Json = nlohmann::json;

// "; disentangled attention (c2p, p2c) over 512 relative embeddings
// (256 log buckets reaching 512, LayerNorm'd)", or nothing.
std::string DisentangledLine(const EncoderConfig& c) {
  if (c.attention_span == 0) return "";
  std::string terms = c.content_to_position ? "c2p" : "";
  if (c.position_to_content) terms += terms.empty() ? "p2c" : ", p2c";
  const std::string rows = std::to_string(2 * c.attention_span);
  return "; disentangled attention (" + terms + ") over " + rows + " relative embeddings (" +
         (c.position_buckets > 0 ? std::to_string(c.position_buckets) + " log buckets reaching " +
                                       std::to_string(c.max_relative_positions)
                                 : "one per distance up to " + std::to_string(c.attention_span)) +
         (c.relative_norm ? ", LayerNorm'd)" : ")");
}

Json ConfigJson(const EncoderConfig& c) {
  return Json{
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"num_layers", c.num_layers},
      {"num_heads", c.num_heads},
      {"head_dim", c.head_dim()},
      {"embedding_size", c.embedding_width()},
      {"intermediate_size", c.intermediate_size},
      {"max_positions", c.max_positions},
      {"max_tokens", c.max_tokens},
      {"type_vocab_size", c.type_vocab_size},
      {"relative_attention_buckets", c.relative_attention_buckets},
      {"disentangled_attention", c.attention_span > 0
                                     ? Json{{"attention_span", c.attention_span},
                                            {"position_buckets", c.position_buckets},
                                            {"max_relative_positions", c.max_relative_positions},
                                            {"content_to_position", c.content_to_position},
                                            {"position_to_content", c.position_to_content},
                                            {"relative_norm", c.relative_norm}}
                                     : Json()},
      {"layer_norm_eps", c.layer_norm_eps},
      {"activation", ActivationName(c.activation)},
      {"norm_first", c.norm_first},
      {"embedding_norm", c.embedding_norm},
      {"final_norm", c.final_norm},
      {"pad_token_id", c.pad_token_id},
      {"mask_pad_keys", c.mask_pad_keys},
      {"zero_pad_embeddings", c.zero_pad_embeddings},
      {"position_rule", PositionRuleName(c.position_rule)},
      {"default_pooling", PoolingName(c.default_pooling)},
      {"default_normalize", c.default_normalize},
      {"default_dimensions", c.default_dimensions},
      {"num_labels", c.num_labels},
      {"head_activation", ActivationName(c.head_activation)},
      {"labels", c.labels},
      {"head_output", c.num_labels > 0 ? HeadOutputName(c.head_output()) : ""},
      {"special_tokens",
       {{"bos", c.special_tokens.bos},
        {"eos", c.special_tokens.eos},
        {"pad", c.special_tokens.pad},
        {"unk", c.special_tokens.unk}}},
  };
}

// How the model reads a text pair, and whether Rerank serves it.
std::string DescribePairs(const ModelBundle& bundle) {
  const EncoderConfig& c = bundle.config;
  const std::optional<PairTemplate> form = bundle.pair_template;
  if (!form) return "none (the family defines no pair format)";
  if (!bundle.tokenizer) return "none (no tokenizer)";
  std::string s = *form == PairTemplate::kBert ? "[CLS] a [SEP] b [SEP]" : "<s> a </s></s> b </s>";
  s += *form == PairTemplate::kBert && c.reads_token_types() ? ", token types 0 then 1"
                                                             : ", every token type 0";
  if (c.serves_rerank(/*has_tokenizer=*/true)) {
    s += "; one-output head: a cross-encoder, served by Rerank";
  }
  return s;
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace

Json DescribeModelJson(const ModelBundle& bundle) {
  Json tensors = Json::array();
  int64_t parameters = 0;
  uint64_t bytes = 0;
  for (const auto& [name, t] : bundle.checkpoint_tensors) {
    tensors.push_back(
        {{"name", name}, {"dtype", std::string(DTypeName(t.dtype()))}, {"shape", t.shape()}});
    parameters += t.numel();
    bytes += t.nbytes();
  }
  Json tokenizer = nullptr;
  if (bundle.tokenizer) {
    tokenizer = {{"file", bundle.tokenizer_path},
                 {"description", bundle.tokenizer->Describe()},
                 {"vocab_size", bundle.tokenizer->vocab_size()}};
  }
  return Json{
      {"directory", bundle.directory},
      {"family", ModelFamilyName(bundle.config.family)},
      {"config", ConfigJson(bundle.config)},
      {"tokenizer", tokenizer},
      {"tokenizer_note",
       bundle.tokenizer_note.empty() ? Json(nullptr) : Json(bundle.tokenizer_note)},
      {"head_note", bundle.head_note.empty() ? Json(nullptr) : Json(bundle.head_note)},
      {"sentence_transformers_modules", bundle.sentence_transformers_modules},
      {"prompts", bundle.prompts},
      {"default_prompt", bundle.default_prompt},
      {"default_prompt_name", bundle.default_prompt_name},
      {"text_pairs", bundle.config.reads_text_pairs(bundle.tokenizer != nullptr)},
      {"rerank", bundle.config.serves_rerank(bundle.tokenizer != nullptr)},
      {"checkpoint",
       {{"file", bundle.checkpoint_path},
        {"format", CheckpointFormatName(bundle.checkpoint_format)},
        {"num_files", bundle.checkpoint_files},
        {"num_tensors", bundle.checkpoint_tensors.size()},
        {"num_parameters", parameters},
        {"bytes", bytes},
        {"tensors", tensors},
        {"placeholder_globals", bundle.placeholder_globals}}},
  };
}

std::string DescribeModelText(const ModelBundle& bundle) {
  const EncoderConfig& c = bundle.config;
  std::ostringstream s;
  s << "model directory: " << bundle.directory << "\n"
    << "family:          " << ModelFamilyName(c.family) << "\n"
    << "layers:          " << c.num_layers << (c.norm_first ? " (pre-norm)" : " (post-norm)")
    << "\n"
    << "hidden size:     " << c.hidden_size
    << (c.projects_embeddings()
            ? " (embeddings " + std::to_string(c.embedding_size) + " wide, projected)"
            : std::string())
    << "\n"
    << "heads:           " << c.num_heads << " (head dim " << c.head_dim() << ")\n"
    << "ffn size:        " << c.intermediate_size << " (" << ActivationName(c.activation) << ")\n"
    << "vocab size:      " << c.vocab_size << "\n"
    << "positions:       " << c.max_positions << " (" << PositionRuleName(c.position_rule)
    << "), max tokens " << c.max_tokens
    << (c.relative_attention_buckets > 0
            ? "; relative attention bias, " + std::to_string(c.relative_attention_buckets) +
                  " buckets up to distance " + std::to_string(c.relative_attention_max_distance)
            : std::string())
    << DisentangledLine(c) << "\n"
    << "token types:     " << c.type_vocab_size << "\n"
    << "layer norm eps:  " << c.layer_norm_eps << "; embedding norm "
    << (c.embedding_norm ? "yes" : "no") << ", final norm " << (c.final_norm ? "yes" : "no") << "\n"
    << "pad token id:    " << c.pad_token_id << "\n"
    << "pooling:         " << PoolingName(c.default_pooling)
    << (c.default_normalize ? ", normalized to unit length" : "")
    << (c.default_dimensions > 0
            ? ", cut to the first " + std::to_string(c.default_dimensions) + " of " +
                  std::to_string(c.pooled_width()) + " values (truncate_dim)"
            : std::string())
    << "\n";
  for (const std::string& module : bundle.sentence_transformers_modules) {
    s << "sentence-transformers module: " << module << "\n";
  }
  if (!bundle.default_prompt.empty()) {
    s << "default prompt:  " << Json(bundle.default_prompt).dump()
      << " before every text whose request names no prompt (from " << bundle.default_prompt_source
      << ")\n";
  }
  for (const auto& [name, prompt] : bundle.prompts) {
    s << "prompt:          " << Json(name).dump() << " = " << Json(prompt).dump()
      << " (a request's prompt_name)\n";
  }
  if (c.num_labels > 0) {
    s << "head:            " << c.num_labels << " labels [" << Join(c.labels) << "], "
      << ActivationName(c.head_activation) << "; scores: " << HeadOutputName(c.head_output())
      << "\n";
  } else {
    s << "head:            none"
      << (bundle.head_note.empty() ? std::string() : " (" + bundle.head_note + ")") << "\n";
  }
  s << "text pairs:      " << DescribePairs(bundle) << "\n";
  s << "tokenizer:       "
    << (bundle.tokenizer
            ? bundle.tokenizer->Describe() + " from " + bundle.tokenizer_path +
                  (bundle.tokenizer_note.empty() ? std::string()
                                                 : " (passed over: " + bundle.tokenizer_note + ")")
        : bundle.tokenizer_note.empty() ? std::string("none")
                                        : "none (" + bundle.tokenizer_note + ")")
    << "\n";
  int64_t parameters = 0;
  uint64_t bytes = 0;
  for (const auto& [name, t] : bundle.checkpoint_tensors) {
    parameters += t.numel();
    bytes += t.nbytes();
  }
  s << "checkpoint:      " << bundle.checkpoint_path << " ("
    << CheckpointFormatName(bundle.checkpoint_format) << ")"
    << (bundle.checkpoint_files > 1 ? ", " + std::to_string(bundle.checkpoint_files) + " shards"
                                    : std::string())
    << "\n"
    << "parameters:      " << parameters << " in " << bundle.checkpoint_tensors.size()
    << " tensors, " << bytes << " bytes\n"
    << "placeholder globals: "
    << (bundle.placeholder_globals.empty() ? "none" : Join(bundle.placeholder_globals)) << "\n"
    << "tensors:\n";
  for (const auto& [name, t] : bundle.checkpoint_tensors) {
    s << "  " << name << "  " << t.Describe() << "\n";
  }
  return s.str();
}

int RunInspectCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  constexpr char kUsage[] = "usage: encoderd inspect MODEL_DIR [--json]\n";
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    out << kUsage;
    return 0;
  }
  std::string dir;
  bool json = false;
  Flags flags;
  flags.Positional("MODEL_DIR", &dir);
  flags.Switch("--json", &json);
  if (const std::string error = flags.Parse(args); !error.empty()) {
    err << "encoderd inspect: " << error << "\n" << kUsage;
    return 2;
  }
  auto bundle = LoadModelDirectory(dir);
  if (!bundle.ok()) {
    err << "encoderd inspect: " << bundle.status().ToString() << "\n";
    return 1;
  }
  if (json) {
    out << JsonText(DescribeModelJson(*bundle), 1) << "\n";
  } else {
    out << DescribeModelText(*bundle);
  }
  return 0;
}

}  // namespace encoderd::server
