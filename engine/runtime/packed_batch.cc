#include "engine/runtime/packed_batch.h"

#include <algorithm>
#include <limits>

namespace encoderd {

PackedBatchBuilder::PackedBatchBuilder(PositionRule rule, int32_t pad_token_id)
    : rule_(rule), pad_token_id_(pad_token_id) {
  batch_.cu_seqlens.push_back(0);
}

Status PackedBatchBuilder::Add(const std::vector<int32_t>& ids,
                               const std::vector<int32_t>& token_types, SequenceOrigin origin,
                               int32_t pool_start) {
  if (ids.empty()) return InvalidArgument("cannot pack an empty sequence");
  if (pool_start < 0) return InvalidArgument("pool_start " + std::to_string(pool_start) + " < 0");
  if (!token_types.empty() && token_types.size() != ids.size()) {
    return InvalidArgument("token_type_ids has " + std::to_string(token_types.size()) +
                           " entries for " + std::to_string(ids.size()) + " tokens");
  }
  const int64_t total = num_tokens() + static_cast<int64_t>(ids.size());
  if (total > std::numeric_limits<int32_t>::max()) {
    return ResourceExhausted("packed batch exceeds 2^31 tokens");
  }
  const int32_t length = static_cast<int32_t>(ids.size());
  batch_.token_ids.insert(batch_.token_ids.end(), ids.begin(), ids.end());
  if (token_types.empty()) {
    batch_.token_type_ids.insert(batch_.token_type_ids.end(), ids.size(), 0);
  } else {
    batch_.token_type_ids.insert(batch_.token_type_ids.end(), token_types.begin(),
                                 token_types.end());
  }
  if (rule_ == PositionRule::kAfterPaddingIdx) {
    // As RoBERTa's create_position_ids_from_input_ids (and fairseq's
    // make_positions): a pad token's position is padding_idx, and the
    // others count on from padding_idx + 1 without it.
    int32_t next = pad_token_id_ + 1;
    for (const int32_t id : ids) batch_.position_ids.push_back(id == pad_token_id_ ? id : next++);
  } else {
    for (int32_t i = 0; i < length; ++i) batch_.position_ids.push_back(i);
  }
  batch_.cu_seqlens.push_back(static_cast<int32_t>(total));
  batch_.max_seqlen = std::max(batch_.max_seqlen, length);
  batch_.origins.push_back(origin);
  batch_.pool_start.push_back(pool_start);
  return Status::Ok();
}

PackedBatch PackedBatchBuilder::Build() {
  PackedBatch out = std::move(batch_);
  batch_ = PackedBatch();
  batch_.cu_seqlens.push_back(0);
  return out;
}

}  // namespace encoderd
