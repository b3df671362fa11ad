// Byte-level BPE: GPT-2's tokenizer, which RoBERTa and the Hugging Face
// folders of its descendants ship as vocab.json + merges.txt. The text is
// split by GPT-2's pattern ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
// ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+), each piece's UTF-8 bytes are spelled as
// GPT-2's printable stand-ins (a space is "Ġ"), and the merges are applied
// lowest rank first; the specials come from the vocabulary (<s>, </s>,
// <pad>, <unk>). Every byte has a token, so no text is unknown (unless a
// fairseq dictionary, below, leaves a token out).
//
// fairseq's and torchtext's RoBERTa take GPT-2's files (encoder.json +
// vocab.bpe, the same formats) and number the tokens by fairseq's
// dictionary (dict.txt): line number n holds a GPT-2 id and a count, and
// gives that token the id 3 + n, after <s> = 0, <pad> = 1, </s> = 2,
// <unk> = 3; a token the dictionary lacks is <unk>.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "engine/text/added_tokens.h"
#include "engine/text/tokenizer.h"

namespace encoderd {

struct ByteBpeOptions {
  // Hugging Face's add_prefix_space: a space before a text that does not
  // start with one (RoBERTa's tokenizers leave it off).
  bool add_prefix_space = false;
  // fairseq's dict.txt (its path for CreateByteBpeTokenizer, its contents
  // for CreateByteBpeTokenizerFromData); empty: the vocabulary's own ids.
  std::string fairseq_dict;
  // Matched in a text before it is split, as ResolveAddedTokens takes them
  // (added_tokens.h; no normalizer). Not with add_prefix_space, which the
  // library applies to each piece between them (the vocabulary's special
  // tokens are then tokenized as text, others refused), nor with
  // fairseq_dict.
  std::vector<AddedToken> added_tokens;
  // The model's token embedding rows, which an added token past the
  // vocabulary must fit (0: any id).
  int64_t added_id_limit = 0;
};

// From vocab.json (an object of token -> id) and merges.txt (an optional
// "#version" line, then one "left right" pair a line, highest priority
// first).
StatusOr<std::unique_ptr<Tokenizer>> CreateByteBpeTokenizer(const std::string& vocab_path,
                                                            const std::string& merges_path,
                                                            const ByteBpeOptions& options);

// GPT-2's spelling of `bytes`: each byte as its printable stand-in (UTF-8),
// as vocab.json and merges.txt write tokens.
std::string ByteLevelSpelling(std::string_view bytes);

// The same from the files' contents; `source` names them in error messages.
StatusOr<std::unique_ptr<Tokenizer>> CreateByteBpeTokenizerFromData(std::string_view vocab_json,
                                                                    std::string_view merges,
                                                                    const ByteBpeOptions& options,
                                                                    const std::string& source);

// As CreateByteBpeTokenizerFromData for the BPE model of a tokenizer.json
// (engine/text/hf_tokenizer_json.h): `vocab_json` is its model.vocab and
// `merges` its model.merges, one "left right" pair a line; errors name those.
StatusOr<std::unique_ptr<Tokenizer>> CreateByteBpeTokenizerFromTokenizerJson(
    std::string_view vocab_json, std::string_view merges, const ByteBpeOptions& options,
    const std::string& source);

}  // namespace encoderd
