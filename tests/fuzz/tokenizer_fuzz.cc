// libFuzzer target: arbitrary bytes (valid UTF-8 or not) through the WordPiece
// (cased and uncased) and SentencePiece tokenizers, with truncation on and
// off. The models are built in memory so the target needs no fixtures.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "engine/text/sentencepiece_tokenizer.h"
#include "engine/text/wordpiece_tokenizer.h"
#include "tests/unit/tokenizer_tiny_models.h"

namespace {

using encoderd::Tokenizer;

struct Tokenizers {
  std::unique_ptr<Tokenizer> uncased;
  std::unique_ptr<Tokenizer> cased;
  std::unique_ptr<Tokenizer> spm;  // null when sentencepiece cannot load here
};

Tokenizers* Build() {
  auto* t = new Tokenizers();
  encoderd::WordPieceOptions options;
  options.max_chars_per_word = 24;
  auto uncased = encoderd::CreateWordPieceTokenizerFromTokens(
      encoderd::testing::TinyWordPieceVocab(), options);
  options.lower_case = false;
  auto cased = encoderd::CreateWordPieceTokenizerFromTokens(encoderd::testing::TinyWordPieceVocab(),
                                                            options);
  if (!uncased.ok() || !cased.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: cannot build wordpiece: %s\n",
                 (uncased.ok() ? cased : uncased).status().ToString().c_str());
    std::abort();
  }
  t->uncased = std::move(uncased).value();
  t->cased = std::move(cased).value();
  auto spm = encoderd::CreateSentencePieceTokenizerFromProto(
      encoderd::testing::TinySentencePieceModel(), {});
  if (spm.ok()) {
    t->spm = std::move(spm).value();
  } else {
    // Sanitizer runtimes forbid the RTLD_DEEPBIND that isolates sentencepiece
    // from the system libprotobuf; say so and fuzz WordPiece alone.
    std::fprintf(stderr, "tokenizer_fuzz: sentencepiece skipped: %s\n",
                 spm.status().ToString().c_str());
  }
  return t;
}

void Check(const Tokenizer& tokenizer, std::string_view text, int64_t max_tokens) {
  for (const bool truncate : {true, false}) {
    auto enc = tokenizer.Encode(text, max_tokens, truncate);
    if (!enc.ok()) continue;
    const auto n = static_cast<int64_t>(enc->ids.size());
    if (n > max_tokens || enc->ids.size() != enc->pieces.size() || n < 2 ||
        enc->ids.front() != tokenizer.special_tokens().bos ||
        enc->ids.back() != tokenizer.special_tokens().eos || enc->untruncated_length < n ||
        (!truncate && enc->truncated())) {
      std::fprintf(stderr, "tokenizer_fuzz: broken encoding from %s\n",
                   tokenizer.Describe().c_str());
      std::abort();
    }
    for (int32_t id : enc->ids) {
      if (id < 0 || id >= tokenizer.vocab_size()) std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Tokenizers* const tokenizers = Build();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const int64_t max_tokens = 2 + (size > 0 ? data[0] % 16 : 0);
  Check(*tokenizers->uncased, text, max_tokens);
  Check(*tokenizers->cased, text, max_tokens);
  if (tokenizers->spm) Check(*tokenizers->spm, text, max_tokens);
  return 0;
}
