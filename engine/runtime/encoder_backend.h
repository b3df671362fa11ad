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
#include "kernels/context.h"
#include "kernels/linear.h"

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
// The activation buffers of a forward, each [tokens, width] of values of
// BackendEncoder::BufferType: kHidden holds the running hidden states,
// kEmbedded the embeddings before their projection (only when the model
// projects them), kNormedBf16 a bf16 copy of a LayerNorm's output (only in
// bf16 models on CPUs with bf16 GEMMs, BackendEncoder::BufferType),
// kProjected a sublayer's output before its residual (only in post-norm
// models whose norms add the residuals: EncoderBackend::NormsAddResiduals).
enum class Buffer { kHidden, kQkv, kContext, kFfn, kNormed, kEmbedded, kNormedBf16, kProjected };
constexpr int kNumBuffers = 8;
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
  // table: [relative_attention_buckets, heads], the model's relative
  // attention bias (EncoderConfig::relative_attention_buckets > 0).
  virtual Status LoadRelativeBias(const Tensor& table) = 0;
  // DeBERTa's disentangled attention (EncoderConfig::attention_span > 0):
  // called after `layer`'s kQkv weight with `relative`, the relative
  // embeddings [2 x attention_span, hidden] in fp32 (LayerNorm'd where the
  // model says so), which the layer's key and query projections make its
  // position tables.
  virtual Status LoadPositionProjections(int64_t layer, const Tensor& relative) = 0;

  // Ops of one forward, on the batch the backend set up before RunEncoder.
  // out = the embeddings of the batch's tokens (LayerNorm'd by the
  // kEmbedding norm when the model has one).
  virtual void Embed(Buffer out) = 0;
  // out = epilogue(in W^T + b) with the weights of `slot` in `layer`;
  // kResidual adds out's previous contents.
  virtual void Linear(int64_t layer, LinearSlot slot, Buffer in, Epilogue epilogue, Buffer out) = 0;
  // out += ffn.out(activation(ffn.in(in))) with the kFfnIn and kFfnOut
  // weights of `layer`, through `hidden` (scratch); in may be out. With
  // add_to_out false, out = ffn.out(...) (out must not be in).
  virtual void FeedForward(int64_t layer, Buffer in, Epilogue activation, Buffer hidden, Buffer out,
                           bool add_to_out) = 0;
  // out = LayerNorm(in) with the norm `slot` of `layer`; out may be in.
  virtual void Norm(int64_t layer, NormSlot slot, Buffer in, Buffer out) = 0;
  // out = LayerNorm(in + residual); out may be either.
  virtual void AddNorm(int64_t layer, NormSlot slot, Buffer in, Buffer residual, Buffer out) = 0;
  // Whether post-norm layers leave their residual adds to the norms, which
  // read those rows anyway (AddNorm), rather than to the out projection's
  // and ffn.out's epilogues (RunEncoder).
  virtual bool NormsAddResiduals() const = 0;
  // out = multi-head self-attention of each sequence over the packed q|k|v
  // of `layer` (with the relative attention bias, or the layer's
  // disentangled terms, where the model has them).
  virtual void Attention(int64_t layer, Buffer qkv, Buffer out) = 0;
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
// propagates. With a profile, each op's wall time from call to return is
// added to it (meaningful where an op's return means it ran). `stop` is asked
// before each layer's attention half and before its feed-forward half; when
// it says true the forward ends there and RunEncoder returns false.
bool RunEncoder(const EncoderConfig& config, EncoderBackend& backend, OpProfile* profile = nullptr,
                const Encoder::StopCheck& stop = {});

// An Encoder made of a backend, with the ops of RunEncoder written once for
// every device over kernels/' device-neutral ops. Load walks the weights into
// it: the Linear layers are packed for the device here (PackedWeight), the
// tables and norms by the device's LoadTable / LoadNorm, which keep them
// where the device reads them and register them with SetTable / SetNorm.
// Before RunEncoder a device's Forward sets run_: the batch's arrays and the
// activation buffers on its device. Pooling and the classification head run
// on the host in fp32 on every device, over Forward's output or over the
// pooled rows a device computed (a few rows per sequence).
class BackendEncoder : public Encoder, protected EncoderBackend {
 public:
  using Encoder::Forward;
  StatusOr<Tensor> Forward(const PackedBatch& batch) final { return HiddenStates(batch, {}); }
  // HiddenStates, then the pooled rows on the host. A backend whose hidden
  // states live on a device overrides it to pool there.
  StatusOr<Result> Forward(const PackedBatch& batch, const Outputs& outputs,
                           const StopCheck& stop) override;
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
  // `activations`: the dtype the device computes in (float32 on the CPU).
  BackendEncoder(const EncoderConfig& config, const EncoderOptions& options, DType activations);
  // LoadEncoderWeights, then the head with `head_dtype` weights (float32 or
  // bfloat16) on `head_threads` CPU threads.
  Status Load(TensorMap& weights, DType head_dtype, int head_threads);

  // Every token's last hidden state (Encoder::Forward(batch)), the forward
  // ended early when `stop` says so (CANCELLED).
  virtual StatusOr<Tensor> HiddenStates(const PackedBatch& batch, const StopCheck& stop) = 0;
  // Where the ops run (a view of the device's own context).
  virtual kernels::Context context() = 0;
  // Frees the packed Linear weights. A device's destructor calls it first:
  // they may free through its context, which dies before this base.
  void ReleaseWeights();
  DType activations() const { return activations_; }
  // The type of `buffer`'s values: activations(), except in a bf16 model
  // whose Linear layers read and write bf16 values
  // (kernels::PackedWeight::bf16_values; EncoderOptions::bf16_activations):
  // its LayerNorms then also write their output's bf16 copy into
  // kNormedBf16 (bfloat16), which the next Linear layer reads while the
  // output is unchanged (so pre-norm layers' kNormed, read by nothing else,
  // is not written at all: it has no rows), and where attention takes bf16 values as well
  // (kernels::AttentionTakesBf16Values), kQkv and kContext are bfloat16. So
  // no pass converts the values between the Linear layers, attention and
  // LayerNorm. Known once the weights are loaded.
  DType BufferType(Buffer buffer) const;
  // Bytes of `buffer` per token (0: unused in this model).
  int64_t BufferRowBytes(Buffer buffer) const;

  // Called by the device's LoadTable / LoadNorm: `data` [rows, embedding
  // width] of activations(), gamma and beta fp32 [hidden], all on the device
  // and kept alive by it.
  void SetTable(EmbeddingTable table, const void* data, int64_t rows);
  void SetNorm(int64_t layer, NormSlot slot, const float* gamma, const float* beta);
  // Rows of a registered table (0: the model has none).
  int64_t table_rows(EmbeddingTable table) const;
  // Whether each Linear layer of the stack runs on the kernels' own
  // parallel regions at `rows` rows (kernels::LinearRunsOnTeam).
  bool LinearsRunOnTeam(int64_t rows) const;

  // The forward in progress, on the device: set before RunEncoder.
  struct Run {
    const int32_t* token_ids = nullptr;
    const int32_t* position_ids = nullptr;    // used when there is a position table
    const int32_t* token_type_ids = nullptr;  // used when there is a token type table
    const int32_t* cu_seqlens = nullptr;
    // PackedBatch::pool_start on a device that pools itself (CUDA); null: 0 each.
    const int32_t* pool_start = nullptr;
    int64_t tokens = 0;
    int64_t sequences = 0;
    int32_t max_seqlen = 0;
    // [tokens] on the host, 0 or -infinity (kernels::KeyBias), where the
    // model masks pad keys and the batch has a pad token (the CPU); null:
    // every key is attended to.
    const float* key_bias = nullptr;
    void* buffers[kNumBuffers] = {};  // [tokens, BufferWidth(...)] of BufferType(...)
    // The buffer whose bf16 copy kNormedBf16 holds (kNormedBf16: none); kept
    // by the ops.
    Buffer normed_bf16_of = Buffer::kNormedBf16;
  };
  Run run_;
  void* Data(Buffer buffer) const { return run_.buffers[static_cast<int>(buffer)]; }

  size_t weight_bytes_ = 0;  // the device's weights (Linear layers are counted here)

 private:
  struct Table {
    const void* data = nullptr;
    int64_t rows = 0;
  };
  struct NormRef {
    const float* gamma = nullptr;
    const float* beta = nullptr;
  };

  // The device's part of LoadEncoderWeights besides the Linear layers.
  Status LoadLinear(int64_t layer, LinearSlot slot, const Tensor& weight, const Tensor& bias) final;
  // Expands the table to each head's bias by distance j - i over the
  // model's longest sequence (host fp32: only the CPU's attention takes one).
  Status LoadRelativeBias(const Tensor& table) final;
  // Runs the layer's own qkv Linear over `relative` and keeps the q and k
  // parts, scaled as the scores are, per head transposed
  // (kernels::DisentangledBias; host fp32: only the CPU's attention takes
  // them, so other devices refuse).
  Status LoadPositionProjections(int64_t layer, const Tensor& relative) final;
  void Embed(Buffer out) final;
  void Linear(int64_t layer, LinearSlot slot, Buffer in, Epilogue epilogue, Buffer out) final;
  void FeedForward(int64_t layer, Buffer in, Epilogue activation, Buffer hidden, Buffer out,
                   bool add_to_out) final;
  void Norm(int64_t layer, NormSlot slot, Buffer in, Buffer out) final;
  void AddNorm(int64_t layer, NormSlot slot, Buffer in, Buffer residual, Buffer out) final;
  bool NormsAddResiduals() const final { return norms_add_residuals_; }
  void Attention(int64_t layer, Buffer qkv, Buffer out) final;
  // What the attention's scores are multiplied by: 1 / sqrt(head_dim), or
  // with DeBERTa's terms 1 / sqrt(head_dim x (1 + terms)).
  float AttentionScale() const;
  // Norm and AddNorm: out = LayerNorm(in + residual), residual null: none.
  void NormOf(int64_t layer, NormSlot slot, const void* in, const void* residual, Buffer out);

  // Linear's input: `in`, or its bf16 copy while kNormedBf16 holds one.
  Buffer LinearInput(Buffer in) const {
    return in == run_.normed_bf16_of ? Buffer::kNormedBf16 : in;
  }
  // An op wrote `out`: a bf16 copy of its former contents is gone.
  void Wrote(Buffer out) {
    if (out == run_.normed_bf16_of) run_.normed_bf16_of = Buffer::kNormedBf16;
  }

  DType activations_;
  bool bf16_normed_ = false;          // LayerNorms write kNormedBf16 (BufferType)
  bool bf16_attention_ = false;       // kQkv and kContext are bf16 (BufferType)
  bool norms_add_residuals_ = false;  // NormsAddResiduals
  Table tables_[3];                   // by EmbeddingTable
  // [heads, 2 * (max_tokens - 1) + 1]: kernels::RelativeBias's values, with
  // center max_tokens - 1; empty without a relative attention bias.
  std::vector<float> relative_bias_;
  // DeBERTa's: per layer, kernels::DisentangledBias's key and query tables;
  // the column of each relative position i - j, with center max_tokens - 1.
  struct PositionTables {
    std::vector<float> key, query;
  };
  std::vector<PositionTables> position_tables_;
  std::vector<int32_t> disentangled_index_;
  SlotWeights<std::unique_ptr<kernels::PackedWeight>, NormRef> weights_;
  std::unique_ptr<HostHead> head_;
};

}  // namespace encoderd
