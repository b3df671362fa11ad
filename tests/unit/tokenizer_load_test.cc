// Loading tokenizers: missing, damaged and incomplete files give errors that
// name the file; vocabulary layout and sizes are what the checkpoints expect.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/text/sentencepiece_tokenizer.h"
#include "engine/text/wordpiece_tokenizer.h"
#include "tests/unit/tokenizer_tiny_models.h"

namespace encoderd {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(ENCODERD_FIXTURES_DIR) / "tokenizers";
const std::string kSpmModel = (kDir / "spm" / "sentencepiece.bpe.model").string();

fs::path WriteTemp(const std::string& name, const std::string& bytes) {
  const fs::path path = fs::path(::testing::TempDir()) / ("tokenizer_load_test_" + name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream data;
  data << in.rdbuf();
  return data.str();
}

void ExpectErrorNaming(const Status& status, const std::string& what) {
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find(what), std::string::npos) << status.ToString();
}

TEST(WordPieceLoadTest, MissingFileIsNotFound) {
  const std::string path = "/nonexistent/dir/vocab.txt";
  auto t = CreateWordPieceTokenizer(path, {});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  ExpectErrorNaming(t.status(), path);
  ExpectErrorNaming(CreateWordPieceTokenizer(::testing::TempDir(), {}).status(),
                    ::testing::TempDir());
}

TEST(WordPieceLoadTest, MissingSpecialTokenIsNamed) {
  const fs::path path = WriteTemp("no_cls.txt", "[PAD]\n[UNK]\n[SEP]\nhello\n");
  auto t = CreateWordPieceTokenizer(path.string(), {});
  ASSERT_FALSE(t.ok());
  ExpectErrorNaming(t.status(), path.string());
  ExpectErrorNaming(t.status(), "[CLS]");
  ExpectErrorNaming(CreateWordPieceTokenizer(WriteTemp("empty.txt", "").string(), {}).status(),
                    "empty.txt");
}

TEST(WordPieceLoadTest, InvalidUtf8LineIsNamed) {
  const fs::path path = WriteTemp("bad_utf8.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nab\xff\n");
  auto t = CreateWordPieceTokenizer(path.string(), {});
  ASSERT_FALSE(t.ok());
  ExpectErrorNaming(t.status(), path.string());
  ExpectErrorNaming(t.status(), "line 5");
}

TEST(WordPieceLoadTest, UniversalNewlinesAndLastDuplicateWins) {
  // \r\n, \r and \n all end a line; "hello" is listed twice and gets id 6.
  const fs::path path =
      WriteTemp("crlf.txt", "[PAD]\r\n[UNK]\r[CLS]\n[SEP]\r\nhello\n##s\nhello\nworld");
  auto t = CreateWordPieceTokenizer(path.string(), {});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->vocab_size(), 8);
  EXPECT_EQ((*t)->special_tokens().bos, 2);
  EXPECT_EQ((*t)->special_tokens().eos, 3);
  EXPECT_EQ((*t)->special_tokens().pad, 0);
  EXPECT_EQ((*t)->special_tokens().unk, 1);
  auto enc = (*t)->Encode("Hello helloS WORLD x", 100, false);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  EXPECT_EQ(enc->ids, (std::vector<int32_t>{2, 6, 6, 5, 7, 1, 3}));
  EXPECT_EQ(enc->pieces, (std::vector<std::string>{"[CLS]", "hello", "hello", "##s", "world",
                                                   "[UNK]", "[SEP]"}));
}

// Without a stated casing, a vocabulary with capitals is a cased
// checkpoint's: lower-casing its input would never reach those tokens.
TEST(WordPieceLoadTest, CasingFromTheVocabulary) {
  const std::vector<std::string> specials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[unused0]"};
  EXPECT_FALSE(VocabularyIsCased(specials));
  std::vector<std::string> tokens = specials;
  for (int i = 0; i < 197; ++i) tokens.push_back("w" + std::to_string(i));
  tokens.push_back("##x");
  EXPECT_FALSE(VocabularyIsCased(tokens));
  // 1%: 2 of 200 tokens capitalised, an ASCII and a non-ASCII capital.
  tokens.push_back("##The");
  EXPECT_FALSE(VocabularyIsCased(tokens));
  tokens.push_back("\xc3\x89mile");
  EXPECT_TRUE(VocabularyIsCased(tokens));
  // Greek capitals count; accents, CJK and punctuation do not (one token
  // wrongly counted in the second vocabulary would be a fifth of it).
  EXPECT_TRUE(VocabularyIsCased({"[CLS]", "a", "b", "\xce\xa9\xce\xbc\xce\xad\xce\xb3\xce\xb1"}));
  EXPECT_FALSE(VocabularyIsCased(
      {"[CLS]", "caf\xc3\xa9", "##\xc3\xa9", "\xe6\x9d\xb1", "\xe2\x80\x94", "\xc2\xab"}));

  for (const bool cased : {false, true}) {
    const std::string file = cased ? "vocab_cased.txt" : "vocab_uncased.txt";
    SCOPED_TRACE(file);
    WordPieceOptions inferred;
    inferred.lower_case.reset();
    auto t = CreateWordPieceTokenizer((kDir / "wordpiece" / file).string(), inferred);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    const std::string description = (*t)->Describe();
    EXPECT_EQ(description.find("uncased"), cased ? std::string::npos : 11u) << description;
    EXPECT_NE(description.find("from its vocabulary"), std::string::npos) << description;
    WordPieceOptions stated;
    stated.lower_case = !cased;
    auto same = CreateWordPieceTokenizer((kDir / "wordpiece" / file).string(), stated);
    ASSERT_TRUE(same.ok()) << same.status().ToString();
    EXPECT_EQ((*same)->Describe().find("from its vocabulary"), std::string::npos);
    const std::string text = "The Cat sat in Paris, caf\xc3\xa9 CONTROL";
    const auto a = (*t)->Encode(text, 64, false), b = (*same)->Encode(text, 64, false);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->ids, b->ids);
  }
}

TEST(WordPieceLoadTest, RejectsBadOptions) {
  WordPieceOptions options;
  options.max_chars_per_word = 0;
  EXPECT_FALSE(
      CreateWordPieceTokenizerFromTokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]"}, options).ok());
}

// WordPiece tries no candidate longer than the vocabulary's longest token
// (in characters, "##" included). Its pieces against a greedy longest-match
// that tries every end, on random words over a vocabulary whose longest
// token starts a word and whose tokens hold 2- and 3-byte characters.
TEST(WordPieceLoadTest, PiecesMatchAnUnboundedLongestMatch) {
  const std::vector<std::string> letters = {
      "s",           "u", "p", "e", "r", "\xc3\x9f" /* ß */, "\xce\xbb" /* λ */, "\xd0\xb6" /* ж */,
      "\xe1\xb8\x80" /* Ḁ */};
  std::vector<std::string> tokens = {"[PAD]",
                                     "[UNK]",
                                     "[CLS]",
                                     "[SEP]",
                                     "superpersuper",
                                     "\xce\xbb\xce\xbb\xd0\xb6",
                                     "##\xd0\xb6\xd0\xb6",
                                     "##per",
                                     "##super",
                                     "su",
                                     "##\xc3\x9f\xe1\xb8\x80"};
  for (const std::string& l : letters) {
    tokens.push_back(l);
    tokens.push_back("##" + l);
  }
  const std::set<std::string> vocab(tokens.begin(), tokens.end());
  WordPieceOptions options;
  options.lower_case = false;
  options.max_chars_per_word = 1000;
  auto t = CreateWordPieceTokenizerFromTokens(tokens, options);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // The reference: every end from the word's end down, for each piece.
  const auto greedy = [&vocab](const std::vector<std::string>& chars) {
    std::vector<std::string> pieces;
    for (size_t start = 0; start < chars.size();) {
      size_t end = chars.size();
      for (; end > start; --end) {
        std::string candidate = start > 0 ? "##" : "";
        for (size_t i = start; i < end; ++i) candidate += chars[i];
        if (vocab.count(candidate)) {
          pieces.push_back(candidate);
          break;
        }
      }
      if (end == start) return std::vector<std::string>{"[UNK]"};
      start = end;
    }
    return pieces;
  };
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::vector<std::string> chars;
    const int length = 1 + static_cast<int>(rng() % 60);
    while (static_cast<int>(chars.size()) < length) {
      if (rng() % 8 == 0) {  // the long word-initial token's letters
        for (const char* c : {"s", "u", "p", "e", "r", "p", "e", "r", "s", "u", "p", "e", "r"})
          chars.push_back(c);
      } else {
        chars.push_back(letters[rng() % letters.size()]);
      }
    }
    std::string word;
    for (const std::string& c : chars) word += c;
    auto e = (*t)->Encode(word, 1 << 20, false);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    const std::vector<std::string> pieces(e->pieces.begin() + 1, e->pieces.end() - 1);
    ASSERT_EQ(pieces, greedy(chars)) << word;
  }
}

TEST(SentencePieceLoadTest, MissingFileIsNotFound) {
  const std::string path = "/nonexistent/sentencepiece.bpe.model";
  auto t = CreateSentencePieceTokenizer(path, {});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  ExpectErrorNaming(t.status(), path);
}

TEST(SentencePieceLoadTest, CorruptFilesAreErrorsNamingTheFile) {
  const std::string model = ReadAll(kSpmModel);
  ASSERT_GT(model.size(), 1000u) << "missing fixture " << kSpmModel;
  const std::pair<std::string, std::string> damaged[] = {
      {"empty.model", ""},
      {"text.model", "this is not a protobuf at all\n"},
      {"truncated.model", model.substr(0, model.size() / 2)},
      {"garbage.model", std::string(4096, '\xff')},
  };
  for (const auto& [name, bytes] : damaged) {
    SCOPED_TRACE(name);
    const fs::path path = WriteTemp(name, bytes);
    auto t = CreateSentencePieceTokenizer(path.string(), {});
    ASSERT_FALSE(t.ok());
    ExpectErrorNaming(t.status(), path.string());
  }
}

TEST(SentencePieceLoadTest, VocabSizeAndXlmrSpecials) {
  auto t = CreateSentencePieceTokenizer(kSpmModel, {});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->vocab_size(), 1001);  // 1000 pieces + fairseq offset 1
  EXPECT_EQ((*t)->special_tokens().bos, 0);
  EXPECT_EQ((*t)->special_tokens().pad, 1);
  EXPECT_EQ((*t)->special_tokens().eos, 2);
  EXPECT_EQ((*t)->special_tokens().unk, 3);
  EXPECT_NE((*t)->Describe().find("1000 pieces"), std::string::npos) << (*t)->Describe();

  SentencePieceOptions small;
  small.vocab_size = 500;
  auto too_small = CreateSentencePieceTokenizer(kSpmModel, small);
  ASSERT_FALSE(too_small.ok());
  ExpectErrorNaming(too_small.status(), "1001");

  SentencePieceOptions padded;
  padded.vocab_size = 1002;  // XLM-R's extra <mask> row
  auto ok = CreateSentencePieceTokenizer(kSpmModel, padded);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)->vocab_size(), 1002);
}

TEST(SentencePieceLoadTest, InMemoryModel) {
  auto t = CreateSentencePieceTokenizerFromProto(testing::TinySentencePieceModel(), {});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto enc = (*t)->Encode("the ring", 16, false);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  // "▁the", "ing" and "▁" are pieces 5, 7 and 12 (fairseq ids: +1).
  EXPECT_EQ(enc->pieces, (std::vector<std::string>{"<s>", "\xe2\x96\x81the", "\xe2\x96\x81", "r",
                                                   "ing", "</s>"}));
  EXPECT_EQ(enc->ids.front(), 0);
  EXPECT_EQ(enc->ids[1], 6);
  EXPECT_EQ(enc->ids[4], 8);
  auto unk = (*t)->Encode("\xd0\x96", 16, false);  // not in the model
  ASSERT_TRUE(unk.ok());
  EXPECT_EQ(unk->ids, (std::vector<int32_t>{0, 13, 3, 2}));
}

TEST(WordPieceLoadTest, InMemoryVocab) {
  auto t = CreateWordPieceTokenizerFromTokens(testing::TinyWordPieceVocab(), {});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto enc = (*t)->Encode("Unable, FOXED!", 16, false);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  EXPECT_EQ(enc->pieces,
            (std::vector<std::string>{"[CLS]", "un", "##able", ",", "fox", "##ed", "!", "[SEP]"}));
}

}  // namespace
}  // namespace encoderd
