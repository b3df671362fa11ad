// Loads libencoderd_sentencepiece.so (see sentencepiece_shim.h) once per
// process and hands out its entry points.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/text/sentencepiece_charsmap.h"
#include "engine/text/sentencepiece_shim.h"

namespace encoderd {

class SentencePieceLibrary {
 public:
  // Where the wrapper is looked for, in order: $ENCODERD_SENTENCEPIECE_LIB,
  // the path it was built at, next to the executable, ../lib from the
  // executable, then the dynamic linker's search path. The first call loads
  // it; the result (or the error listing every place tried) is kept for the
  // process lifetime. Thread-safe.
  static StatusOr<const SentencePieceLibrary*> Get();

  // A loaded model; frees the processor when destroyed.
  class Model {
   public:
    Model(const SentencePieceLibrary* lib, void* handle) : lib_(lib), handle_(handle) {}
    ~Model() { lib_->free_(handle_); }
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    int piece_size() const { return lib_->piece_size_(handle_); }
    int unk_id() const { return lib_->unk_id_(handle_); }
    int PieceToId(std::string_view piece) const {
      return lib_->piece_to_id_(handle_, piece.data(), piece.size());
    }
    // The piece of `id`, 0 <= id < piece_size().
    std::string IdToPiece(int id) const;
    // The pieces of `text`, each with its sentencepiece id and the bytes of
    // `text` it stands for. Thread-safe.
    struct Piece {
      std::string piece;
      int id = 0;
      size_t begin = 0, end = 0;
      // Where the character that gave the piece's last byte begins (begin
      // when the piece stands for no byte of `text`), from which a text
      // may resume after it.
      size_t last = 0;
    };
    StatusOr<std::vector<Piece>> EncodeWithOffsets(std::string_view text) const;
    // How its normalizer treats spaces, as the library holds the model.
    const SentencePieceWhitespace& whitespace() const { return whitespace_; }

   private:
    friend class SentencePieceLibrary;
    const SentencePieceLibrary* lib_;
    void* handle_;
    SentencePieceWhitespace whitespace_;
  };

  // Parses a serialized ModelProto; INVALID_ARGUMENT with sentencepiece's
  // message when it is not a usable model, or with what is wrong with a
  // normalization map (sentencepiece_charsmap.h), which the library would
  // take unchecked; INTERNAL when the loaded model cannot be read back.
  StatusOr<std::unique_ptr<Model>> Load(std::string_view serialized_model) const;

 private:
  EncoderdSpmLoadFn load_ = nullptr;
  EncoderdSpmFreeFn free_ = nullptr;
  EncoderdSpmPieceSizeFn piece_size_ = nullptr;
  EncoderdSpmUnkIdFn unk_id_ = nullptr;
  EncoderdSpmPieceToIdFn piece_to_id_ = nullptr;
  EncoderdSpmIdToPieceFn id_to_piece_ = nullptr;
  EncoderdSpmEncodeFn encode_ = nullptr;
  EncoderdSpmSerializedModelFn serialized_model_ = nullptr;
};

}  // namespace encoderd
