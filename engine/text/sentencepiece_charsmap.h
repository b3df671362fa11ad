// Checks a sentencepiece model's normalization maps before the sentencepiece
// library sees them. The library reads a map's trie and its replacement
// strings with no bounds checks (sentencepiece 0.1.97's normalizer.cc and
// darts-clone's commonPrefixSearch): a damaged map loads without an error
// and then reads outside it, or past a 32-entry array on the stack, while
// encoding a model's self-test samples at load or a client's text, which
// can take the process down. A map that passes these checks keeps every
// read the library makes inside it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace encoderd {

// A precompiled_charsmap as the library takes it: a little-endian uint32 n,
// n bytes of double-array trie (4-byte units), then the NUL-terminated
// replacement strings. Checks, over every node a text can reach from the
// root: its children's block of 256 units lies inside the trie; a leaf's
// value is the start of a string that ends with a NUL inside the map; no
// cycle; at most 32 leaves along any path (the library keeps 32 matches).
// INVALID_ARGUMENT naming what is wrong otherwise. An empty map is no map.
Status CheckPrecompiledCharsMap(std::string_view map);

// Every precompiled_charsmap of a serialized ModelProto (its normalizer_spec
// and denormalizer_spec) through CheckPrecompiledCharsMap; INVALID_ARGUMENT
// also when the bytes are not protobuf wire format.
Status CheckSentencePieceCharsMaps(std::string_view serialized_model);

// How a model's normalizer treats spaces (its NormalizerSpec's flags).
struct SentencePieceWhitespace {
  // A "▁" is put before the text.
  bool add_dummy_prefix = true;
  // Spaces at the text's start and end are dropped, runs of them collapsed.
  bool remove_extra_whitespaces = true;
  // Spaces become "▁".
  bool escape_whitespaces = true;
};

// The whitespace flags of a serialized ModelProto; INVALID_ARGUMENT when
// the bytes are not protobuf wire format.
StatusOr<SentencePieceWhitespace> ReadSentencePieceWhitespace(std::string_view serialized_model);

// The serialized ModelProto as the fast class transformers converts it into
// reads it, and in *map its normalizer_spec's precompiled_charsmap (empty:
// none), which that class applies a grapheme cluster at a time
// (PrecompiledGraphemes): the model without the map, with the whitespace
// flags at sentencepiece's defaults (the converter writes Strip, runs of
// spaces made one and Metaspace's prefix whatever the model says, which is
// what those defaults do) and without self-test samples (their expected
// pieces come from the map); the rest as it was. INVALID_ARGUMENT when the
// bytes are not protobuf wire format.
StatusOr<std::string> FastClassModel(std::string_view serialized_model, std::string* map);

// A piece of a serialized ModelProto and its score.
struct SentencePieceEntry {
  std::string piece;
  float score = 0;
};
// The pieces of a serialized ModelProto, in id order; INVALID_ARGUMENT when
// the bytes are not protobuf wire format.
StatusOr<std::vector<SentencePieceEntry>> ReadSentencePieces(std::string_view serialized_model);

// Whether a serialized ModelProto's trainer_spec says UNIGRAM (its default),
// as XLM-R's model is; INVALID_ARGUMENT when the bytes are not protobuf wire
// format.
StatusOr<bool> IsUnigramModel(std::string_view serialized_model);

// The tokenizers library's Precompiled normalizer (Hugging Face's, through
// its spm_precompiled crate) over a precompiled_charsmap. sentencepiece
// replaces the longest key of the map at each place; the library takes the
// text one extended grapheme cluster (Unicode's UAX #29, here ICU's) at a
// time: a cluster of under 6 bytes that starts with a key is replaced whole
// by the replacement of the shortest such key (whatever follows that key in
// the cluster is dropped), and any other cluster character by character,
// each by its own key's replacement or kept. So NFD U+1EC7 (e, U+0323,
// U+0302) becomes U+1EB9 (the U+0302 dropped), fullwidth e and U+0301 an
// "e", and NFD Hangul stays conjoining jamo, where sentencepiece gives
// U+1EC7, U+00E9 and syllables.
class PrecompiledGraphemes {
 public:
  // INVALID_ARGUMENT where CheckPrecompiledCharsMap refuses the map, or its
  // replacement strings are not UTF-8 or one begins inside a character (the
  // library refuses those too).
  static StatusOr<std::shared_ptr<const PrecompiledGraphemes>> Create(std::string_view map);

  struct Normalized {
    std::string text;
    // text.size() + 1 entries, as sentencepiece's norm_to_orig: where in the
    // input the characters that byte i of `text` came from begin; the last
    // entry is the input's size.
    std::vector<uint32_t> input_at;
  };
  // `text`: well-formed UTF-8; INVALID_ARGUMENT from 2 GiB on.
  StatusOr<Normalized> Normalize(std::string_view text) const;

 private:
  PrecompiledGraphemes(std::vector<uint32_t> units, std::string strings)
      : units_(std::move(units)), strings_(std::move(strings)) {}
  // The replacement of the shortest key `key` starts with, if any.
  const char* Shortest(std::string_view key) const;

  std::vector<uint32_t> units_;
  std::string strings_;
};

}  // namespace encoderd
