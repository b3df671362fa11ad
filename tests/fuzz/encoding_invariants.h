// What every tokenizer's encoding must satisfy, for the fuzz targets that
// tokenize (tokenizer_fuzz, spm_model_fuzz): aborts when an encoding of
// `text` breaks it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "engine/text/tokenizer.h"

namespace encoderd::fuzz {

// At most max_tokens ids, each inside the vocabulary, between the
// tokenizer's <s> and </s>, a piece per id, and never cut when truncation is
// off; for truncate both true and false. An encoding that fails is allowed.
inline void CheckEncoding(const Tokenizer& tokenizer, std::string_view text, int64_t max_tokens) {
  for (const bool truncate : {true, false}) {
    auto enc = tokenizer.Encode(text, max_tokens, truncate);
    if (!enc.ok()) continue;
    const auto n = static_cast<int64_t>(enc->ids.size());
    if (n > max_tokens || enc->ids.size() != enc->pieces.size() || n < 2 ||
        enc->ids.front() != tokenizer.special_tokens().bos ||
        enc->ids.back() != tokenizer.special_tokens().eos || enc->untruncated_length < n ||
        (!truncate && enc->truncated())) {
      std::fprintf(stderr, "fuzz: broken encoding from %s\n", tokenizer.Describe().c_str());
      std::abort();
    }
    for (int32_t id : enc->ids) {
      if (id < 0 || id >= tokenizer.vocab_size()) std::abort();
    }
  }
}

}  // namespace encoderd::fuzz
