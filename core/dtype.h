// Element types of tensors read from checkpoints and used by the engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace encoderd {

enum class DType : uint8_t {
  kFloat32,
  kFloat16,
  kBFloat16,
  kFloat64,
  kInt64,
  kInt32,
  kInt16,
  kInt8,
  kUInt8,
  kBool,
};

// Bytes per element.
size_t DTypeSize(DType dtype);
// Lower-case name as PyTorch prints it without the "torch." prefix: "float32", "bfloat16", ...
std::string_view DTypeName(DType dtype);
// Inverse of DTypeName; also accepts "fp32", "fp16", "bf16".
std::optional<DType> ParseDType(std::string_view name);
bool IsFloatingPoint(DType dtype);

// Scalar conversions between the 16-bit float formats and float32.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
inline float BFloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof(f));
  return f;
}
// Round to nearest even, as PyTorch does.
inline uint16_t FloatToBFloat16(float f) {
  uint32_t bits;
  __builtin_memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return 0x7fc0;  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace encoderd
