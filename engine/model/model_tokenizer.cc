#include "engine/model/model_tokenizer.h"

#include <sys/stat.h>

#include "engine/model/hf_config.h"
#include "engine/text/byte_bpe_tokenizer.h"
#include "engine/text/hf_tokenizer_json.h"
#include "engine/text/sentencepiece_tokenizer.h"
#include "engine/text/wordpiece_tokenizer.h"

namespace encoderd {
namespace {

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A card for the files of a Hugging Face directory that transformers' slow
// tokenizers read (BertTokenizer, XLMRobertaTokenizer, RobertaTokenizer), if
// it has any.
StatusOr<std::optional<TokenizerCard>> SlowTokenizerFiles(const std::string& dir,
                                                          const std::string& name_hint) {
  TokenizerCard card;
  const std::string tokenizer_config = dir + "/tokenizer_config.json";
  if (IsFile(dir + "/vocab.txt")) {
    card.kind = TokenizerKind::kWordPiece;
    card.file = "vocab.txt";
    if (IsFile(tokenizer_config)) {
      ASSIGN_OR_RETURN(card.lower_case, ReadTokenizerFlag(tokenizer_config, "do_lower_case"));
    }
    if (!card.lower_case) {
      const bool cased = name_hint.find("cased") != std::string::npos &&
                         name_hint.find("uncased") == std::string::npos;
      card.lower_case = !cased;
    }
    return std::optional<TokenizerCard>(card);
  }
  if (IsFile(dir + "/sentencepiece.bpe.model")) {
    card.kind = TokenizerKind::kSentencePiece;
    card.file = "sentencepiece.bpe.model";
    return std::optional<TokenizerCard>(card);
  }
  if (IsFile(dir + "/vocab.json") && IsFile(dir + "/merges.txt")) {
    card.kind = TokenizerKind::kByteLevelBpe;
    card.file = "vocab.json";
    if (IsFile(tokenizer_config)) {
      ASSIGN_OR_RETURN(card.add_prefix_space,
                       ReadTokenizerFlag(tokenizer_config, "add_prefix_space"));
    }
    return std::optional<TokenizerCard>(card);
  }
  return std::optional<TokenizerCard>();
}

// A card key the tokenizer's kind would ignore is an error, not a surprise.
// Each key is read by one kind only; tokenizer-json reads none (the file says
// everything).
Status CheckCardKeys(const TokenizerCard& card) {
  const struct {
    const char* key;
    bool set;
    TokenizerKind reader;
  } keys[] = {
      {"lower_case", card.lower_case.has_value(), TokenizerKind::kWordPiece},
      {"id_offset", card.id_offset.has_value(), TokenizerKind::kSentencePiece},
      {"{bos,eos,pad,unk}_id", card.bos || card.eos || card.pad || card.unk,
       TokenizerKind::kSentencePiece},
      {"merges_file", !card.merges_file.empty(), TokenizerKind::kByteLevelBpe},
      {"fairseq_dict", !card.fairseq_dict.empty(), TokenizerKind::kByteLevelBpe},
      {"add_prefix_space", card.add_prefix_space.has_value(), TokenizerKind::kByteLevelBpe},
  };
  for (const auto& k : keys) {
    if (k.set && k.reader != card.kind) {
      return InvalidArgument(std::string("tokenizer.") + k.key + " does not apply to " +
                             TokenizerKindName(card.kind) + " (only " +
                             TokenizerKindName(k.reader) + " reads it)");
    }
  }
  return Status::Ok();
}

// A tokenizer.json. Found by name, it is read as transformers' fast
// tokenizer of the folder reads it: BertTokenizerFast (and DistilBERT's and
// ELECTRA's) rebuilds the normalizer with tokenizer_config.json's
// do_lower_case, true when it says none, and RobertaTokenizerFast the
// pre-tokenizer with its add_prefix_space, false when it says none; the
// generic PreTrainedTokenizerFast, when tokenizer_config.json's
// tokenizer_class names it, takes the file as it is.
StatusOr<HfJsonTokenizer> TokenizerJson(const std::string& dir, const std::string& path,
                                        bool found_by_name) {
  HfJsonOverrides overrides;
  const std::string tokenizer_config = dir + "/tokenizer_config.json";
  if (found_by_name) {
    std::optional<bool> lower_case, add_prefix_space;
    std::optional<std::string> tokenizer_class;
    if (IsFile(tokenizer_config)) {
      ASSIGN_OR_RETURN(lower_case, ReadTokenizerFlag(tokenizer_config, "do_lower_case"));
      ASSIGN_OR_RETURN(add_prefix_space, ReadTokenizerFlag(tokenizer_config, "add_prefix_space"));
      ASSIGN_OR_RETURN(tokenizer_class, ReadTokenizerText(tokenizer_config, "tokenizer_class"));
    }
    if (tokenizer_class != "PreTrainedTokenizerFast") {
      overrides.lower_case = lower_case.value_or(true);
      overrides.add_prefix_space = add_prefix_space.value_or(false);
    }
  }
  return CreateTokenizerFromHfJson(path, overrides);
}

// The loaded tokenizer, if its ids fit the model's token embedding.
StatusOr<ModelTokenizer> FittingEmbedding(ModelTokenizer result, const EncoderConfig& config) {
  if (result.tokenizer->vocab_size() > config.vocab_size) {
    return InvalidArgument(result.path + ": the tokenizer has " +
                           std::to_string(result.tokenizer->vocab_size()) +
                           " tokens but the model's token embedding has only " +
                           std::to_string(config.vocab_size) + " rows");
  }
  return result;
}

}  // namespace

StatusOr<ModelTokenizer> LoadModelTokenizer(const std::string& dir,
                                            const std::optional<TokenizerCard>& card_in,
                                            const std::string& name_hint,
                                            const EncoderConfig& config) {
  std::optional<TokenizerCard> card = card_in;
  ModelTokenizer result;
  if (!card && IsHuggingFaceFamily(config.family)) {
    // As transformers' AutoTokenizer: the folder's tokenizer.json (its fast
    // tokenizer) where it has one; the files of its slow tokenizer where it
    // has none, or one whose pipeline encoderd does not reproduce.
    const std::string json_path = dir + "/tokenizer.json";
    if (IsFile(json_path)) {
      StatusOr<HfJsonTokenizer> t = TokenizerJson(dir, json_path, /*found_by_name=*/true);
      if (t.ok()) {
        result.path = json_path;
        result.tokenizer = std::move(t->tokenizer);
        result.pairs = t->pairs;
        return FittingEmbedding(std::move(result), config);
      }
      if (t.status().code() != StatusCode::kUnimplemented) return t.status();
      result.note = t.status().message();
    }
    ASSIGN_OR_RETURN(card, SlowTokenizerFiles(dir, name_hint));
  }
  if (!card) return result;
  RETURN_IF_ERROR(CheckCardKeys(*card));
  result.path = dir + "/" + card->file;
  if (card->kind == TokenizerKind::kWordPiece) {
    WordPieceOptions options;
    options.lower_case = card->lower_case.value_or(true);
    ASSIGN_OR_RETURN(result.tokenizer, CreateWordPieceTokenizer(result.path, options));
  } else if (card->kind == TokenizerKind::kTokenizerJson) {
    ASSIGN_OR_RETURN(HfJsonTokenizer t, TokenizerJson(dir, result.path, /*found_by_name=*/false));
    result.tokenizer = std::move(t.tokenizer);
    result.pairs = t.pairs;
  } else if (card->kind == TokenizerKind::kByteLevelBpe) {
    ByteBpeOptions options;
    options.add_prefix_space = card->add_prefix_space.value_or(false);
    if (!card->fairseq_dict.empty()) options.fairseq_dict = dir + "/" + card->fairseq_dict;
    const std::string merges =
        dir + "/" + (card->merges_file.empty() ? "merges.txt" : card->merges_file);
    ASSIGN_OR_RETURN(result.tokenizer, CreateByteBpeTokenizer(result.path, merges, options));
  } else {
    SentencePieceOptions options;
    options.id_offset = card->id_offset.value_or(1);
    options.special_tokens.bos = card->bos.value_or(options.special_tokens.bos);
    options.special_tokens.eos = card->eos.value_or(options.special_tokens.eos);
    options.special_tokens.pad = card->pad.value_or(static_cast<int32_t>(config.pad_token_id));
    options.special_tokens.unk = card->unk.value_or(options.special_tokens.unk);
    options.vocab_size = config.vocab_size;
    ASSIGN_OR_RETURN(result.tokenizer, CreateSentencePieceTokenizer(result.path, options));
  }
  // Found by name in a Hugging Face folder, the file is read as transformers
  // reads it: vocab.txt by BertTokenizer, sentencepiece.bpe.model by
  // XLMRobertaTokenizer, vocab.json + merges.txt by RobertaTokenizer, and each
  // joins pairs its own way whatever the model. Named by a card, they follow
  // the family (a tokenizer.json's template is its own either way).
  if (!card_in) {
    result.pairs =
        card->kind == TokenizerKind::kWordPiece ? PairTemplate::kBert : PairTemplate::kRoberta;
  }
  return FittingEmbedding(std::move(result), config);
}

}  // namespace encoderd
