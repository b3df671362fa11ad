#include "server/core/encoder_batch_engine.h"

#include <map>
#include <tuple>

namespace encoderd::server {
namespace {

std::vector<float> Row(const Tensor& t, int64_t row) {
  const int64_t width = t.shape()[1];
  const float* p = t.data<float>() + row * width;
  return std::vector<float>(p, p + width);
}

}  // namespace

StatusOr<std::vector<std::vector<float>>> EncoderBatchEngine::Run(
    const PackedBatch& batch, const std::vector<OutputSpec>& specs) {
  if (static_cast<int64_t>(specs.size()) != batch.num_sequences())
    return Internal("one output spec per sequence expected");
  ASSIGN_OR_RETURN(Tensor hidden_any, encoder_->Forward(batch));
  const Tensor hidden = hidden_any.ToContiguous();

  // Each distinct (pooling, normalize) variant and the head run once per batch.
  std::map<std::tuple<int, bool>, Tensor> pooled;
  Tensor probabilities;
  bool have_probabilities = false;
  for (const OutputSpec& spec : specs) {
    if (spec.kind == OutputKind::kEmbedding) {
      const auto key = std::make_tuple(static_cast<int>(spec.pooling), spec.normalize);
      if (pooled.count(key)) continue;
      ASSIGN_OR_RETURN(Tensor p, encoder_->Pool(hidden, batch, spec.pooling, spec.normalize));
      pooled[key] = p.ToContiguous();
    } else if (spec.kind == OutputKind::kClassification && !have_probabilities) {
      ASSIGN_OR_RETURN(Tensor p, encoder_->Classify(hidden, batch));
      probabilities = p.ToContiguous();
      have_probabilities = true;
    }
  }

  std::vector<std::vector<float>> out(specs.size());
  const int64_t width = hidden.shape()[1];
  for (size_t i = 0; i < specs.size(); ++i) {
    switch (specs[i].kind) {
      case OutputKind::kEmbedding:
        out[i] =
            Row(pooled[std::make_tuple(static_cast<int>(specs[i].pooling), specs[i].normalize)],
                static_cast<int64_t>(i));
        break;
      case OutputKind::kClassification:
        out[i] = Row(probabilities, static_cast<int64_t>(i));
        break;
      case OutputKind::kHiddenStates: {
        const float* p = hidden.data<float>() + int64_t{batch.cu_seqlens[i]} * width;
        out[i].assign(p, p + int64_t{batch.length(static_cast<int64_t>(i))} * width);
        break;
      }
    }
  }
  return out;
}

}  // namespace encoderd::server
