// C interface of libencoderd_sentencepiece.so, a small shared library that
// wraps Debian's libsentencepiece. The engine never links libsentencepiece
// itself: that library bundles and exports its own protobuf-lite (3.14), which
// clashes with the system libprotobuf (3.21) that LibTorch and gRPC load, and
// the process dies before main() or on the first model load. The engine
// dlopen()s this wrapper with RTLD_LOCAL | RTLD_DEEPBIND instead (see
// sentencepiece_library.cc), so each protobuf copy only serves its own users.
//
// Every function catches all exceptions. Error texts are written, truncated
// and NUL-terminated, into `error` (capacity `error_size`).
#pragma once

#include <cstddef>

extern "C" {

// Returns a processor handle, or null with `error` set.
typedef void* (*EncoderdSpmLoadFn)(const char* model, size_t model_size, char* error,
                                   size_t error_size);
typedef void (*EncoderdSpmFreeFn)(void* processor);
typedef int (*EncoderdSpmPieceSizeFn)(const void* processor);
typedef int (*EncoderdSpmUnkIdFn)(const void* processor);
typedef int (*EncoderdSpmPieceToIdFn)(const void* processor, const char* piece, size_t size);
// Calls sink(context, piece, size) with the piece of `id` (0 <= id < piece
// size); returns 0, or -1 for an id out of range.
typedef int (*EncoderdSpmIdToPieceFn)(const void* processor, int id,
                                      void (*sink)(void* context, const char* piece, size_t size),
                                      void* context);
// Calls sink(context, bytes, size) with the model the processor holds,
// serialized again by its protobuf (each field as protobuf writes it,
// whatever bytes it was read from); returns 0, or -1.
typedef int (*EncoderdSpmSerializedModelFn)(const void* processor,
                                            void (*sink)(void* context, const char* bytes,
                                                         size_t size),
                                            void* context);
// Calls sink(context, piece, size, id, begin, end) for each piece of `text`,
// in order: the piece, its sentencepiece id, and the bytes [begin, end) of
// `text` it stands for. Returns 0 on success, -1 with `error` set. Safe to
// call concurrently on one handle.
typedef void (*EncoderdSpmPieceSink)(void* context, const char* piece, size_t size, int id,
                                     size_t begin, size_t end);
typedef int (*EncoderdSpmEncodeFn)(const void* processor, const char* text, size_t text_size,
                                   EncoderdSpmPieceSink sink, void* context, char* error,
                                   size_t error_size);
}

// Exported symbol names, one per typedef above.
#define ENCODERD_SPM_LOAD "encoderd_spm_load"
#define ENCODERD_SPM_FREE "encoderd_spm_free"
#define ENCODERD_SPM_PIECE_SIZE "encoderd_spm_piece_size"
#define ENCODERD_SPM_UNK_ID "encoderd_spm_unk_id"
#define ENCODERD_SPM_PIECE_TO_ID "encoderd_spm_piece_to_id"
#define ENCODERD_SPM_ID_TO_PIECE "encoderd_spm_id_to_piece"
#define ENCODERD_SPM_ENCODE "encoderd_spm_encode"
#define ENCODERD_SPM_SERIALIZED_MODEL "encoderd_spm_serialized_model"
