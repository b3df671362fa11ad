// For the ops' device dispatch (kernels/*.cc only): the CUDA implementations
// are called only in a build that has them.
#pragma once

#include "kernels/context.h"
#include "kernels/cuda/cuda_ops.h"       // declarations only, no CUDA type
#include "kernels/cuda/gemm_cublaslt.h"  // the same

namespace encoderd::kernels {

// std::invalid_argument: `op` was asked to run on CUDA in a build without the
// CUDA kernels.
[[noreturn]] void ThrowBuiltWithoutCuda(const char* op);

}  // namespace encoderd::kernels

// ENCODERD_ON_CUDA(op, call): `call` in a build with kernels/cuda, else
// ThrowBuiltWithoutCuda(op); `call` is then not compiled at all.
#if ENCODERD_WITH_CUDA
#define ENCODERD_ON_CUDA(op, ...) __VA_ARGS__
#else
#define ENCODERD_ON_CUDA(op, ...) ::encoderd::kernels::ThrowBuiltWithoutCuda(op)
#endif
