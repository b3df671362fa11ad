// Workload: the texts of request number i, as a pure function of (spec, i),
// so any thread can build any request and a run is reproducible from its seed.
// Generated texts are random words of one language (per text) from the
// built-in word list; corpus texts are lines sampled from a file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace encoderd::loadtest {

enum class TextLengthMode {
  kFixed,    // every text has min_words words
  kUniform,  // words uniform in [min_words, max_words]
  kCorpus,   // lines of a file, sampled uniformly
};

struct WorkloadSpec {
  // Texts in each request.
  int texts_per_request = 1;
  TextLengthMode length_mode = TextLengthMode::kFixed;
  // Words per generated text (kFixed uses min_words).
  int min_words = 16;
  int max_words = 16;
  // kCorpus: the texts (non-empty lines of the file).
  std::vector<std::string> corpus;
  uint64_t seed = 1;
};

// Empty when the spec is valid, else what is wrong with it.
std::string ValidateWorkloadSpec(const WorkloadSpec& spec);

// Reads the non-empty lines of `path` (a trailing '\r' is dropped). Returns
// false and sets *error (naming the file) when it cannot be read or is empty.
bool ReadCorpusFile(const std::string& path, std::vector<std::string>* lines, std::string* error);

class Workload {
 public:
  // `spec` must have passed ValidateWorkloadSpec.
  explicit Workload(WorkloadSpec spec) : spec_(std::move(spec)) {}

  // Thread-safe; the same index always gives the same texts.
  std::vector<std::string> Texts(uint64_t index) const;

  const WorkloadSpec& spec() const { return spec_; }

 private:
  WorkloadSpec spec_;
};

}  // namespace encoderd::loadtest
