#include "engine/text/added_tokens.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "engine/text/utf8.h"

namespace encoderd {
namespace {

// The UTF-8 character at `pos` of valid UTF-8: its length, and whether it
// is whitespace as Rust's char::is_whitespace says (Unicode White_Space).
std::pair<size_t, bool> WhitespaceAt(std::string_view text, size_t pos) {
  const auto [c, n] = DecodeAt(text, pos);
  if (c < 0x80) return {1, (c >= 0x09 && c <= 0x0d) || c == ' '};
  return {n, u_isUWhiteSpace(static_cast<UChar32>(c)) != 0};
}

// Whether a token's content begins or ends with whitespace.
bool WhitespaceAtAnEnd(const std::string& content) {
  const std::vector<char32_t> chars = DecodeUtf8(content);
  for (const char32_t c : {chars.front(), chars.back()}) {
    if (u_isUWhiteSpace(static_cast<UChar32>(c))) return true;
  }
  return false;
}

}  // namespace

std::vector<AddedToken> ResolveIds(std::vector<AddedToken> tokens,
                                   const std::function<int32_t(const std::string&)>& id_of) {
  std::vector<AddedToken> resolved;
  for (AddedToken& token : tokens) {
    if (token.id == -1) token.id = id_of(token.content);
    if (token.id >= 0) resolved.push_back(std::move(token));
  }
  return resolved;
}

StatusOr<std::vector<AddedToken>> ResolveAddedTokens(
    std::vector<AddedToken> tokens, const std::function<int32_t(const std::string&)>& id_of,
    const AddedTokenRules& rules, const std::string& source) {
  std::vector<AddedToken> resolved;
  // The ids of the tokens added so far, and the largest.
  std::unordered_map<std::string, int32_t> added;
  int64_t largest = -1;
  for (AddedToken& token : tokens) {
    if (token.content.empty()) continue;  // the library adds none
    const std::string shown = "added token \"" + token.content.substr(0, 64) + "\"";
    const int32_t in_vocab = id_of(token.content);
    const auto seen = added.find(token.content);
    int64_t id = in_vocab;
    if (seen != added.end()) {
      id = seen->second;
    } else if (in_vocab < 0) {
      if (token.id == -1) continue;  // a class's special the vocabulary lacks
      // The library's next id: past the vocabulary and every token added.
      id = largest >= rules.vocab_size ? largest + 1 : rules.vocab_size;
    }
    if (token.id != -1 && token.id != id) {
      return Unimplemented(source + ": " + shown + " has id " + std::to_string(token.id) +
                           (in_vocab >= 0 ? ", but the vocabulary's is " + std::to_string(id)
                                          : ", where the tokenizers library numbers it " +
                                                std::to_string(id) + " (after the vocabulary's " +
                                                std::to_string(rules.vocab_size) +
                                                " tokens and the tokens added before it)"));
    }
    if (in_vocab < 0 && rules.id_limit > 0 && id >= rules.id_limit) {
      return Unimplemented(source + ": " + shown + " has id " + std::to_string(id) +
                           ", past the model's token embedding of " +
                           std::to_string(rules.id_limit) + " rows");
    }
    token.id = static_cast<int32_t>(id);
    added.emplace(token.content, token.id);
    largest = std::max(largest, id);
    // More than a special token of the vocabulary.
    const bool extra = !token.special || in_vocab < 0;
    // Why encoderd would not match it as the library does, if it would not.
    const char* why = nullptr;
    if (token.single_word) {
      why = "single_word (Hugging Face matches it only as a whole word)";
    } else if (token.normalized && rules.normalizes && !rules.matches_normalized) {
      why = "normalized (Hugging Face matches it in the normalized text)";
    } else if (token.normalized && rules.matches_normalized && extra &&
               (token.lstrip || token.rstrip)) {
      // (A special token of the vocabulary so is matched as written.)
      why = "normalized with lstrip or rstrip";
    } else if (token.normalized && rules.normalizes && rules.matches_normalized && extra &&
               WhitespaceAtAnEnd(token.content)) {
      // The library may match it from or to the middle of a character's
      // normalized form (a space BERT's normalizer puts by a CJK ideograph).
      // Without a normalizer (RoBERTa's pipeline) every character is its
      // own form, and such a token is matched as the others are.
      why = "normalized and begins or ends with whitespace";
    } else if (rules.prefixes_pieces) {
      why = "added where the pre-tokenizer prefixes pieces otherwise than encoderd";
    }
    if (why == nullptr) {
      resolved.push_back(std::move(token));
    } else if (extra) {
      return Unimplemented(source + ": " + shown + " is " + why +
                           ", which encoderd does not reproduce");
    }
  }
  return resolved;
}

AddedTokens::AddedTokens(std::vector<AddedToken> tokens, CharNormalizer normalize)
    : normalize_(std::move(normalize)) {
  std::unordered_set<std::string> seen;
  for (AddedToken& token : tokens) {
    if (!token.content.empty() && seen.insert(token.content).second) {
      tokens_.push_back(std::move(token));
    }
  }
  for (uint32_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& token = tokens_[i];
    end_id_ = std::max<int64_t>(end_id_, int64_t{token.id} + 1);
    if (token.normalized && normalize_ && !token.lstrip && !token.rstrip) {
      std::u32string pattern;
      for (const char32_t c : DecodeUtf8(token.content)) pattern += normalize_(c);
      if (pattern.empty()) continue;
      if (trie_token_.empty()) {  // the root
        trie_token_.push_back(-1);
        trie_inner_.push_back(false);
      }
      uint32_t node = 0;
      for (const char32_t c : pattern) {
        const auto [edge, fresh] = trie_edges_.emplace(uint64_t{node} << 21 | c,
                                                       static_cast<uint32_t>(trie_token_.size()));
        if (fresh) {
          trie_inner_[node] = true;
          trie_token_.push_back(-1);
          trie_inner_.push_back(false);
        }
        node = edge->second;
      }
      if (trie_token_[node] < 0) trie_token_[node] = static_cast<int32_t>(i);
      continue;
    }
    by_first_byte_[static_cast<unsigned char>(token.content[0])].push_back(i);
    any_lstrip_ = any_lstrip_ || token.lstrip;
  }
  for (std::vector<uint32_t>& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

std::string AddedTokens::Describe() const {
  if (tokens_.empty()) return "";
  const auto others = static_cast<size_t>(std::count_if(
      tokens_.begin(), tokens_.end(), [](const AddedToken& t) { return !t.special; }));
  const size_t specials = tokens_.size() - others;
  if (others == 0) {
    return ", " + std::to_string(specials) + " special token" + (specials == 1 ? "" : "s") +
           " matched in a text";
  }
  return ", " + std::to_string(specials) + " special and " + std::to_string(others) +
         " other added token" + (others == 1 ? "" : "s") + " matched in a text";
}

const AddedToken* AddedTokens::LongestAt(std::string_view text, size_t pos) const {
  for (uint32_t i : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    const std::string& content = tokens_[i].content;
    if (text.compare(pos, content.size(), content) == 0) return &tokens_[i];
  }
  return nullptr;
}

AddedTokens::Scan::Scan(const AddedTokens& tokens, std::string_view text)
    : tokens_(tokens), text_(text) {}

void AddedTokens::Scan::FindWritten(size_t limit) {
  while (!match_ && scanned_ < text_.size()) {
    // Past the limit, only a match that takes whitespace begun by then
    // begins by then.
    if (scanned_ > limit && !(tokens_.any_lstrip_ && space_from_ <= limit)) break;
    if (const AddedToken* token = tokens_.LongestAt(text_, scanned_)) {
      Match m{token->lstrip ? space_from_ : scanned_, scanned_ + token->content.size(), token};
      if (token->rstrip) {
        while (m.end < text_.size()) {
          const auto [n, space] = WhitespaceAt(text_, m.end);
          if (!space) break;
          m.end += n;
        }
      }
      match_ = m;
      break;
    }
    const auto [n, space] = WhitespaceAt(text_, scanned_);
    scanned_ += n;
    if (!space) space_from_ = scanned_;
  }
}

const AddedTokens::Scan::Form* AddedTokens::Scan::FormAt(size_t i) {
  while (forms_.size() <= i) {
    const size_t begin = forms_.empty() ? normalized_from_ : forms_.back().end;
    if (begin >= text_.size()) return nullptr;
    const auto [c, n] = DecodeAt(text_, begin);
    forms_.push_back(Form{begin, begin + n, tokens_.normalize_(c)});
  }
  return &forms_[i];
}

void AddedTokens::Scan::NormalizedFrom(size_t pos) {
  normalized_from_ = pos;
  while (!forms_.empty() && forms_.front().begin < pos) forms_.pop_front();
}

std::optional<AddedTokens::Match> AddedTokens::Scan::NormalizedHere() {
  // The ends of the tokens the trie reaches, shortest first (after the last
  // character of a form: not through characters dropped after it).
  std::vector<std::pair<size_t, int32_t>> ends;
  uint32_t node = 0;
  for (size_t i = 0;; ++i) {
    const Form* form = FormAt(i);
    if (form == nullptr) break;
    if (form->text.empty()) {
      if (i == 0) return std::nullopt;  // dropped: no match starts here
      continue;
    }
    bool dead = false;
    for (const char32_t c : form->text) {
      const auto edge = tokens_.trie_edges_.find(uint64_t{node} << 21 | c);
      if (edge == tokens_.trie_edges_.end()) {
        dead = true;
        break;
      }
      node = edge->second;
    }
    if (dead) break;
    if (tokens_.trie_token_[node] >= 0) ends.emplace_back(form->end, tokens_.trie_token_[node]);
    if (!tokens_.trie_inner_[node]) break;
  }
  for (auto it = ends.rbegin(); it != ends.rend(); ++it) {
    // It must end before the next token matched as written begins.
    FindWritten(it->first);
    if (match_ && match_->begin < it->first) continue;
    return Match{normalized_from_, it->first, &tokens_.tokens_[it->second]};
  }
  return std::nullopt;
}

void AddedTokens::Scan::FindNormalized(size_t limit) {
  while (!normalized_match_ && normalized_from_ <= limit && normalized_from_ < text_.size()) {
    if (match_ && normalized_from_ >= match_->begin) return;
    normalized_match_ = NormalizedHere();
    if (!normalized_match_) NormalizedFrom(FormAt(0)->end);
  }
}

const AddedTokens::Match* AddedTokens::Scan::Next(size_t limit) {
  if (!normalized_match_) {
    FindWritten(limit);
    if (!tokens_.trie_token_.empty()) FindNormalized(limit);  // a normalized token
  }
  const std::optional<Match>& next = normalized_match_ ? normalized_match_ : match_;
  return next && next->begin <= limit ? &*next : nullptr;
}

void AddedTokens::Scan::Take() {
  if (normalized_match_) {
    // What was read as written up to here has no match that begins before
    // its end.
    NormalizedFrom(normalized_match_->end);
    normalized_match_.reset();
    return;
  }
  scanned_ = space_from_ = match_->end;
  NormalizedFrom(match_->end);
  match_.reset();
}

}  // namespace encoderd
