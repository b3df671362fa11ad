// The enums of the ops, one of each for every device and layer, from the
// proto boundary down to the kernels.
#pragma once

#include <optional>
#include <string_view>

namespace encoderd {

// Where an encoder runs.
enum class Device { kCpu, kCuda };
// "cpu", "cuda", and back.
inline const char* DeviceName(Device device) { return device == Device::kCuda ? "cuda" : "cpu"; }
inline std::optional<Device> ParseDevice(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  return std::nullopt;
}

// How a sequence's token states become one row (sentence-transformers'
// Pooling modes, over the sequence's own tokens, special tokens included).
enum class Pooling {
  kCls,           // the first token of each sequence
  kMean,          // the mean over each sequence's tokens (fp32 sum, then divide)
  kMax,           // the elementwise maximum over the tokens
  kMeanSqrtLen,   // the sum over the tokens divided by sqrt(length)
  kWeightedMean,  // tokens weighted by their position 1, 2, ..., length
  kLastToken,     // the last token (the closing special token)
};
inline constexpr Pooling kAllPoolings[] = {Pooling::kCls,          Pooling::kMean,
                                           Pooling::kMax,          Pooling::kMeanSqrtLen,
                                           Pooling::kWeightedMean, Pooling::kLastToken};

// What a Linear layer applies to x W^T + b (b when the layer has a bias)
// before it stores the result y.
enum class Epilogue {
  kNone,
  kGelu,  // exact erf form, as torch.nn.functional.gelu's default
  kRelu,
  kResidual,  // + the previous contents of y (the residual add, in place)
};

}  // namespace encoderd
