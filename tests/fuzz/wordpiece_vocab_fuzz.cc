// libFuzzer target: any byte string as a model directory's vocab.txt, read
// from a file as the loader reads it, then a few texts through the WordPiece
// tokenizer it makes (cased and uncased). The contract: a damaged vocabulary
// gives an error naming the file, never a crash or hang; one that loads
// encodes as every tokenizer must (encoding_invariants.h).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include "engine/text/wordpiece_tokenizer.h"
#include "tests/fuzz/encoding_invariants.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // One file per process (never destroyed), removed when libFuzzer exits.
  static const std::string& path =
      *new std::string("/tmp/wordpiece_vocab_fuzz." + std::to_string(getpid()) + ".txt");
  static const int removed_at_exit = std::atexit([] { std::remove(path.c_str()); });
  (void)removed_at_exit;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  // Unset: the casing from the vocabulary (VocabularyIsCased reads every token).
  for (const std::optional<bool> lower_case :
       {std::optional<bool>(true), std::optional<bool>(false), std::optional<bool>()}) {
    encoderd::WordPieceOptions options;
    options.lower_case = lower_case;
    options.max_chars_per_word = 24;
    auto tokenizer = encoderd::CreateWordPieceTokenizer(path, options);
    if (!tokenizer.ok()) {
      if (tokenizer.status().message().find(path) == std::string::npos) {
        std::abort();  // every error must name the file
      }
      continue;
    }
    for (const std::string_view text :
         {std::string_view(""), std::string_view("The thing, in 2 parts!"),
          std::string_view("unaffable r\xc3\xa9sum\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 x\ty"),
          std::string_view("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
          std::string_view("\xff\xfe invalid")}) {
      encoderd::fuzz::CheckEncoding(**tokenizer, text, 8);
    }
  }
  return 0;
}
