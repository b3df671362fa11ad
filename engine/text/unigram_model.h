// The tokenizers library's Unigram model (Hugging Face's; what transformers'
// fast classes run for XLM-R's sentencepiece model, and a tokenizer.json's
// "Unigram"), on one word: the best path over the word's pieces, summed in
// float64 from the word's start. sentencepiece's Viterbi over the same
// pieces sums float32 from the text's start, and so breaks ties otherwise
// (a word "000" whose "0 00" and "00 0" score the same: the library keeps
// the path whose last piece starts earlier, "0 00"; sentencepiece gave
// "00 0" here), and never matches its control pieces (<s>), which are the
// library's vocabulary entries like any other.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace encoderd {

class UnigramModel {
 public:
  struct Entry {
    std::string piece;
    double score = 0;
  };
  // `vocab` in id order (id = index); `unk_id` one of them. INVALID_ARGUMENT
  // when the vocabulary is empty, unk_id is outside it, or a piece is empty
  // or not UTF-8 (the library's vocabulary holds strings). Where a piece is
  // given twice, its last entry is the one used (the library's map keeps the
  // last).
  static StatusOr<std::shared_ptr<const UnigramModel>> Create(std::vector<Entry> vocab,
                                                              int32_t unk_id);

  // A piece of a word: its id and the bytes [begin, end) of the word.
  struct Token {
    int32_t id = 0;
    size_t begin = 0, end = 0;
  };
  // Appends the pieces of `word` (well-formed UTF-8), as the library's
  // encode_optimized splits it: at each character start every piece of the
  // vocabulary the word goes on with, and where none is that character
  // alone, an <unk> of it scored the lowest score less 10; a later path to
  // a place wins only with a higher score; runs of <unk> are one <unk>,
  // whose id is that of its text where the vocabulary holds it.
  void Encode(std::string_view word, std::vector<Token>* out) const;

  int32_t unk_id() const { return unk_id_; }
  // The longest piece, in bytes.
  size_t longest_piece() const { return longest_; }

 private:
  UnigramModel() = default;
  // A byte trie over the pieces: a node's children are contiguous, sorted
  // by their byte.
  struct Node {
    uint32_t first_child = 0;
    uint16_t children = 0;
    uint8_t byte = 0;
    int32_t id = -1;  // the piece that ends here, if any
  };
  // The child of `node` for `byte`; 0 (the root, no one's child): none.
  uint32_t Child(uint32_t node, uint8_t byte) const;
  // The id of the piece `piece` (not empty), or -1.
  int32_t Find(std::string_view piece) const;

  std::vector<Entry> vocab_;
  int32_t unk_id_ = 0;
  double unk_score_ = 0;
  size_t longest_ = 0;
  std::vector<Node> nodes_;
  std::array<uint32_t, 256> root_children_{};
};

}  // namespace encoderd
