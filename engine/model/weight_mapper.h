// Moves checkpoint tensors to canonical names (model_spec.h), checking each
// one's dtype and shape on the way. Errors name the checkpoint file and key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace encoderd {

// A dimension that any size matches (Find returns the tensor for the caller
// to read the size from).
inline constexpr int64_t kAnySize = -1;

class WeightMapper {
 public:
  // `checkpoint` must outlive the mapper; `file` is used in error messages.
  WeightMapper(const TensorMap& checkpoint, std::string file);

  bool Has(const std::string& key) const { return checkpoint_.count(key) != 0; }
  // The floating-point tensor stored under `key`, of the given shape
  // (kAnySize matches any size): NotFound or InvalidArgument otherwise.
  StatusOr<Tensor> Find(const std::string& key, const std::vector<int64_t>& shape) const;

  // canonical <- key (shared storage, no copy).
  Status Add(const std::string& canonical, const std::string& key,
             const std::vector<int64_t>& shape);
  // canonical.{weight,bias} <- key.{weight,bias}: [out, in] and [out].
  Status AddLinear(const std::string& canonical, const std::string& key, int64_t out, int64_t in);
  // canonical.{weight,bias} <- key.{weight,bias} or, in the oldest BERT
  // checkpoints, key.{gamma,beta}: both [size].
  Status AddNorm(const std::string& canonical, const std::string& key, int64_t size);
  // canonical <- the tensors under `keys` stacked along dim 0; each must have
  // `part_shape`. The one place weights are copied.
  Status AddConcat(const std::string& canonical, const std::vector<std::string>& keys,
                   const std::vector<int64_t>& part_shape);

  // Number of children "<prefix><i>." for i = 0, 1, ... (the highest index + 1,
  // so a missing layer surfaces as a missing key).
  int64_t CountIndexed(const std::string& prefix) const;

  // The distinct names "<name>" of the keys "<prefix><name>.<rest>", in the
  // order of the keys.
  std::vector<std::string> ChildNames(const std::string& prefix) const;

  const std::string& file() const { return file_; }
  TensorMap Release() { return std::move(weights_); }

 private:
  // Counts `bytes` more of mapped weights against the checkpoint's bytes:
  // DataLoss once they pass twice its distinct bytes. Each mapped tensor is
  // packed on its own later, so tensors shared between layers (or views of
  // one storage under many layers' names) would multiply a small file into
  // any amount of memory.
  Status Spend(const std::string& key, size_t bytes);

  const TensorMap& checkpoint_;
  std::string file_;
  TensorMap weights_;
  size_t mapped_bytes_ = 0;
  size_t checkpoint_bytes_;  // DistinctBytes(checkpoint_)
};

}  // namespace encoderd
