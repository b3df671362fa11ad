// The enums of the ops, one of each for every device and layer, from the
// proto boundary down to the kernels.
#pragma once

namespace encoderd {

// How a sequence's token states become one row.
enum class Pooling {
  kCls,   // the first token of each sequence
  kMean,  // the mean over each sequence's tokens (fp32 sum, then divide)
};

// What a Linear layer applies to x W^T + b (b when the layer has a bias)
// before it stores the result y.
enum class Epilogue {
  kNone,
  kGelu,  // exact erf form, as torch.nn.functional.gelu's default
  kRelu,
  kResidual,  // + the previous contents of y (the residual add, in place)
};

}  // namespace encoderd
