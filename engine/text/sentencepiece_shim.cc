// Built as libencoderd_sentencepiece.so (not part of encoderd_engine); see
// sentencepiece_shim.h for why.
#include "engine/text/sentencepiece_shim.h"

#include <sentencepiece_processor.h>

#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace {

using sentencepiece::SentencePieceProcessor;

void SetError(const std::string& message, char* error, size_t error_size) {
  if (error == nullptr || error_size == 0) return;
  const size_t n = std::min(message.size(), error_size - 1);
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

const SentencePieceProcessor* AsProcessor(const void* p) {
  return static_cast<const SentencePieceProcessor*>(p);
}

}  // namespace

#define ENCODERD_SPM_EXPORT extern "C" __attribute__((visibility("default")))

ENCODERD_SPM_EXPORT void* encoderd_spm_load(const char* model, size_t model_size, char* error,
                                            size_t error_size) {
  try {
    auto* processor = new SentencePieceProcessor();
    const auto status = processor->LoadFromSerializedProto(std::string_view(model, model_size));
    if (!status.ok()) {
      SetError(status.ToString(), error, error_size);
      delete processor;
      return nullptr;
    }
    return processor;
  } catch (const std::exception& e) {
    SetError(e.what(), error, error_size);
  } catch (...) {
    SetError("unknown exception in sentencepiece", error, error_size);
  }
  return nullptr;
}

ENCODERD_SPM_EXPORT void encoderd_spm_free(void* processor) {
  delete static_cast<SentencePieceProcessor*>(processor);
}

ENCODERD_SPM_EXPORT int encoderd_spm_piece_size(const void* processor) {
  return AsProcessor(processor)->GetPieceSize();
}

ENCODERD_SPM_EXPORT int encoderd_spm_unk_id(const void* processor) {
  return AsProcessor(processor)->unk_id();
}

ENCODERD_SPM_EXPORT int encoderd_spm_piece_to_id(const void* processor, const char* piece,
                                                 size_t size) {
  try {
    return AsProcessor(processor)->PieceToId(std::string_view(piece, size));
  } catch (...) {
    return AsProcessor(processor)->unk_id();
  }
}

ENCODERD_SPM_EXPORT int encoderd_spm_id_to_piece(const void* processor, int id,
                                                 void (*sink)(void*, const char*, size_t),
                                                 void* context) {
  try {
    if (id < 0 || id >= AsProcessor(processor)->GetPieceSize()) return -1;
    const std::string& piece = AsProcessor(processor)->IdToPiece(id);
    sink(context, piece.data(), piece.size());
    return 0;
  } catch (...) {
    return -1;
  }
}

ENCODERD_SPM_EXPORT int encoderd_spm_serialized_model(const void* processor,
                                                      void (*sink)(void*, const char*, size_t),
                                                      void* context) {
  try {
    const std::string bytes = AsProcessor(processor)->serialized_model_proto();
    sink(context, bytes.data(), bytes.size());
    return 0;
  } catch (...) {
    return -1;
  }
}

ENCODERD_SPM_EXPORT int encoderd_spm_encode(const void* processor, const char* text,
                                            size_t text_size, EncoderdSpmPieceSink sink,
                                            void* context, char* error, size_t error_size) {
  try {
    sentencepiece::ImmutableSentencePieceText spt;
    const auto status =
        AsProcessor(processor)->Encode(std::string_view(text, text_size), spt.mutable_proto());
    if (!status.ok()) {
      SetError(status.ToString(), error, error_size);
      return -1;
    }
    for (size_t i = 0; i < spt.pieces_size(); ++i) {
      const auto sp = spt.pieces(static_cast<int>(i));
      sink(context, sp.piece().data(), sp.piece().size(), static_cast<int>(sp.id()), sp.begin(),
           sp.end());
    }
    return 0;
  } catch (const std::exception& e) {
    SetError(e.what(), error, error_size);
  } catch (...) {
    SetError("unknown exception in sentencepiece", error, error_size);
  }
  return -1;
}
