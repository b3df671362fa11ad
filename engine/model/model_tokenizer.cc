#include "engine/model/model_tokenizer.h"

#include <sys/stat.h>

#include <algorithm>

#include "core/file.h"
#include "engine/model/hf_config.h"
#include "engine/text/byte_bpe_tokenizer.h"
#include "engine/text/hf_tokenizer_json.h"
#include "engine/text/sentencepiece_charsmap.h"
#include "engine/text/sentencepiece_tokenizer.h"
#include "engine/text/wordpiece_tokenizer.h"

namespace encoderd {
namespace {

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Whether the sentencepiece model at `path` has <unk> <s> </s> as its
// pieces 0, 1 and 2; nothing where it cannot be read or has no pieces
// (creating the tokenizer then says why).
std::optional<bool> StartsUnkBosEos(const std::string& path) {
  StatusOr<std::string> data = ReadWholeFile(path, "sentencepiece model file");
  if (!data.ok()) return std::nullopt;
  StatusOr<std::vector<SentencePieceEntry>> pieces = ReadSentencePieces(*data);
  if (!pieces.ok() || pieces->empty()) return std::nullopt;
  return pieces->size() >= 3 && (*pieces)[0].piece == "<unk>" && (*pieces)[1].piece == "<s>" &&
         (*pieces)[2].piece == "</s>";
}

// A card for the files of a Hugging Face directory that transformers' slow
// tokenizers read (BertTokenizer, XLMRobertaTokenizer, RobertaTokenizer,
// and in a DeBERTa folder DebertaV2Tokenizer), if it has any.
StatusOr<std::optional<TokenizerCard>> SlowTokenizerFiles(const std::string& dir,
                                                          ModelFamily family) {
  TokenizerCard card;
  const std::string tokenizer_config = dir + "/tokenizer_config.json";
  if (IsFile(dir + "/vocab.txt")) {
    card.kind = TokenizerKind::kWordPiece;
    card.file = "vocab.txt";
    if (IsFile(tokenizer_config)) {
      ASSIGN_OR_RETURN(const TokenizerConfig read, ReadTokenizerConfig(tokenizer_config));
      card.lower_case = read.do_lower_case;
      card.strip_accents = read.strip_accents;
      // What BertTokenizer reads beside vocab.txt and encoderd does not
      // reproduce: the folder then takes token ids only (LoadModelTokenizer).
      if (read.tokenize_chinese_chars == false) {
        return Unimplemented(tokenizer_config +
                             ": tokenize_chinese_chars = false (CJK characters left inside "
                             "words) is not supported");
      }
      if (read.tokenizer_class == "BertJapaneseTokenizer") {
        return Unimplemented(tokenizer_config +
                             ": tokenizer_class BertJapaneseTokenizer (MeCab or character word "
                             "splitting) is not supported");
      }
    }
    return std::optional<TokenizerCard>(card);
  }
  if (family == ModelFamily::kDeberta && IsFile(dir + "/spm.model")) {
    // DebertaV2Tokenizer: [CLS] and [SEP] around the pieces, the model's own
    // ids; lower-casing and punctuation splitting before sentencepiece are
    // not reproduced.
    if (IsFile(tokenizer_config)) {
      ASSIGN_OR_RETURN(const TokenizerConfig read, ReadTokenizerConfig(tokenizer_config));
      for (const auto& [key, value] : {std::pair{"do_lower_case", read.do_lower_case},
                                       std::pair{"split_by_punct", read.split_by_punct}}) {
        if (value.value_or(false)) {
          return Unimplemented(tokenizer_config + ": " + key +
                               " = true (DebertaV2Tokenizer's step before sentencepiece) is "
                               "not supported");
        }
      }
    }
    card.kind = TokenizerKind::kSentencePiece;
    card.file = "spm.model";
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
      ASSIGN_OR_RETURN(const TokenizerConfig read, ReadTokenizerConfig(tokenizer_config));
      card.add_prefix_space = read.add_prefix_space;
    }
    return std::optional<TokenizerCard>(card);
  }
  return std::optional<TokenizerCard>();
}

// A tokenizer class's name without "Fast" at its end (BertTokenizerFast:
// BertTokenizer).
std::string SlowClassName(std::string name) {
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Fast") == 0)
    name.resize(name.size() - 4);
  return name;
}

// Whether a folder's sentencepiece.bpe.model is read by CamembertTokenizer:
// as AutoTokenizer picks the class, tokenizer_config.json's tokenizer_class
// where it names CamembertTokenizer or XLMRobertaTokenizer (or their fast
// classes), else the model type's.
StatusOr<bool> CamembertClassFolder(const std::string& dir, ModelFamily family) {
  const std::string path = dir + "/tokenizer_config.json";
  if (IsFile(path)) {
    ASSIGN_OR_RETURN(const TokenizerConfig read, ReadTokenizerConfig(path));
    if (read.tokenizer_class) {
      const std::string name = SlowClassName(*read.tokenizer_class);
      if (name == "CamembertTokenizer") return true;
      if (name == "XLMRobertaTokenizer") return false;
    }
  }
  return family == ModelFamily::kCamembert;
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
      {"strip_accents", card.strip_accents.has_value(), TokenizerKind::kWordPiece},
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

// The fast tokenizer classes of transformers that rebuild part of a
// tokenizer.json's pipeline from their arguments.
enum class FastClass {
  kBertLike,     // BertTokenizerFast and its copies: BERT's normalizer
  kRobertaLike,  // RobertaTokenizerFast and its copies: ByteLevel's add_prefix_space
  kOther,        // the generic PreTrainedTokenizerFast, XLM-R's, any other: the file as it is
};

// The class transformers' AutoTokenizer loads a folder's tokenizer.json
// with: tokenizer_config.json's tokenizer_class, else the model type's.
FastClass FastClassOf(const std::optional<std::string>& tokenizer_class, ModelFamily family) {
  if (!tokenizer_class) {
    switch (family) {
      case ModelFamily::kBert:
      case ModelFamily::kDistilbert:
      case ModelFamily::kElectra:
      case ModelFamily::kMpnet:
        return FastClass::kBertLike;
      case ModelFamily::kRoberta:
      case ModelFamily::kData2VecText:  // AutoTokenizer: RobertaTokenizerFast
      case ModelFamily::kRobertaPreLayerNorm:
        return FastClass::kRobertaLike;
      default:
        return FastClass::kOther;
    }
  }
  const std::string name = SlowClassName(*tokenizer_class);
  for (const char* bert : {"BertTokenizer", "DistilBertTokenizer", "ElectraTokenizer",
                           "MobileBertTokenizer", "SqueezeBertTokenizer", "MPNetTokenizer"}) {
    if (name == bert) return FastClass::kBertLike;
  }
  for (const char* roberta : {"RobertaTokenizer", "LongformerTokenizer", "BartTokenizer"}) {
    if (name == roberta) return FastClass::kRobertaLike;
  }
  return FastClass::kOther;
}

// A tokenizer.json. Found by name, it is read as transformers' fast
// tokenizer class of the folder (FastClassOf) reads it: BertTokenizerFast
// and its kin set BERT's normalizer from tokenizer_config.json's
// do_lower_case (default true), strip_accents (default: following it) and
// tokenize_chinese_chars (default true); RobertaTokenizerFast and its kin
// set ByteLevel's add_prefix_space from its add_prefix_space (default
// false); other classes take the file as it is.
StatusOr<HfJsonTokenizer> TokenizerJson(const std::string& dir, const std::string& path,
                                        bool found_by_name, const EncoderConfig& config) {
  const ModelFamily family = config.family;
  HfJsonOverrides overrides;
  overrides.added_id_limit = config.vocab_size;
  const std::string tokenizer_config = dir + "/tokenizer_config.json";
  if (found_by_name) {
    TokenizerConfig read;
    if (IsFile(tokenizer_config)) {
      ASSIGN_OR_RETURN(read, ReadTokenizerConfig(tokenizer_config));
    }
    switch (FastClassOf(read.tokenizer_class, family)) {
      case FastClass::kBertLike:
        overrides.lower_case = read.do_lower_case.value_or(true);
        overrides.strip_accents = read.strip_accents;
        overrides.handle_chinese_chars = read.tokenize_chinese_chars.value_or(true);
        break;
      case FastClass::kRobertaLike:
        overrides.add_prefix_space = read.add_prefix_space.value_or(false);
        break;
      case FastClass::kOther:
        break;
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

// The special tokens transformers' fast class matches in a text when it
// converts a folder's vocab.txt or vocab.json + merges.txt: BERT's, or
// RoBERTa's and MPNet's (`mask_lstrip`: their "<mask>" takes the whitespace
// before it). Each where the vocabulary has it.
std::vector<AddedToken> FastClassSpecials(bool mask_lstrip,
                                          std::initializer_list<const char*> names) {
  std::vector<AddedToken> tokens;
  for (const char* name : names) tokens.push_back(AddedToken{name});
  if (mask_lstrip) {
    AddedToken mask{"<mask>"};
    mask.lstrip = true;
    tokens.push_back(mask);
  }
  return tokens;
}

}  // namespace

StatusOr<ModelTokenizer> LoadModelTokenizer(const std::string& dir,
                                            const std::optional<TokenizerCard>& card_in,
                                            const EncoderConfig& config) {
  std::optional<TokenizerCard> card = card_in;
  ModelTokenizer result;
  bool found_by_name = false;  // the slow tokenizer's files of a Hugging Face folder
  if (!card && IsHuggingFaceFamily(config.family)) {
    // As transformers' AutoTokenizer: the folder's tokenizer.json (its fast
    // tokenizer) where it has one; the files of its slow tokenizer where it
    // has none, or one whose pipeline encoderd does not reproduce.
    const std::string json_path = dir + "/tokenizer.json";
    if (IsFile(json_path)) {
      StatusOr<HfJsonTokenizer> t = TokenizerJson(dir, json_path, /*found_by_name=*/true, config);
      if (t.ok()) {
        result.path = json_path;
        result.tokenizer = std::move(t->tokenizer);
        result.pairs = t->pairs;
        return FittingEmbedding(std::move(result), config);
      }
      if (t.status().code() != StatusCode::kUnimplemented) return t.status();
      result.note = t.status().message();
    }
    StatusOr<std::optional<TokenizerCard>> slow = SlowTokenizerFiles(dir, config.family);
    if (!slow.ok() && slow.status().code() == StatusCode::kUnimplemented) {
      result.note += (result.note.empty() ? "" : "; ") + slow.status().message();
      return result;
    }
    ASSIGN_OR_RETURN(card, std::move(slow));
    found_by_name = card.has_value();
  }
  if (!card) return result;
  RETURN_IF_ERROR(CheckCardKeys(*card));
  // The added tokens the folder declares beside the files found by name,
  // which AutoTokenizer's fast class adds; each before the class's own
  // special token of the same content, which it replaces where encoderd
  // matches it.
  std::vector<AddedToken> declared;
  std::string declared_in;
  if (found_by_name) {
    ASSIGN_OR_RETURN(declared, ReadDeclaredAddedTokens(dir, &declared_in));
  }
  const auto with_declared = [&declared](std::vector<AddedToken> specials) {
    std::vector<AddedToken> tokens = declared;
    tokens.insert(tokens.end(), specials.begin(), specials.end());
    return tokens;
  };
  result.path = dir + "/" + card->file;
  // An MPNet model's vocab.txt is read by MPNetTokenizer: <s> and </s>
  // around a text, RoBERTa's pair template.
  const bool mpnet_vocab =
      config.family == ModelFamily::kMpnet && card->kind == TokenizerKind::kWordPiece;
  // A DeBERTa folder's spm.model, found by name or named by a card that
  // sets no ids of its own: the model's ids as they are (until 2026-12-05 a
  // card's got fairseq's offset and specials).
  const bool deberta_spm = config.family == ModelFamily::kDeberta &&
                           card->kind == TokenizerKind::kSentencePiece && !card->id_offset &&
                           !card->bos && !card->eos && !card->pad && !card->unk;
  // A CamemBERT sentencepiece model, found by name or named by a card that
  // sets no ids of its own: CamembertTokenizer's ids, not
  // XLMRobertaTokenizer's (before 2026-12-07 the model was refused). Found
  // by name, the class AutoTokenizer picks decides; named by a card, the
  // family.
  bool camembert_ids = config.family == ModelFamily::kCamembert;
  if (found_by_name && card->file == "sentencepiece.bpe.model") {
    ASSIGN_OR_RETURN(camembert_ids, CamembertClassFolder(dir, config.family));
  }
  const bool camembert_spm = camembert_ids && card->kind == TokenizerKind::kSentencePiece &&
                             !card->id_offset && !card->bos && !card->eos && !card->pad &&
                             !card->unk;
  // A folder's files found by name that encoderd does not reproduce: token
  // ids only, saying why.
  const auto token_ids_only = [&result](const std::string& why) {
    result.note += (result.note.empty() ? "" : "; ") + why;
    result.path.clear();
    return std::move(result);
  };
  if (camembert_spm && StartsUnkBosEos(result.path) == false) {
    // CamembertTokenizer's <s> and </s> are the model's own pieces (plus
    // its offset), 5 and 6 only where they are its pieces 1 and 2.
    const std::string why = result.path +
                            ": a CamemBERT sentencepiece model whose first pieces are not <unk> "
                            "<s> </s> is not read (CamembertTokenizer's ids would differ)";
    if (found_by_name) return token_ids_only(why);
    return InvalidArgument(why);
  }
  StatusOr<std::unique_ptr<Tokenizer>> created = std::unique_ptr<Tokenizer>();
  if (card->kind == TokenizerKind::kWordPiece) {
    WordPieceOptions options;
    options.added_id_limit = config.vocab_size;
    options.lower_case = card->lower_case;  // unset: the vocabulary's
    options.strip_accents = card->strip_accents;
    if (mpnet_vocab) options.specials = WordPieceSpecials::Mpnet();
    // AutoTokenizer gives a folder without tokenizer.json the fast class,
    // converted from vocab.txt: the tokenizers library's rules (until
    // 2026-12-05 the slow BertTokenizer's). A card's vocab.txt keeps them.
    if (found_by_name) {
      options.rules = BertRules::kTokenizers;
      options.added_tokens = with_declared(
          mpnet_vocab ? FastClassSpecials(true, {"<s>", "<pad>", "</s>", "[UNK]"})
                      : FastClassSpecials(false, {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}));
    }
    created = CreateWordPieceTokenizer(result.path, options);
  } else if (card->kind == TokenizerKind::kTokenizerJson) {
    ASSIGN_OR_RETURN(HfJsonTokenizer t,
                     TokenizerJson(dir, result.path, /*found_by_name=*/false, config));
    created = std::move(t.tokenizer);
    result.pairs = t.pairs;
  } else if (card->kind == TokenizerKind::kByteLevelBpe) {
    ByteBpeOptions options;
    options.added_id_limit = config.vocab_size;
    options.add_prefix_space = card->add_prefix_space.value_or(false);
    if (!card->fairseq_dict.empty()) options.fairseq_dict = dir + "/" + card->fairseq_dict;
    if (found_by_name) {
      options.added_tokens =
          with_declared(FastClassSpecials(true, {"<s>", "<pad>", "</s>", "<unk>"}));
    }
    const std::string merges =
        dir + "/" + (card->merges_file.empty() ? "merges.txt" : card->merges_file);
    created = CreateByteBpeTokenizer(result.path, merges, options);
  } else {
    SentencePieceOptions options;
    if (camembert_ids) {
      // CamembertTokenizer's ids, each of which a card's key replaces:
      // <s>NOTUSED <pad> </s>NOTUSED <unk> <unk>NOTUSED, then the model's
      // pieces after its <unk> (<s> 5, </s> 6), <mask> last.
      options.id_offset = CamembertConverterLayout().offset;
      options.special_tokens = CamembertConverterLayout().ids;
    }
    options.id_offset = card->id_offset.value_or(options.id_offset);
    options.special_tokens.bos = card->bos.value_or(options.special_tokens.bos);
    options.special_tokens.eos = card->eos.value_or(options.special_tokens.eos);
    options.special_tokens.pad = card->pad.value_or(static_cast<int32_t>(config.pad_token_id));
    options.special_tokens.unk = card->unk.value_or(options.special_tokens.unk);
    options.vocab_size = config.vocab_size;
    if (deberta_spm) {
      options.id_offset = 0;
      options.pieces = {"[CLS]", "[SEP]", "[PAD]", "[UNK]"};
      options.special_ids_from_model = true;
    } else if (camembert_spm && found_by_name) {
      // CamembertTokenizer's specials and, for a Unigram model, the fast
      // class CamembertConverter makes (XLM-R's pipeline over its vocabulary).
      options.added_tokens = CamembertClassSpecials();
      options.fast_class = true;
    } else if (found_by_name) {
      // XLMRobertaTokenizer's specials, <mask> after the model's pieces
      // (until 2026-12-05 tokenized as text), and a Unigram model (XLM-R's)
      // read as the fast class AutoTokenizer converts it into: its map
      // applied a grapheme cluster at a time, the converter's spaces (until
      // 2026-12-06 sentencepiece's normalization and the model's flags,
      // the slow class's), each word split by the library's Unigram over
      // the converter's vocabulary (until 2026-12-06 by sentencepiece).
      options.added_tokens = XlmrClassSpecials();
      options.fast_class = true;
    }
    // Other tokens a sentencepiece folder declares are not reproduced.
    std::vector<std::string> own =
        deberta_spm ? std::vector<std::string>{"[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"}
                    : std::vector<std::string>{"<s>", "<pad>", "</s>", "<unk>", "<mask>"};
    if (camembert_spm) {
      for (const AddedToken& token : CamembertClassSpecials()) own.push_back(token.content);
    }
    for (const AddedToken& token : declared) {
      if (std::find(own.begin(), own.end(), token.content) == own.end()) {
        created =
            Unimplemented(dir + ": the added token \"" + token.content.substr(0, 64) + "\" (id " +
                          std::to_string(token.id) + ") is not reproduced beside " + card->file);
        break;
      }
    }
    if (created.ok()) created = CreateSentencePieceTokenizer(result.path, options);
  }
  // Here only an added token the folder declares is not reproduced.
  if (found_by_name && created.status().code() == StatusCode::kUnimplemented) {
    return token_ids_only(
        created.status().message() +
        (declared_in.empty() ? "" : " (the added tokens of " + declared_in + ")"));
  }
  ASSIGN_OR_RETURN(result.tokenizer, std::move(created));
  // Found by name in a Hugging Face folder, the file is read as transformers
  // reads it: vocab.txt by BertTokenizer (MPNetTokenizer in an MPNet
  // folder), sentencepiece.bpe.model by XLMRobertaTokenizer (CamembertTokenizer
  // in a CamemBERT folder), spm.model by
  // DebertaV2Tokenizer, vocab.json + merges.txt by RobertaTokenizer, and each
  // joins pairs its own way whatever the model. Named by a card, they follow
  // the family (a tokenizer.json's template is its own either way).
  if (!card_in) {
    result.pairs = (card->kind == TokenizerKind::kWordPiece && !mpnet_vocab) || deberta_spm
                       ? PairTemplate::kBert
                       : PairTemplate::kRoberta;
  }
  return FittingEmbedding(std::move(result), config);
}

}  // namespace encoderd
