// An allow-list unpickler: a stack machine for pickle protocols 0..5 as
// written by torch.save. It never imports or calls anything: allow-listed
// globals (pickle_globals.h) are evaluated by C++ code, every other global
// becomes an inert placeholder, and persistent ids are handed to the caller.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/io/pickle_value.h"

namespace encoderd {

// Turns a persistent id (BINPERSID/PERSID) into a value; errors abort the read.
using PersistentLoadFn =
    std::function<StatusOr<const PickleValue*>(const PickleValue* pid, PickleArena* arena)>;

struct UnpickleResult {
  const PickleValue* root = nullptr;
  // Offset just past the STOP opcode (the next pickle in a stream starts there).
  size_t end = 0;
};

// Reads one pickle from data[0, size). Values are allocated in `arena`; names of
// globals that became placeholders are appended to `placeholder_globals`
// (each once). Memory use is bounded by a small multiple of `size`.
StatusOr<UnpickleResult> Unpickle(const std::byte* data, size_t size, PickleArena* arena,
                                  const PersistentLoadFn& persistent_load,
                                  std::vector<std::string>* placeholder_globals);

}  // namespace encoderd
