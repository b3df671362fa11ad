// Conversion of activations to fp32, for the results an encoder hands back.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/context.h"

namespace encoderd::kernels {

// out[i] = float(in[i]) for i < n, in and out on ctx's device; in holds
// activations of `dtype`. Throws std::invalid_argument on a negative size,
// null pointers or a dtype the device's activations are not.
void CastToFloat(const Context& ctx, DType dtype, const void* in, int64_t n, float* out);

}  // namespace encoderd::kernels
