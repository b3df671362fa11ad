// PackedBatch: the only thing that crosses from the batcher into the engine.
// Every sequence of the batch is laid end to end (no padding); cu_seqlens
// holds the B+1 prefix sums of the sequence lengths.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/model/model_spec.h"

namespace encoderd {

// Which client request, and which of its texts, a packed sequence came from.
struct SequenceOrigin {
  uint64_t request_id = 0;
  int32_t index = 0;
};

struct PackedBatch {
  std::vector<int32_t> token_ids;       // [total_tokens]
  std::vector<int32_t> position_ids;    // [total_tokens]
  std::vector<int32_t> token_type_ids;  // [total_tokens]
  std::vector<int32_t> cu_seqlens;      // [num_sequences + 1], cu_seqlens[0] == 0
  int32_t max_seqlen = 0;
  std::vector<SequenceOrigin> origins;  // [num_sequences]
  // [num_sequences], or empty (0 for each): the first token of each
  // sequence its pooling reads (kernels::Pool), past a prompt that
  // sentence-transformers' include_prompt = false leaves out.
  std::vector<int32_t> pool_start;

  int64_t num_sequences() const { return static_cast<int64_t>(origins.size()); }
  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int32_t length(int64_t sequence) const { return cu_seqlens[sequence + 1] - cu_seqlens[sequence]; }
  // Tokens a padded batch of the same sequences would compute
  // (num_sequences * max_seqlen).
  int64_t padded_tokens() const { return num_sequences() * max_seqlen; }
};

// Appends sequences to a PackedBatch, assigning position ids by the model's
// rule: 0, 1, 2, ... (kFromZero); pad_token_id + 1, + 2, ... for every token
// but the pad token, which keeps pad_token_id (kAfterPaddingIdx, as
// RoBERTa's and fairseq's positions treat token ids a client padded).
class PackedBatchBuilder {
 public:
  PackedBatchBuilder(PositionRule rule, int32_t pad_token_id);

  // `ids` must be non-empty; `token_types` empty (all zero) or ids.size() long;
  // `pool_start` >= 0 (PackedBatch::pool_start).
  Status Add(const std::vector<int32_t>& ids, const std::vector<int32_t>& token_types,
             SequenceOrigin origin, int32_t pool_start = 0);
  int64_t num_tokens() const { return static_cast<int64_t>(batch_.token_ids.size()); }
  int64_t num_sequences() const { return batch_.num_sequences(); }
  // Returns the batch and leaves the builder empty.
  PackedBatch Build();

 private:
  PositionRule rule_;
  int32_t pad_token_id_;
  PackedBatch batch_;
};

}  // namespace encoderd
