#include "engine/text/hf_tokenizer_json.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "core/file.h"
#include "core/json_depth.h"
#include "engine/text/byte_bpe_tokenizer.h"
#include "engine/text/sentencepiece_tokenizer.h"
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
                         "; encoderd reads BERT's WordPiece, RoBERTa's byte-level BPE and "
                         "XLM-R's (and CamemBERT's) Unigram pipelines from a tokenizer.json");
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

  // The post-processor writes `single` and `pair` (Templates), `whose` pipeline's.
  Status ExpectTemplates(const json& root, const json& vocab, const std::string& single,
                         const std::string& pair, const std::string& whose) const {
    ASSIGN_OR_RETURN(const auto templates, Templates(root, vocab));
    if (templates.first == single && templates.second == pair) return Status::Ok();
    return Unsupported("the post_processor writes \"" + templates.first + "\" and \"" +
                       templates.second + "\", not " + whose + "'s \"" + single + "\" and \"" +
                       pair + "\"");
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

// The file's added tokens, in its order, with their flags (the tokenizer
// resolves them: ResolveAddedTokens), once model.vocab is known to have
// `required`.
StatusOr<std::vector<AddedToken>> DeclaredTokens(const Reader& r, const json& root,
                                                 const json& vocab,
                                                 std::initializer_list<const char*> required) {
  std::vector<AddedToken> declared;
  if (const json* added = Reader::Find(root, "added_tokens")) {
    if (!added->is_array()) return r.Refuse("added_tokens is not a list");
    for (const json& a : *added) {
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string() ||
          !a.contains("id") || !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0 ||
          a["id"].get<int64_t>() >= (int64_t{1} << 30)) {
        return r.Refuse("added_tokens has " + Shown(a));
      }
      AddedToken token{a["content"].get<std::string>(), a["id"].get<int32_t>()};
      ASSIGN_OR_RETURN(token.lstrip, r.Flag(a, "added_tokens", "lstrip", false));
      ASSIGN_OR_RETURN(token.rstrip, r.Flag(a, "added_tokens", "rstrip", false));
      ASSIGN_OR_RETURN(token.single_word, r.Flag(a, "added_tokens", "single_word", false));
      ASSIGN_OR_RETURN(token.normalized, r.Flag(a, "added_tokens", "normalized", true));
      ASSIGN_OR_RETURN(token.special, r.Flag(a, "added_tokens", "special", false));
      declared.push_back(std::move(token));
    }
  }
  for (const char* token : required) {
    if (!vocab.contains(token)) {
      return r.Unsupported("model.vocab has no " + std::string(token) + " token");
    }
  }
  return declared;
}

// A WordPiece pipeline: BERT's, or MPNet's (its converter writes <s> and
// </s> around a text and RoBERTa's pair template, as a RobertaProcessing or
// a TemplateProcessing with type ids on the second text; MPNet reads none).
// Sets *pairs to the template's join.
StatusOr<std::unique_ptr<Tokenizer>> WordPiece(const Reader& r, const json& root, const json& model,
                                               const std::string& source,
                                               const HfJsonOverrides& overrides,
                                               PairTemplate* pairs) {
  const json& vocab = model.at("vocab");
  ASSIGN_OR_RETURN(const std::string prefix, r.Text(model, "model", "continuing_subword_prefix"));
  if (prefix != "##") {
    return r.Unsupported("model.continuing_subword_prefix is \"" + prefix + "\", not \"##\"");
  }
  ASSIGN_OR_RETURN(const std::string unk, r.Text(model, "model", "unk_token"));
  if (unk != "[UNK]") return r.Unsupported("model.unk_token is \"" + unk + "\", not \"[UNK]\"");
  WordPieceOptions options;
  options.added_id_limit = overrides.added_id_limit;
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
  options.lower_case = lowercase;
  options.strip_accents = strip_accents;
  options.rules = BertRules::kTokenizers;

  ASSIGN_OR_RETURN(const std::string pre, r.Type(root, "pre_tokenizer"));
  if (pre != "BertPreTokenizer") {
    return r.Unsupported("a WordPiece model's pre_tokenizer is \"" + pre +
                         "\", not BertPreTokenizer");
  }
  ASSIGN_OR_RETURN(const auto templates, r.Templates(root, vocab));
  const bool mpnet =
      templates.first == "<s> $A </s>" && (templates.second == "<s> $A </s> </s> $B </s>" ||
                                           templates.second == "<s> $A </s> </s> $B:1 </s>:1");
  if (mpnet) {
    options.specials = WordPieceSpecials::Mpnet();
    *pairs = PairTemplate::kRoberta;
  } else {
    RETURN_IF_ERROR(
        r.ExpectTemplates(root, vocab, "[CLS] $A [SEP]", "[CLS] $A [SEP] $B:1 [SEP]:1", "BERT"));
    *pairs = PairTemplate::kBert;
  }
  const WordPieceSpecials& names = options.specials;
  ASSIGN_OR_RETURN(options.added_tokens, DeclaredTokens(r, root, vocab,
                                                        {names.cls.c_str(), names.sep.c_str(),
                                                         names.pad.c_str(), names.unk.c_str()}));
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
  options.added_id_limit = overrides.added_id_limit;
  // Hugging Face's ByteLevel requires the field (RoBERTa's files say false);
  // transformers' RobertaTokenizerFast sets it from tokenizer_config.json.
  const json* prefix = Reader::Find(pre_tokenizer, "add_prefix_space");
  if (prefix == nullptr || !prefix->is_boolean()) {
    return r.Refuse("pre_tokenizer.add_prefix_space is not true or false");
  }
  options.add_prefix_space = overrides.add_prefix_space.value_or(prefix->get<bool>());

  const json& vocab = model.at("vocab");
  RETURN_IF_ERROR(
      r.ExpectTemplates(root, vocab, "<s> $A </s>", "<s> $A </s> </s> $B </s>", "RoBERTa"));
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
  ASSIGN_OR_RETURN(options.added_tokens,
                   DeclaredTokens(r, root, vocab, {"<s>", "</s>", "<pad>", "<unk>"}));
  for (int b = 0; b < 256; ++b) {
    const std::string spelling = ByteLevelSpelling(std::string(1, static_cast<char>(b)));
    if (!vocab.contains(spelling)) {
      return r.Unsupported("model.vocab has no token for the byte " + std::to_string(b) + " (\"" +
                           spelling + "\")");
    }
  }
  return CreateByteBpeTokenizerFromTokenizerJson(vocab.dump(), lines, options, source);
}

// Standard base64 (RFC 4648, padded or not) as bytes; none for anything else.
std::optional<std::string> DecodeBase64(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t bits = 0;
  int count = 0;
  for (const char c : text) {
    int v;
    if (c >= 'A' && c <= 'Z') {
      v = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      v = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      v = c - '0' + 52;
    } else if (c == '+') {
      v = 62;
    } else if (c == '/') {
      v = 63;
    } else {
      return std::nullopt;
    }
    bits = (bits << 6) | static_cast<uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xff));
    }
  }
  if (count >= 6) return std::nullopt;  // a lone last character
  return out;
}

// Protocol-buffer wire format, as much of it as a sentencepiece ModelProto
// needs.
void Varint(uint64_t v, std::string* out) {
  for (; v >= 0x80; v >>= 7) out->push_back(static_cast<char>((v & 0x7f) | 0x80));
  out->push_back(static_cast<char>(v));
}
void IntField(int field, int64_t v, std::string* out) {
  Varint(static_cast<uint64_t>(field) << 3, out);
  Varint(static_cast<uint64_t>(v), out);
}
void BytesField(int field, std::string_view bytes, std::string* out) {
  Varint(static_cast<uint64_t>(field) << 3 | 2, out);
  Varint(bytes.size(), out);
  out->append(bytes);
}
void FloatField(int field, float v, std::string* out) {
  Varint(static_cast<uint64_t>(field) << 3 | 5, out);
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(bits >> (8 * i)));
}

// XLM-R's pipeline, as transformers' XLMRobertaConverter writes it from the
// sentencepiece model: model Unigram whose vocab is fairseq's <s> <pad> </s>
// <unk> (unk_id 3), the model's pieces after its own <unk> <s> </s>, with
// their scores (where the model has a piece <mask>, it too), and <mask>
// last or not at all (or CamembertConverter's vocab, the same pipeline:
// <s>NOTUSED <pad> </s>NOTUSED <unk> <unk>NOTUSED, then the model's pieces
// after its <unk>, <s> and </s> first); normalizer Precompiled (the
// model's normalization map), alone or followed by steps that only strip
// trailing or collapse repeated spaces; pre-tokenizer Metaspace ("\u2581",
// a prefix); RoBERTa's template. Rebuilt into that sentencepiece model with
// fairseq's id offset 1 (CamemBERT's: 4) and no map of its own: a text reaches it normalized
// as the library's Precompiled normalizes it, one grapheme cluster at a
// time (PrecompiledGraphemes; sentencepiece's longest match differs, and did
// here until 2026-12-06: NFD Vietnamese, NFD Hangul, a fullwidth letter with
// an accent), its spaces as the tokenizers library runs the file
// (SentencePieceOptions::Spaces): a "\u2581" token for a text's trailing
// spaces, and without a collapsing step, for every space of a run but the
// last before a word, where XLMRobertaTokenizer, the slow class, drops them.
// With both a Strip and a collapsing step the two agree. (With a Strip
// alone, or without "\u2581" among the pieces, this follows the slow class:
// runs collapsed. Until 2026-12-05 every file followed it.) Each word is
// split by the library's Unigram over the file's vocabulary (UnigramModel:
// float64 sums, every entry a piece), not by sentencepiece, whose float32
// sums broke ties otherwise until 2026-12-06.
StatusOr<std::unique_ptr<Tokenizer>> XlmrUnigram(const Reader& r, const json& root,
                                                 const json& model, const std::string& source,
                                                 const HfJsonOverrides& overrides) {
  ASSIGN_OR_RETURN(const bool byte_fallback, r.Flag(model, "model", "byte_fallback", false));
  if (byte_fallback) return r.Unsupported("model.byte_fallback is true");
  const json* list = Reader::Find(model, "vocab");
  if (list == nullptr || !list->is_array() || list->size() < 5) {
    return r.Refuse("model.vocab is not a list of at least 5 [piece, score] pairs");
  }
  json vocab = json::object();  // piece -> id, for the template and added tokens
  for (size_t i = 0; i < list->size(); ++i) {
    const json& e = (*list)[i];
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number()) {
      return r.Refuse("model.vocab entry " + std::to_string(i) + " is " + Shown(e) +
                      ", not [piece, score]");
    }
    const std::string piece = e[0].get<std::string>();
    // A piece with a NUL would be cut short where sentencepiece reads it.
    if (piece.empty() || piece.find('\0') != std::string::npos) {
      return r.Refuse("model.vocab entry " + std::to_string(i) + " is empty or holds a NUL");
    }
    if (!std::isfinite(e[1].get<double>()) ||
        std::abs(e[1].get<double>()) > std::numeric_limits<float>::max()) {
      return r.Refuse("model.vocab entry " + std::to_string(i) + " has the score " + Shown(e[1]));
    }
    // The converters append <mask> even to a model with a piece <mask> of
    // its own, whose id the library's last entry then takes.
    const bool last_mask = piece == "<mask>" && i + 1 == list->size();
    if (vocab.contains(piece) && !last_mask) {
      return r.Refuse("model.vocab has \"" + piece.substr(0, 64) + "\" twice");
    }
    vocab[piece] = i;
  }
  // The layouts transformers' converters write (XLMRobertaConverter's,
  // CamembertConverter's): <unk> is 3 in each, an entry's id its index, and
  // the model's pieces past its <unk> <s> </s> come the layout's offset
  // past theirs in the sentencepiece model rebuilt below.
  const UnigramConverterLayout* layout = nullptr;
  std::string layouts;  // for the message
  for (const UnigramConverterLayout* l : {&XlmrConverterLayout(), &CamembertConverterLayout()}) {
    bool starts = list->size() >= l->first.size();
    std::string pieces;
    for (size_t i = 0; i < l->first.size(); ++i) {
      starts = starts && (*list)[i][0] == l->first[i].piece;
      pieces += (i ? " " : "") + std::string(l->first[i].piece);
    }
    if (starts && layout == nullptr) layout = l;
    const bool first_named = layouts.empty();
    layouts += std::string(first_named ? "" : " or ") + l->name +
               (first_named ? " Unigram layout (" : " (") + pieces + ")";
  }
  if (layout == nullptr) {
    return r.Unsupported("model.vocab starts " + Shown((*list)[0][0]) + ", not as " + layouts);
  }
  const json* unk_id = Reader::Find(model, "unk_id");
  if (unk_id == nullptr || *unk_id != 3) {
    return r.Unsupported("model.unk_id is " + (unk_id ? Shown(*unk_id) : std::string("null")) +
                         ", not 3 (the layout's <unk>)");
  }
  const bool mask = list->back()[0] == "<mask>";
  const size_t end = list->size() - (mask ? 1 : 0);
  if (vocab.contains("<mask>") && !mask) {
    return r.Unsupported("model.vocab has <mask> before its end");
  }

  // normalizer: Precompiled first, then only space handling sentencepiece
  // does itself (remove_extra_whitespaces).
  ASSIGN_OR_RETURN(const std::string normalizer, r.Type(root, "normalizer"));
  std::vector<const json*> steps;
  if (normalizer == "Sequence") {
    const json* items = Reader::Find(root.at("normalizer"), "normalizers");
    if (items == nullptr || !items->is_array())
      return r.Refuse("normalizer.normalizers is not a list");
    for (const json& step : *items) {
      if (!step.is_object()) return r.Refuse("normalizer.normalizers has " + Shown(step));
      steps.push_back(&step);
    }
  } else {
    steps.push_back(Reader::Find(root, "normalizer"));
  }
  if (steps.empty()) return r.Unsupported("a Unigram model's normalizer is an empty Sequence");
  std::shared_ptr<const PrecompiledGraphemes> graphemes;
  bool strips = false, collapses = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const json* step = steps[i];
    ASSIGN_OR_RETURN(const std::string type, step ? r.Text(*step, "normalizer", "type")
                                                  : StatusOr<std::string>(std::string()));
    const std::string where = step ? Shown(*step) : std::string("null");
    if (i == 0) {
      if (type != "Precompiled") {
        return r.Unsupported("a Unigram model's normalizer is " + where +
                             ", not Precompiled (the sentencepiece model's map)");
      }
      // Hugging Face refuses an empty or missing map too.
      ASSIGN_OR_RETURN(const std::string map, r.Text(*step, "normalizer", "precompiled_charsmap"));
      std::optional<std::string> bytes = DecodeBase64(map);
      if (!bytes || bytes->empty()) {
        return r.Refuse("normalizer.precompiled_charsmap is not a map in base64");
      }
      StatusOr<std::shared_ptr<const PrecompiledGraphemes>> made =
          PrecompiledGraphemes::Create(*bytes);
      if (!made.ok()) {
        return r.Refuse("normalizer.precompiled_charsmap is not a map encoderd reads: " +
                        made.status().message());
      }
      graphemes = std::move(made).value();
      continue;
    }
    bool spaces = false;
    if (type == "Strip") {
      ASSIGN_OR_RETURN(const bool left, r.Flag(*step, "normalizer", "strip_left", true));
      spaces = strips = !left;
    } else if (type == "Replace") {
      const json* pattern = Reader::Find(*step, "pattern");
      const json* regex =
          pattern && pattern->is_object() ? Reader::Find(*pattern, "Regex") : nullptr;
      const json* content = Reader::Find(*step, "content");
      spaces = collapses = regex != nullptr && *regex == " {2,}" && content != nullptr &&
                           (*content == " " || *content == "\u2581");
    }
    if (!spaces) {
      return r.Unsupported("a Unigram model's normalizer has " + where +
                           " (encoderd reproduces Precompiled and space handling)");
    }
  }

  ASSIGN_OR_RETURN(const std::string pre, r.Type(root, "pre_tokenizer"));
  if (pre != "Metaspace") {
    return r.Unsupported("a Unigram model's pre_tokenizer is \"" + pre + "\", not Metaspace");
  }
  const json& meta = root.at("pre_tokenizer");
  ASSIGN_OR_RETURN(const std::string replacement, r.Text(meta, "pre_tokenizer", "replacement"));
  // As the tokenizers library reads a Metaspace: prepend_scheme (default
  // "always") decides, and add_prefix_space only where it is false, which
  // means "never" (the library refuses a file that says false beside
  // another scheme). Until 2026-12-04 add_prefix_space true outranked
  // "never", and a file with neither key was refused.
  ASSIGN_OR_RETURN(std::string scheme, r.Text(meta, "pre_tokenizer", "prepend_scheme"));
  ASSIGN_OR_RETURN(const bool add_prefix, r.Flag(meta, "pre_tokenizer", "add_prefix_space", true));
  if (!add_prefix) {
    if (!scheme.empty() && scheme != "never") {
      return r.Refuse("pre_tokenizer.add_prefix_space is false and prepend_scheme is \"" + scheme +
                      "\"");
    }
    scheme = "never";
  }
  const bool prefix = scheme.empty() || scheme == "always" || scheme == "first";
  ASSIGN_OR_RETURN(const bool split, r.Flag(meta, "pre_tokenizer", "split", true));
  if (replacement != "\u2581" || !prefix || !split) {
    return r.Unsupported("pre_tokenizer is " + Shown(meta) +
                         ", not Metaspace with \"\u2581\", a prefix and splits");
  }

  RETURN_IF_ERROR(
      r.ExpectTemplates(root, vocab, "<s> $A </s>", "<s> $A </s> </s> $B </s>", "XLM-R"));
  // The added tokens, numbered as the library numbers them (past the
  // vocabulary, <mask> included, for those it lacks). Those not normalized
  // are matched as written; Precompiled's output is not searched for
  // normalized ones, so a normalized token more than a special token of the
  // vocabulary is refused (one that is stays tokenized as text).
  ASSIGN_OR_RETURN(std::vector<AddedToken> declared, DeclaredTokens(r, root, vocab, {}));
  AddedTokenRules rules;
  rules.vocab_size = static_cast<int64_t>(list->size());
  rules.normalizes = true;
  rules.id_limit = overrides.added_id_limit;
  // The library puts Metaspace's "first" prefix before the text's first
  // piece only, not before one after an added token, where sentencepiece's
  // dummy prefix would go: such files match none.
  rules.prefixes_pieces = scheme == "first";
  ASSIGN_OR_RETURN(std::vector<AddedToken> added,
                   ResolveAddedTokens(
                       std::move(declared),
                       [&vocab](const std::string& token) {
                         const auto it = vocab.find(token);
                         return it == vocab.end() ? -1 : it->get<int32_t>();
                       },
                       rules, source));
  int64_t vocab_size = rules.vocab_size;
  for (const AddedToken& token : added) vocab_size = std::max<int64_t>(vocab_size, token.id + 1);

  // How spaces become tokens: as the tokenizers library runs the file,
  // where encoderd reproduces it.
  using Spaces = SentencePieceOptions::Spaces;
  Spaces spaces = Spaces::kSentencePiece;
  if (!strips && vocab.contains("\u2581")) {
    spaces = collapses ? Spaces::kMetaspaceCollapsed : Spaces::kMetaspace;
  }

  // The sentencepiece model: its <unk> <s> </s>, then the pieces (with
  // Metaspace's spaces, unused where a "\u2581" follows their first byte:
  // its split never leaves one inside a word).
  std::string proto;
  const auto piece = [&proto](std::string_view text, float score, int type) {
    std::string p;
    BytesField(1, text, &p);
    FloatField(2, score, &p);
    IntField(3, type, &p);
    BytesField(1, p, &proto);
  };
  constexpr int kNormal = 1, kUnknown = 2, kControl = 3, kUnused = 5;
  piece("<unk>", 0.f, kUnknown);
  piece("<s>", 0.f, kControl);
  piece("</s>", 0.f, kControl);
  for (size_t i = layout->first.size(); i < end; ++i) {
    const std::string& text = (*list)[i][0].get_ref<const std::string&>();
    const bool inside = text.find("\u2581", 1) != std::string::npos;
    piece(text, (*list)[i][1].get<float>(),
          inside && spaces != Spaces::kSentencePiece ? kUnused : kNormal);
  }
  std::string trainer;
  IntField(3, 1, &trainer);    // UNIGRAM
  IntField(40, 0, &trainer);   // unk_id
  IntField(41, 1, &trainer);   // bos_id
  IntField(42, 2, &trainer);   // eos_id
  IntField(43, -1, &trainer);  // pad_id: none
  BytesField(2, trainer, &proto);
  // (No map: the text reaches sentencepiece normalized, as the library
  // normalizes it, by `graphemes`.)
  std::string spec;
  IntField(3, 1, &spec);                                         // add_dummy_prefix
  IntField(4, spaces == Spaces::kSentencePiece ? 1 : 0, &spec);  // remove_extra_whitespaces
  IntField(5, 1, &spec);                                         // escape_whitespaces
  BytesField(3, spec, &proto);

  SentencePieceOptions options;
  options.spaces = spaces;
  options.id_offset = layout->offset;
  options.special_tokens = layout->ids;
  options.vocab_size = vocab_size;
  options.added_tokens = std::move(added);
  options.graphemes = std::move(graphemes);
  // Each word split as the library splits it: float64 sums over the file's
  // scores, every entry of the vocabulary a piece.
  std::vector<UnigramModel::Entry> entries;
  entries.reserve(list->size());
  for (const json& e : *list) entries.push_back({e[0].get<std::string>(), e[1].get<double>()});
  StatusOr<std::shared_ptr<const UnigramModel>> words =
      UnigramModel::Create(std::move(entries), /*unk_id=*/3);
  if (!words.ok()) return r.Refuse("model.vocab: " + words.status().message());
  options.unigram = std::move(words).value();
  StatusOr<std::unique_ptr<Tokenizer>> t =
      CreateSentencePieceTokenizerFromProto(proto, options, "the sentencepiece model");
  if (t.status().code() == StatusCode::kInvalidArgument) {
    return r.Refuse("model.vocab does not make a sentencepiece model: " + t.status().message());
  }
  if (!t.ok()) return Status(t.status().code(), source + ": " + t.status().message());
  return t;
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
    ASSIGN_OR_RETURN(result.tokenizer,
                     WordPiece(r, root, *model, source, overrides, &result.pairs));
    return result;
  }
  if (type == "BPE") {
    ASSIGN_OR_RETURN(result.tokenizer, ByteLevelBpe(r, root, *model, source, overrides));
    result.pairs = PairTemplate::kRoberta;
    return result;
  }
  if (type == "Unigram") {
    ASSIGN_OR_RETURN(result.tokenizer, XlmrUnigram(r, root, *model, source, overrides));
    result.pairs = PairTemplate::kRoberta;
    return result;
  }
  return r.Unsupported("model.type is \"" + type + "\"");
}

StatusOr<HfJsonTokenizer> CreateTokenizerFromHfJson(const std::string& path,
                                                    const HfJsonOverrides& overrides) {
  ASSIGN_OR_RETURN(std::string data, ReadWholeFile(path, "tokenizer.json"));
  return CreateTokenizerFromHfJsonData(data, path, overrides);
}

}  // namespace encoderd
