// Bounded encoding (engine/text/bounded_encoding.h): a tokenizer that reads
// only a prefix of a long text gives exactly the answer it gives on the whole
// text, over real and adversarial texts, for every tokenizer kind, and reads a
// number of bytes bounded by max_tokens however large the text is.
#include "engine/text/bounded_encoding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/text/byte_bpe_tokenizer.h"
#include "engine/text/hf_tokenizer_json.h"
#include "engine/text/sentencepiece_tokenizer.h"
#include "engine/text/utf8.h"
#include "engine/text/wordpiece_tokenizer.h"
#include "tests/unit/tokenizer_fixtures.h"

namespace encoderd {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(ENCODERD_FIXTURES_DIR) / "tokenizers";

struct NamedTokenizer {
  std::string name;
  std::unique_ptr<Tokenizer> tokenizer;
};

std::vector<NamedTokenizer> AllTokenizers() {
  std::vector<NamedTokenizer> out;
  const auto add = [&](const std::string& name, StatusOr<std::unique_ptr<Tokenizer>> t) {
    EXPECT_TRUE(t.ok()) << name << ": " << t.status().ToString();
    if (t.ok()) out.push_back({name, std::move(t).value()});
  };
  add("langid bpe", CreateSentencePieceTokenizer(
                        ENCODERD_SOURCE_DIR "/models/langid/sentencepiece.bpe.model", {}));
  add("fixture bpe",
      CreateSentencePieceTokenizer((kFixtures / "spm" / "sentencepiece.bpe.model").string(), {}));
  add("fixture unigram", CreateSentencePieceTokenizer(
                             (kFixtures / "spm" / "sentencepiece.unigram.model").string(), {}));
  // Normalizers whose windows may not start at a space: one keeps spaces
  // after its "▁" first (a window there gained a "▁"), one puts none first
  // and drops leading spaces (a window there lost one); one does neither.
  for (const char* kind : {"keep_spaces", "no_prefix", "raw_spaces"}) {
    add(std::string("fixture bpe ") + kind,
        CreateSentencePieceTokenizer(
            (kFixtures / "spm" / ("sentencepiece." + std::string(kind) + ".model")).string(), {}));
  }
  for (const bool lower : {true, false}) {
    WordPieceOptions options;
    options.lower_case = lower;
    const std::string file = lower ? "vocab_uncased.txt" : "vocab_cased.txt";
    add(lower ? "wordpiece uncased" : "wordpiece cased",
        CreateWordPieceTokenizer((kFixtures / "wordpiece" / file).string(), options));
  }
  add("byte-level bpe",
      CreateByteBpeTokenizer((kFixtures / "bytebpe" / "vocab.json").string(),
                             (kFixtures / "bytebpe" / "merges.txt").string(), {}));
  // The unigram model read as the fast class reads an XLM-R folder's
  // sentencepiece.bpe.model: normalized a grapheme cluster at a time.
  SentencePieceOptions as_fast_class;
  as_fast_class.fast_class = true;
  add("fixture unigram, fast class",
      CreateSentencePieceTokenizer((kFixtures / "spm" / "sentencepiece.unigram.model").string(),
                                   as_fast_class));
  // The unigram model with the tokenizers library's spaces (XLM-R's
  // tokenizer.json): every space a word, or runs collapsed; a window that
  // ends in spaces settles what they make only once the text goes on.
  for (const char* kind : {"xlmr_unigram_keep", "xlmr_unigram"}) {
    auto json = CreateTokenizerFromHfJson(
        (kFixtures / "tokenizer_json" / (std::string(kind) + ".json")).string());
    add(std::string("tokenizer.json ") + kind,
        json.ok() ? StatusOr<std::unique_ptr<Tokenizer>>(std::move(json->tokenizer))
                  : StatusOr<std::unique_ptr<Tokenizer>>(json.status()));
  }
  return out;
}

std::string Repeat(const std::string& unit, size_t bytes) {
  std::string s;
  while (s.size() < bytes) s += unit;
  return s;
}

// A run of U+1F600 (unknown to the langid model) of `bytes` bytes with 96
// bytes of `island` (one byte) over each byte B = first x 4^k, from B - 80
// on: each window that begins where the text does and grows x4 from `first`
// bytes ends 80 bytes into an island, after the run (dropped characters:
// the run's <unk> takes them up to the cut; letters: a known word after it).
std::string RunWithIslands(size_t bytes, char island, size_t first) {
  std::string text = Repeat("\xf0\x9f\x98\x80", bytes);
  for (size_t b = first; b + 16 <= text.size(); b *= 4) {
    for (size_t i = b - 80; i < b + 16; ++i) text[i] = island;
  }
  return text;
}

// Real text (the fixture samples) and adversarial text: long runs without a
// space of one letter, of mixed scripts, of combining marks, of CJK, of emoji
// and ZWJ sequences, of characters the normalizer drops; words just over
// WordPiece's 100-character limit; spaces in odd places.
std::vector<std::string> Texts() {
  std::vector<std::string> texts;
  std::ifstream in(kFixtures / "samples.json");
  EXPECT_TRUE(in.good()) << "missing fixture samples.json (run ctest -R generate_fixtures)";
  if (in) {
    std::string all_samples;
    for (const auto& s : nlohmann::json::parse(in)) {
      texts.push_back(s.get<std::string>());
      all_samples += s.get<std::string>() + " ";
    }
    texts.push_back(Repeat(all_samples, 60000));
  }
  const std::string cjk =
      "\xe4\xbb\x8a\xe5\xa4\xa9\xe5\xa4\xa9\xe6\xb0\x94\xe5\xbe\x88\xe5\xa5\xbd\xef\xbc\x8c"
      "\xe6\x88\x91\xe4\xbb\xac\xe5\x8e\xbb\xe5\x85\xac\xe5\x9b\xad\xe6\x95\xa3\xe6\xad\xa5"
      "\xe3\x80\x82\xe3\x83\x95\xe3\x82\xa1\xe3\x82\xa4\xe3\x83\xab\xe3\x82\x92\xe9\x96\x8b"
      "\xe3\x81\x91\xe3\x81\xbe\xe3\x81\x9b\xe3\x82\x93";
  const std::string emoji =
      "\xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91"
      "\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7";
  const std::string mixed = "abcxyz\xc3\xa4\xc3\xb6\xc3\xbc\xe6\x97\xa5\xe6\x9c\xac\xd0\xb6";
  for (const size_t n : {3000u, 20011u, 70001u}) {
    texts.push_back(std::string(n, 'a'));
    texts.push_back(Repeat(mixed, n));
    texts.push_back(Repeat(cjk, n));
    texts.push_back(Repeat(emoji, n));
    texts.push_back(Repeat("e\xcc\x81", n));              // e + combining acute
    texts.push_back("a" + Repeat("\xcc\x81", n));         // one letter, endless marks
    texts.push_back(Repeat("\x01\x02\x7f", n) + " end");  // dropped by normalizers
    texts.push_back(Repeat("word\n", n));                 // separated, but not by spaces
    texts.push_back(Repeat(std::string(101, 'b') + " ", n));
    texts.push_back(Repeat(std::string(99, 'c') + "-", n));
    texts.push_back(Repeat("ab", n) + " tail words");
    texts.push_back("start " + std::string(n, ' ') + "end");
    texts.push_back("start" + std::string(n, ' '));
    texts.push_back(Repeat("line\r\n", n));
    texts.push_back(Repeat("a \r\n\r\n  \t", n) + "\r");
    texts.push_back(Repeat("supercalifragilistic" + cjk + " ", n));
  }
  // Grapheme clusters the tokenizers library's Precompiled replaces whole
  // (NFD Vietnamese, a fullwidth letter with a mark) or keeps apart (NFD
  // Hangul), and U+00BC, which NFKC makes "1", an unknown U+2044 and "4":
  // at the text's start, that unknown piece stands for no byte of its own.
  for (const size_t n : {3000u, 20011u}) {
    texts.push_back(Repeat("e\xcc\xa3\xcc\x82", n));
    texts.push_back(Repeat("\xef\xbd\x85\xcc\x81", n));
    texts.push_back(Repeat("\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab", n));
    texts.push_back("\xc2\xbc" + std::string(n, 'a'));
    texts.push_back(Repeat("\xc2\xbc", n));
    // An unknown run, then U+00BC where the first window's cut falls just
    // after it (at 512 tokens): a window resumed at U+00BC gave its "1"
    // and U+2044 again.
    texts.push_back(Repeat("\xf0\x9f\x98\x80", 1087 * 4) + "\xc2\xbc" + std::string(n, 'b'));
  }
  // NFD Hangul, which sentencepiece's own normalization composes: a window
  // cut between a syllable's jamo ends in a lone leading consonant (U+1112),
  // which the vocabulary does not know, and which with its vowel after the
  // cut is part of a known syllable (U+D55C). A window resumed there, as
  // inside an unknown run, began a new word: an <unk>, then "▁" + U+D55C
  // where the whole text has U+D55C. At 512 tokens (a first window of
  // 4,352 bytes) the cuts fall there in a word of syllables, in a run of
  // lone consonants before a vowel, and after an unknown run.
  const std::string syllable = "\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab";  // U+1112 U+1161 U+11AB
  texts.push_back(Repeat(syllable, 4348));
  for (const size_t n : {4345u, 4348u}) {
    texts.push_back(Repeat("\xe1\x84\x92", n) + "\xe1\x85\xa1\xe1\x86\xab end");
  }
  texts.push_back(Repeat("\xf0\x9f\x98\x80", 4015) + Repeat(syllable, 20000));
  // Unknown runs ending in dropped characters, or a word, at the cuts.
  for (const char island : {'\x01', 'a'}) texts.push_back(RunWithIslands(30000, island, 4352));
  // Stretches of characters the normalizer drops or makes spaces, before an
  // unknown run, after its first character, and between a run and a word.
  texts.push_back(std::string(9000, '\x01') + Repeat("\xf0\x9f\x98\x80", 8000) + " end");
  texts.push_back(Repeat("\n\t", 9000) + Repeat("\xf0\x9f\x98\x80", 8000) + "word");
  // A word, then whitespace (not ASCII spaces, where windows cut) or
  // dropped characters past the cut, over 64 KiB (windows that long are
  // first read in pieces for unknown characters), then words.
  texts.push_back("ab" + Repeat("\n\t\xe3\x80\x80", 70000) + "cd ef");
  texts.push_back("ab" + std::string(70000, '\x01') + "cd ef");
  // The same before unknown characters, where a window over 64 KiB is
  // encoded only to 1 KiB past the first one that is unknown alone (a run
  // at the text's start offers no place to resume, nor a lone U+1112 that
  // its vowel makes known; a run then words to count).
  texts.push_back("\xf0\x9f\x98\x80" + Repeat(std::string(15000, '\x01') + "c", 70000) +
                  Repeat("\xf0\x9f\x98\x80", 3000) + " end");
  texts.push_back("ab" + std::string(1019, '\x01') + "\xe1\x84\x92\xe1\x85\xa1" +
                  std::string(70000, '\x01') + Repeat("\xf0\x9f\x98\x80", 3000) + " end");
  texts.push_back("ab" + std::string(90000, '\x01') + "\xf0\x9f\x98\x80" + Repeat(" a", 4000));
  texts.push_back(Repeat("\xf0\x9f\x98\x80", 1172 * 4) + std::string(9000, '\x01') +
                  Repeat("\xf0\x9f\x98\x80", 8000) + std::string(9000, '\x01') + "word");
  // A lead (an unknown U+1112) before dropped characters, then the vowel it
  // would compose with; a literal U+2581 before dropped characters.
  texts.push_back(Repeat("\xf0\x9f\x98\x80", 1200) + "\xe1\x84\x92" + std::string(3000, '\x01') +
                  "\xe1\x85\xa1" + std::string(3000, 'b'));
  texts.push_back("\xe2\x96\x81" + std::string(5000, '\x01') + "word");
  texts.push_back("a \xe2\x96\x81" + std::string(5000, '\x01') + "word");
  // An unknown run, characters the normalizer drops up to the first window's
  // cut (at 16 and 512 tokens), then a known word: a window resumed at a
  // dropped character began the word with a "▁" the whole text does not
  // give it.
  for (const size_t first : {384u, 4352u}) {
    texts.push_back(Repeat("\xf0\x9f\x98\x80", first - 40) + std::string(40, '\x01') +
                    Repeat("word", 3000));
  }
  // "<" + U+0338, which sentencepiece's NFKC makes an unknown "≮" (windows
  // cut between the two; see HugeWordsReadBoundedBytesOrAreOneUnknownToken).
  // Not for WordPiece: a window cut after a punctuation character settles
  // it, though NFC may join it to a mark after the cut (a known limit).
  for (const size_t n : {3000u, 20011u, 70001u}) texts.push_back(Repeat("<\xcc\xb8", n));
  // Runs of one digit, past the first windows: a unigram model's best split
  // of such a run depends on its length's parity all the way to its start
  // ("7" x 4353 starts "▁7 77 ...", "7" x 4354 "▁ 77 77 ..."), which a window
  // that settled half a cut word answered wrongly.
  for (const char digit : {'1', '5', '7'}) {
    for (const size_t n : {4353u, 5001u, 9002u}) texts.push_back(std::string(n, digit));
  }
  // Characters that NFKC makes several words (U+FDFA four), whose later
  // words' pieces begin where the character does (a window resumed there
  // gave the earlier ones twice), and spaces NFKC makes of others (U+3000).
  // Windows resume only where one settled too few tokens: next to runs the
  // normalizer drops. (An unknown character, a dropped run to a cut, then a
  // known word right after the run: below.)
  const std::string dropped = Repeat("\x01\x02\x7f", 900);
  for (const size_t n : {3000u, 20011u}) {
    texts.push_back("x\xef\xb7\xba" + Repeat("\x01\x02\x7f", n) + " end");
    texts.push_back(Repeat("ab \xef\xb7\xba" + dropped + " ", n));
    texts.push_back(Repeat(dropped + " a", n));
    texts.push_back(Repeat(dropped + "  b   ", n));
    texts.push_back(Repeat("word\xe3\x80\x80" + dropped, n));
  }
  return texts;
}

// The sentencepiece models of AllTokenizers with scan_long_windows off, by
// name: their whole-text encodings read no window in parts.
const Tokenizer* WholeTextTokenizer(const std::string& name) {
  static const auto* const models = [] {
    auto* m = new std::map<std::string, std::unique_ptr<Tokenizer>>();
    SentencePieceOptions whole;
    whole.scan_long_windows = false;
    const auto add = [&](const std::string& n, const std::string& path) {
      StatusOr<std::unique_ptr<Tokenizer>> t = CreateSentencePieceTokenizer(path, whole);
      EXPECT_TRUE(t.ok()) << n << ": " << t.status().ToString();
      if (t.ok()) (*m)[n] = std::move(t).value();
    };
    add("langid bpe", ENCODERD_SOURCE_DIR "/models/langid/sentencepiece.bpe.model");
    add("fixture bpe", (kFixtures / "spm" / "sentencepiece.bpe.model").string());
    add("fixture unigram", (kFixtures / "spm" / "sentencepiece.unigram.model").string());
    for (const char* kind : {"keep_spaces", "no_prefix", "raw_spaces"}) {
      add(std::string("fixture bpe ") + kind,
          (kFixtures / "spm" / ("sentencepiece." + std::string(kind) + ".model")).string());
    }
    return m;
  }();
  const auto it = models->find(name);
  return it == models->end() ? nullptr : it->second.get();
}

// What the tokenizer makes of the whole text.
Encoding Whole(const Tokenizer& t, const std::string& text) {
  // More tokens than any text here has (U+FDFA's 3 bytes make 8), and a
  // first window (8 bytes a token) of the whole text.
  const StatusOr<Encoding> whole = t.Encode(text, 8 * static_cast<int64_t>(text.size()) + 2, false);
  EXPECT_TRUE(whole.ok()) << whole.status().ToString();
  if (!whole.ok()) return Encoding{};
  EXPECT_EQ(whole->bytes_read, static_cast<int64_t>(text.size()));
  return *whole;
}

// The whole text's encoding with the length limit applied afterwards: the
// reference for every bounded answer. Null when truncate=false refuses.
std::unique_ptr<Encoding> Reference(Encoding whole, int64_t max_tokens, bool truncate) {
  const auto count = static_cast<int64_t>(whole.ids.size());
  if (count > max_tokens && !truncate) return nullptr;
  if (count > max_tokens) {
    const int32_t closing = whole.ids.back();
    const std::string closing_piece = whole.pieces.back();
    whole.ids.resize(max_tokens - 1);
    whole.pieces.resize(max_tokens - 1);
    whole.ids.push_back(closing);
    whole.pieces.push_back(closing_piece);
  }
  whole.untruncated_length = count;
  return std::make_unique<Encoding>(std::move(whole));
}

// Compares every bounded answer of `t` on `texts` with the whole text's
// encoding cut afterwards; counts the answers and those that stopped reading
// before the text's end.
void CompareWithWholeTexts(const std::string& name, const Tokenizer* t,
                           const std::vector<std::string>& texts, int64_t* compared, int64_t* cut) {
  for (size_t i = 0; i < texts.size(); ++i) {
    if (name.rfind("wordpiece", 0) == 0 && texts[i].rfind("<\xcc\xb8", 0) == 0) continue;
    const Tokenizer* reference = WholeTextTokenizer(name);
    const Encoding whole = Whole(reference ? *reference : *t, texts[i]);
    for (const int64_t max_tokens : {2, 3, 8, 16, 64, 128, 512}) {
      for (const bool truncate : {false, true}) {
        SCOPED_TRACE(name + ", text " + std::to_string(i) + " (" + std::to_string(texts[i].size()) +
                     " bytes), max_tokens " + std::to_string(max_tokens) + ", truncate " +
                     std::to_string(truncate));
        const std::unique_ptr<Encoding> want = Reference(whole, max_tokens, truncate);
        const StatusOr<Encoding> got = t->Encode(texts[i], max_tokens, truncate);
        ++*compared;
        ASSERT_EQ(got.ok(), want != nullptr) << got.status().ToString();
        if (!got.ok()) {
          EXPECT_NE(got.status().message().find("more than the limit of " +
                                                std::to_string(max_tokens) + " tokens"),
                    std::string::npos)
              << got.status().message();
          continue;
        }
        ASSERT_EQ(got->ids, want->ids);
        ASSERT_EQ(got->pieces.size(), want->pieces.size());
        for (size_t p = 0; p < got->pieces.size(); ++p) {
          // An <unk> for a run read over several windows holds the run's
          // start (what the first window saw, whose last character may
          // have normalized otherwise alone: "<" of "<" + U+0338).
          const std::string& piece = got->pieces[p];
          const std::string start =
              piece.substr(0, piece.empty() ? 0 : CharStartAtOrBefore(piece, piece.size() - 1));
          const bool same = got->ids[p] == t->special_tokens().unk
                                ? want->pieces[p].rfind(start, 0) == 0
                                : want->pieces[p] == piece;
          ASSERT_TRUE(same) << "piece " << p << ": " << got->pieces[p].substr(0, 40)
                            << " != " << want->pieces[p].substr(0, 40) << " ("
                            << got->pieces[p].size() << " and " << want->pieces[p].size()
                            << " bytes)";
        }
        EXPECT_EQ(got->truncated(), want->truncated());
        EXPECT_LE(got->untruncated_length, want->untruncated_length);
        if (got->bytes_read < static_cast<int64_t>(texts[i].size())) {
          ++*cut;
          EXPECT_GT(got->untruncated_length, max_tokens);
        } else {
          EXPECT_EQ(got->untruncated_length, want->untruncated_length);
        }
      }
    }
  }
}

TEST(BoundedEncodingTest, SameAnswerAsTheWholeText) {
  const std::vector<NamedTokenizer> tokenizers = AllTokenizers();
  ASSERT_EQ(tokenizers.size(), 12u);
  const std::vector<std::string> texts = Texts();
  int64_t compared = 0, cut = 0;
  for (const auto& [name, t] : tokenizers) {
    CompareWithWholeTexts(name, t.get(), texts, &compared, &cut);
    if (HasFatalFailure()) return;
  }
  // The bound is exercised, not only whole texts.
  EXPECT_GT(cut, compared / 8) << cut << " of " << compared;
}

// Special tokens written in texts, which a tokenizer.json's added tokens
// match (<mask> taking the whitespace before it): between them, the text is
// read in windows as any text is. Runs of tokens with nothing between,
// tokens after long runs of whitespace (which <mask> takes, however far
// back they start), and tokens cut by a window's end.
TEST(BoundedEncodingTest, AddedTokensSameAnswerAsTheWholeText) {
  std::vector<NamedTokenizer> tokenizers;
  for (const char* kind : {"wordpiece_uncased", "bytebpe", "xlmr_unigram", "xlmr_unigram_keep",
                           "xlmr_unigram_strip", "mpnet"}) {
    auto json = CreateTokenizerFromHfJson(
        (kFixtures / "tokenizer_json" / (std::string(kind) + ".json")).string());
    ASSERT_TRUE(json.ok()) << kind << ": " << json.status().ToString();
    tokenizers.push_back({kind, std::move(json->tokenizer)});
  }
  // As an XLM-R folder's sentencepiece.bpe.model is read (sentencepiece's own spaces).
  auto spm = testing::XlmrClassSentencePiece(kFixtures.string());
  ASSERT_TRUE(spm.ok()) << spm.status().ToString();
  tokenizers.push_back({"spm xlmr class", std::move(spm).value()});
  std::vector<std::string> texts;
  for (const size_t n : {3000u, 20011u}) {
    texts.push_back(Repeat("a <mask> b", n));
    texts.push_back(Repeat("<mask>", n));
    texts.push_back(Repeat("[SEP]x[MASK]", n));
    texts.push_back(Repeat("  \xe3\x80\x80<mask></s>\n", n));
    texts.push_back(Repeat("word ", n) + "<mask>" + Repeat("<s>", n));
    texts.push_back("start" + std::string(n, ' ') + "<mask> end");
    texts.push_back("start" + std::string(n, ' ') + "<mas");
    texts.push_back(Repeat("<ma", n) + "<mask>");
  }
  int64_t compared = 0, cut = 0;
  for (const auto& [name, t] : tokenizers) {
    CompareWithWholeTexts(name, t.get(), texts, &compared, &cut);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(cut, compared / 8) << cut << " of " << compared;
  // A text of 4 MiB of tokens is read as far as the limit needs.
  const std::string masks = Repeat("<mask>", size_t{4} << 20);
  for (const auto& [name, t] : tokenizers) {
    if (name == "wordpiece_uncased") continue;  // (no <mask> token)
    SCOPED_TRACE(name);
    const StatusOr<Encoding> enc = t->Encode(masks, 16, true);
    ASSERT_TRUE(enc.ok()) << enc.status().ToString();
    EXPECT_EQ(enc->ids.size(), 16u);
    EXPECT_LE(enc->bytes_read, 16 * 6);
    const StatusOr<Encoding> refused = t->Encode(masks, 16, false);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("at least 17 tokens"), std::string::npos)
        << refused.status().message();
  }
}

// Tokens added past the vocabulary, normalized and not, read window by
// window as the whole text reads them; a 4 MiB text of them is read as far
// as the limit needs.
TEST(BoundedEncodingTest, NormalizedAddedTokensSameAnswerAsTheWholeText) {
  std::vector<NamedTokenizer> tokenizers;
  for (const char* kind : {"wordpiece_uncased", "bytebpe"}) {
    std::ifstream in(kFixtures / "tokenizer_json" / (std::string(kind) + ".json"));
    nlohmann::json file = nlohmann::json::parse(in);
    const auto size = static_cast<int64_t>(file["model"]["vocab"].size());
    int64_t id = size;
    for (const auto& [content, normalized] :
         std::vector<std::pair<std::string, bool>>{{"<Domain>", false},
                                                   {"<Norm>", true},
                                                   {"<Norm><Dom", true},
                                                   {"\xe4\xb8\xad\xe6\x96\x87x", true}}) {
      file["added_tokens"].push_back({{"id", id++},
                                      {"content", content},
                                      {"special", false},
                                      {"normalized", normalized},
                                      {"lstrip", false},
                                      {"rstrip", false},
                                      {"single_word", false}});
    }
    auto json = CreateTokenizerFromHfJsonData(file.dump(), kind);
    ASSERT_TRUE(json.ok()) << kind << ": " << json.status().ToString();
    tokenizers.push_back({std::string(kind) + " + added", std::move(json->tokenizer)});
  }
  std::vector<std::string> texts;
  for (const size_t n : {3000u, 20011u}) {
    texts.push_back(Repeat("a <norm> b", n));
    texts.push_back(Repeat("<NORM>", n));
    texts.push_back(Repeat("<Norm><Domain>x<norm><dom", n));
    texts.push_back(Repeat("\x01<n\x01orm>\x01", n));
    texts.push_back(Repeat("word \xe4\xb8\xad\xe6\x96\x87X", n));
    texts.push_back("start" + std::string(n, ' ') + "<Norm> end");
    texts.push_back("start" + std::string(n, '\x01') + "<Nor");
    texts.push_back(Repeat("<No", n) + "<norm>");
  }
  int64_t compared = 0, cut = 0;
  for (const auto& [name, t] : tokenizers) {
    CompareWithWholeTexts(name, t.get(), texts, &compared, &cut);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(cut, compared / 8) << cut << " of " << compared;
  const std::string norms = Repeat("<Norm>", size_t{4} << 20);
  for (const auto& [name, t] : tokenizers) {
    SCOPED_TRACE(name);
    const StatusOr<Encoding> enc = t->Encode(norms, 16, true);
    ASSERT_TRUE(enc.ok()) << enc.status().ToString();
    EXPECT_EQ(enc->ids.size(), 16u);
    EXPECT_LE(enc->bytes_read, 16 * 6 + 64);
  }
}

// The scan for normalized tokens normalizes each character of the text
// once, however many tokens start alike: 2,000 tokens that all begin with
// the space BERT's normalizer puts before a CJK ideograph, over 100,000
// ideographs, none of which starts one.
TEST(BoundedEncodingTest, NormalizedTokensNormalizeEachCharacterOnce) {
  int64_t calls = 0;
  const CharNormalizer normalize = [&calls](char32_t c) {
    ++calls;
    return c >= 0x4e00 ? std::u32string{' ', c, ' '} : std::u32string(1, c);
  };
  std::vector<AddedToken> tokens;
  for (int i = 0; i < 2000; ++i) {
    AddedToken token{"\xe4\xb8\x80" + std::to_string(i), 100 + i};  // U+4E00, then digits
    token.special = false;
    token.normalized = true;
    tokens.push_back(token);
  }
  const AddedTokens added(tokens, normalize);
  std::string text;
  for (int i = 0; i < 100000; ++i) text += "\xe4\xb8\x80";  // U+4E00 alone, no digit after
  calls = 0;
  AddedTokens::Scan scan(added, text);
  EXPECT_EQ(scan.Next(text.size()), nullptr);
  EXPECT_EQ(calls, 100000);
  // And one that is there is found.
  text +=
      "\xe4\xb8\x80"
      "1999";
  AddedTokens::Scan found(added, text);
  const AddedTokens::Match* match = found.Next(text.size());
  ASSERT_NE(match, nullptr);
  EXPECT_EQ(match->begin, size_t{300000});
  EXPECT_EQ(match->token->id, 2099);
}

// 4 MiB texts of one endless word. A word of known characters costs a few
// windows sized by max_tokens, and the answer is the truncated encoding or the
// refusal naming the limit. A run the vocabulary does not know is one token
// however long (sentencepiece's <unk> for the run, WordPiece's [UNK] for a
// word over 100 characters): it is read to its end, in small windows, and
// the text fits. (CPU per MiB is measured by tokenize_bench, not here.)
TEST(BoundedEncodingTest, HugeWordsReadBoundedBytesOrAreOneUnknownToken) {
  const std::vector<NamedTokenizer> tokenizers = AllTokenizers();
  const size_t four_mib = size_t{4} << 20;
  const std::string emoji =
      "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7";
  struct Word {
    std::string text;
    bool unknown_for_sentencepiece, unknown_for_wordpiece;
    // Uncased WordPiece strips what made the word one [UNK] (its accents).
    bool known_to_uncased_wordpiece = false;
  };
  const std::vector<Word> words = {
      {std::string(four_mib, 'a'), false, true},
      {Repeat("abcxyz\xc3\xa4\xc3\xb6\xc3\xbc\xe6\x97\xa5\xe6\x9c\xac", four_mib), false, false},
      {Repeat("\xe4\xbb\x8a\xe5\xa4\xa9\xe5\xa4\xa9\xe6\xb0\x94", four_mib), false, false},
      {Repeat(emoji, four_mib), true, true},
      // "<" + U+0338 normalizes to an unknown "≮", and a window cut between
      // the two left a known "<" last: the window grew, keeping the cut in
      // the same place, to the whole text (18.6 s for 1 MiB on langid's
      // model, quadratic in the length). Cased WordPiece composes it into
      // one long word; uncased strips the U+0338 again, leaving "<"s.
      {Repeat("<\xcc\xb8", four_mib), true, true, true},
  };
  for (const auto& [name, t] : tokenizers) {
    const bool wordpiece = name.rfind("wordpiece", 0) == 0;
    // Byte-level BPE has a token for every byte: nothing is unknown.
    const bool byte_level = name.rfind("byte-level", 0) == 0;
    for (size_t w = 0; w < words.size(); ++w) {
      const std::string& text = words[w].text;
      const bool stripped = name == "wordpiece uncased" && words[w].known_to_uncased_wordpiece;
      const bool unknown =
          !byte_level && !stripped &&
          (wordpiece ? words[w].unknown_for_wordpiece : words[w].unknown_for_sentencepiece);
      for (const int64_t max_tokens : {16, 512}) {
        SCOPED_TRACE(name + ", word " + std::to_string(w) + ", max_tokens " +
                     std::to_string(max_tokens));
        const StatusOr<Encoding> cut = t->Encode(text, max_tokens, true);
        const StatusOr<Encoding> strict = t->Encode(text, max_tokens, false);
        ASSERT_TRUE(cut.ok()) << cut.status().ToString();
        if (unknown) {
          ASSERT_TRUE(strict.ok()) << strict.status().ToString();
          EXPECT_EQ(strict->ids, cut->ids);
          EXPECT_FALSE(cut->truncated());
          EXPECT_EQ(cut->bytes_read, static_cast<int64_t>(text.size()));
          // [CLS] [UNK] [SEP], or <s> (U+2581) <unk> </s> (no U+2581
          // where the normalizer puts none first).
          const bool prefix = name != "fixture bpe no_prefix" && name != "fixture bpe raw_spaces";
          EXPECT_EQ(cut->ids.size(), wordpiece || !prefix ? 3u : 4u);
          EXPECT_EQ(cut->ids[cut->ids.size() - 2], t->special_tokens().unk);
          continue;
        }
        // Windows grow x4 from InitialWindowBytes; three growths at most.
        const auto limit = static_cast<int64_t>(InitialWindowBytes(max_tokens)) * 64;
        EXPECT_EQ(static_cast<int64_t>(cut->ids.size()), max_tokens);
        EXPECT_GT(cut->untruncated_length, max_tokens);
        EXPECT_LE(cut->bytes_read, limit);
        ASSERT_FALSE(strict.ok());
        EXPECT_NE(strict.status().message().find("more than the limit of " +
                                                 std::to_string(max_tokens) + " tokens"),
                  std::string::npos)
            << strict.status().message();
      }
    }
  }
}

// A run of unknown characters is read to its end in small windows, however
// it ends at a window's cut: in characters the normalizer drops (its <unk>
// takes them), or followed by a known word. A window that found no place to
// resume inside the run grew x4 instead, keeping its cut in the same place,
// up to the whole text: one sentencepiece call on a run of 1 MiB (the langid
// model: 9-20 s).
TEST(BoundedEncodingTest, UnknownRunsAreReadInSmallWindows) {
  const std::vector<NamedTokenizer> tokenizers = AllTokenizers();
  const size_t mib = size_t{1} << 20;
  const std::string smile = "\xf0\x9f\x98\x80";
  for (const int64_t max_tokens : {16, 512}) {
    const size_t first = InitialWindowBytes(max_tokens);
    std::vector<std::string> texts;
    for (const char island : {'\x01', 'a'}) texts.push_back(RunWithIslands(mib, island, first));
    // A stretch that encodes as nothing (dropped characters, or spaces the
    // normalizer strips at a window's ends) before the run, taking all but
    // the last of the growing windows: the last took in 3/4 of the run.
    texts.push_back(std::string(278465, '\x01') + Repeat(smile, mib - 278465));
    texts.push_back(Repeat("\n\t\xe3\x80\x80", 278465) + Repeat(smile, mib - 278465));
    // The run's first window resumes, then one whose only unknown
    // character is its first, then dropped characters past its cut.
    texts.push_back(Repeat(smile, 1172 * 4) + std::string(300000, '\x01') + Repeat(smile, mib));
    for (size_t i = 0; i < texts.size(); ++i) {
      for (const auto& [name, t] : tokenizers) {
        if (name.rfind("wordpiece", 0) == 0 || name.rfind("byte-level", 0) == 0) continue;
        for (const bool truncate : {true, false}) {
          SCOPED_TRACE(name + ", text " + std::to_string(i) + ", max_tokens " +
                       std::to_string(max_tokens) + ", truncate " + std::to_string(truncate));
          const StatusOr<Encoding> enc = t->Encode(texts[i], max_tokens, truncate);
          if (!enc.ok()) {  // refused: over the limit
            EXPECT_FALSE(truncate) << enc.status().ToString();
            continue;
          }
          // Where U+1F600 is unknown (the langid model), windows of the
          // first's size or 1 KiB; where it is known (the fixture models), a
          // word that grows the window three times at most (as in
          // HugeWordsReadBoundedBytesOrAreOneUnknownToken).
          const bool unknown = name == "langid bpe";
          EXPECT_EQ(unknown, std::find(enc->ids.begin(), enc->ids.end(), t->special_tokens().unk) !=
                                 enc->ids.end());
          const auto bound =
              static_cast<int64_t>(unknown ? std::max<size_t>(first, 1024) : 64 * first);
          EXPECT_LE(enc->largest_window, bound);
          EXPECT_GT(enc->largest_window, 0);
        }
      }
    }
  }
}

// A word, then a stretch that encodes as nothing (dropped characters, or
// whitespace other than ASCII spaces) past the cut, or dropped characters
// between a few letters, then an unknown run: the windows grew through the
// stretch, the cut word unsettled, until one took in most of the run (here
// one window of the whole MiB, and sentencepiece's time for a run grows
// with its square: 2.3 s for 512 KiB of U+1F600 alone on the langid
// model). Since 2026-12-06 a window over 64 KiB is first read in 1 KiB
// pieces for an unknown character, and encoded only to 1 KiB past one.
TEST(BoundedEncodingTest, LongWindowsStopShortOfUnknownRuns) {
  const size_t mib = size_t{1} << 20;
  const std::string smile = "\xf0\x9f\x98\x80";
  const std::vector<std::string> before = {"ab" + std::string(300000, '\x01'),
                                           "ab" + Repeat("\n\t\xe3\x80\x80", 300000),
                                           "ab" + Repeat(std::string(15000, '\x01') + "c", 600000)};
  for (const auto& [name, t] : AllTokenizers()) {
    if (name.rfind("wordpiece", 0) == 0 || name.rfind("byte-level", 0) == 0) continue;
    const bool unknown = name == "langid bpe";
    for (size_t s = 0; s < before.size(); ++s) {
      const std::string text = before[s] + Repeat(smile, mib - before[s].size());
      for (const int64_t max_tokens : {16, 512}) {
        for (const bool truncate : {true, false}) {
          SCOPED_TRACE(name + ", text " + std::to_string(s) + ", max_tokens " +
                       std::to_string(max_tokens) + ", truncate " + std::to_string(truncate));
          const StatusOr<Encoding> enc = t->Encode(text, max_tokens, truncate);
          if (!enc.ok()) {  // refused: over the limit
            EXPECT_FALSE(truncate) << enc.status().ToString();
            continue;
          }
          EXPECT_GT(enc->largest_window, 0);
          // Where U+1F600 is unknown, no window holds more than a few KiB of
          // the run (where it is known, the run is a word of known pieces).
          if (unknown) {
            EXPECT_LE(enc->largest_window, static_cast<int64_t>(before[s].size() + 4096));
          }
        }
      }
    }
  }
}

TEST(BoundedEncodingTest, PrefixWindow) {
  EXPECT_TRUE(PrefixWindow("short", 10).whole);
  const TextWindow spaced = PrefixWindow("aaaa bbbb cccc", 12);
  EXPECT_EQ(spaced.text, "aaaa bbbb");
  EXPECT_TRUE(spaced.at_space);
  EXPECT_FALSE(spaced.whole);
  // No space in the second half: cut mid-word, on a character boundary.
  const TextWindow cut = PrefixWindow("ab \xc3\xa4\xc3\xa4\xc3\xa4\xc3\xa4", 8);
  EXPECT_EQ(cut.text, "ab \xc3\xa4\xc3\xa4");
  EXPECT_FALSE(cut.at_space);
  EXPECT_EQ(PrefixWindow(std::string(100, 'x'), 10).text.size(), 10u);
}

}  // namespace
}  // namespace encoderd
