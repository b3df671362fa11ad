#include "engine/text/sentencepiece_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "engine/text/sentencepiece_library.h"
#include "engine/text/truncation.h"

namespace encoderd {
namespace {

constexpr char kBos[] = "<s>";
constexpr char kEos[] = "</s>";
constexpr char kPad[] = "<pad>";
constexpr char kUnk[] = "<unk>";

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<SentencePieceLibrary::Model> processor,
                         const SentencePieceOptions& options, int64_t vocab_size)
      : processor_(std::move(processor)), options_(options), vocab_size_(vocab_size) {}

  StatusOr<Encoding> Encode(std::string_view text, int64_t max_tokens,
                            bool truncate) const override {
    RETURN_IF_ERROR(CheckUtf8(text));
    ASSIGN_OR_RETURN(std::vector<std::string> pieces, processor_->Encode(text));
    const SpecialTokens& special = options_.special_tokens;
    Encoding enc;
    enc.ids.reserve(pieces.size() + 2);
    enc.pieces.reserve(pieces.size() + 2);
    enc.ids.push_back(special.bos);
    enc.pieces.emplace_back(kBos);
    for (std::string& piece : pieces) {
      enc.ids.push_back(PieceToId(piece));
      enc.pieces.push_back(std::move(piece));
    }
    enc.ids.push_back(special.eos);
    enc.pieces.emplace_back(kEos);
    return ApplyLengthLimit(std::move(enc), max_tokens, truncate);
  }

  int64_t vocab_size() const override { return vocab_size_; }
  const SpecialTokens& special_tokens() const override { return options_.special_tokens; }
  std::string Describe() const override {
    return "sentencepiece (" + std::to_string(processor_->piece_size()) + " pieces, id offset " +
           std::to_string(options_.id_offset) + ", " + std::to_string(vocab_size_) + " tokens)";
  }

 private:
  // XLMRobertaTokenizer._convert_token_to_id: the fairseq specials by name,
  // then the sentencepiece id shifted by the offset; spm's own <unk> (id 0 in
  // XLM-R's model) maps to the fairseq <unk>.
  int32_t PieceToId(const std::string& piece) const {
    const SpecialTokens& special = options_.special_tokens;
    if (piece == kBos) return special.bos;
    if (piece == kPad) return special.pad;
    if (piece == kEos) return special.eos;
    if (piece == kUnk) return special.unk;
    const int spm_id = processor_->PieceToId(piece);
    return spm_id == processor_->unk_id() ? special.unk : spm_id + options_.id_offset;
  }

  std::unique_ptr<SentencePieceLibrary::Model> processor_;
  SentencePieceOptions options_;
  int64_t vocab_size_;
};

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> CreateSentencePieceTokenizerFromProto(
    std::string_view serialized_model, const SentencePieceOptions& options,
    const std::string& source) {
  ASSIGN_OR_RETURN(const SentencePieceLibrary* library, SentencePieceLibrary::Get());
  StatusOr<std::unique_ptr<SentencePieceLibrary::Model>> loaded = library->Load(serialized_model);
  if (!loaded.ok()) {
    return InvalidArgument(source +
                           " is not a valid sentencepiece model: " + loaded.status().message());
  }
  std::unique_ptr<SentencePieceLibrary::Model> processor = std::move(loaded).value();
  const int64_t pieces = processor->piece_size();
  if (pieces <= 0) return InvalidArgument(source + ": the sentencepiece model has no pieces");
  if (options.id_offset < 0) {
    return InvalidArgument("sentencepiece id_offset must not be negative, got " +
                           std::to_string(options.id_offset));
  }
  const int64_t needed = pieces + options.id_offset;
  const int64_t vocab_size = options.vocab_size == 0 ? needed : options.vocab_size;
  if (vocab_size < needed) {
    return InvalidArgument(source + ": " + std::to_string(pieces) + " pieces with id offset " +
                           std::to_string(options.id_offset) + " need a vocabulary of " +
                           std::to_string(needed) + " tokens, but vocab_size is " +
                           std::to_string(vocab_size));
  }
  const SpecialTokens& s = options.special_tokens;
  for (const int32_t id : {s.bos, s.eos, s.pad, s.unk}) {
    if (id < 0 || id >= vocab_size) {
      return InvalidArgument(source + ": special token id " + std::to_string(id) +
                             " is outside the vocabulary of " + std::to_string(vocab_size));
    }
  }
  return std::unique_ptr<Tokenizer>(
      new SentencePieceTokenizer(std::move(processor), options, vocab_size));
}

StatusOr<std::unique_ptr<Tokenizer>> CreateSentencePieceTokenizer(
    const std::string& model_path, const SentencePieceOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(model_path, ec)) {
    return NotFound("sentencepiece model file " + model_path + " does not exist or is not a file");
  }
  std::ifstream in(model_path, std::ios::binary);
  if (!in) return NotFound("cannot open sentencepiece model file " + model_path);
  std::ostringstream data;
  data << in.rdbuf();
  if (in.bad()) return DataLoss("error reading sentencepiece model file " + model_path);
  return CreateSentencePieceTokenizerFromProto(data.str(), options,
                                               "sentencepiece model file " + model_path);
}

}  // namespace encoderd
