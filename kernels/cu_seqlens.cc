#include "kernels/cu_seqlens.h"

#include <stdexcept>
#include <string>

namespace encoderd::kernels {

void CheckCuSeqlens(const char* op, const int32_t* cu_seqlens, int64_t batch, int64_t total_tokens,
                    bool require_nonempty) {
  const std::string name(op);
  if (batch < 0 || total_tokens < 0) throw std::invalid_argument(name + ": negative size");
  if (cu_seqlens == nullptr) throw std::invalid_argument(name + ": null cu_seqlens");
  if (cu_seqlens[0] != 0) throw std::invalid_argument(name + ": cu_seqlens[0] != 0");
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = int64_t{cu_seqlens[b + 1]} - cu_seqlens[b];
    if (len < 0 || (require_nonempty && len == 0)) {
      throw std::invalid_argument(name + ": sequence " + std::to_string(b) + " has length " +
                                  std::to_string(len));
    }
  }
  if (cu_seqlens[batch] != total_tokens) {
    throw std::invalid_argument(name + ": cu_seqlens ends at " + std::to_string(cu_seqlens[batch]) +
                                ", expected " + std::to_string(total_tokens) + " tokens");
  }
}

}  // namespace encoderd::kernels
