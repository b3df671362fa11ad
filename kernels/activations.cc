#include "kernels/activations.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace encoderd::kernels {
namespace {

void CheckVector(const char* op, const float* x, int64_t n) {
  if (n < 0) throw std::invalid_argument(std::string(op) + ": negative size");
  if (n > 0 && x == nullptr) throw std::invalid_argument(std::string(op) + ": null tensor");
}

}  // namespace

void TanhInPlace(float* x, int64_t n) {
  CheckVector("TanhInPlace", x, n);
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
}

void ReluInPlace(float* x, int64_t n) {
  CheckVector("ReluInPlace", x, n);
  for (int64_t i = 0; i < n; ++i) x[i] = std::max(x[i], 0.f);
}

void GeluInPlace(float* x, int64_t n) {
  CheckVector("GeluInPlace", x, n);
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.f + std::erf(x[i] * kInvSqrt2));
}

void SoftmaxRows(float* x, int64_t rows, int64_t cols) {
  if (rows < 0 || cols <= 0) throw std::invalid_argument("SoftmaxRows: bad shape");
  CheckVector("SoftmaxRows", x, rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * cols;
    const float max = *std::max_element(row, row + cols);
    float sum = 0.f;
    for (int64_t i = 0; i < cols; ++i) {
      row[i] = std::exp(row[i] - max);
      sum += row[i];
    }
    const float inv = 1.f / sum;
    for (int64_t i = 0; i < cols; ++i) row[i] *= inv;
  }
}

}  // namespace encoderd::kernels
