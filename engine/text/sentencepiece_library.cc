#include "engine/text/sentencepiece_library.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <limits>
#include <string>

#include "engine/text/sentencepiece_charsmap.h"
#include "engine/text/utf8.h"

namespace encoderd {
namespace {

constexpr char kLibraryName[] = "libencoderd_sentencepiece.so";

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define ENCODERD_NO_DEEPBIND 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ENCODERD_NO_DEEPBIND 1
#endif

// The sanitizer runtimes refuse RTLD_DEEPBIND. Sanitizer builds load the
// wrapper (built without sanitizers, engine/text/CMakeLists.txt) into a link
// namespace of its own with dlmopen instead: there it gets its own libc,
// libstdc++ and protobuf, and only plain C calls cross the boundary (model
// bytes in; pieces out through a callback; the processor freed by the
// wrapper), so the system libprotobuf in the main namespace never meets it.
void* OpenWrapper(const std::string& path) {
#ifdef ENCODERD_NO_DEEPBIND
  return dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
#else
  return dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
#endif
}

std::vector<std::string> Candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("ENCODERD_SENTENCEPIECE_LIB"); env != nullptr && *env) {
    out.emplace_back(env);
  }
#ifdef ENCODERD_SENTENCEPIECE_LIB_PATH
  out.emplace_back(ENCODERD_SENTENCEPIECE_LIB_PATH);
#endif
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    std::string dir(exe, n);
    dir.resize(dir.rfind('/') + 1);
    out.push_back(dir + kLibraryName);
    out.push_back(dir + "../lib/" + kLibraryName);
  }
  out.emplace_back(kLibraryName);
  return out;
}

template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  return *fn != nullptr;
}

}  // namespace

StatusOr<const SentencePieceLibrary*> SentencePieceLibrary::Get() {
  static const StatusOr<const SentencePieceLibrary*> kLoaded =
      []() -> StatusOr<const SentencePieceLibrary*> {
    std::string tried;
    for (const std::string& path : Candidates()) {
      void* handle = OpenWrapper(path);
      if (handle == nullptr) {
        const char* why = dlerror();
        tried += "\n  " + path + ": " + (why ? why : "not loadable");
        continue;
      }
      auto* lib = new SentencePieceLibrary();  // lives as long as the process
      if (!Resolve(handle, ENCODERD_SPM_LOAD, &lib->load_) ||
          !Resolve(handle, ENCODERD_SPM_FREE, &lib->free_) ||
          !Resolve(handle, ENCODERD_SPM_PIECE_SIZE, &lib->piece_size_) ||
          !Resolve(handle, ENCODERD_SPM_UNK_ID, &lib->unk_id_) ||
          !Resolve(handle, ENCODERD_SPM_PIECE_TO_ID, &lib->piece_to_id_) ||
          !Resolve(handle, ENCODERD_SPM_ID_TO_PIECE, &lib->id_to_piece_) ||
          !Resolve(handle, ENCODERD_SPM_ENCODE, &lib->encode_) ||
          !Resolve(handle, ENCODERD_SPM_SERIALIZED_MODEL, &lib->serialized_model_)) {
        delete lib;
        tried += "\n  " + path + ": missing encoderd_spm_* symbols";
        continue;
      }
      return static_cast<const SentencePieceLibrary*>(lib);
    }
    return FailedPrecondition(std::string("cannot load the sentencepiece support library ") +
                              kLibraryName +
                              " (set ENCODERD_SENTENCEPIECE_LIB to its path); tried:" + tried);
  }();
  return kLoaded;
}

StatusOr<std::unique_ptr<SentencePieceLibrary::Model>> SentencePieceLibrary::Load(
    std::string_view serialized_model) const {
  // The library's protobuf takes the size as an int.
  if (serialized_model.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return InvalidArgument("a sentencepiece model of " + std::to_string(serialized_model.size()) +
                           " bytes is larger than protobuf reads (2 GiB)");
  }
  // The library reads its normalization maps unchecked: while encoding, and
  // already while loading (a model's self-test samples).
  RETURN_IF_ERROR(CheckSentencePieceCharsMaps(serialized_model));
  char error[512] = {0};
  void* handle = load_(serialized_model.data(), serialized_model.size(), error, sizeof(error));
  if (handle == nullptr) return InvalidArgument(error);
  auto model = std::make_unique<Model>(this, handle);
  // The maps the library holds, as its protobuf writes them, checked again:
  // they pass unless the check above read the bytes' fields otherwise than
  // protobuf did.
  struct Held {
    std::string bytes;
    bool failed = false;
  } held;
  const auto sink = [](void* context, const char* data, size_t size) {
    auto* h = static_cast<Held*>(context);
    try {  // nothing may unwind into the wrapper (its own runtime under dlmopen)
      h->bytes.assign(data, size);
    } catch (...) {
      h->failed = true;
    }
  };
  if (serialized_model_(handle, sink, &held) != 0 || held.failed || held.bytes.empty()) {
    return Internal("sentencepiece: the loaded model could not be serialized again");
  }
  if (Status held_maps = CheckSentencePieceCharsMaps(held.bytes); !held_maps.ok()) {
    return InvalidArgument("sentencepiece read a normalization map that its check did not see: " +
                           held_maps.message());
  }
  ASSIGN_OR_RETURN(model->whitespace_, ReadSentencePieceWhitespace(held.bytes));
  return model;
}

std::string SentencePieceLibrary::Model::IdToPiece(int id) const {
  std::string piece;
  const auto sink = [](void* context, const char* data, size_t size) {
    static_cast<std::string*>(context)->assign(data, size);
  };
  lib_->id_to_piece_(handle_, id, sink, &piece);
  return piece;
}

StatusOr<std::vector<SentencePieceLibrary::Model::Piece>>
SentencePieceLibrary::Model::EncodeWithOffsets(std::string_view text) const {
  std::vector<Piece> pieces;
  char error[512] = {0};
  const auto sink = [](void* context, const char* piece, size_t size, int id, size_t begin,
                       size_t end) {
    static_cast<std::vector<Piece>*>(context)->push_back(
        {std::string(piece, size), id, begin, end});
  };
  if (lib_->encode_(handle_, text.data(), text.size(), sink, &pieces, error, sizeof(error)) != 0) {
    return Internal(std::string("sentencepiece: ") + error);
  }
  for (Piece& p : pieces) {
    p.last =
        p.end > p.begin && p.end <= text.size() ? CharStartAtOrBefore(text, p.end - 1) : p.begin;
  }
  return pieces;
}

}  // namespace encoderd
