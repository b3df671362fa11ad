// Pooling and the classification head, run on the host with the CPU kernels
// over an encoder's fp32 hidden states or over pooled rows. Shared by every
// Encoder implementation (the CUDA encoder pools on the device and hands the
// pooled rows to the host for pool_dense, normalization and the head).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "engine/model/model_spec.h"
#include "engine/runtime/packed_batch.h"
#include "kernels/cpu_context.h"
#include "kernels/linear.h"

namespace encoderd {

// Checks a batch against the model before any kernel sees it: consistent
// cu_seqlens / max_seqlen, no empty or over-long sequence, every token,
// position and token type id inside its table (`position_rows` 0: the model
// has no position table; `type_rows` 0: only type 0 is valid), pool_start
// empty or one entry >= 0 per sequence.
Status ValidatePackedBatch(const EncoderConfig& config, const PackedBatch& batch,
                           int64_t position_rows, int64_t type_rows);

// Whether the model masks pad keys (EncoderConfig::mask_pad_keys) and the
// batch holds its pad token.
bool HoldsMaskedPad(const EncoderConfig& config, const PackedBatch& batch);

// The batch's kernels::KeyBias where the model masks pad keys
// (EncoderConfig::mask_pad_keys): *bias [tokens] 0, or -infinity for each
// pad token of a sequence that has another token (a sequence of pad tokens
// alone keeps its keys: the requests refuse it, and no row gets no key).
// Returns false, leaving *bias as it was, where nothing is masked.
bool PadKeyBias(const EncoderConfig& config, const PackedBatch& batch, std::vector<float>* bias);

// `t` as contiguous fp32, without a copy when it already is, at any address:
// for data read only by memcpy, unaligned vector loads or oneDNN (a legacy
// checkpoint's storages are mapped at arbitrary byte offsets; copying them to
// realign would make whole tables resident at load).
Tensor Fp32AnyAlignment(const Tensor& t);

// Packs weight [out, in] and bias ([out] or undefined) of the Linear layer
// `name` for kernels::Linear on ctx's device with `type` weights (float32,
// bfloat16 or int8 on the CPU, float16 or bfloat16 on CUDA), then
// releases their pages (Encoder::Create's contract: one copy of the model at
// a time).
StatusOr<std::unique_ptr<kernels::PackedWeight>> PackLinear(const kernels::Context& ctx,
                                                            const std::string& name,
                                                            const Tensor& weight,
                                                            const Tensor& bias, DType type);
// The same for `prefix`.weight and `prefix`.bias of `weights`, which it
// removes from the map.
StatusOr<std::unique_ptr<kernels::PackedWeight>> PackLinear(const kernels::Context& ctx,
                                                            TensorMap& weights,
                                                            const std::string& prefix, DType type);

class HostHead {
 public:
  // Packs head.dense / head.out when config.num_labels > 0 and the
  // pool_dense layers (removing them from `weights`), with bf16-rounded
  // weights when dtype is bfloat16.
  static StatusOr<std::unique_ptr<HostHead>> Create(const EncoderConfig& config, TensorMap& weights,
                                                    DType dtype, int num_threads);

  // See Encoder::Pool, Classify, EmbeddingFromPooled and ClassifyFromFirst.
  // Thread-safe.
  StatusOr<Tensor> Pool(const Tensor& hidden, const PackedBatch& batch, Pooling pooling,
                        bool normalize);
  StatusOr<Tensor> Classify(const Tensor& hidden, const PackedBatch& batch);
  StatusOr<Tensor> EmbeddingFromPooled(const Tensor& pooled, bool normalize);
  StatusOr<Tensor> ClassifyFromFirst(const Tensor& first);
  // Each sequence's pooled row of `hidden` (Forward's output for `batch`):
  // float32 [num_sequences, hidden], before any pool_dense layer.
  StatusOr<Tensor> PoolRows(const Tensor& hidden, const PackedBatch& batch, Pooling pooling);
  // Bytes of the packed head weights.
  size_t weight_bytes() const;

 private:
  HostHead(const EncoderConfig& config, int num_threads) : config_(config), ctx_(num_threads) {}
  // The parts of the public calls, with mutex_ held.
  StatusOr<Tensor> PoolLocked(const Tensor& hidden, const PackedBatch& batch, Pooling pooling);
  StatusOr<Tensor> EmbeddingLocked(Tensor pooled, bool normalize);
  StatusOr<Tensor> ClassifyLocked(const Tensor& first);
  // INVALID_ARGUMENT unless `rows` is float32 [n, hidden_size], n > 0.
  Status CheckPooledRows(const Tensor& rows, const char* what) const;

  EncoderConfig config_;
  kernels::CpuContext ctx_;
  std::mutex mutex_;  // serialises use of ctx_
  std::unique_ptr<kernels::PackedWeight> dense_, out_;
  std::vector<std::unique_ptr<kernels::PackedWeight>> pool_dense_;
};

}  // namespace encoderd
