// Tokenizers read only as much of a text as max_tokens can use, so the cost
// of a request is bounded by the model's length limit and not by the bytes a
// client sends (a 4 MiB word costs what a few KiB cost).
//
// A tokenizer encodes the text window by window. Each window starts where the
// text can be encoded on its own (the start, a space, or inside a run of
// characters the vocabulary does not know) and reports which of its tokens are
// settled (equal to those of the whole text) and where the next window may
// start. The driver stops as soon as the answer is settled: the text is
// exhausted, or max_tokens + 1 tokens are settled (truncate=true), or the text
// provably needs more than max_tokens (truncate=false). A window that settles
// too little is retried larger (x4).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text/added_tokens.h"
#include "engine/text/tokenizer.h"

namespace encoderd {

// A window of a text handed to a tokenizer: a prefix of what is left.
struct TextWindow {
  std::string_view text;
  // The window reaches the end of the text.
  bool whole = false;
  // The window ends right before an ASCII space: a tokenizer whose tokens
  // never span a space encodes it exactly as that part of the whole text.
  bool at_space = false;
  // The window starts inside a run of characters the vocabulary does not
  // know, whose single <unk> token an earlier window already produced.
  bool in_unknown_run = false;
  // With in_unknown_run, encoded before `text` and standing for none of its
  // bytes: a character the vocabulary does not know, from the run (so that
  // the window's first <unk> is the run's), where the run went on in
  // characters the normalizer drops (WindowEncoding::resume_lead).
  std::string_view lead;
};

// The whole of `text` when it has at most `budget` bytes. Otherwise the
// longest prefix of at most `budget` bytes that ends before an ASCII space, if
// it is at least budget/2 long; otherwise the prefix cut at the last UTF-8
// character boundary at or before `budget` (mid-word).
TextWindow PrefixWindow(std::string_view text, size_t budget);

// What a tokenizer made of one window (special tokens excluded).
struct WindowEncoding {
  std::vector<int32_t> ids;
  std::vector<std::string> pieces;
  // The first `settled` tokens are those of the whole text at this place.
  int64_t settled = 0;
  // A lower bound of the tokens the text has from the window's start on.
  int64_t min_tokens = 0;
  // Where the next window may start (bytes into this one), and how many of
  // this window's tokens come before it (<= settled); 0: nowhere before the
  // window's end, the next try is this window, larger.
  size_t resume_at = 0;
  int64_t resume_tokens = 0;
  // The next window starts inside a run of unknown characters whose <unk>
  // is among the resume_tokens.
  bool resume_in_unknown_run = false;
  // The next window's TextWindow::lead (with resume_in_unknown_run).
  std::string resume_lead;
  // Where the tokenizer encoded only the window's first `encoded` bytes (a
  // window of those alone, never whole), what this encoding stands for; 0:
  // the whole window.
  size_t encoded = 0;
};

using WindowEncoder = std::function<StatusOr<WindowEncoding>(const TextWindow&)>;

// Bytes of a first window: enough for max_tokens tokens of ordinary text.
size_t InitialWindowBytes(int64_t max_tokens);

// Tokenizer::Encode's length contract (see ApplyLengthLimit) over windows,
// with `bos` / `eos` (ids and pieces) around the content. When the text is
// cut, untruncated_length is a lower bound of the whole text's length (at
// least max_tokens + 1), and the refusal for truncate=false says "at least N
// tokens". Sets bytes_read. With `added` (not empty), the added tokens
// matched in the text are their own ids and the text between them is
// encoded piece by piece, each piece as a whole text (AddedTokens).
StatusOr<Encoding> EncodeBounded(std::string_view text, int64_t max_tokens, bool truncate,
                                 std::pair<int32_t, std::string> bos,
                                 std::pair<int32_t, std::string> eos,
                                 const WindowEncoder& encode_window,
                                 const AddedTokens* added = nullptr);

}  // namespace encoderd
