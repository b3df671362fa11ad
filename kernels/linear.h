// Linear layer y = x W^T + b with fused epilogues, over packed activations.
#pragma once

#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "core/op_types.h"
#include "kernels/cpu_context.h"

namespace encoderd::kernels {

// Weight and bias of one Linear layer in the GEMM library's preferred layout,
// packed once at load time. Thread-safe: Linear may run with the same
// PackedWeight from several contexts at once.
class PackedWeight {
 public:
  // weight: [out_features, in_features] fp32 row-major (torch.nn.Linear's
  // layout); bias: [out_features] or null. Neither is referenced after the
  // call. `type` is the stored weight type: kFloat32; kBFloat16, which
  // rounds the weight to bf16 (nearest even); or kInt8, symmetric per output
  // channel, the input then quantized per row to uint8 at each call
  // (kernels/cpu/linear_cpu.h). The bias stays fp32. Throws
  // std::invalid_argument on another type, non-positive sizes or a null weight.
  static std::unique_ptr<PackedWeight> Pack(const CpuContext& ctx, const float* weight,
                                            const float* bias, int64_t out_features,
                                            int64_t in_features, DType type);
  ~PackedWeight();

  int64_t out_features() const;
  int64_t in_features() const;
  DType type() const;
  // Bytes held by the packed weight and bias.
  size_t bytes() const;

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  explicit PackedWeight(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// y[m, :] = epilogue(x[m, :] W^T + b) for m < rows.
// x: [rows, in_features] fp32, y: [rows, out_features] fp32, both row-major
// and dense. For bf16 weights x is rounded to bf16 and products accumulate in
// fp32; for int8 weights each row of x is quantized to uint8 (its own scale
// and zero point) and products accumulate in int32. residual (only for kResidual, else ignored):
// [rows, out_features] fp32; it may alias y. x must not alias y. rows == 0 is a no-op. Throws
// std::invalid_argument on negative rows or missing pointers.
void Linear(const CpuContext& ctx, const float* x, int64_t rows, const PackedWeight& weight,
            Epilogue epilogue, const float* residual, float* y);

}  // namespace encoderd::kernels
