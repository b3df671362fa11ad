// libFuzzer target: any byte string as a SentencePiece model file (a model
// directory's sentencepiece.bpe.model, read by the sentencepiece library),
// then a few texts through the tokenizer it makes. The contract: a damaged
// model file gives an error naming it, never a crash or hang; a model that
// loads encodes as every tokenizer must (encoding_invariants.h); when the
// model's bytes pass the normalization-map check (sentencepiece_charsmap.h),
// so do the maps the library holds after loading it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/text/sentencepiece_tokenizer.h"
#include "tests/fuzz/encoding_invariants.h"
#include "tests/unit/tokenizer_tiny_models.h"

namespace {

// Whether the sentencepiece library loads here at all: without it every
// input is refused and the target tests only that refusal.
bool SentencePieceLoads() {
  auto tiny = encoderd::CreateSentencePieceTokenizerFromProto(
      encoderd::testing::TinySentencePieceModel(), {});
  if (!tiny.ok()) {
    std::fprintf(stderr, "spm_model_fuzz: sentencepiece does not load here: %s\n",
                 tiny.status().ToString().c_str());
  }
  return tiny.ok();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool loads = SentencePieceLoads();
  (void)loads;
  const std::string_view model(reinterpret_cast<const char*>(data), size);
  auto tokenizer = encoderd::CreateSentencePieceTokenizerFromProto(model, {}, "fuzz-model");
  if (!tokenizer.ok()) {
    if (tokenizer.status().message().find("fuzz-model") == std::string::npos) {
      std::abort();  // every error must name the file
    }
    // The library holds a normalization map that the check before loading
    // did not read where protobuf did, or the model could not be read back
    // to find out (sentencepiece_library.cc).
    const std::string& message = tokenizer.status().message();
    if (message.find("its check did not see") != std::string::npos ||
        message.find("could not be serialized again") != std::string::npos) {
      std::abort();
    }
    return 0;
  }
  for (const std::string_view text :
       {std::string_view(""), std::string_view("the thing, in 2 parts!"),
        std::string_view("\xe4\xb8\xad \xe2\x96\x81 x\ty"),
        std::string_view("aaaaaaaaaaaaaaaaaaaaaaaa"), std::string_view("\xff\xfe invalid")}) {
    encoderd::fuzz::CheckEncoding(**tokenizer, text, 8);
  }
  return 0;
}
