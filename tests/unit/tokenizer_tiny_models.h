// Tiny tokenizer models built in memory, for tests and the fuzz target that
// must not depend on generated fixtures.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace encoderd::testing {

// A WordPiece vocabulary: specials, ASCII letters and digits with their "##"
// forms, a few words and punctuation.
inline std::vector<std::string> TinyWordPieceVocab() {
  std::vector<std::string> v = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (char c = 'a'; c <= 'z'; ++c) v.push_back(std::string(1, c));
  for (char c = 'a'; c <= 'z'; ++c) v.push_back("##" + std::string(1, c));
  for (char c = '0'; c <= '9'; ++c) v.push_back(std::string(1, c));
  for (const char* w : {"the", "quick", "fox", "##ing", "##ed", "un", "##able", ".", ",", "!", "?",
                        "'", "\xe4\xb8\xad", "\xc3\x9f"}) {
    v.push_back(w);
  }
  return v;
}

// A byte-level BPE as vocab.json and merges.txt hold it (RoBERTa's
// specials, every byte, a few merges), from the library's own spelling of
// bytes.
struct TinyByteBpe {
  std::string vocab_json, merges;
  // GPT-2's encoder.json form (fairseq and torchtext RoBERTa): the same ids,
  // without <s> <pad> </s> <unk> <mask>.
  std::string gpt2_vocab_json;
  std::vector<std::string> tokens;  // tokens[i] has the id i
};
template <typename Spell>
TinyByteBpe MakeTinyByteBpe(Spell spell) {
  std::vector<std::string> tokens = {"<s>", "<pad>", "</s>", "<unk>"};
  for (int b = 0; b < 256; ++b) tokens.push_back(spell(std::string(1, static_cast<char>(b))));
  TinyByteBpe out;
  out.merges = "#version: 0.2\n";
  const std::string a8(8, 'a'), a16(16, 'a');
  const std::vector<std::pair<std::string, std::string>> merges = {
      {" ", "t"},
      {"h", "e"},
      {" t", "he"},
      {"i", "n"},
      {"in", "g"},
      {"e", "r"},
      {" ", " "},
      {"\xe4", "\xb8"},
      {"\xe4\xb8", "\xad"},
      {"'", "s"},
      {"1", "a"},
      {"'", "r"},
      {"'", "v"},
      {"'", "l"},
      {"'r", "e"},
      {"'v", "e"},
      {"'l", "l"},
      // Runs of a up to 32 in one token: windows of few tokens (the tests'
      // cuts).
      {"a", "a"},
      {"aa", "aa"},
      {"aaaa", "aaaa"},
      {a8, a8},
      {a16, a16}};
  for (const auto& [a, b] : merges) {
    out.merges += spell(a) + " " + spell(b) + "\n";
    tokens.push_back(spell(a + b));
  }
  tokens.push_back("<mask>");
  out.vocab_json = out.gpt2_vocab_json = "{";
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string quoted;
    for (const char c : tokens[i]) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    const std::string entry = "\"" + quoted + "\":" + std::to_string(i);
    out.vocab_json += (i ? "," : "") + entry;
    if (i >= 4 && i + 1 < tokens.size()) out.gpt2_vocab_json += (i > 4 ? "," : "") + entry;
  }
  out.vocab_json += "}";
  out.gpt2_vocab_json += "}";
  out.tokens = std::move(tokens);
  return out;
}

namespace internal {
inline void Varint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
inline void Bytes(int field, const std::string& bytes, std::string* out) {
  Varint(static_cast<uint64_t>(field) << 3 | 2, out);
  Varint(bytes.size(), out);
  out->append(bytes);
}
inline void Int(int field, uint64_t v, std::string* out) {
  Varint(static_cast<uint64_t>(field) << 3, out);
  Varint(v, out);
}
}  // namespace internal

// A serialized sentencepiece ModelProto: BPE over "▁", ASCII letters and a few
// merges, identity normalizer, <unk>=0 <s>=1 </s>=2 like XLM-R.
inline std::string TinySentencePieceModel() {
  using internal::Bytes;
  using internal::Int;
  std::vector<std::pair<std::string, int>> pieces = {{"<unk>", 2}, {"<s>", 3}, {"</s>", 3}};
  for (const char* p : {"\xe2\x96\x81t", "he", "\xe2\x96\x81the", "in", "ing",
                        "\xe2\x96\x81"
                        "a",
                        "er", "on", "\xe2\x96\x81\xe2\x96\x81"}) {
    pieces.push_back({p, 1});
  }
  pieces.push_back({"\xe2\x96\x81", 1});
  for (char c = 'a'; c <= 'z'; ++c) pieces.push_back({std::string(1, c), 1});
  for (char c = 'A'; c <= 'Z'; ++c) pieces.push_back({std::string(1, c), 1});
  for (const char* p : {".", ",", "!", "?", "0", "1", "2", "\xe4\xb8\xad"})
    pieces.push_back({p, 1});
  std::string model;
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::string piece;
    Bytes(1, pieces[i].first, &piece);
    const float score = -static_cast<float>(i);
    uint32_t bits;
    std::memcpy(&bits, &score, sizeof(bits));
    internal::Varint(2 << 3 | 5, &piece);  // fixed32
    for (int b = 0; b < 4; ++b) piece.push_back(static_cast<char>(bits >> (8 * b)));
    Int(3, static_cast<uint64_t>(pieces[i].second), &piece);
    Bytes(1, piece, &model);
  }
  std::string trainer;
  Int(3, 2, &trainer);  // model_type = BPE
  Int(4, pieces.size(), &trainer);
  Bytes(2, trainer, &model);
  std::string normalizer;
  Bytes(1, "identity", &normalizer);
  Bytes(3, normalizer, &model);
  return model;
}

}  // namespace encoderd::testing
