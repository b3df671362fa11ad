// libFuzzer target: arbitrary bytes (valid UTF-8 or not) through the WordPiece
// (cased and uncased), SentencePiece and byte-level BPE tokenizers, with truncation on and
// off; the uncased WordPiece and the byte-level BPE match special tokens
// written in the text (added_tokens.h). The models are built in memory so
// the target needs no fixtures.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "engine/text/byte_bpe_tokenizer.h"
#include "engine/text/sentencepiece_tokenizer.h"
#include "engine/text/wordpiece_tokenizer.h"
#include "tests/fuzz/encoding_invariants.h"
#include "tests/unit/tokenizer_tiny_models.h"

namespace {

using encoderd::Tokenizer;

struct Tokenizers {
  std::unique_ptr<Tokenizer> uncased;
  std::unique_ptr<Tokenizer> cased;
  std::unique_ptr<Tokenizer> spm;  // null when sentencepiece cannot load here
  std::unique_ptr<Tokenizer> byte_bpe;
};

Tokenizers* Build() {
  auto* t = new Tokenizers();
  encoderd::WordPieceOptions options;
  options.max_chars_per_word = 24;
  // Special tokens matched in the text (added_tokens.h), one taking the
  // whitespace on both sides.
  encoderd::AddedToken mask{"[MASK]"};
  mask.lstrip = mask.rstrip = true;
  options.added_tokens = {encoderd::AddedToken{"[SEP]"}, encoderd::AddedToken{"[CLS]"}, mask};
  auto uncased = encoderd::CreateWordPieceTokenizerFromTokens(
      encoderd::testing::TinyWordPieceVocab(), options);
  options.added_tokens.clear();
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
  const encoderd::testing::TinyByteBpe tiny =
      encoderd::testing::MakeTinyByteBpe(encoderd::ByteLevelSpelling);
  encoderd::ByteBpeOptions bpe_options;
  encoderd::AddedToken bpe_mask{"<mask>"};
  bpe_mask.lstrip = true;
  bpe_options.added_tokens = {encoderd::AddedToken{"<s>"}, encoderd::AddedToken{"</s>"}, bpe_mask};
  auto byte_bpe =
      encoderd::CreateByteBpeTokenizerFromData(tiny.vocab_json, tiny.merges, bpe_options, "tiny");
  if (!byte_bpe.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: cannot build byte-level BPE: %s\n",
                 byte_bpe.status().ToString().c_str());
    std::abort();
  }
  t->byte_bpe = std::move(byte_bpe).value();
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Tokenizers* const tokenizers = Build();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const int64_t max_tokens = 2 + (size > 0 ? data[0] % 16 : 0);
  using encoderd::fuzz::CheckEncoding;
  CheckEncoding(*tokenizers->uncased, text, max_tokens);
  CheckEncoding(*tokenizers->cased, text, max_tokens);
  if (tokenizers->spm) CheckEncoding(*tokenizers->spm, text, max_tokens);
  CheckEncoding(*tokenizers->byte_bpe, text, max_tokens);
  return 0;
}
