#include "engine/text/bounded_encoding.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "engine/text/truncation.h"
#include "engine/text/utf8.h"

namespace encoderd {

TextWindow PrefixWindow(std::string_view text, size_t budget) {
  TextWindow window;
  if (text.size() <= budget) {
    window.text = text;
    window.whole = true;
    return window;
  }
  for (size_t i = budget; i >= budget / 2 && i > 0; --i) {
    if (text[i] == ' ') {
      window.text = text.substr(0, i);
      window.at_space = true;
      return window;
    }
  }
  window.text = text.substr(0, CharStartAtOrBefore(text, budget));
  return window;
}

size_t InitialWindowBytes(int64_t max_tokens) {
  // Ordinary text averages 3-6 bytes a token; a window that settles too few
  // tokens grows.
  return static_cast<size_t>(std::max<int64_t>(max_tokens, 0)) * 8 + 256;
}

namespace {

// Windows through a run of unknown characters stay small: sentencepiece joins
// a run into one piece by appending, so its cost grows with the square of
// the run's length within one window.
constexpr size_t kUnknownRunWindow = 1024;

void Append(const WindowEncoding& w, int64_t count, Encoding* enc) {
  enc->ids.insert(enc->ids.end(), w.ids.begin(), w.ids.begin() + count);
  enc->pieces.insert(enc->pieces.end(), w.pieces.begin(), w.pieces.begin() + count);
}

}  // namespace

StatusOr<Encoding> EncodeBounded(std::string_view text, int64_t max_tokens, bool truncate,
                                 std::pair<int32_t, std::string> bos,
                                 std::pair<int32_t, std::string> eos,
                                 const WindowEncoder& encode_window, const AddedTokens* added) {
  if (max_tokens < 2) return ApplyLengthLimit(Encoding{}, max_tokens, truncate);
  // Content tokens (specials not counted) that put a text over the limit.
  const int64_t over = max_tokens - 1;
  Encoding enc;
  enc.ids.push_back(bos.first);
  enc.pieces.push_back(std::move(bos.second));
  size_t largest_window = 0;
  const auto finish = [&](size_t bytes_read) -> StatusOr<Encoding> {
    enc.ids.push_back(eos.first);
    enc.pieces.push_back(std::move(eos.second));
    ASSIGN_OR_RETURN(Encoding done, ApplyLengthLimit(std::move(enc), max_tokens, truncate));
    done.bytes_read = static_cast<int64_t>(bytes_read);
    done.largest_window = static_cast<int64_t>(largest_window);
    return done;
  };
  // The text over the limit with `min_tokens` or more content tokens.
  const auto over_limit = [&](int64_t min_tokens, size_t bytes_read) -> StatusOr<Encoding> {
    const int64_t at_least = min_tokens + 2;
    if (!truncate) {
      return InvalidArgument("input is at least " + std::to_string(at_least) +
                             " tokens long, more than the limit of " + std::to_string(max_tokens) +
                             " tokens (truncation is off)");
    }
    ASSIGN_OR_RETURN(Encoding done, finish(bytes_read));
    done.untruncated_length = std::max(at_least, max_tokens + 1);
    return done;
  };
  std::optional<AddedTokens::Scan> scan;
  if (added != nullptr && !added->empty()) scan.emplace(*added, text);
  size_t pos = 0, read = 0;
  bool in_unknown_run = false;
  std::string lead;  // TextWindow::lead, with in_unknown_run
  for (size_t budget = InitialWindowBytes(max_tokens);;) {
    // The piece of text from `pos` to the next added token (when it begins
    // within this window's reach) or the text's end.
    const AddedTokens::Match* token = scan ? scan->Next(pos + budget) : nullptr;
    const std::string_view piece = text.substr(pos, (token ? token->begin : text.size()) - pos);
    const auto before = static_cast<int64_t>(enc.ids.size()) - 1;
    // (No empty piece is encoded, as in the library; an empty text is.)
    if (!piece.empty() || (!token && pos == 0)) {
      TextWindow window = PrefixWindow(piece, budget);
      window.in_unknown_run = in_unknown_run;
      if (in_unknown_run) window.lead = lead;
      ASSIGN_OR_RETURN(WindowEncoding w, encode_window(window));
      const size_t encoded = w.encoded > 0 ? w.encoded : window.text.size();
      read = std::max(read, pos + encoded);
      largest_window = std::max(largest_window, encoded);
      if (!window.whole || encoded < window.text.size()) {
        if (truncate && before + w.settled >= over) {
          Append(w, w.settled, &enc);
          return over_limit(before + w.min_tokens, read);
        }
        if (!truncate && before + w.min_tokens >= over) {
          return over_limit(before + w.min_tokens, read);
        }
        if (w.resume_at > 0) {
          Append(w, w.resume_tokens, &enc);
          pos += w.resume_at;
          in_unknown_run = w.resume_in_unknown_run;
          lead = std::move(w.resume_lead);
          budget = in_unknown_run ? kUnknownRunWindow : InitialWindowBytes(max_tokens);
        } else {
          budget *= 4;
        }
        continue;
      }
      Append(w, static_cast<int64_t>(w.ids.size()), &enc);
    }
    if (!token) return finish(read);
    enc.ids.push_back(token->token->id);
    enc.pieces.push_back(token->token->content);
    pos = token->end;
    read = std::max(read, pos);
    scan->Take();
    in_unknown_run = false;
    budget = InitialWindowBytes(max_tokens);
    // Over the limit whatever follows.
    const auto content = static_cast<int64_t>(enc.ids.size()) - 1;
    if (content >= over && pos < text.size()) return over_limit(content, read);
  }
}

}  // namespace encoderd
