#include "engine/text/wordpiece_tokenizer.h"

#include <algorithm>
#include <iterator>
#include <unordered_map>
#include <utility>

#include "core/file.h"
#include "engine/text/bert_pre_tokenizer.h"
#include "engine/text/bounded_encoding.h"
#include "engine/text/truncation.h"
#include "engine/text/utf8.h"

namespace encoderd {
namespace {

// BertNormalizer one character at a time, for the added tokens it
// normalizes (AddedTokens).
CharNormalizer BertCharNormalizer(bool lower_case, bool strip_accents) {
  return [lower_case, strip_accents](char32_t c) {
    if (c < 0x80) {
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return std::u32string(1, ' ');
      if (c < 0x20 || c == 0x7f) return std::u32string();  // control: dropped
      return std::u32string(1, lower_case && c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
    }
    // CJK ideographs of the blocks that neither decompose nor change case.
    if ((c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf)) {
      return std::u32string{' ', c, ' '};
    }
    return BertNormalized(std::u32string_view(&c, 1), lower_case, strip_accents);
  };
}

class WordPieceTokenizer final : public Tokenizer {
 public:
  // lower_case: options.lower_case, or the vocabulary's where that is unset.
  WordPieceTokenizer(std::unordered_map<std::string, int32_t> vocab, int64_t vocab_size,
                     const SpecialTokens& special, const WordPieceOptions& options, bool lower_case)
      : vocab_(std::move(vocab)),
        vocab_size_(vocab_size),
        special_(special),
        options_(options),
        lower_case_(lower_case),
        strip_accents_(options.strip_accents.value_or(lower_case)),
        added_(std::exchange(options_.added_tokens, {}),
               BertCharNormalizer(lower_case_, strip_accents_)) {
    for (const auto& [token, id] : vocab_)
      longest_token_chars_ = std::max(longest_token_chars_, DecodeUtf8(token).size());
  }

  StatusOr<Encoding> Encode(std::string_view text, int64_t max_tokens,
                            bool truncate) const override {
    RETURN_IF_ERROR(CheckUtf8(text));
    return EncodeBounded(
        text, max_tokens, truncate, {special_.bos, options_.specials.cls},
        {special_.eos, options_.specials.sep},
        [this](const TextWindow& window) { return EncodeWindow(window); }, &added_);
  }

  // Added tokens past the vocabulary count in it, as in the library.
  int64_t vocab_size() const override { return std::max(vocab_size_, added_.end_id()); }
  const SpecialTokens& special_tokens() const override { return special_; }
  std::string Describe() const override {
    const char* accents = strip_accents_ == lower_case_ ? ""
                          : strip_accents_              ? ", accents stripped"
                                                        : ", accents kept";
    return std::string("wordpiece (") + (lower_case_ ? "uncased" : "cased") + accents +
           (options_.lower_case.has_value() ? "" : ", from its vocabulary") +
           (options_.rules == BertRules::kTokenizers ? ", tokenizers library's rules" : "") + ", " +
           std::to_string(vocab_size()) + " tokens" + added_.Describe() + ")";
  }

 private:
  // One window of the text (bounded_encoding.h). Words never span a space,
  // so a window that ends before one is settled. A window cut mid-word
  // settles every word but the last, which may go on; the last one too once
  // it is longer than max_chars_per_word + 1 characters (one of them may
  // still compose with what follows): it is one [UNK] however it goes on,
  // and the next window starts at its last character and skips the rest.
  StatusOr<WindowEncoding> EncodeWindow(const TextWindow& window) const {
    WindowEncoding out;
    Encoding enc;
    const std::vector<char32_t> chars = DecodeUtf8(window.text);
    const BertRules rules = options_.rules;
    const std::vector<std::u32string> words = BertPreTokenize(
        std::u32string_view(chars.data(), chars.size()), lower_case_, strip_accents_, rules);
    const size_t first = window.in_unknown_run && !words.empty() ? 1 : 0;
    const char32_t last = chars.empty() ? U' ' : chars.back();
    const bool cut = !window.whole && !window.at_space;
    if (first == 1 && words.size() == 1 && cut && IsBertWordCharacter(last, rules)) {
      // The [UNK] word of an earlier window fills this one and goes on.
      out.resume_at = CharStartAtOrBefore(window.text, window.text.size() - 1);
      out.resume_in_unknown_run = true;
      return out;
    }
    const bool goes_on = cut && words.size() > first && !IsBertWhitespace(last, rules) &&
                         !IsBertPunctuation(last) && !IsBertCjk(last, rules);
    const bool long_word =
        goes_on && static_cast<int64_t>(words.back().size()) > options_.max_chars_per_word + 1;
    for (size_t i = first; i < words.size(); ++i) {
      if (goes_on && !long_word && i + 1 == words.size()) {
        out.settled = static_cast<int64_t>(enc.ids.size());
      }
      AppendWord(words[i], &enc);
    }
    const auto n = static_cast<int64_t>(enc.ids.size());
    if (!goes_on || long_word) out.settled = n;
    out.min_tokens = out.settled + (goes_on && !long_word ? 1 : 0);
    if (window.at_space) {
      out.resume_at = window.text.size();
      out.resume_tokens = n;
    } else if (long_word && IsBertWordCharacter(last, rules)) {
      out.resume_at = CharStartAtOrBefore(window.text, window.text.size() - 1);
      out.resume_tokens = n;
      out.resume_in_unknown_run = true;
    }
    out.ids = std::move(enc.ids);
    out.pieces = std::move(enc.pieces);
    return out;
  }

  // WordpieceTokenizer.tokenize for one word: greedy longest-match-first, the
  // whole word becomes [UNK] when it is too long or any part has no match.
  void AppendWord(const std::u32string& word, Encoding* enc) const {
    if (static_cast<int64_t>(word.size()) > options_.max_chars_per_word) {
      AppendUnk(enc);
      return;
    }
    std::string utf8;
    std::vector<size_t> offsets;  // byte offset of each character, then the end
    offsets.reserve(word.size() + 1);
    for (char32_t c : word) {
      offsets.push_back(utf8.size());
      AppendUtf8(c, &utf8);
    }
    offsets.push_back(utf8.size());

    const size_t first = enc->ids.size();
    std::string candidate;
    for (size_t start = 0; start < word.size();) {
      // No piece longer than the longest token can match ("##" included):
      // the matches are the same, and the work linear in the word, not
      // cubic (max_chars_per_word may let a whole 1 MB word through).
      size_t end = std::min(word.size(), start + longest_token_chars_);
      int32_t id = -1;
      for (; end > start; --end) {
        candidate.assign(start > 0 ? "##" : "");
        candidate.append(utf8, offsets[start], offsets[end] - offsets[start]);
        const auto it = vocab_.find(candidate);
        if (it != vocab_.end()) {
          id = it->second;
          break;
        }
      }
      if (id < 0) {
        enc->ids.resize(first);
        enc->pieces.resize(first);
        AppendUnk(enc);
        return;
      }
      enc->ids.push_back(id);
      enc->pieces.push_back(candidate);
      start = end;
    }
  }

  void AppendUnk(Encoding* enc) const {
    enc->ids.push_back(special_.unk);
    enc->pieces.emplace_back(options_.specials.unk);
  }

  std::unordered_map<std::string, int32_t> vocab_;
  int64_t vocab_size_;
  SpecialTokens special_;
  WordPieceOptions options_;
  bool lower_case_;
  bool strip_accents_;
  AddedTokens added_;
  // The longest vocabulary token, in characters.
  size_t longest_token_chars_ = 0;
};

// Python's universal-newline readlines(), each line without its terminator.
std::vector<std::string> SplitLines(const std::string& data) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != '\n' && data[i] != '\r') continue;
    lines.push_back(data.substr(start, i - start));
    if (data[i] == '\r' && i + 1 < data.size() && data[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < data.size()) lines.push_back(data.substr(start));
  return lines;
}

}  // namespace

bool VocabularyIsCased(const std::vector<std::string>& tokens) {
  // At most tokens.size() count, so this many capitalised ones settle it.
  const int64_t enough = (static_cast<int64_t>(tokens.size()) + 99) / 100;
  int64_t counted = 0, capitalised = 0;
  for (const std::string& token : tokens) {
    if (token.size() >= 2 && token.front() == '[' && token.back() == ']') continue;
    const std::string_view text = std::string_view(token).substr(token.rfind("##", 0) == 0 ? 2 : 0);
    if (text.empty() || !IsValidUtf8(text)) continue;
    ++counted;
    bool ascii = true, capital = false;
    for (const char c : text) {
      ascii = ascii && static_cast<unsigned char>(c) < 0x80;
      capital = capital || (c >= 'A' && c <= 'Z');
    }
    if (!capital && !ascii) {
      const std::vector<char32_t> chars = DecodeUtf8(text);
      capital = ChangesWhenLowerCased(std::u32string_view(chars.data(), chars.size()));
    }
    if (capital && ++capitalised >= enough) return true;
  }
  return counted > 0 && capitalised * 100 >= counted;
}

StatusOr<std::unique_ptr<Tokenizer>> CreateWordPieceTokenizerFromTokens(
    std::vector<std::string> tokens, const WordPieceOptions& options, const std::string& source) {
  if (options.max_chars_per_word < 1) {
    return InvalidArgument("wordpiece max_chars_per_word must be positive, got " +
                           std::to_string(options.max_chars_per_word));
  }
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgument(source + ": too many tokens for 32-bit ids");
  }
  const bool lower_case =
      options.lower_case.has_value() ? *options.lower_case : !VocabularyIsCased(tokens);
  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!IsValidUtf8(tokens[i])) {
      return InvalidArgument(source + ": line " + std::to_string(i + 1) + " is not valid UTF-8");
    }
    vocab[std::move(tokens[i])] = static_cast<int32_t>(i);
  }
  SpecialTokens special;
  const WordPieceSpecials& names = options.specials;
  const std::pair<const std::string*, int32_t*> required[] = {{&names.cls, &special.bos},
                                                              {&names.sep, &special.eos},
                                                              {&names.pad, &special.pad},
                                                              {&names.unk, &special.unk}};
  for (const auto& [name, id] : required) {
    const auto it = vocab.find(*name);
    if (it == vocab.end()) {
      return InvalidArgument(source + ": the vocabulary has no " + *name + " token");
    }
    *id = it->second;
  }
  WordPieceOptions resolved = options;
  AddedTokenRules rules;
  rules.vocab_size = static_cast<int64_t>(vocab.size());
  rules.normalizes = true;  // the tokenizers library's BertNormalizer
  rules.matches_normalized = true;
  rules.id_limit = options.added_id_limit;
  ASSIGN_OR_RETURN(resolved.added_tokens, ResolveAddedTokens(
                                              options.added_tokens,
                                              [&vocab](const std::string& token) {
                                                const auto it = vocab.find(token);
                                                return it == vocab.end() ? -1 : it->second;
                                              },
                                              rules, source));
  const auto vocab_size = static_cast<int64_t>(tokens.size());
  return std::unique_ptr<Tokenizer>(
      new WordPieceTokenizer(std::move(vocab), vocab_size, special, resolved, lower_case));
}

StatusOr<std::unique_ptr<Tokenizer>> CreateWordPieceTokenizer(const std::string& vocab_path,
                                                              const WordPieceOptions& options) {
  ASSIGN_OR_RETURN(std::string data, ReadWholeFile(vocab_path, "wordpiece vocab file"));
  return CreateWordPieceTokenizerFromTokens(SplitLines(data), options,
                                            "wordpiece vocab file " + vocab_path);
}

}  // namespace encoderd
