// Validation of cu_seqlens, the B+1 int32 prefix sums that describe a packed batch.
#pragma once

#include <cstdint>

namespace encoderd::kernels {

// Throws std::invalid_argument unless cu_seqlens is non-null (when batch > 0
// or total_tokens > 0), starts at 0, never decreases and ends at total_tokens.
// With require_nonempty, every sequence must hold at least one token.
void CheckCuSeqlens(const char* op, const int32_t* cu_seqlens, int64_t batch, int64_t total_tokens,
                    bool require_nonempty = false);

}  // namespace encoderd::kernels
