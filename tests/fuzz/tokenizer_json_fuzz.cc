// libFuzzer target: any byte string as a model directory's tokenizer.json
// (Hugging Face's), then a few texts through the tokenizer it makes. The
// contract: a damaged or unsupported file gives an error naming it, never a
// crash or hang; one that loads encodes as every tokenizer must
// (encoding_invariants.h). Seeds: tiny BERT and RoBERTa files as Hugging
// Face writes them (tests/fixtures/fx_tokenizers.py's writers), and a tiny
// XLM-R Unigram one (xlmr_unigram_tokenizer_json of a 20-piece sentencepiece
// model trained with a 4-rule normalization map: 1 KB of map).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/text/hf_tokenizer_json.h"
#include "tests/fuzz/encoding_invariants.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  auto tokenizer = encoderd::CreateTokenizerFromHfJsonData(file, "fuzz-tokenizer.json");
  if (!tokenizer.ok()) {
    if (tokenizer.status().message().find("fuzz-tokenizer.json") == std::string::npos) {
      std::abort();  // every error must name the file
    }
    return 0;
  }
  for (const std::string_view text :
       {std::string_view(""), std::string_view("The thing, in 2 parts!"),
        std::string_view("unaffable r\xc3\xa9sum\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 x\ty don't"),
        std::string_view("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), std::string_view("\xff\xfe invalid"),
        std::string_view("  runs  of\r\n\r\n spaces \n ")}) {
    encoderd::fuzz::CheckEncoding(*tokenizer->tokenizer, text, 8);
  }
  return 0;
}
