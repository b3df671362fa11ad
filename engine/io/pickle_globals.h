// The globals an unpickled checkpoint may call, and what calling them means.
// This is the whole of what a checkpoint can make the reader do: build
// containers, tensors and byte strings. Nothing here touches the system.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "engine/io/pickle_value.h"

namespace encoderd {

// Caps the total number of container elements a pickle may create, so that
// copying calls (list(x), set(x)) cannot grow memory beyond a multiple of the input.
class ElementBudget {
 public:
  explicit ElementBudget(size_t limit) : left_(limit) {}
  Status Take(size_t n);

 private:
  size_t left_;
};

// True for "module.name" globals that stay real globals (callable or storage
// types); any other global must become a placeholder.
bool IsAllowedGlobal(const std::string& name);

// The dtype of a torch.*Storage type global ("torch.FloatStorage"), if it is one.
std::optional<DType> StorageTypeDType(const std::string& name);

// Evaluates `name(*args)` for an allow-listed global (REDUCE and NEWOBJ).
// `args` must be a tuple.
StatusOr<const PickleValue*> CallGlobal(const std::string& name, const PickleValue* args,
                                        PickleArena* arena, ElementBudget* budget);

}  // namespace encoderd
