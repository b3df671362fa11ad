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
  // The ids the library gave the tokens the vocabulary lacks.
  std::unordered_map<std::string, int32_t> added;
  int64_t next = rules.vocab_size;
  for (AddedToken& token : tokens) {
    const std::string shown = "added token \"" + token.content.substr(0, 64) + "\"";
    const int32_t in_vocab = id_of(token.content);
    bool extra = !token.special;  // more than a special token of the vocabulary
    if (token.id == -1) {
      if (in_vocab < 0) continue;
      token.id = in_vocab;
    } else if (in_vocab >= 0) {
      if (in_vocab != token.id) {
        return Unimplemented(source + ": " + shown + " has id " + std::to_string(token.id) +
                             ", but the vocabulary's is " + std::to_string(in_vocab));
      }
    } else {
      extra = true;
      const auto [it, first] = added.emplace(token.content, static_cast<int32_t>(next));
      if (first) ++next;
      if (it->second != token.id) {
        return Unimplemented(source + ": " + shown + " has id " + std::to_string(token.id) +
                             ", where the tokenizers library numbers it " +
                             std::to_string(it->second) + " (after the vocabulary's " +
                             std::to_string(rules.vocab_size) +
                             " tokens and the added tokens before it)");
      }
    }
    // Why encoderd would not match it as the library does, if it would not.
    const char* why = nullptr;
    if (token.single_word) {
      why = "single_word (Hugging Face matches it only as a whole word)";
    } else if (token.normalized && rules.normalizes) {
      why = "normalized (Hugging Face matches it in the normalized text)";
    } else if (rules.prefixes_pieces) {
      why = "added where the pre-tokenizer puts a space before each piece";
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

AddedTokens::AddedTokens(std::vector<AddedToken> tokens) {
  std::unordered_set<std::string> seen;
  for (AddedToken& token : tokens) {
    if (!token.content.empty() && seen.insert(token.content).second) {
      tokens_.push_back(std::move(token));
    }
  }
  for (uint32_t i = 0; i < tokens_.size(); ++i) {
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
    any_lstrip_ = any_lstrip_ || tokens_[i].lstrip;
    end_id_ = std::max<int64_t>(end_id_, int64_t{tokens_[i].id} + 1);
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

const AddedTokens::Match* AddedTokens::Scan::Next(size_t limit) {
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
  return match_ && match_->begin <= limit ? &*match_ : nullptr;
}

void AddedTokens::Scan::Take() {
  scanned_ = space_from_ = match_->end;
  match_.reset();
}

}  // namespace encoderd
