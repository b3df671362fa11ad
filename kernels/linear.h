// Linear layer y = x W^T + b with fused epilogues, over packed activations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "core/op_types.h"
#include "kernels/context.h"

namespace encoderd::kernels {

// Weight and bias of one Linear layer, packed once at load time in the
// device's preferred form. Thread-safe: Linear may run with the same
// PackedWeight from several contexts of its device at once.
class PackedWeight {
 public:
  // weight: [out_features, in_features] fp32 row-major in host memory
  // (torch.nn.Linear's layout), at any byte address; bias: [out_features] or
  // null. Neither is referenced after the call. `type` is the stored weight
  // type:
  // - CPU: kFloat32; kBFloat16, which rounds the weight to bf16 (nearest
  //   even); or kInt8, symmetric per output channel, the input then quantized
  //   per row to uint8 at each call (kernels/cpu/linear_cpu.h). The bias stays
  //   fp32. Packed into oneDNN's layout, or for int8 on AVX512-VNNI into the
  //   project's int8 kernel's (kernels/cpu/int8_gemm_avx512.h).
  // - CUDA: kFloat16 or kBFloat16, weight and bias, uploaded to the
  //   context's GPU (the activations' dtype); freed through that context, so
  //   the weight must not outlive it.
  // Throws std::invalid_argument on another type, non-positive sizes or a
  // null weight; std::runtime_error when the device fails.
  static std::unique_ptr<PackedWeight> Pack(const Context& ctx, const float* weight,
                                            const float* bias, int64_t out_features,
                                            int64_t in_features, DType type);
  ~PackedWeight();

  Device device() const;
  int64_t out_features() const;
  int64_t in_features() const;
  DType type() const;
  // Bytes held by the packed weight and bias.
  size_t bytes() const;
  // Whether Linear (the overload with two dtypes, below) reads and writes
  // bfloat16 values with this weight on bf16 GEMMs, without a conversion
  // pass of its own beyond the few rows the few-row kernels take: a bfloat16
  // weight on a CPU with AVX512-BF16.
  bool bf16_values() const;

  // The device's packed form (kernels/cpu/linear_cpu.h, kernels/cuda/).
  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  explicit PackedWeight(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct PackedWeight::Impl {
  virtual ~Impl() = default;
  virtual size_t bytes() const = 0;
  virtual bool bf16_values() const { return false; }  // PackedWeight::bf16_values
  Device device = Device::kCpu;
  int64_t out_features = 0;
  int64_t in_features = 0;
  DType type = DType::kFloat32;
};

// y[m, :] = epilogue(x[m, :] W^T + b) for m < rows, on ctx's device, which
// must be the weight's. x: [rows, in_features], y: [rows, out_features],
// activations of `dtype`, row-major and dense; residual (only for kResidual,
// else ignored): [rows, out_features]; it may alias y. x must not alias y.
// Products accumulate in fp32 (int32 for int8 weights on the CPU).
// CPU (float32 activations): bf16 weights round x to bf16; int8 weights
// quantize each row of x to uint8 (its own scale and zero point). CUDA
// (float16 / bfloat16 activations, the weight's type): cuBLASLt, bias and
// ReLU fused, GELU its own pass (kernels/cuda/gemm_cublaslt.h).
// rows == 0 is a no-op. Throws std::invalid_argument on negative rows,
// missing pointers, a weight of another device or type, or a dtype the
// device's activations are not.
void Linear(const Context& ctx, DType dtype, const void* x, int64_t rows,
            const PackedWeight& weight, Epilogue epilogue, const void* residual, void* y);

// Whether Linear of up to `rows` rows runs every parallel region of it on
// the CPU kernels' own (kernels/cpu/parallel.h), not on oneDNN's, so that
// all the threads of a CpuContext::RunAsTeam stretch work on it: the
// few-row kernels and the int8 kernels. False on other devices.
bool LinearRunsOnTeam(const PackedWeight& weight, int64_t rows);

// Linear with an input and an output of their own dtypes. On the CPU, x and
// y may also be bfloat16 (bf16 values, as uint16) for a bfloat16 weight, y
// not with kResidual (whose residual and y are float32): x is then used as
// it is, not rounded by a pass of its own, and y holds the float32 call's
// output rounded to bf16 (nearest even), so that a bf16 model's activations
// between its Linear layers and attention need no conversion passes. The
// same checks as above, and std::invalid_argument on another pairing.
void Linear(const Context& ctx, DType x_dtype, const void* x, int64_t rows,
            const PackedWeight& weight, Epilogue epilogue, const void* residual, DType y_dtype,
            void* y);

// The feed-forward block of an encoder layer with its residual:
// y[m, :] += act(x[m, :] W_in^T + b_in) W_out^T + b_out for m < rows, act
// the epilogue `activation` (kNone, kGelu or kRelu). x: [rows,
// w_in.in_features]; y: [rows, w_out.out_features], which may be x when the
// two widths are equal (a row is read before it is written); hidden: [rows,
// w_in.out_features] of `dtype`, scratch whose contents are unspecified
// afterwards. Both weights are on ctx's device. Two Linear calls (x ->
// hidden -> y), except on the CPU when both weights are bf16 on AVX512-BF16
// and the rows are more than the few-row kernels take (kernels/cpu/
// few_rows_gemm_avx512.h) or neither weight runs on them (the first GEMM
// stores bf16, which the second reads): the hidden
// activations are then not stored and read back in fp32, and the result is
// the two calls' bit for bit. Throws as Linear does, and on an activation of
// kResidual, weights whose shapes do not chain, hidden aliasing x or y, or
// y aliasing an x of another width.
void FeedForward(const Context& ctx, DType dtype, const void* x, int64_t rows,
                 const PackedWeight& w_in, Epilogue activation, const PackedWeight& w_out,
                 void* hidden, void* y);

// FeedForward over x of x_dtype: `dtype`, or on the CPU bfloat16 for
// bfloat16 weights (as Linear's x above); hidden and y are of `dtype`. With
// add_to_y false, y = act(x W_in^T + b_in) W_out^T + b_out (its previous
// contents unread; it must not alias x), for a caller that adds the
// residual itself (a post-norm layer's LayerNorm).
void FeedForward(const Context& ctx, DType x_dtype, const void* x, int64_t rows,
                 const PackedWeight& w_in, Epilogue activation, const PackedWeight& w_out,
                 DType dtype, void* hidden, void* y, bool add_to_y = true);

}  // namespace encoderd::kernels
