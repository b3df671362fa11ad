// The native encoder forward: embeddings -> N fused layers -> pooling / head,
// every op over the packed tokens of a PackedBatch (no padding anywhere).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/op_types.h"
#include "core/status.h"
#include "core/tensor.h"
#include "engine/model/model_spec.h"
#include "engine/runtime/packed_batch.h"

namespace encoderd {

// OK when `device` runs `dtype` (cpu: float32, bfloat16, int8; cuda:
// float16, bfloat16), else INVALID_ARGUMENT naming both and the dtypes it runs. Does
// not look for a GPU: Encoder::Create does, when the model loads.
Status CheckDeviceDType(Device device, DType dtype);

struct EncoderOptions {
  Device device = Device::kCpu;
  // cpu: float32, bfloat16 (bf16 weights, fp32 accumulation and LayerNorm)
  // or int8 (the encoder's Linear layers in int8, kernels/linear.h; the
  // rest, and any classification head, in fp32); cuda: float16 or bfloat16
  // (CheckDeviceDType).
  DType dtype = DType::kFloat32;
  // CPU threads for this encoder; 0 = every core.
  int num_threads = 0;
  // With int8: the Linear layers kept in fp32, each a canonical name without
  // ".weight": a slot in every layer ("ffn.out", "attention.qkv",
  // "attention.out", "ffn.in", "embeddings.project") or one layer's
  // ("layers.11.ffn.out"). ParseFp32Linears checks them.
  std::vector<std::string> fp32_linears;
  // cpu bfloat16: keep in bf16 the activations that only bf16 matmuls read,
  // where the kernels take them (BackendEncoder::BufferType); false keeps
  // every activation buffer fp32, each op converting its inputs, as before.
  // The same outputs either way, bit for bit, where the attention scale
  // 1 / sqrt(head_dim) is a power of two (head_dim 64 or 256); else q is
  // rounded once more. For tests and benchmarks.
  bool bf16_activations = true;
};

// The comma-separated names of EncoderOptions::fp32_linears ("" is none);
// INVALID_ARGUMENT naming an entry that names no Linear layer.
StatusOr<std::vector<std::string>> ParseFp32Linears(const std::string& list);

// The ops of an encoder forward, as a profile counts them: kEmbed includes
// the embeddings' projection, kNorm every LayerNorm but the embeddings', and
// kFeedForward both of its Linear layers.
enum class EncoderOp { kEmbed, kQkv, kAttention, kOut, kNorm, kFeedForward };
constexpr int kNumEncoderOps = 6;
const char* EncoderOpName(EncoderOp op);

// The most sequences in one batch on CUDA: the attention kernel's grid holds
// a batch's sequences in one dimension (kernels/cuda/attention.cu).
constexpr int64_t kMaxCudaBatchSequences = 65535;

// Wall time and calls of each op, summed over the forwards that ran while
// the profile was set (Encoder::ProfileOps).
struct OpProfile {
  double seconds[kNumEncoderOps] = {};
  int64_t calls[kNumEncoderOps] = {};
  int64_t forwards = 0;
};

class Encoder {
 public:
  // Checks that the model can run on options.device / options.dtype (the
  // capability check happens here, at load time, never on a request) and
  // packs the weights for the kernels. `weights` uses the canonical names of
  // model_spec.h. Each weight is dropped from the map as soon as it is packed,
  // and its pages are released when it lives in a mapped checkpoint, so that
  // loading never holds two copies of the model: pass the map with std::move
  // when the caller no longer needs it.
  static StatusOr<std::unique_ptr<Encoder>> Create(const EncoderConfig& config, TensorMap weights,
                                                   const EncoderOptions& options);
  virtual ~Encoder() = default;

  // Last hidden states of every packed token: float32 [num_tokens, hidden].
  // Thread-safe (calls are serialised on the encoder's execution context).
  virtual StatusOr<Tensor> Forward(const PackedBatch& batch) = 0;

  // What a caller reads of one forward: every token's row, and/or each
  // sequence's pooled row for some pooling modes (before any pool_dense
  // layer). An encoder whose hidden states live on a device pools them there
  // and brings back one row per sequence instead of every token's.
  struct Outputs {
    bool hidden_states = false;
    std::vector<Pooling> poolings;  // distinct modes (CheckOutputs)
  };
  struct Result {
    Tensor hidden_states;              // float32 [num_tokens, hidden], when asked
    std::map<Pooling, Tensor> pooled;  // float32 [num_sequences, hidden] per mode asked
  };
  // INVALID_ARGUMENT from Forward(batch, outputs) when a mode repeats.
  static Status CheckOutputs(const Outputs& outputs);
  // Asked on the forward's thread while it runs; true ends it with
  // CANCELLED, its work so far thrown away (an executor's batch whose every
  // request is gone). The CPU asks before each layer's attention and before
  // its feed-forward block, so a forward ends within half a layer; CUDA
  // queues a forward whole and asks once, before queuing it. Empty: never
  // asked.
  using StopCheck = std::function<bool()>;
  virtual StatusOr<Result> Forward(const PackedBatch& batch, const Outputs& outputs,
                                   const StopCheck& stop) = 0;
  StatusOr<Result> Forward(const PackedBatch& batch, const Outputs& outputs) {
    return Forward(batch, outputs, StopCheck());
  }

  // One row per sequence: float32 [num_sequences, config.pooled_width()].
  // kCls takes each sequence's first token, kMean averages its tokens; then
  // the config's pool_dense layers; `normalize` scales each row to unit L2
  // norm. `hidden` is Forward's output for `batch`.
  virtual StatusOr<Tensor> Pool(const Tensor& hidden, const PackedBatch& batch, Pooling pooling,
                                bool normalize) = 0;
  // Label scores per sequence: float32 [num_sequences, num_labels], the
  // head's logits through config.head_output() (softmax; a sigmoid per output
  // for one-output and multi-label heads; raw logits for regression; for a
  // one-output head, the activation its config.json names).
  // FAILED_PRECONDITION when the model has no classification head.
  virtual StatusOr<Tensor> Classify(const Tensor& hidden, const PackedBatch& batch) = 0;
  // Pool and Classify from Result::pooled's rows: EmbeddingFromPooled runs
  // the pool_dense layers and `normalize` over one mode's rows (the result
  // may share their storage when there is nothing to do; `pooled` itself is
  // never written), ClassifyFromFirst the head over the kCls rows.
  virtual StatusOr<Tensor> EmbeddingFromPooled(const Tensor& pooled, bool normalize) = 0;
  virtual StatusOr<Tensor> ClassifyFromFirst(const Tensor& first) = 0;

  const EncoderConfig& config() const { return config_; }
  const EncoderOptions& options() const { return options_; }
  // Bytes of packed weights held by the encoder.
  virtual size_t weight_bytes() const = 0;

  // Adds each op's wall time to `profile` in the forwards that follow, until
  // called with null (`encoderd bench --op-profile`). false where an op's
  // return does not mean it ran (the CUDA encoder queues its ops on a
  // stream), so a host clock cannot time them apart. Not for concurrent
  // forwards.
  virtual bool ProfileOps(OpProfile* /*profile*/) { return false; }

 protected:
  Encoder(EncoderConfig config, EncoderOptions options)
      : config_(std::move(config)), options_(options) {}

 private:
  EncoderConfig config_;
  EncoderOptions options_;
};

}  // namespace encoderd
