// Checks a sentencepiece model's normalization maps before the sentencepiece
// library sees them. The library reads a map's trie and its replacement
// strings with no bounds checks (sentencepiece 0.1.97's normalizer.cc and
// darts-clone's commonPrefixSearch): a damaged map loads without an error
// and then reads outside it, or past a 32-entry array on the stack, while
// encoding a model's self-test samples at load or a client's text, which
// can take the process down. A map that passes these checks keeps every
// read the library makes inside it.
#pragma once

#include <string_view>

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

}  // namespace encoderd
