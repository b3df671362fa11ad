// libFuzzer target: a sentencepiece normalization map (precompiled_charsmap)
// and a text. Input: the map's bytes, the text, then one byte giving the
// text's length (at most 255). The contract of CheckPrecompiledCharsMap: a
// map it passes keeps every read the library makes inside it. So for a map
// it passes, the library's prefix search (darts-clone's commonPrefixSearch
// and the normalizer's reading of a replacement) is walked here over every
// suffix of the text with each read checked, aborting on one outside the
// map or on more than 32 matches; then the library itself, in the tiny
// model, encodes the text (which finds only reads that fault: the library
// runs without the sanitizers, sentencepiece_library.cc); then the map as
// PrecompiledGraphemes applies it, before the tiny model without it.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text/sentencepiece_charsmap.h"
#include "engine/text/sentencepiece_tokenizer.h"
#include "engine/text/utf8.h"
#include "tests/fuzz/encoding_invariants.h"
#include "tests/unit/tokenizer_tiny_models.h"

namespace {

// darts-clone's unit fields.
bool HasLeaf(uint32_t unit) { return (unit >> 8) & 1; }
uint32_t Value(uint32_t unit) { return unit & ((1u << 31) - 1); }
uint32_t Label(uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
uint32_t Offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

// The library's reads for one prefix search from `text`, each checked.
void WalkPrefixSearch(const std::vector<uint32_t>& units, std::string_view strings,
                      std::string_view text) {
  auto unit = [&](uint64_t at) {
    if (at >= units.size()) std::abort();  // a read outside the trie
    return units[at];
  };
  uint64_t node = 0 ^ Offset(unit(0));
  int matches = 0;
  for (const char byte : text) {
    const uint32_t c = static_cast<uint8_t>(byte);
    node ^= c;
    const uint32_t u = unit(node);
    if (Label(u) != c) return;
    node ^= Offset(u);
    if (HasLeaf(u)) {
      const uint32_t value = Value(unit(node));
      if (value >= strings.size() ||
          !std::memchr(strings.data() + value, 0, strings.size() - value))
        std::abort();                    // a replacement read past the map
      if (++matches > 32) std::abort();  // past the library's 32 results
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t text_size = std::min<size_t>(data[size - 1], size - 1);
  const std::string_view map(reinterpret_cast<const char*>(data), size - 1 - text_size);
  const std::string_view text(map.data() + map.size(), text_size);
  if (!encoderd::CheckPrecompiledCharsMap(map).ok() || map.empty()) return 0;

  uint32_t trie_bytes = 0;
  std::memcpy(&trie_bytes, map.data(), sizeof(trie_bytes));
  std::vector<uint32_t> units(trie_bytes / 4);
  std::memcpy(units.data(), map.data() + 4, trie_bytes);
  const std::string_view strings = map.substr(4 + trie_bytes);
  for (size_t start = 0; start < text.size(); ++start) {
    WalkPrefixSearch(units, strings, text.substr(start));
  }

  std::string spec, model = encoderd::testing::TinySentencePieceModel();
  encoderd::testing::internal::Bytes(2, std::string(map), &spec);
  encoderd::testing::internal::Bytes(3, spec, &model);
  auto tokenizer = encoderd::CreateSentencePieceTokenizerFromProto(model, {}, "fuzz-map");
  if (!tokenizer.ok()) return 0;  // e.g. no sentencepiece library here
  encoderd::fuzz::CheckEncoding(**tokenizer, text, 16);

  // The same map applied as the tokenizers library applies it, a grapheme
  // cluster at a time (PrecompiledGraphemes, in this instrumented build):
  // where each normalized byte came from stays in order and inside the text,
  // and the text stays UTF-8 (each replacement a whole one).
  auto graphemes = encoderd::PrecompiledGraphemes::Create(map);
  if (graphemes.ok() && encoderd::IsValidUtf8(text)) {
    auto normalized = (*graphemes)->Normalize(text);
    if (!normalized.ok() || !encoderd::IsValidUtf8(normalized->text)) std::abort();
    const auto& at = normalized->input_at;
    if (at.size() != normalized->text.size() + 1 || at.back() != text.size()) std::abort();
    for (size_t i = 1; i < at.size(); ++i) {
      if (at[i] < at[i - 1]) std::abort();
    }
    // The tiny model as a Unigram one (a second trainer_spec, merged),
    // which the fast class reads this way.
    std::string trainer;
    encoderd::testing::internal::Int(3, 1, &trainer);
    encoderd::testing::internal::Bytes(2, trainer, &model);
    encoderd::SentencePieceOptions options;
    options.fast_class = true;
    auto fast = encoderd::CreateSentencePieceTokenizerFromProto(model, options, "fuzz-map");
    if (fast.ok()) encoderd::fuzz::CheckEncoding(**fast, text, 16);
  }
  return 0;
}
