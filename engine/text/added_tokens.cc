#include "engine/text/added_tokens.h"

#include <unicode/uchar.h>

#include <algorithm>
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

AddedTokens::AddedTokens(std::vector<AddedToken> tokens) {
  for (AddedToken& token : tokens) {
    if (!token.content.empty()) tokens_.push_back(std::move(token));
  }
  for (uint32_t i = 0; i < tokens_.size(); ++i) {
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
    any_lstrip_ = any_lstrip_ || tokens_[i].lstrip;
  }
  for (std::vector<uint32_t>& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

std::string AddedTokens::Describe() const {
  if (tokens_.empty()) return "";
  return ", " + std::to_string(tokens_.size()) + " special token" +
         (tokens_.size() == 1 ? "" : "s") + " matched in a text";
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
