// The values an allow-list unpickler can produce. Values live in a
// PickleArena and refer to each other by raw pointer, so shared and even
// cyclic structures (a list appended to itself) are freed with the arena.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace encoderd {

enum class PickleKind : uint8_t {
  kNone,
  kBool,
  kInt,
  kBigInt,  // an integer wider than 64 bits; `str` holds its two's-complement LE bytes
  kFloat,
  kString,  // UTF-8
  kBytes,
  kTuple,
  kList,
  kSet,
  kDict,         // `items` holds key, value, key, value... in insertion order
  kGlobal,       // an allow-listed global (`str` is "module.name")
  kPlaceholder,  // any other global, or the result of calling one; `items`: the
                 // attributes BUILD gave it, as a kDict holds them
  kStorage,      // a persistent-id storage reference
  kTensor,
};

struct PickleValue {
  PickleKind kind = PickleKind::kNone;
  int64_t int_value = 0;  // kBool, kInt
  double float_value = 0;
  // kString/kBytes payload, kBigInt bytes, kGlobal/kPlaceholder name, kStorage key.
  std::string str;
  // kTuple/kList/kSet elements; kDict interleaved keys and values.
  std::vector<const PickleValue*> items;

  // kStorage: element type, element count declared by the persistent id, and
  // (legacy storage views) the element offset into the root storage.
  DType dtype = DType::kFloat32;
  int64_t storage_numel = 0;
  int64_t storage_view_offset = 0;
  bool storage_is_view = false;

  // kTensor: `storage` is a kStorage value.
  const PickleValue* storage = nullptr;
  int64_t storage_offset = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;

  bool IsContainer() const {
    return kind == PickleKind::kTuple || kind == PickleKind::kList || kind == PickleKind::kSet ||
           kind == PickleKind::kDict;
  }
};

// Owns every value made while reading one pickle (or several, for the legacy format).
class PickleArena {
 public:
  PickleValue* New(PickleKind kind) {
    values_.push_back(std::make_unique<PickleValue>());
    values_.back()->kind = kind;
    return values_.back().get();
  }
  size_t size() const { return values_.size(); }

 private:
  std::vector<std::unique_ptr<PickleValue>> values_;
};

// The value stored under string key `key` in dict `dict` (the last one, as a
// Python dict would keep), or the attribute `key` of a placeholder object;
// nullptr when there is none.
const PickleValue* DictGet(const PickleValue* dict, const std::string& key);

}  // namespace encoderd
