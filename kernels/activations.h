// Small dense helpers for classification / pooler heads (a few rows each),
// fp32 in host memory: the heads run on the host on every device.
#pragma once

#include <cstdint>

namespace encoderd::kernels {

// x[i] = tanh(x[i]) for i < n, in place.
void TanhInPlace(float* x, int64_t n);
// x[i] = max(x[i], 0) for i < n, in place.
void ReluInPlace(float* x, int64_t n);
// x[i] = gelu(x[i]) (erf form, torch.nn.functional.gelu's default), in place.
void GeluInPlace(float* x, int64_t n);
// Numerically stable softmax of each row of x [rows, cols], in place.
// Throws std::invalid_argument on non-positive cols or negative rows.
void SoftmaxRows(float* x, int64_t rows, int64_t cols);

}  // namespace encoderd::kernels
