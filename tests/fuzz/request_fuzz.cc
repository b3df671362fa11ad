// libFuzzer target: arbitrary bytes as an encoderd.v1 request, through the
// same validation and tokenization the gRPC handlers run
// (server/core/request_validation.h), against the default model's real
// SentencePiece tokenizer (models/langid) with small limits.
//
// Input: byte 0 picks the request type (Embed, Classify, Encode, Tokenize,
// ModelInfo or Rerank) and the truncate flag's override; the rest is parsed as
// that message (unparsable: ignored, as gRPC answers it before validation).
// Requests with text_pairs (and Rerank's query with its texts) go through
// TokenizeTextPairs with the RoBERTa template the langid model would use.
// A request's prompt_name picks one of three prompts (PromptNamed over
// kPrompts: a short one, an empty one, one longer than max_tokens), which
// goes in front of each text, a pair's first one and the query.
// Invariants (trap on violation): every rejection is INVALID_ARGUMENT; an
// accepted request has 1..max_client_batch_size inputs, and every sequence it
// yields has 2..max_tokens ids inside the vocabulary; validation accepts
// exactly what an independent check of the limits accepts; a prompt changes
// no check, an unknown prompt_name is refused with a short message.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text/sentencepiece_tokenizer.h"
#include "proto/encoderd.pb.h"
#include "server/core/request_validation.h"
#include "tests/fuzz/fuzz_require.h"

namespace {

using encoderd::Encoding;
using encoderd::Status;
using encoderd::StatusCode;
using encoderd::Tokenizer;
using encoderd::server::RequestLimits;
namespace v1 = encoderd::v1;
namespace sv = encoderd::server;

const Tokenizer& LangidTokenizer() {
  static const Tokenizer* const tokenizer = [] {
    auto t = encoderd::CreateSentencePieceTokenizer(
        ENCODERD_SOURCE_DIR "/models/langid/sentencepiece.bpe.model", {});
    if (!t.ok()) {
      std::fprintf(stderr, "request_fuzz: cannot load the langid tokenizer: %s\n",
                   t.status().ToString().c_str());
      std::abort();
    }
    return std::move(t).value().release();
  }();
  return *tokenizer;
}

bool IsInvalidArgument(const Status& s) { return s.code() == StatusCode::kInvalidArgument; }

// The prompts a fuzzed request may name, as a model folder's would be.
const std::map<std::string, std::string>& Prompts() {
  static const auto* const prompts = new std::map<std::string, std::string>{
      {"query", "query: "},
      {"document", ""},
      {"long", "represent this sentence for searching relevant passages, please: "}};
  return *prompts;
}

// The prompt `name` names (the default, "query: ", where it is empty);
// nullopt, its refusal checked, where it names none.
std::optional<std::string_view> FuzzPrompt(const std::string& name) {
  auto prompt = sv::PromptNamed(Prompts(), "query: ", name, "model 'fuzz'");
  REQUIRE(prompt.ok() == (name.empty() || Prompts().count(name) == 1));
  if (prompt.ok()) return *prompt;
  REQUIRE(IsInvalidArgument(prompt.status()));
  REQUIRE(prompt.status().message().size() < 1024);
  return std::nullopt;
}

// Causes of a rejection seen from outside the checks: an empty text or one
// holding NUL, no texts or more than the limit.
bool BadText(const std::string& t) { return t.empty() || t.find('\0') != std::string::npos; }
bool AnyBadText(const std::vector<std::string>& texts) {
  for (const std::string& t : texts)
    if (BadText(t)) return true;
  return false;
}
bool BadCount(const std::vector<std::string>& texts, const RequestLimits& limits) {
  return texts.empty() || static_cast<int64_t>(texts.size()) > limits.max_client_batch_size;
}

// Texts through TokenizeTexts, checked against CheckTexts and the limits.
void FuzzTexts(const google::protobuf::RepeatedPtrField<std::string>& field, bool truncate,
               const RequestLimits& limits, std::string_view prompt) {
  const std::vector<std::string> texts(field.begin(), field.end());
  const Tokenizer& tokenizer = LangidTokenizer();
  const Status checked = sv::CheckTexts(texts, limits);
  auto encodings = sv::TokenizeTexts(tokenizer, texts, limits, truncate, prompt);
  if (!checked.ok()) {
    REQUIRE(IsInvalidArgument(checked));
    REQUIRE(!encodings.ok() && encodings.status().message() == checked.message());
    // Protobuf already refused invalid UTF-8, so a rejection has a visible cause.
    REQUIRE(BadCount(texts, limits) || AnyBadText(texts));
    return;
  }
  if (!encodings.ok()) {
    // Only the length limit can refuse checked texts, and only without truncation.
    REQUIRE(IsInvalidArgument(encodings.status()) && !truncate);
    REQUIRE(encodings.status().message().find("more than the limit of") != std::string::npos);
    return;
  }
  REQUIRE(encodings->size() == texts.size());
  for (const Encoding& e : *encodings) {
    REQUIRE(e.ids.size() >= 2 && static_cast<int64_t>(e.ids.size()) <= limits.max_tokens);
    REQUIRE(e.pieces.size() == e.ids.size());
    REQUIRE(truncate || !e.truncated());
    for (int32_t id : e.ids) REQUIRE(id >= 0 && id < tokenizer.vocab_size());
  }
}

// What TokenizeTextPairs or TokenizeQueryPairs made of requests that
// `checked` (the checks of the texts) says are valid or not: rejections are
// INVALID_ARGUMENT and have a cause seen from outside (`visible_cause`);
// accepted pairs are <s> a </s></s> b </s> within the limit, every token
// type 0.
void CheckPairEncodings(const Status& checked, bool visible_cause,
                        const encoderd::StatusOr<std::vector<Encoding>>& encodings, size_t count,
                        bool truncate, const RequestLimits& limits) {
  const Tokenizer& tokenizer = LangidTokenizer();
  if (!checked.ok()) {
    REQUIRE(IsInvalidArgument(checked) && visible_cause);
    REQUIRE(!encodings.ok() && IsInvalidArgument(encodings.status()));
    return;
  }
  if (!encodings.ok()) {
    REQUIRE(IsInvalidArgument(encodings.status()) && !truncate);
    REQUIRE(encodings.status().message().find("text pair is") != std::string::npos);
    return;
  }
  REQUIRE(encodings->size() == count);
  const encoderd::SpecialTokens& special = tokenizer.special_tokens();
  for (const Encoding& e : *encodings) {
    // A text of only spaces has no content tokens: the specials alone remain.
    REQUIRE(static_cast<int64_t>(e.ids.size()) >=
                encoderd::PairSpecialTokens(encoderd::PairTemplate::kRoberta) &&
            static_cast<int64_t>(e.ids.size()) <= limits.max_tokens);
    REQUIRE(e.pieces.size() == e.ids.size() && e.token_types.size() == e.ids.size());
    REQUIRE(e.ids.front() == special.bos && e.ids.back() == special.eos);
    REQUIRE(truncate || !e.truncated());
    for (int32_t type : e.token_types) REQUIRE(type == 0);
    for (int32_t id : e.ids) REQUIRE(id >= 0 && id < tokenizer.vocab_size());
  }
}

// Text pairs through TokenizeTextPairs, with the RoBERTa template.
void FuzzPairs(const std::vector<std::string>& texts, const std::vector<std::string>& pairs,
               bool truncate, const RequestLimits& limits, std::string_view prompt) {
  auto encodings = sv::TokenizeTextPairs(LangidTokenizer(), encoderd::PairTemplate::kRoberta, texts,
                                         pairs, limits, truncate, prompt);
  Status checked = sv::CheckTexts(texts, limits);
  for (size_t i = 0; checked.ok() && i < pairs.size(); ++i)
    checked = sv::CheckText(pairs[i], i, "text_pairs");
  if (checked.ok() && pairs.size() != texts.size()) checked = encoderd::InvalidArgument("count");
  const bool visible = BadCount(texts, limits) || pairs.size() != texts.size() ||
                       AnyBadText(texts) || AnyBadText(pairs);
  CheckPairEncodings(checked, visible, encodings, texts.size(), truncate, limits);
}

// Rerank's (query, text) pairs through TokenizeQueryPairs.
void FuzzRerank(const v1::RerankRequest& r, const RequestLimits& limits) {
  const std::optional<std::string_view> prompt = FuzzPrompt(r.prompt_name());
  if (!prompt) return;
  const std::vector<std::string> texts(r.texts().begin(), r.texts().end());
  auto encodings = sv::TokenizeQueryPairs(LangidTokenizer(), encoderd::PairTemplate::kRoberta,
                                          r.query(), texts, limits, r.truncate(), *prompt);
  Status checked = sv::CheckQuery(r.query());
  REQUIRE(checked.ok() == !BadText(r.query()));
  if (checked.ok()) checked = sv::CheckTexts(texts, limits);
  const bool visible = BadText(r.query()) || BadCount(texts, limits) || AnyBadText(texts);
  CheckPairEncodings(checked, visible, encodings, texts.size(), r.truncate(), limits);
}

template <typename Request>
void FuzzTextsOrPairs(const Request& r, bool truncate, const RequestLimits& limits) {
  const std::optional<std::string_view> prompt = FuzzPrompt(r.prompt_name());
  if (!prompt) return;
  if (r.text_pairs_size() == 0) {
    FuzzTexts(r.texts(), truncate, limits, *prompt);
  } else {
    FuzzPairs({r.texts().begin(), r.texts().end()}, {r.text_pairs().begin(), r.text_pairs().end()},
              truncate, limits, *prompt);
  }
}

void FuzzTokenIds(const v1::EncodeRequest& request, const RequestLimits& limits) {
  std::vector<std::vector<int32_t>> sequences;
  for (const v1::TokenIds& ids : request.token_ids())
    sequences.emplace_back(ids.ids().begin(), ids.ids().end());
  bool valid =
      !sequences.empty() && static_cast<int64_t>(sequences.size()) <= limits.max_client_batch_size;
  for (const auto& s : sequences) {
    valid &= !s.empty() && static_cast<int64_t>(s.size()) <= limits.max_tokens;
    for (int32_t id : s) valid &= id >= 0 && id < limits.vocab_size;
  }
  const Status status = sv::CheckTokenIds(sequences, limits);
  REQUIRE(status.ok() == valid);
  REQUIRE(status.ok() || IsInvalidArgument(status));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const RequestLimits limits{/*max_client_batch_size=*/4, /*max_tokens=*/16,
                             LangidTokenizer().vocab_size()};
  const uint8_t selector = data[0];
  const void* body = data + 1;
  const int body_size = static_cast<int>(size - 1);
  switch (selector % 5) {
    case 0: {
      v1::EmbedRequest r;
      if (!r.ParseFromArray(body, body_size)) return 0;
      const Status pooling = sv::CheckPooling(r.pooling()).status();
      REQUIRE(pooling.ok() == v1::Pooling_IsValid(r.pooling()));
      REQUIRE(pooling.ok() || IsInvalidArgument(pooling));
      // dimensions against a 64-wide embedding whose default is 48 values: a
      // prefix, cut and made unit length again, or a refusal.
      constexpr int64_t kWidth = 64, kDefault = 48;
      const auto kept = sv::KeptDimensions(r.dimensions(), kDefault, kWidth, r.model());
      REQUIRE(kept.ok() == (r.dimensions() >= 0 && r.dimensions() <= kWidth));
      if (kept.ok()) {
        REQUIRE(*kept == (r.dimensions() == 0 ? kDefault : r.dimensions()));
        float whole[kWidth];
        for (int64_t i = 0; i < kWidth; ++i) whole[i] = static_cast<float>(i % 7) - 3.f;
        const std::vector<float> cut = sv::KeptValues(whole, kWidth, *kept, r.normalize());
        REQUIRE(static_cast<int64_t>(cut.size()) == *kept);
        double norm = 0;
        for (float v : cut) norm += double{v} * v;
        REQUIRE(!r.normalize() || *kept == kWidth || std::fabs(norm - 1) < 1e-5);
      } else {
        REQUIRE(IsInvalidArgument(kept.status()) && kept.status().message().size() < 1024);
      }
      FuzzTextsOrPairs(r, r.truncate(), limits);
      break;
    }
    case 1: {
      v1::ClassifyRequest r;
      if (!r.ParseFromArray(body, body_size)) return 0;
      FuzzTextsOrPairs(r, r.truncate(), limits);
      break;
    }
    case 2: {
      v1::EncodeRequest r;
      if (!r.ParseFromArray(body, body_size)) return 0;
      const Status inputs = sv::CheckEncodeInputs(r.texts_size(), r.token_ids_size());
      REQUIRE(inputs.ok() == ((r.texts_size() > 0) != (r.token_ids_size() > 0)));
      if (!inputs.ok()) {
        REQUIRE(IsInvalidArgument(inputs));
      } else if (r.token_ids_size() > 0) {
        FuzzTokenIds(r, limits);
      } else {
        FuzzTextsOrPairs(r, r.truncate(), limits);
      }
      break;
    }
    case 3: {
      v1::TokenizeRequest r;
      if (!r.ParseFromArray(body, body_size)) return 0;
      // The selector's high bit flips truncate, so both modes see every text.
      FuzzTextsOrPairs(r, r.truncate() != ((selector & 0x80) != 0), limits);
      break;
    }
    default: {
      if (selector & 0x40) {
        v1::RerankRequest r;
        if (!r.ParseFromArray(body, body_size)) return 0;
        FuzzRerank(r, limits);
        break;
      }
      v1::ModelInfoRequest r;
      if (!r.ParseFromArray(body, body_size)) return 0;
      REQUIRE(r.ByteSizeLong() <= static_cast<size_t>(body_size));
      break;
    }
  }
  return 0;
}
