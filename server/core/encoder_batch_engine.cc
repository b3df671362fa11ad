#include "server/core/encoder_batch_engine.h"

#include <algorithm>
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
    const PackedBatch& batch, const std::vector<OutputSpec>& specs,
    const std::function<bool()>& stop) {
  if (static_cast<int64_t>(specs.size()) != batch.num_sequences())
    return Internal("one output spec per sequence expected");
  // Only what the specs read comes back from the encoder: pooled rows, and
  // every token's row only when a sequence asks for its hidden states.
  Encoder::Outputs wanted;
  const auto want_pooling = [&wanted](Pooling pooling) {
    if (std::find(wanted.poolings.begin(), wanted.poolings.end(), pooling) ==
        wanted.poolings.end()) {
      wanted.poolings.push_back(pooling);
    }
  };
  for (const OutputSpec& spec : specs) {
    switch (spec.kind) {
      case OutputKind::kEmbedding:
        want_pooling(spec.pooling);
        break;
      case OutputKind::kClassification:
        want_pooling(Pooling::kCls);
        break;
      case OutputKind::kHiddenStates:
        wanted.hidden_states = true;
        break;
    }
  }
  ASSIGN_OR_RETURN(Encoder::Result result, encoder_->Forward(batch, wanted, stop));

  // Each distinct (pooling, normalize) variant and the head run once per batch.
  std::map<std::tuple<int, bool>, Tensor> embeddings;
  Tensor probabilities;
  for (const OutputSpec& spec : specs) {
    if (spec.kind == OutputKind::kEmbedding) {
      const auto key = std::make_tuple(static_cast<int>(spec.pooling), spec.normalize);
      if (embeddings.count(key)) continue;
      ASSIGN_OR_RETURN(
          Tensor e, encoder_->EmbeddingFromPooled(result.pooled.at(spec.pooling), spec.normalize));
      embeddings[key] = e.ToContiguous();
    } else if (spec.kind == OutputKind::kClassification && !probabilities.defined()) {
      ASSIGN_OR_RETURN(Tensor p, encoder_->ClassifyFromFirst(result.pooled.at(Pooling::kCls)));
      probabilities = p.ToContiguous();
    }
  }

  const Tensor hidden =
      wanted.hidden_states ? result.hidden_states.ToContiguous() : result.hidden_states;
  std::vector<std::vector<float>> out(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    switch (specs[i].kind) {
      case OutputKind::kEmbedding:
        out[i] =
            Row(embeddings[std::make_tuple(static_cast<int>(specs[i].pooling), specs[i].normalize)],
                static_cast<int64_t>(i));
        break;
      case OutputKind::kClassification:
        out[i] = Row(probabilities, static_cast<int64_t>(i));
        break;
      case OutputKind::kHiddenStates: {
        const int64_t width = hidden.shape()[1];
        const float* p = hidden.data<float>() + int64_t{batch.cu_seqlens[i]} * width;
        out[i].assign(p, p + int64_t{batch.length(static_cast<int64_t>(i))} * width);
        break;
      }
    }
  }
  return out;
}

}  // namespace encoderd::server
