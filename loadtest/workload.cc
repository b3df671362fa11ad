#include "loadtest/workload.h"

#include <fstream>

#include "loadtest/word_list.h"

namespace encoderd::loadtest {
namespace {

// SplitMix64: a tiny, well-mixed generator; seeding it per request is free.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) for n > 0 (the modulo bias is < 2^-40 for our n).
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  uint64_t state_;
};

}  // namespace

std::string ValidateWorkloadSpec(const WorkloadSpec& spec) {
  if (spec.texts_per_request < 1) return "texts per request must be >= 1";
  switch (spec.length_mode) {
    case TextLengthMode::kFixed:
      if (spec.min_words < 1) return "words per text must be >= 1";
      break;
    case TextLengthMode::kUniform:
      if (spec.min_words < 1 || spec.max_words < spec.min_words)
        return "word range must satisfy 1 <= min <= max";
      break;
    case TextLengthMode::kCorpus:
      if (spec.corpus.empty()) return "the text file has no non-empty lines";
      break;
  }
  return "";
}

bool ReadCorpusFile(const std::string& path, std::vector<std::string>* lines, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot open text file " + path;
    return false;
  }
  lines->clear();
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines->push_back(line);
  }
  if (in.bad()) {
    *error = "error reading text file " + path;
    return false;
  }
  if (lines->empty()) {
    *error = "text file " + path + " has no non-empty lines";
    return false;
  }
  return true;
}

std::vector<std::string> Workload::Texts(uint64_t index) const {
  SplitMix64 rng(spec_.seed * 0x2545F4914F6CDD1DULL ^ SplitMix64(index).Next());
  const auto& languages = BuiltinWordList();
  std::vector<std::string> texts;
  texts.reserve(static_cast<size_t>(spec_.texts_per_request));
  for (int t = 0; t < spec_.texts_per_request; ++t) {
    if (spec_.length_mode == TextLengthMode::kCorpus) {
      texts.push_back(spec_.corpus[rng.Below(spec_.corpus.size())]);
      continue;
    }
    int words = spec_.min_words;
    if (spec_.length_mode == TextLengthMode::kUniform) {
      words +=
          static_cast<int>(rng.Below(static_cast<uint64_t>(spec_.max_words - spec_.min_words) + 1));
    }
    const LanguageWords& lang = languages[rng.Below(languages.size())];
    std::string text;
    for (int w = 0; w < words; ++w) {
      if (w) text += ' ';
      text += lang.words[rng.Below(lang.words.size())];
    }
    texts.push_back(std::move(text));
  }
  return texts;
}

}  // namespace encoderd::loadtest
