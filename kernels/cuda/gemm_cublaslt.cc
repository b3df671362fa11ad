#include "kernels/cuda/gemm_cublaslt.h"

#include <array>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"

namespace encoderd::kernels {
namespace {

// Owns the cuBLASLt descriptors of one call.
struct MatmulPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~MatmulPlan() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

cublasLtEpilogue_t LtEpilogue(Epilogue e, bool has_bias) {
  switch (e) {
    case Epilogue::kRelu:
      return has_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case Epilogue::kGelu:  // applied after the GEMM (CudaGeluInPlace)
    case Epilogue::kNone:
    case Epilogue::kResidual:
      break;
  }
  return has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// A Linear's weights on the device (PackedWeight::impl() of a CUDA weight).
struct CudaPackedWeight final : PackedWeight::Impl {
  DeviceBuffer weight, bias;  // dtype [out, in] and [out] (bias may be empty)
  int device = 0;             // the GPU they live on
  size_t bytes() const override { return weight.bytes() + bias.bytes(); }
};

}  // namespace

std::unique_ptr<PackedWeight::Impl> PackWeightCuda(CudaContext& ctx, const float* weight,
                                                   const float* bias, int64_t out_features,
                                                   int64_t in_features, DType dtype) {
  auto w = std::make_unique<CudaPackedWeight>();
  w->device = ctx.device();
  const int64_t n = out_features * in_features;
  w->weight = DeviceBuffer(&ctx, static_cast<size_t>(n) * DTypeSize(dtype));
  CudaUploadAs(ctx, dtype, weight, n, w->weight.get());
  if (bias != nullptr) {
    w->bias = DeviceBuffer(&ctx, static_cast<size_t>(out_features) * DTypeSize(dtype));
    CudaUploadAs(ctx, dtype, bias, out_features, w->bias.get());
  }
  ctx.Synchronize();  // the caller may free or unmap the host weights now
  return w;
}

void LinearCuda(CudaContext& ctx, DType dtype, const void* x, int64_t rows,
                const PackedWeight& weight, Epilogue epilogue, const void* residual, void* y) {
  const auto& w = static_cast<const CudaPackedWeight&>(weight.impl());
  if (w.device != ctx.device()) {
    throw std::invalid_argument("Linear: a weight on GPU " + std::to_string(w.device) +
                                " run on GPU " + std::to_string(ctx.device()));
  }
  // (The Impl's own fields: this library does not link kernels/linear.cc.)
  GemmLt(ctx, dtype, x, rows, w.weight.get(), w.bias.get(), w.out_features, w.in_features, epilogue,
         residual, y);
}

void GemmLt(CudaContext& ctx, DType dtype, const void* x, int64_t rows, const void* weight,
            const void* bias, int64_t out_features, int64_t in_features, Epilogue epilogue,
            const void* residual, void* y) {
  if (rows < 0 || out_features <= 0 || in_features <= 0) {
    throw std::invalid_argument("GemmLt: bad sizes");
  }
  if (rows == 0) return;
  if (!x || !weight || !y || (epilogue == Epilogue::kResidual && !residual)) {
    throw std::invalid_argument("GemmLt: missing pointer");
  }
  if (dtype != DType::kFloat16 && dtype != DType::kBFloat16) {
    throw std::invalid_argument("GemmLt: dtype must be float16 or bfloat16");
  }
  const cudaDataType_t type = dtype == DType::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
  // cuBLASLt is column-major. Row-major y [rows, N] is column-major y^T
  // [N, rows] = W x^T, where row-major W [N, K] is column-major [K, N]
  // (transposed by the op) and row-major x [rows, K] is column-major [K, rows].
  const uint64_t m = out_features, n = rows, k = in_features;
  MatmulPlan p;
  ENCODERD_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  ENCODERD_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  ENCODERD_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  const cublasLtEpilogue_t epi = LtEpilogue(epilogue, bias != nullptr);
  ENCODERD_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (bias) {
    // The bias has the output's type (cuBLASLt's default for 16-bit D).
    ENCODERD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                         &bias, sizeof(bias)));
  }
  ENCODERD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, type, k, m, k));
  ENCODERD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, type, k, n, k));
  ENCODERD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, type, m, n, m));  // C and D alike

  auto handle = static_cast<cublasLtHandle_t>(ctx.lt_handle());
  static_assert(sizeof(cublasLtMatmulAlgo_t) == sizeof(std::array<uint64_t, 8>));
  const CudaContext::GemmKey key = {static_cast<int64_t>(type), static_cast<int64_t>(m),
                                    static_cast<int64_t>(n),    static_cast<int64_t>(k),
                                    static_cast<int64_t>(epi),  bias != nullptr};
  auto& algorithms = ctx.gemm_algorithms();
  auto known = algorithms.find(key);
  if (known == algorithms.end()) {
    uint64_t workspace = ctx.workspace_bytes();
    ENCODERD_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p.pref));
    ENCODERD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
    cublasLtMatmulHeuristicResult_t result = {};
    int found = 0;
    ENCODERD_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.a, p.b, p.c, p.c, p.pref,
                                                         1, &result, &found));
    if (found == 0) {
      throw std::runtime_error("GemmLt: cuBLASLt has no algorithm for " + std::to_string(rows) +
                               "x" + std::to_string(in_features) + " -> " +
                               std::to_string(out_features));
    }
    std::array<uint64_t, 8> blob;
    std::memcpy(blob.data(), &result.algo, sizeof(blob));
    if (algorithms.size() >= 4096) algorithms.clear();  // a row count per batch size seen
    known = algorithms.emplace(key, blob).first;
  }
  cublasLtMatmulAlgo_t algo;
  std::memcpy(&algo, known->second.data(), sizeof(algo));
  const float alpha = 1.0f;
  const float beta = epilogue == Epilogue::kResidual ? 1.0f : 0.0f;
  const void* c = epilogue == Epilogue::kResidual ? residual : y;
  ENCODERD_CUBLAS_CHECK(cublasLtMatmul(handle, p.op, &alpha, weight, p.a, x, p.b, &beta, c, p.c, y,
                                       p.c, &algo, ctx.workspace(), ctx.workspace_bytes(),
                                       static_cast<cudaStream_t>(ctx.stream())));
  if (epilogue == Epilogue::kGelu) CudaGeluInPlace(ctx, dtype, y, rows * out_features);
}

}  // namespace encoderd::kernels
