// The encoder written once for every device. LoadEncoderWeights decides which
// weights a model has and checks each against the config; RunEncoder is the
// op sequence of the forward (embeddings, the pre- or post-norm layers, the
// final norm). A device backend (cpu_encoder.cc, cuda_encoder.cc) supplies
// only how a weight is packed or uploaded and its ops over its own buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/op_types.h"
#include "core/status.h"
#include "core/tensor.h"
#include "engine/model/model_spec.h"
#include "engine/runtime/encoder.h"
#include "engine/runtime/host_head.h"

namespace encoderd {

enum class EmbeddingTable { kWord, kPosition, kTokenType };
// The Linear layers and LayerNorms of one encoder layer; kEmbeddingProject,
// kEmbedding and kFinal are outside the layers (their layer index is -1).
enum class LinearSlot { kQkv, kOut, kFfnIn, kFfnOut, kEmbeddingProject };
enum class NormSlot { kEmbedding, kNorm1, kNorm2, kFinal };
const char* LinearSlotName(LinearSlot slot);
// The canonical name of a slot's weights (+ ".weight" / ".bias"):
// LayerWeightName(layer, LinearSlotName(slot)), or "embeddings.project".
std::string LinearWeightPrefix(int64_t layer, LinearSlot slot);
// INVALID_ARGUMENT when a "layers.N..." entry of fp32_linears (already
// ParseFp32Linears-checked) names no layer of `c`.
Status CheckFp32Linears(const EncoderConfig& c, const std::vector<std::string>& names);
// Whether options.fp32_linears names this layer's slot.
bool KeepsFp32(const EncoderOptions& options, int64_t layer, LinearSlot slot);
// The activation buffers of a forward, each [tokens, width] in the backend's
// element type: kHidden holds the running hidden states, kEmbedded the
// embeddings before their projection (only when the model projects them).
enum class Buffer { kHidden, kQkv, kContext, kFfn, kNormed, kEmbedded };
constexpr int kNumBuffers = 6;
// Columns of `buffer` per token for a model of `config` (0: unused, e.g.
// kNormed in a post-norm model).
int64_t BufferWidth(const EncoderConfig& config, Buffer buffer);

class EncoderBackend {
 public:
  virtual ~EncoderBackend() = default;

  // Loading, called by LoadEncoderWeights with weights already checked
  // against the config; each entry is removed from the map after its call. A
  // backend that copies a weight releases the checkpoint's pages
  // (Tensor::ReleasePages), so that loading holds one copy of the model.
  // table: [rows, hidden].
  virtual Status LoadTable(EmbeddingTable table, const Tensor& t) = 0;
  // weight [out, in] (torch.nn.Linear's layout); bias [out] or undefined.
  virtual Status LoadLinear(int64_t layer, LinearSlot slot, const Tensor& weight,
                            const Tensor& bias) = 0;
  // gamma, beta: [hidden].
  virtual Status LoadNorm(int64_t layer, NormSlot slot, const Tensor& gamma,
                          const Tensor& beta) = 0;

  // Ops of one forward, on the batch the backend set up before RunEncoder.
  // out = the embeddings of the batch's tokens (LayerNorm'd by the
  // kEmbedding norm when the model has one).
  virtual void Embed(Buffer out) = 0;
  // out = epilogue(in W^T + b) with the weights of `slot` in `layer`;
  // kResidual adds out's previous contents.
  virtual void Linear(int64_t layer, LinearSlot slot, Buffer in, Epilogue epilogue, Buffer out) = 0;
  // out = LayerNorm(in) with the norm `slot` of `layer`; out may be in.
  virtual void Norm(int64_t layer, NormSlot slot, Buffer in, Buffer out) = 0;
  // out = multi-head self-attention of each sequence over the packed q|k|v.
  virtual void Attention(Buffer qkv, Buffer out) = 0;
};

// Where a backend keeps its weights, by slot: LinearWeights and NormWeights
// are its own types (packed for oneDNN, uploaded to the GPU, ...).
template <typename LinearWeights, typename NormWeights>
class SlotWeights {
 public:
  explicit SlotWeights(int64_t layers) : layers_(static_cast<size_t>(layers)) {}
  // kEmbeddingProject ignores `layer`; the others need one.
  LinearWeights& linear(int64_t layer, LinearSlot slot) {
    if (slot == LinearSlot::kEmbeddingProject) return embedding_project_;
    return layers_.at(static_cast<size_t>(layer)).linear[static_cast<int>(slot)];
  }
  const LinearWeights& linear(int64_t layer, LinearSlot slot) const {
    return const_cast<SlotWeights*>(this)->linear(layer, slot);
  }
  // kEmbedding and kFinal ignore `layer`; kNorm1 and kNorm2 need a layer.
  NormWeights& norm(int64_t layer, NormSlot slot) {
    switch (slot) {
      case NormSlot::kEmbedding:
        return embedding_norm_;
      case NormSlot::kFinal:
        return final_norm_;
      case NormSlot::kNorm1:
        return layers_.at(static_cast<size_t>(layer)).norm1;
      case NormSlot::kNorm2:
        break;
    }
    return layers_.at(static_cast<size_t>(layer)).norm2;
  }
  const NormWeights& norm(int64_t layer, NormSlot slot) const {
    return const_cast<SlotWeights*>(this)->norm(layer, slot);
  }

 private:
  struct Layer {
    LinearWeights linear[4];  // indexed by LinearSlot, kQkv..kFfnOut
    NormWeights norm1, norm2;
  };
  std::vector<Layer> layers_;
  LinearWeights embedding_project_;
  NormWeights embedding_norm_, final_norm_;
};

// Takes every weight of the encoder stack out of `weights` (canonical names
// of model_spec.h) into `backend`, in order, after checking its shape against
// `config`: INVALID_ARGUMENT names the weight and both shapes, NOT_FOUND a
// missing one. The classification head stays in `weights`.
Status LoadEncoderWeights(const EncoderConfig& config, TensorMap& weights, EncoderBackend& backend);

// The forward: Embed, every layer (pre- or post-norm as config.norm_first),
// the final norm; the result is in Buffer::kHidden. What an op throws
// propagates.
void RunEncoder(const EncoderConfig& config, EncoderBackend& backend);

// An Encoder made of a backend: Load walks the weights into it and builds the
// pooling and classification head, which run on the host in fp32 on every
// device, over Forward's output or over the pooled rows a device computed
// (a few rows per sequence).
class BackendEncoder : public Encoder, protected EncoderBackend {
 public:
  using Encoder::Forward;
  // Forward(batch), then the pooled rows on the host. A backend whose hidden
  // states live on a device overrides it to pool there.
  StatusOr<Result> Forward(const PackedBatch& batch, const Outputs& outputs) override;
  StatusOr<Tensor> Pool(const Tensor& hidden, const PackedBatch& batch, Pooling pooling,
                        bool normalize) final {
    return head_->Pool(hidden, batch, pooling, normalize);
  }
  StatusOr<Tensor> Classify(const Tensor& hidden, const PackedBatch& batch) final {
    return head_->Classify(hidden, batch);
  }
  StatusOr<Tensor> EmbeddingFromPooled(const Tensor& pooled, bool normalize) final {
    return head_->EmbeddingFromPooled(pooled, normalize);
  }
  StatusOr<Tensor> ClassifyFromFirst(const Tensor& first) final {
    return head_->ClassifyFromFirst(first);
  }
  size_t weight_bytes() const final { return weight_bytes_ + head_->weight_bytes(); }

 protected:
  using Encoder::Encoder;
  // LoadEncoderWeights, then the head with `head_dtype` weights (float32 or
  // bfloat16) on `head_threads` CPU threads.
  Status Load(TensorMap& weights, DType head_dtype, int head_threads);

  size_t weight_bytes_ = 0;  // the backend's own weights; the head's are added

 private:
  std::unique_ptr<HostHead> head_;
};

}  // namespace encoderd
