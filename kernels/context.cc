#include <stdexcept>
#include <string>

#include "kernels/dispatch.h"

namespace encoderd::kernels {

void ThrowBuiltWithoutCuda(const char* op) {
  throw std::invalid_argument(std::string(op) +
                              ": this build has no CUDA kernels (ENCODERD_WITH_CUDA is off)");
}

}  // namespace encoderd::kernels
