#include "engine/text/hf_tokenizer_json.h"

#include <algorithm>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "core/file.h"
#include "engine/text/byte_bpe_tokenizer.h"
#include "engine/text/json_depth.h"
#include "engine/text/wordpiece_tokenizer.h"

namespace encoderd {
namespace {

using nlohmann::json;

// A value as the file writes it, shortened for a message.
std::string Shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// Reads one part of the file, naming it in every refusal.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  Status Refuse(const std::string& what) const { return InvalidArgument(source_ + ": " + what); }
  // A well-formed file whose pipeline encoderd does not reproduce.
  Status Unsupported(const std::string& what) const {
    return Unimplemented(source_ + ": " + what +
                         "; encoderd reads BERT's WordPiece and RoBERTa's byte-level BPE "
                         "pipelines from a tokenizer.json");
  }

  // obj[key] when present and not null; nullptr otherwise.
  static const json* Find(const json& obj, const char* key) {
    const auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }

  // A boolean setting, `fallback` when absent or null.
  StatusOr<bool> Flag(const json& obj, const std::string& where, const char* key,
                      bool fallback) const {
    const json* v = Find(obj, key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Refuse(where + "." + key + " is " + Shown(*v) + ", not a boolean");
    return v->get<bool>();
  }

  // A string setting, "" when absent or null.
  StatusOr<std::string> Text(const json& obj, const std::string& where, const char* key) const {
    const json* v = Find(obj, key);
    if (v == nullptr) return std::string();
    if (!v->is_string()) return Refuse(where + "." + key + " is " + Shown(*v) + ", not a string");
    return v->get<std::string>();
  }

  // obj.type, or "" for a null or absent part.
  StatusOr<std::string> Type(const json& root, const char* part) const {
    const json* obj = Find(root, part);
    if (obj == nullptr) return std::string();
    if (!obj->is_object()) return Refuse(std::string(part) + " is not an object");
    return Text(*obj, part, "type");
  }

  // The post-processor as the special tokens around one text and a pair:
  // BertProcessing / RobertaProcessing {cls: [name, id], sep: [name, id]},
  // or TemplateProcessing's single and pair written as the same sequence of
  // tokens ("[CLS]", "$A", "[SEP]", "$B:1", ...). `vocab` checks the ids.
  StatusOr<std::pair<std::string, std::string>> Templates(const json& root,
                                                          const json& vocab) const {
    const json* post = Find(root, "post_processor");
    if (post == nullptr || !post->is_object()) {
      return Unsupported(
          "the file has no post_processor (no [CLS]/<s> and [SEP]/</s> around a text)");
    }
    ASSIGN_OR_RETURN(const std::string type, Text(*post, "post_processor", "type"));
    if (type == "BertProcessing" || type == "RobertaProcessing") {
      std::string names[2];
      const char* keys[2] = {"cls", "sep"};
      for (int i = 0; i < 2; ++i) {
        const json* v = Find(*post, keys[i]);
        if (v == nullptr || !v->is_array() || v->size() != 2 || !(*v)[0].is_string() ||
            !(*v)[1].is_number_integer()) {
          return Refuse("post_processor." + std::string(keys[i]) + " is not [token, id]");
        }
        names[i] = (*v)[0].get<std::string>();
        RETURN_IF_ERROR(CheckId(vocab, names[i], (*v)[1], "post_processor"));
      }
      const std::string& cls = names[0];
      const std::string& sep = names[1];
      if (type == "BertProcessing") {
        return std::make_pair(cls + " $A " + sep, cls + " $A " + sep + " $B:1 " + sep + ":1");
      }
      return std::make_pair(cls + " $A " + sep, cls + " $A " + sep + " " + sep + " $B " + sep);
    }
    if (type == "TemplateProcessing") {
      std::string single, pair;
      RETURN_IF_ERROR(Template(*post, "single", vocab, &single));
      RETURN_IF_ERROR(Template(*post, "pair", vocab, &pair));
      return std::make_pair(single, pair);
    }
    return Unsupported("post_processor.type is \"" + type + "\"");
  }

 private:
  // One of TemplateProcessing's sequences, written "[CLS] $A [SEP] $B:1
  // [SEP]:1" (a type id other than 0 after a colon); each special token's
  // ids must be [its id in the vocabulary].
  Status Template(const json& post, const char* key, const json& vocab, std::string* out) const {
    const std::string where = std::string("post_processor.") + key;
    const json* items = Find(post, key);
    if (items == nullptr || !items->is_array()) return Refuse(where + " is not a list");
    const json* specials = Find(post, "special_tokens");
    for (const json& item : *items) {
      const bool special = item.is_object() && item.contains("SpecialToken");
      const bool sequence = item.is_object() && item.contains("Sequence");
      if (!special && !sequence) return Refuse(where + " has " + Shown(item));
      const json& body = item.at(special ? "SpecialToken" : "Sequence");
      if (!body.is_object() || !body.contains("id") || !body["id"].is_string()) {
        return Refuse(where + " has " + Shown(item));
      }
      const std::string id = body["id"].get<std::string>();
      const json type_id = body.value("type_id", json(0));
      if (!type_id.is_number_integer()) return Refuse(where + " has " + Shown(item));
      if (special) {
        const json* entry = specials == nullptr ? nullptr : Find(*specials, id.c_str());
        if (entry == nullptr || !entry->is_object() || !entry->contains("ids") ||
            !(*entry)["ids"].is_array() || (*entry)["ids"].size() != 1) {
          return Unsupported("post_processor.special_tokens[\"" + id + "\"] is not one token");
        }
        RETURN_IF_ERROR(CheckId(vocab, id, (*entry)["ids"][0], "post_processor.special_tokens"));
      }
      if (!out->empty()) *out += ' ';
      *out += special ? id : "$" + id;
      if (type_id.get<int64_t>() != 0) *out += ":" + std::to_string(type_id.get<int64_t>());
    }
    return Status::Ok();
  }

  // The post-processor's id for `token` is the vocabulary's. Hugging Face
  // loads a file whose special token is an added token outside model.vocab,
  // or whose post-processor gives it another id (and writes that id): a
  // pipeline encoderd does not reproduce, not a damaged file.
  Status CheckId(const json& vocab, const std::string& token, const json& id,
                 const std::string& where) const {
    if (!id.is_number_integer())
      return Refuse(where + " gives \"" + token + "\" the id " + Shown(id));
    const auto it = vocab.find(token);
    if (it == vocab.end()) {
      return Unsupported(where + " names \"" + token + "\", which model.vocab does not have");
    }
    if (*it != id) {
      return Unsupported(where + " gives \"" + token + "\" the id " + Shown(id) + ", model.vocab " +
                         Shown(*it));
    }
    return Status::Ok();
  }

  std::string source_;
};

// model.vocab (token -> id) as the token of each id 0..n-1.
StatusOr<std::vector<std::string>> TokensById(const Reader& r, const json& vocab) {
  std::vector<std::string> tokens(vocab.size());
  std::vector<bool> taken(vocab.size(), false);
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= static_cast<int64_t>(tokens.size())) {
      return r.Unsupported("model.vocab gives \"" + token.substr(0, 64) + "\" the id " + Shown(id) +
                           ": encoderd reads WordPiece ids 0 to " +
                           std::to_string(tokens.size() - 1) + ", each once");
    }
    const auto i = static_cast<size_t>(id.get<int64_t>());
    if (taken[i]) {
      return r.Refuse("model.vocab gives \"" + tokens[i].substr(0, 64) + "\" and \"" +
                      token.substr(0, 64) + "\" the same id " + std::to_string(i));
    }
    taken[i] = true;
    tokens[i] = token;
  }
  return tokens;
}

// Every added token is a special token of model.vocab with its id (none is
// matched in a text, so one that is not a vocabulary token or not special,
// which Hugging Face matches, would tokenize differently), and `required`
// are all in model.vocab.
Status CheckTokens(const Reader& r, const json& root, const json& vocab,
                   std::initializer_list<const char*> required) {
  if (const json* added = Reader::Find(root, "added_tokens")) {
    if (!added->is_array()) return r.Refuse("added_tokens is not a list");
    for (const json& a : *added) {
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string() ||
          !a.contains("id") || !a["id"].is_number_integer()) {
        return r.Refuse("added_tokens has " + Shown(a));
      }
      const std::string content = a["content"].get<std::string>();
      const auto it = vocab.find(content);
      if (it == vocab.end() || *it != a["id"]) {
        return r.Unsupported("added token \"" + content.substr(0, 64) + "\" (id " + Shown(a["id"]) +
                             ") is not model.vocab's");
      }
      if (!a.contains("special") || a["special"] != true) {
        return r.Unsupported("added token \"" + content.substr(0, 64) +
                             "\" is not special (Hugging Face matches it in the text)");
      }
    }
  }
  for (const char* token : required) {
    if (!vocab.contains(token)) {
      return r.Unsupported("model.vocab has no " + std::string(token) + " token");
    }
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<Tokenizer>> WordPiece(const Reader& r, const json& root, const json& model,
                                               const std::string& source,
                                               const HfJsonOverrides& overrides) {
  const json& vocab = model.at("vocab");
  ASSIGN_OR_RETURN(const std::string prefix, r.Text(model, "model", "continuing_subword_prefix"));
  if (prefix != "##") {
    return r.Unsupported("model.continuing_subword_prefix is \"" + prefix + "\", not \"##\"");
  }
  ASSIGN_OR_RETURN(const std::string unk, r.Text(model, "model", "unk_token"));
  if (unk != "[UNK]") return r.Unsupported("model.unk_token is \"" + unk + "\", not \"[UNK]\"");
  WordPieceOptions options;
  if (const json* max = Reader::Find(model, "max_input_chars_per_word")) {
    if (!max->is_number_integer() || max->get<int64_t>() < 1) {
      return r.Refuse("model.max_input_chars_per_word is " + Shown(*max) +
                      ", not a positive integer");
    }
    // Longer limits give the same tokens as 2^30 (no text has such a word).
    options.max_chars_per_word = std::min<int64_t>(max->get<int64_t>(), int64_t{1} << 30);
  }

  ASSIGN_OR_RETURN(const std::string normalizer, r.Type(root, "normalizer"));
  if (normalizer != "BertNormalizer") {
    return r.Unsupported("a WordPiece model's normalizer is \"" + normalizer +
                         "\", not BertNormalizer");
  }
  const json& norm = root.at("normalizer");
  ASSIGN_OR_RETURN(const bool clean_text, r.Flag(norm, "normalizer", "clean_text", true));
  ASSIGN_OR_RETURN(bool chinese, r.Flag(norm, "normalizer", "handle_chinese_chars", true));
  ASSIGN_OR_RETURN(bool lowercase, r.Flag(norm, "normalizer", "lowercase", true));
  // strip_accents null follows lowercase, as in BertNormalizer.
  ASSIGN_OR_RETURN(bool strip_accents, r.Flag(norm, "normalizer", "strip_accents", lowercase));
  if (overrides.lower_case) {
    // transformers' BertTokenizerFast leaves the normalizer with its own
    // settings (rebuilding it where the file's differ).
    lowercase = *overrides.lower_case;
    strip_accents = overrides.strip_accents.value_or(lowercase);
    chinese = overrides.handle_chinese_chars;
  }
  if (!clean_text || !chinese) {
    return r.Unsupported(
        "normalizer.clean_text and normalizer.handle_chinese_chars are not both "
        "true");
  }
  if (strip_accents != lowercase) {
    return r.Unsupported("normalizer.strip_accents differs from normalizer.lowercase");
  }
  options.lower_case = lowercase;

  ASSIGN_OR_RETURN(const std::string pre, r.Type(root, "pre_tokenizer"));
  if (pre != "BertPreTokenizer") {
    return r.Unsupported("a WordPiece model's pre_tokenizer is \"" + pre +
                         "\", not BertPreTokenizer");
  }
  ASSIGN_OR_RETURN(const auto templates, r.Templates(root, vocab));
  if (templates.first != "[CLS] $A [SEP]" || templates.second != "[CLS] $A [SEP] $B:1 [SEP]:1") {
    return r.Unsupported("the post_processor writes \"" + templates.first + "\" and \"" +
                         templates.second +
                         "\", not BERT's \"[CLS] $A [SEP]\" and \"[CLS] $A [SEP] $B:1 [SEP]:1\"");
  }
  RETURN_IF_ERROR(CheckTokens(r, root, vocab, {"[CLS]", "[SEP]", "[PAD]", "[UNK]"}));
  ASSIGN_OR_RETURN(std::vector<std::string> tokens, TokensById(r, vocab));
  return CreateWordPieceTokenizerFromTokens(std::move(tokens), options, source);
}

StatusOr<std::unique_ptr<Tokenizer>> ByteLevelBpe(const Reader& r, const json& root,
                                                  const json& model, const std::string& source,
                                                  const HfJsonOverrides& overrides) {
  if (const json* dropout = Reader::Find(model, "dropout")) {
    return r.Unsupported("model.dropout is " + Shown(*dropout));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    ASSIGN_OR_RETURN(const std::string v, r.Text(model, "model", key));
    if (!v.empty()) return r.Unsupported("model." + std::string(key) + " is \"" + v + "\"");
  }
  for (const char* key : {"byte_fallback", "ignore_merges"}) {
    ASSIGN_OR_RETURN(const bool v, r.Flag(model, "model", key, false));
    if (v) return r.Unsupported("model." + std::string(key) + " is true");
  }
  ASSIGN_OR_RETURN(const std::string normalizer, r.Type(root, "normalizer"));
  if (!normalizer.empty()) {
    return r.Unsupported("a BPE model's normalizer is \"" + normalizer + "\", not null");
  }
  ASSIGN_OR_RETURN(const std::string pre, r.Type(root, "pre_tokenizer"));
  if (pre != "ByteLevel") {
    return r.Unsupported("a BPE model's pre_tokenizer is \"" + pre + "\", not ByteLevel");
  }
  const json& pre_tokenizer = root.at("pre_tokenizer");
  ASSIGN_OR_RETURN(const bool use_regex, r.Flag(pre_tokenizer, "pre_tokenizer", "use_regex", true));
  if (!use_regex) return r.Unsupported("pre_tokenizer.use_regex is false");
  ByteBpeOptions options;
  // Hugging Face's ByteLevel requires the field (RoBERTa's files say false);
  // transformers' RobertaTokenizerFast sets it from tokenizer_config.json.
  const json* prefix = Reader::Find(pre_tokenizer, "add_prefix_space");
  if (prefix == nullptr || !prefix->is_boolean()) {
    return r.Refuse("pre_tokenizer.add_prefix_space is not true or false");
  }
  options.add_prefix_space = overrides.add_prefix_space.value_or(prefix->get<bool>());

  const json& vocab = model.at("vocab");
  ASSIGN_OR_RETURN(const auto templates, r.Templates(root, vocab));
  if (templates.first != "<s> $A </s>" || templates.second != "<s> $A </s> </s> $B </s>") {
    return r.Unsupported("the post_processor writes \"" + templates.first + "\" and \"" +
                         templates.second +
                         "\", not RoBERTa's \"<s> $A </s>\" and \"<s> $A </s> </s> $B </s>\"");
  }
  // The merges one pair a line, as merges.txt writes them: "left right"
  // strings, or [left, right] lists (newer files). Byte-level tokens never
  // hold a space (GPT-2 spells it "Ġ").
  const json* merges = Reader::Find(model, "merges");
  if (merges == nullptr || !merges->is_array()) return r.Refuse("model.merges is not a list");
  std::string lines;
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    std::string left, right;
    if (m.is_string()) {
      const std::string pair = m.get<std::string>();
      const size_t space = pair.find(' ');
      if (space != std::string::npos) {
        left = pair.substr(0, space);
        right = pair.substr(space + 1);
      }
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    }
    if (left.empty() || right.empty()) {
      return r.Refuse("model.merges entry " + std::to_string(i + 1) + " is " + Shown(m) +
                      ", not two tokens");
    }
    if (left.find(' ') != std::string::npos || right.find(' ') != std::string::npos) {
      return r.Unsupported("model.merges entry " + std::to_string(i + 1) + " is " + Shown(m) +
                           ": a byte-level token holds no space");
    }
    lines += left + ' ' + right + '\n';
  }
  RETURN_IF_ERROR(CheckTokens(r, root, vocab, {"<s>", "</s>", "<pad>", "<unk>"}));
  for (int b = 0; b < 256; ++b) {
    const std::string spelling = ByteLevelSpelling(std::string(1, static_cast<char>(b)));
    if (!vocab.contains(spelling)) {
      return r.Unsupported("model.vocab has no token for the byte " + std::to_string(b) + " (\"" +
                           spelling + "\")");
    }
  }
  return CreateByteBpeTokenizerFromTokenizerJson(vocab.dump(), lines, options, source);
}

}  // namespace

StatusOr<HfJsonTokenizer> CreateTokenizerFromHfJsonData(std::string_view text,
                                                        const std::string& source,
                                                        const HfJsonOverrides& overrides) {
  const Reader r(source);
  if (!JsonDepthAtMost(text)) {
    return r.Refuse("nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  const json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return r.Refuse("not valid JSON");
  if (!root.is_object()) return r.Refuse("not a JSON object");
  const json* model = Reader::Find(root, "model");
  if (model == nullptr || !model->is_object()) return r.Refuse("no model object");
  ASSIGN_OR_RETURN(const std::string type, r.Text(*model, "model", "type"));
  const json* vocab = Reader::Find(*model, "vocab");
  if ((type == "WordPiece" || type == "BPE") &&
      (vocab == nullptr || !vocab->is_object() || vocab->empty())) {
    return r.Refuse("model.vocab is not a non-empty object of token -> id");
  }
  HfJsonTokenizer result;
  if (type == "WordPiece") {
    ASSIGN_OR_RETURN(result.tokenizer, WordPiece(r, root, *model, source, overrides));
    result.pairs = PairTemplate::kBert;
    return result;
  }
  if (type == "BPE") {
    ASSIGN_OR_RETURN(result.tokenizer, ByteLevelBpe(r, root, *model, source, overrides));
    result.pairs = PairTemplate::kRoberta;
    return result;
  }
  if (type == "Unigram") {
    return r.Unsupported(
        "model.type is Unigram (SentencePiece's); a folder with sentencepiece.bpe.model loads "
        "that instead");
  }
  return r.Unsupported("model.type is \"" + type + "\"");
}

StatusOr<HfJsonTokenizer> CreateTokenizerFromHfJson(const std::string& path,
                                                    const HfJsonOverrides& overrides) {
  ASSIGN_OR_RETURN(std::string data, ReadWholeFile(path, "tokenizer.json"));
  return CreateTokenizerFromHfJsonData(data, path, overrides);
}

}  // namespace encoderd
