#include "engine/text/byte_bpe_tokenizer.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <queue>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/file.h"
#include "core/json_depth.h"
#include "engine/text/bounded_encoding.h"
#include "engine/text/truncation.h"
#include "engine/text/utf8.h"

namespace encoderd {
namespace {

// A piece cut by a window's end settles no closer than this many tokens to
// the cut (as sentencepiece_tokenizer.cc's words).
constexpr int64_t kSettleMargin = 64;

// GPT-2's bytes_to_unicode: the printable Latin-1 bytes stand for
// themselves, the other 68 for U+0100 on, in byte order.
std::vector<std::string> ByteSymbols() {
  std::vector<std::string> out(256);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    AppendUtf8(printable ? static_cast<char32_t>(b) : next++, &out[b]);
  }
  return out;
}

// The classes GPT-2's pattern tells apart: \s (Unicode White_Space),
// \p{L}, \p{N}, and everything else.
enum class CharClass { kSpace, kLetter, kNumber, kOther };

CharClass ClassOf(char32_t c) {
  if (u_isUWhiteSpace(static_cast<UChar32>(c))) return CharClass::kSpace;
  const uint32_t mask = U_GET_GC_MASK(static_cast<UChar32>(c));
  if (mask & U_GC_L_MASK) return CharClass::kLetter;
  if (mask & U_GC_N_MASK) return CharClass::kNumber;
  return CharClass::kOther;
}

// The end of the pattern's match at text[i] (i < text.size()), as Python's
// regex finds it: the alternatives in order, each as long as it goes.
size_t PieceEnd(std::string_view text, size_t i) {
  if (text[i] == '\'' && i + 1 < text.size()) {
    const char a = text[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    const char b = i + 2 < text.size() ? text[i + 2] : '\0';
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": a run of one class, after
  // one optional ASCII space.
  size_t start = text[i] == ' ' && i + 1 < text.size() ? i + 1 : i;
  auto [c, n] = DecodeAt(text, start);
  CharClass cls = ClassOf(c);
  if (cls == CharClass::kSpace && start != i) {
    start = i;
    std::tie(c, n) = DecodeAt(text, i);
    cls = ClassOf(c);
  }
  size_t end = start + n;
  if (cls != CharClass::kSpace) {
    while (end < text.size()) {
      const auto [d, m] = DecodeAt(text, end);
      if (ClassOf(d) != cls) break;
      end += m;
    }
    return end;
  }
  // "\s+(?!\S)|\s+": a run of whitespace, less its last character when more
  // than one come before a non-space one.
  size_t last = start, chars = 1;
  while (end < text.size()) {
    const auto [d, m] = DecodeAt(text, end);
    if (ClassOf(d) != CharClass::kSpace) return chars > 1 ? last : end;
    last = end;
    end += m;
    ++chars;
  }
  return end;
}

// The lines of a text file, without a leading UTF-8 BOM or line ends ("\n"
// or "\r\n"); line i is line number i + 1.
std::vector<std::string_view> Lines(std::string_view text) {
  if (text.substr(0, 3) == "\xef\xbb\xbf") text.remove_prefix(3);
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    pos = eol + 1;
  }
  return lines;
}

// What error messages call the vocabulary and a merge.
struct SourceNames {
  std::string vocab = "vocab.json";
  std::string merge = "merges.txt line";
};

class ByteBpeTokenizer final : public Tokenizer {
 public:
  explicit ByteBpeTokenizer(const ByteBpeOptions& options) : options_(options) {}

  // Loads the vocabulary (token -> id) and the merges; `source` names them.
  Status Load(const nlohmann::json& vocab, std::string_view merges, const std::string& source,
              const SourceNames& names) {
    if (!vocab.is_object() || vocab.empty()) {
      return InvalidArgument(source + ": " + names.vocab +
                             " must be a non-empty object of token -> id");
    }
    std::unordered_map<int32_t, std::string> token_of_id;
    for (const auto& [token, id] : vocab.items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 30)) {
        return InvalidArgument(source + ": " + names.vocab + " gives \"" + token.substr(0, 64) +
                               "\" the id " + id.dump().substr(0, 32) +
                               ", not an integer in [0, 2^30)");
      }
      const auto value = id.get<int32_t>();
      const auto [other, fresh] = token_of_id.emplace(value, token);
      if (!fresh) {
        return InvalidArgument(source + ": " + names.vocab + " gives \"" +
                               other->second.substr(0, 64) + "\" and \"" + token.substr(0, 64) +
                               "\" the same id " + std::to_string(value));
      }
      vocab_[token] = value;
      vocab_size_ = std::max<int64_t>(vocab_size_, value + 1);
      // Each byte is one character of a token's spelling.
      max_token_bytes_ =
          std::max<int64_t>(max_token_bytes_, static_cast<int64_t>(DecodeUtf8(token).size()));
    }
    const std::pair<const char*, int32_t*> specials[] = {{"<s>", &special_.bos},
                                                         {"</s>", &special_.eos},
                                                         {"<pad>", &special_.pad},
                                                         {"<unk>", &special_.unk}};
    for (const auto& [name, id] : specials) {
      if (!options_.fairseq_dict.empty()) break;  // fairseq's, the defaults
      const auto it = vocab_.find(name);
      if (it == vocab_.end()) {
        return InvalidArgument(source + ": " + names.vocab + " has no " + name + " token");
      }
      *id = it->second;
    }
    // Every byte has a token, and so every text has an encoding.
    for (int b = 0; b < 256; ++b) {
      const std::string spelling = ByteLevelSpelling(std::string(1, static_cast<char>(b)));
      if (vocab_.count(spelling) == 0) {
        return InvalidArgument(source + ": " + names.vocab + " has no token for the byte " +
                               std::to_string(b) + " (\"" + spelling + "\")");
      }
      byte_symbol_[b] = Intern(spelling);
    }
    const std::vector<std::string_view> lines = Lines(merges);
    int64_t rank = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string_view line = lines[i];
      const auto line_number = static_cast<int64_t>(i + 1);
      if (line.empty() || (i == 0 && line.substr(0, 8) == "#version")) continue;
      const size_t space = line.find(' ');
      if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
          line.find(' ', space + 1) != std::string_view::npos) {
        return InvalidArgument(source + ": " + names.merge + " " + std::to_string(line_number) +
                               " is not two tokens separated by one space");
      }
      const std::string_view left = line.substr(0, space), right = line.substr(space + 1);
      const std::string joined = std::string(left) + std::string(right);
      // As Hugging Face's BPE model: every part and result is a token (so
      // no piece is <unk>, and max_token_bytes_ bounds every piece).
      for (const std::string_view token : {left, right, std::string_view(joined)}) {
        if (vocab_.count(std::string(token)) == 0) {
          return InvalidArgument(source + ": " + names.merge + " " + std::to_string(line_number) +
                                 " names \"" + std::string(token.substr(0, 64)) + "\", which " +
                                 names.vocab + " does not have");
        }
      }
      const int32_t a = Intern(left), b = Intern(right), merged = Intern(joined);
      // A repeated pair takes its last line's rank, as GPT-2's dict does.
      merge_of_[PairKey(a, b)] = Merge{static_cast<int32_t>(rank++), merged};
    }
    merges_ = static_cast<int64_t>(merge_of_.size());
    token_of_symbol_.resize(symbols_.size());
    for (size_t s = 0; s < symbols_.size(); ++s) token_of_symbol_[s] = vocab_.at(symbols_[s]);
    // (Kept in added_ from here, or not at all.)
    std::vector<AddedToken> added = std::exchange(options_.added_tokens, {});
    if (!options_.fairseq_dict.empty()) {
      RETURN_IF_ERROR(Renumber(options_.fairseq_dict, source));
      options_.fairseq_dict = std::string();  // its contents are no longer needed
    } else {
      AddedTokenRules rules;
      rules.vocab_size = static_cast<int64_t>(vocab_.size());
      rules.matches_normalized = true;  // as written: no normalizer
      rules.prefixes_pieces = options_.add_prefix_space;
      rules.id_limit = options_.added_id_limit;
      ASSIGN_OR_RETURN(std::vector<AddedToken> resolved,
                       ResolveAddedTokens(
                           std::move(added),
                           [this](const std::string& token) {
                             const auto it = vocab_.find(token);
                             return it == vocab_.end() ? -1 : it->second;
                           },
                           rules, source));
      // No normalizer: a normalized token is matched as written, after
      // those that are not normalized, as the library matches it.
      added_ = AddedTokens(std::move(resolved), [](char32_t c) { return std::u32string(1, c); });
      // Added tokens past the vocabulary count in it, as in the library.
      vocab_size_ = std::max(vocab_size_, added_.end_id());
    }
    return Status::Ok();
  }

  // Token ids by fairseq's dictionary (see the header): GPT-2 id g is the
  // fairseq id of the line that names g, <unk> where none does. Lines as
  // fairseq's Dictionary.add_from_file reads them: "symbol count", split at
  // the last space after trailing whitespace, every symbol once (the
  // specials included), an integer count; "#fairseq:overwrite" lines are
  // refused. A symbol is a GPT-2 id when it is a decimal number as Python
  // writes one (fairseq looks up str(id)). A leading UTF-8 BOM is dropped.
  Status Renumber(std::string_view dict, const std::string& source) {
    constexpr int32_t kFirstSymbol = 4;  // after <s> <pad> </s> <unk>
    const int64_t gpt2_tokens = vocab_size_;
    std::unordered_map<int32_t, int32_t> fairseq_of_gpt2;
    std::unordered_map<std::string_view, int64_t> line_of_symbol = {
        {"<s>", 0}, {"<pad>", 0}, {"</s>", 0}, {"<unk>", 0}};
    const std::vector<std::string_view> lines = Lines(dict);
    for (size_t i = 0; i < lines.size(); ++i) {
      std::string_view line = lines[i];
      const auto line_number = static_cast<int64_t>(i + 1);
      const auto refuse = [&](const std::string& why) {
        return InvalidArgument(source + ": fairseq dictionary line " + std::to_string(line_number) +
                               " " + why);
      };
      while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
      const size_t space = line.rfind(' ');
      std::string_view count = space == std::string_view::npos ? "" : line.substr(space + 1);
      if (count == "#fairseq:overwrite") return refuse("has #fairseq:overwrite, not supported");
      if (!count.empty() && (count[0] == '-' || count[0] == '+')) count.remove_prefix(1);
      if (space == 0 || count.empty() ||
          count.find_first_not_of("0123456789") != std::string_view::npos) {
        return refuse("is not \"symbol count\"");
      }
      const std::string_view symbol = line.substr(0, space);
      const auto [seen, fresh] = line_of_symbol.emplace(symbol, line_number);
      if (!fresh) {
        return refuse("repeats the symbol " + std::string(symbol.substr(0, 64)) +
                      (seen->second > 0 ? " of line " + std::to_string(seen->second)
                                        : ", one of fairseq's specials"));
      }
      const int32_t id = kFirstSymbol + static_cast<int32_t>(i);
      const bool decimal = symbol.size() <= 9 &&
                           symbol.find_first_not_of("0123456789") == std::string_view::npos &&
                           (symbol[0] != '0' || symbol.size() == 1);
      if (decimal) {
        const int32_t gpt2 = std::stoi(std::string(symbol));
        if (gpt2 >= gpt2_tokens) {
          return refuse("names the GPT-2 id " + std::string(symbol) + ", past the vocabulary's " +
                        std::to_string(gpt2_tokens) + " ids");
        }
        fairseq_of_gpt2.emplace(gpt2, id);
      }
      vocab_size_ = id + 1;
    }
    if (fairseq_of_gpt2.empty()) {
      return InvalidArgument(source + ": the fairseq dictionary names no GPT-2 token");
    }
    special_ = SpecialTokens{};  // <s> 0, </s> 2, <pad> 1, <unk> 3
    fairseq_symbols_ = static_cast<int64_t>(lines.size());
    for (int32_t& token : token_of_symbol_) {
      const auto it = fairseq_of_gpt2.find(token);
      token = it == fairseq_of_gpt2.end() ? special_.unk : it->second;
    }
    return Status::Ok();
  }

  StatusOr<Encoding> Encode(std::string_view text, int64_t max_tokens,
                            bool truncate) const override {
    RETURN_IF_ERROR(CheckUtf8(text));
    std::string prefixed;
    const bool prefix = options_.add_prefix_space && !text.empty() && text[0] != ' ';
    if (prefix) {
      prefixed.reserve(text.size() + 1);
      prefixed.append(" ").append(text);
      text = prefixed;
    }
    ASSIGN_OR_RETURN(
        Encoding enc,
        EncodeBounded(
            text, max_tokens, truncate, {special_.bos, "<s>"}, {special_.eos, "</s>"},
            [this](const TextWindow& window) { return EncodeWindow(window); }, &added_));
    if (prefix) enc.bytes_read = std::max<int64_t>(enc.bytes_read - 1, 0);
    return enc;
  }

  int64_t vocab_size() const override { return vocab_size_; }
  const SpecialTokens& special_tokens() const override { return special_; }
  std::string Describe() const override {
    return "byte-level BPE (" + std::to_string(vocab_.size()) + " tokens, " +
           std::to_string(merges_) + " merges" +
           (fairseq_symbols_ == 0
                ? ""
                : ", fairseq dictionary of " + std::to_string(fairseq_symbols_) + " symbols") +
           (options_.add_prefix_space ? ", prefix space" : "") + added_.Describe() + ")";
  }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };

  static uint64_t PairKey(int32_t a, int32_t b) {
    return static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 | static_cast<uint32_t>(b);
  }

  int32_t Intern(std::string_view spelling) {
    const auto [it, added] =
        symbol_ids_.emplace(std::string(spelling), static_cast<int32_t>(symbols_.size()));
    if (added) symbols_.emplace_back(spelling);
    return it->second;
  }

  // The tokens of one piece of the pattern: its bytes' symbols merged, the
  // lowest rank first and, within a rank, leftmost first: Hugging Face's
  // BPE, and GPT-2's bpe() on merges files as trained, where a merge's
  // parts rank before it and no two merges make the same token (with two
  // merges of one token GPT-2's whole-word passes can pair differently).
  void AppendPiece(std::string_view piece, WindowEncoding* out) const {
    const auto n = static_cast<int32_t>(piece.size());
    std::vector<int32_t> symbol(n), next(n), prev(n);
    for (int32_t i = 0; i < n; ++i) {
      symbol[i] = byte_symbol_[static_cast<unsigned char>(piece[i])];
      next[i] = i + 1 < n ? i + 1 : -1;
      prev[i] = i - 1;
    }
    // (rank, left position, left symbol, right symbol), smallest first.
    using Candidate = std::tuple<int32_t, int32_t, int32_t, int32_t>;
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    const auto offer = [&](int32_t left) {
      if (left < 0 || next[left] < 0) return;
      const int32_t right = next[left];
      const auto it = merge_of_.find(PairKey(symbol[left], symbol[right]));
      if (it != merge_of_.end()) queue.emplace(it->second.rank, left, symbol[left], symbol[right]);
    };
    for (int32_t i = 0; i + 1 < n; ++i) offer(i);
    while (!queue.empty()) {
      const auto [rank, left, a, b] = queue.top();
      queue.pop();
      const int32_t right = next[left];
      // Stale: a neighbour merged since this pair was offered.
      if (symbol[left] != a || right < 0 || symbol[right] != b) continue;
      symbol[left] = merge_of_.at(PairKey(a, b)).result;
      symbol[right] = -1;
      next[left] = next[right];
      if (next[left] >= 0) prev[next[left]] = left;
      offer(prev[left]);
      offer(left);
    }
    for (int32_t i = 0; i >= 0 && i < n; i = next[i]) {
      out->ids.push_back(token_of_symbol_[symbol[i]]);
      out->pieces.push_back(symbols_[symbol[i]]);
    }
  }

  // One window of the text (bounded_encoding.h). The pattern's pieces are
  // hard boundaries: no merge spans two, and its matching starts afresh at
  // each. A window's last piece may go on past the cut (or, a run of
  // spaces, give its last space to the next piece; or, "'" then "r" at the
  // cut, be the start of 're), so it is settled only
  // when the window is the whole text or ends, after a non-space, before a
  // space, which no piece may take after a non-space. When the last piece
  // is the only one (a word longer than the window), it is settled up to
  // half its tokens, no closer than kSettleMargin to the cut, as a
  // sentencepiece word is. Every token stands for at most max_token_bytes_
  // bytes, which bounds from below the tokens from the last piece on.
  StatusOr<WindowEncoding> EncodeWindow(const TextWindow& window) const {
    const std::string_view text = window.text;
    WindowEncoding out;
    size_t last_begin = 0, previous_begin = 0;
    int64_t last_tokens = 0, previous_tokens = 0;
    for (size_t pos = 0; pos < text.size();) {
      const size_t end = PieceEnd(text, pos);
      previous_begin = last_begin;
      previous_tokens = last_tokens;
      last_begin = pos;
      last_tokens = static_cast<int64_t>(out.ids.size());
      AppendPiece(text.substr(pos, end - pos), &out);
      pos = end;
    }
    // 're, 've and 'll need two characters after the apostrophe: cut after
    // its first, the window makes "'" and "r" pieces that the whole text may
    // not, so the cut piece starts at the apostrophe.
    if (!window.whole && last_begin > 0 && last_begin + 1 == text.size() &&
        (text[last_begin] == 'r' || text[last_begin] == 'v' || text[last_begin] == 'l') &&
        previous_begin + 1 == last_begin && text[previous_begin] == '\'') {
      last_begin = previous_begin;
      last_tokens = previous_tokens;
    }
    const auto n = static_cast<int64_t>(out.ids.size());
    const bool ends_in_space =
        !text.empty() &&
        ClassOf(DecodeAt(text, CharStartAtOrBefore(text, text.size() - 1)).first) ==
            CharClass::kSpace;
    if (window.whole || (window.at_space && !ends_in_space)) {
      out.settled = out.min_tokens = n;
      if (!window.whole) {
        out.resume_at = text.size();
        out.resume_tokens = n;
      }
      return out;
    }
    out.resume_at = last_begin;
    out.resume_tokens = last_begin > 0 ? last_tokens : 0;
    const int64_t cut = n - last_tokens;
    out.settled =
        last_tokens +
        (last_begin > 0 ? 0 : std::max<int64_t>(0, cut - std::max(cut / 2, kSettleMargin)));
    out.min_tokens =
        last_tokens + static_cast<int64_t>(text.size() - last_begin) / max_token_bytes_;
    return out;
  }

  ByteBpeOptions options_;
  AddedTokens added_;
  int64_t merges_ = 0, fairseq_symbols_ = 0;
  std::unordered_map<std::string, int32_t> vocab_;
  int64_t vocab_size_ = 0;
  int64_t max_token_bytes_ = 1;
  SpecialTokens special_;
  // Spellings (the byte stand-ins) of every byte, merge part and result.
  std::vector<std::string> symbols_;
  std::unordered_map<std::string, int32_t> symbol_ids_;
  int32_t byte_symbol_[256] = {};
  std::unordered_map<uint64_t, Merge> merge_of_;
  // The token id of each symbol: its vocabulary id, or fairseq's.
  std::vector<int32_t> token_of_symbol_;
};

}  // namespace

std::string ByteLevelSpelling(std::string_view bytes) {
  static const std::vector<std::string> symbols = ByteSymbols();
  std::string out;
  for (const char b : bytes) out += symbols[static_cast<unsigned char>(b)];
  return out;
}

namespace {

StatusOr<std::unique_ptr<Tokenizer>> CreateNamed(std::string_view vocab_json,
                                                 std::string_view merges,
                                                 const ByteBpeOptions& options,
                                                 const std::string& source,
                                                 const SourceNames& names) {
  if (!JsonDepthAtMost(vocab_json)) {
    return InvalidArgument(source + ": " + names.vocab + " nests deeper than " +
                           std::to_string(kMaxJsonDepth) + " levels");
  }
  nlohmann::json vocab = nlohmann::json::parse(vocab_json, nullptr, /*allow_exceptions=*/false);
  if (vocab.is_discarded())
    return InvalidArgument(source + ": " + names.vocab + " is not valid JSON");
  if (!IsValidUtf8(merges)) return InvalidArgument(source + ": the merges are not UTF-8");
  auto tokenizer = std::make_unique<ByteBpeTokenizer>(options);
  RETURN_IF_ERROR(tokenizer->Load(vocab, merges, source, names));
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> CreateByteBpeTokenizerFromData(std::string_view vocab_json,
                                                                    std::string_view merges,
                                                                    const ByteBpeOptions& options,
                                                                    const std::string& source) {
  return CreateNamed(vocab_json, merges, options, source, SourceNames());
}

StatusOr<std::unique_ptr<Tokenizer>> CreateByteBpeTokenizerFromTokenizerJson(
    std::string_view vocab_json, std::string_view merges, const ByteBpeOptions& options,
    const std::string& source) {
  return CreateNamed(vocab_json, merges, options, source,
                     SourceNames{"model.vocab", "model.merges entry"});
}

StatusOr<std::unique_ptr<Tokenizer>> CreateByteBpeTokenizer(const std::string& vocab_path,
                                                            const std::string& merges_path,
                                                            const ByteBpeOptions& options) {
  ASSIGN_OR_RETURN(std::string vocab, ReadWholeFile(vocab_path, "byte-level BPE vocabulary"));
  ASSIGN_OR_RETURN(std::string merges, ReadWholeFile(merges_path, "byte-level BPE merges"));
  ByteBpeOptions with_dict = options;
  std::string source = "byte-level BPE " + vocab_path + " + " + merges_path;
  if (!options.fairseq_dict.empty()) {
    ASSIGN_OR_RETURN(with_dict.fairseq_dict,
                     ReadWholeFile(options.fairseq_dict, "fairseq dictionary"));
    if (with_dict.fairseq_dict.empty()) {
      return InvalidArgument("fairseq dictionary " + options.fairseq_dict + " is empty");
    }
    source += " + " + options.fairseq_dict;
  }
  return CreateByteBpeTokenizerFromData(vocab, merges, with_dict, source);
}

}  // namespace encoderd
