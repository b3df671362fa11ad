// Tokenization cost of hostile inputs: CPU seconds per call and per MiB of
// input for one long word (no spaces) of several kinds at 256 KiB, 1 MiB and
// 4 MiB, for the bounded encoding the daemon uses and for the whole text (what
// the tokenizer costs when it reads everything: the cost before bounding).
//
//   ./build/engine/tokenize_bench [--spm FILE] [--vocab FILE] [--bpe-dir DIR]
//                                 [--tokenizer-json FILE] [--max-tokens N]
//                                 [--only NAME] [--whole 0]
//
// Defaults: the bundled langid SentencePiece model and a generated WordPiece
// vocabulary; max_tokens 512. --bpe-dir adds the byte-level BPE of DIR's
// vocab.json + merges.txt (a Hugging Face RoBERTa folder), --tokenizer-json
// the tokenizer of a tokenizer.json (an XLM-R one normalizes one grapheme
// cluster at a time); --only runs the tokenizer of that name alone, and
// --whole 0 leaves out the whole-text column (a run of unknown characters
// costs sentencepiece time quadratic in its length there: minutes at 4 MiB).
// Prints a Markdown table (docs/reliability.md).
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/text/byte_bpe_tokenizer.h"
#include "engine/text/hf_tokenizer_json.h"
#include "engine/text/sentencepiece_tokenizer.h"
#include "engine/text/wordpiece_tokenizer.h"

namespace {

using encoderd::Encoding;
using encoderd::StatusOr;
using encoderd::Tokenizer;

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string Repeat(const std::string& unit, size_t bytes) {
  std::string s;
  while (s.size() + unit.size() <= bytes) s += unit;
  return s;
}

struct Input {
  const char* name;
  std::string unit;  // repeated to the size, whole characters only
};

// A vocabulary of letters, their "##" forms and a few words: WordPiece's cost
// depends on the word lengths, not on the vocabulary's size.
std::vector<std::string> SmallWordPieceVocab() {
  std::vector<std::string> v = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (char c = 'a'; c <= 'z'; ++c) {
    v.push_back(std::string(1, c));
    v.push_back("##" + std::string(1, c));
  }
  for (const char* w : {"the", "quick", "brown", "fox", "##ing", "##ed"}) v.push_back(w);
  return v;
}

std::string StretchThenRun(char stretch) {
  std::string unit(17 * 1024, stretch);
  for (int i = 0; i < 47 * 1024 / 4; ++i) unit += "\xf0\x9f\x98\x80";
  return unit;
}

}  // namespace

int main(int argc, char** argv) {
  std::string spm_path = ENCODERD_SOURCE_DIR "/models/langid/sentencepiece.bpe.model";
  std::string vocab_path, bpe_dir, json_path, only;
  bool whole_text = true;
  int64_t max_tokens = 512;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--spm"))
      spm_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--vocab"))
      vocab_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--bpe-dir"))
      bpe_dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--tokenizer-json"))
      json_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--only"))
      only = argv[i + 1];
    else if (!std::strcmp(argv[i], "--whole"))
      whole_text = std::strcmp(argv[i + 1], "0") != 0;
    else if (!std::strcmp(argv[i], "--max-tokens"))
      max_tokens = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--spm FILE] [--vocab FILE] [--bpe-dir DIR] [--tokenizer-json FILE] "
                   "[--max-tokens N] [--only NAME] [--whole 0]\n",
                   argv[0]);
      return 2;
    }
  }
  auto spm = encoderd::CreateSentencePieceTokenizer(spm_path, {});
  auto wordpiece = vocab_path.empty()
                       ? encoderd::CreateWordPieceTokenizerFromTokens(SmallWordPieceVocab(), {})
                       : encoderd::CreateWordPieceTokenizer(vocab_path, {});
  auto bpe = bpe_dir.empty() ? StatusOr<std::unique_ptr<Tokenizer>>(std::unique_ptr<Tokenizer>())
                             : encoderd::CreateByteBpeTokenizer(bpe_dir + "/vocab.json",
                                                                bpe_dir + "/merges.txt", {});
  auto from_json = json_path.empty()
                       ? StatusOr<encoderd::HfJsonTokenizer>(encoderd::HfJsonTokenizer{})
                       : encoderd::CreateTokenizerFromHfJson(json_path);
  if (!from_json.ok()) {
    std::fprintf(stderr, "%s\n", from_json.status().ToString().c_str());
    return 1;
  }
  for (const auto* t : {&spm, &wordpiece, &bpe}) {
    if (!t->ok()) {
      std::fprintf(stderr, "%s\n", t->status().ToString().c_str());
      return 1;
    }
  }
  const std::vector<Input> inputs = {
      {"'a' run", "a"},
      {"mixed scripts", "abcxyz\xc3\xa4\xc3\xb6\xc3\xbc\xe6\x97\xa5\xe6\x9c\xac\xd0\xb6"},
      {"CJK run", "\xe4\xbb\x8a\xe5\xa4\xa9\xe5\xa4\xa9\xe6\xb0\x94\xe5\xbe\x88\xe5\xa5\xbd"},
      {"emoji + ZWJ", "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7"},
      {"combining marks", "e\xcc\x81"},
      // NFD Vietnamese: e, U+0323, U+0302 (one cluster), then e and U+0301.
      {"two marks a letter",
       "e\xcc\xa3\xcc\x82"
       "e\xcc\x81"},
      {"words", "the quick brown fox "},
      // 17 KiB of characters the normalizer drops (or of spaces), then a
      // 47 KiB run of characters the vocabulary lacks: windows under 64 KiB.
      {"dropped + unknown run", StretchThenRun('\x01')},
      {"spaces + unknown run", StretchThenRun(' ')},
  };
  std::printf("max_tokens %lld; CPU seconds of the calling thread, one call each\n\n",
              static_cast<long long>(max_tokens));
  std::printf(
      "| tokenizer | input | size | truncate | answer | bytes read | ms | ms/MiB "
      "| whole text: ms/MiB |\n|---|---|---:|---|---|---:|---:|---:|---:|\n");
  for (const auto& [name, tokenizer] :
       {std::pair<const char*, const Tokenizer*>{"sentencepiece (langid)", spm->get()},
        {"wordpiece", wordpiece->get()},
        {"byte-level BPE", bpe->get()},
        {"tokenizer.json", from_json->tokenizer.get()}}) {
    if (tokenizer == nullptr || (!only.empty() && only != name)) continue;
    for (const Input& input : inputs) {
      for (const size_t kib : {256u, 1024u, 4096u}) {
        const std::string text = Repeat(input.unit, kib * 1024);
        const double mib = static_cast<double>(text.size()) / (1 << 20);
        // The whole text: max_tokens above any token count reads everything.
        double t0 = ThreadCpuSeconds();
        const bool whole =
            whole_text &&
            tokenizer->Encode(text, static_cast<int64_t>(text.size()) + 2, false).ok();
        const double whole_s = ThreadCpuSeconds() - t0;
        for (const bool truncate : {true, false}) {
          t0 = ThreadCpuSeconds();
          StatusOr<Encoding> enc = tokenizer->Encode(text, max_tokens, truncate);
          const double s = ThreadCpuSeconds() - t0;
          const std::string answer = !enc.ok() ? "refused"
                                     : enc->truncated()
                                         ? "truncated"
                                         : std::to_string(enc->ids.size()) + " tokens";
          const std::string read = enc.ok() ? std::to_string(enc->bytes_read) : "-";
          std::printf("| %s | %s | %zu KiB | %s | %s | %s | %.2f | %.2f | %.0f |\n", name,
                      input.name, kib, truncate ? "yes" : "no", answer.c_str(), read.c_str(),
                      s * 1e3, s * 1e3 / mib, whole ? whole_s * 1e3 / mib : -1.0);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
