// The CPU backend of the encoder (encoder_backend.h): fp32 tables and norms,
// Linear weights packed for oneDNN in fp32 or bf16, fp32 activations, the ops
// of kernels/.
#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "engine/runtime/cuda_encoder.h"
#include "engine/runtime/encoder.h"
#include "engine/runtime/encoder_backend.h"
#include "engine/runtime/host_head.h"
#include "kernels/attention.h"
#include "kernels/cpu_context.h"
#include "kernels/embeddings.h"
#include "kernels/layer_norm.h"
#include "kernels/linear.h"

namespace encoderd {
namespace {

namespace k = kernels;

// A LayerNorm's parameters, kept as fp32 tensors (shared with the checkpoint
// when it stored fp32).
struct NormWeights {
  Tensor gamma;
  Tensor beta;
  const float* g() const { return gamma.data<float>(); }
  const float* b() const { return beta.data<float>(); }
};

class CpuEncoder final : public BackendEncoder {
 public:
  CpuEncoder(const EncoderConfig& config, const EncoderOptions& options)
      : BackendEncoder(config, options),
        ctx_(options.num_threads),
        weights_(std::max<int64_t>(config.num_layers, 0)) {}

  Status Init(TensorMap& weights) { return Load(weights, options().dtype, options().num_threads); }

  using BackendEncoder::Forward;
  StatusOr<Tensor> Forward(const PackedBatch& batch) override;

 private:
  Status LoadTable(EmbeddingTable table, const Tensor& t) override;
  Status LoadLinear(int64_t layer, LinearSlot slot, const Tensor& weight,
                    const Tensor& bias) override;
  Status LoadNorm(int64_t layer, NormSlot slot, const Tensor& gamma, const Tensor& beta) override;
  void Embed(Buffer out) override;
  void Linear(int64_t layer, LinearSlot slot, Buffer in, Epilogue epilogue, Buffer out) override;
  void Norm(int64_t layer, NormSlot slot, Buffer in, Buffer out) override;
  void Attention(Buffer qkv, Buffer out) override;

  // `t` as contiguous fp32, aligned unless `any_alignment`.
  Tensor Fp32(const Tensor& t, bool any_alignment);
  float* Data(Buffer buffer) { return buffers_[static_cast<int>(buffer)]; }

  k::CpuContext ctx_;
  std::mutex mutex_;  // serialises use of ctx_, the scratch buffers and batch_
  Tensor word_, position_, token_type_;
  SlotWeights<std::unique_ptr<k::PackedWeight>, NormWeights> weights_;
  // The forward in progress: its batch and buffers (kHidden is its output,
  // the others point into scratch_).
  const PackedBatch* batch_ = nullptr;
  float* buffers_[kNumBuffers] = {};
  std::vector<float> scratch_[kNumBuffers];
};

Tensor CpuEncoder::Fp32(const Tensor& source, bool any_alignment) {
  // An embedding table stays where the checkpoint maps it even when it is not
  // 4-byte aligned (the kernel reads rows with memcpy): only the rows used
  // become resident, instead of a full copy at load.
  Tensor t = any_alignment ? Fp32AnyAlignment(source) : source.To(DType::kFloat32);
  // A converted or realigned copy: the file's pages are no longer needed.
  if (t.raw_data() != source.raw_data()) source.ReleasePages();
  weight_bytes_ += t.nbytes();
  return t;
}

Status CpuEncoder::LoadTable(EmbeddingTable table, const Tensor& t) {
  Tensor& slot = table == EmbeddingTable::kWord       ? word_
                 : table == EmbeddingTable::kPosition ? position_
                                                      : token_type_;
  slot = Fp32(t, /*any_alignment=*/true);
  return Status::Ok();
}

Status CpuEncoder::LoadLinear(int64_t layer, LinearSlot slot, const Tensor& weight,
                              const Tensor& bias) {
  const DType type = options().dtype == DType::kInt8 && KeepsFp32(options(), layer, slot)
                         ? DType::kFloat32
                         : options().dtype;
  ASSIGN_OR_RETURN(auto packed,
                   PackLinear(ctx_, LinearWeightPrefix(layer, slot), weight, bias, type));
  weight_bytes_ += packed->bytes();
  weights_.linear(layer, slot) = std::move(packed);
  return Status::Ok();
}

Status CpuEncoder::LoadNorm(int64_t layer, NormSlot slot, const Tensor& gamma, const Tensor& beta) {
  weights_.norm(layer, slot) = NormWeights{Fp32(gamma, false), Fp32(beta, false)};
  return Status::Ok();
}

void CpuEncoder::Embed(Buffer out) {
  const EncoderConfig& c = config();
  k::EmbeddingTables tables;
  tables.word = word_.data<float>();
  tables.word_rows = word_.size(0);
  if (position_.defined()) {
    tables.position = position_.data<float>();
    tables.position_rows = position_.size(0);
  }
  if (token_type_.defined()) {
    tables.token_type = token_type_.data<float>();
    tables.token_type_rows = token_type_.size(0);
  }
  tables.hidden = c.embedding_width();
  const NormWeights& norm = weights_.norm(-1, NormSlot::kEmbedding);
  k::EmbeddingLayerNorm(ctx_, tables, batch_->token_ids.data(),
                        position_.defined() ? batch_->position_ids.data() : nullptr,
                        token_type_.defined() ? batch_->token_type_ids.data() : nullptr,
                        batch_->num_tokens(), c.embedding_norm ? norm.g() : nullptr,
                        c.embedding_norm ? norm.b() : nullptr, c.layer_norm_eps, Data(out));
}

void CpuEncoder::Linear(int64_t layer, LinearSlot slot, Buffer in, Epilogue epilogue, Buffer out) {
  float* y = Data(out);
  k::Linear(ctx_, Data(in), batch_->num_tokens(), *weights_.linear(layer, slot), epilogue,
            epilogue == Epilogue::kResidual ? y : nullptr, y);
}

void CpuEncoder::Norm(int64_t layer, NormSlot slot, Buffer in, Buffer out) {
  const NormWeights& norm = weights_.norm(layer, slot);
  k::LayerNorm(ctx_, Data(in), norm.g(), norm.b(), batch_->num_tokens(), config().hidden_size,
               config().layer_norm_eps, Data(out));
}

void CpuEncoder::Attention(Buffer qkv, Buffer out) {
  const EncoderConfig& c = config();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
  k::Attention(ctx_, Data(qkv), batch_->cu_seqlens.data(), batch_->num_sequences(),
               batch_->num_tokens(), c.num_heads, c.head_dim(), scale, Data(out));
}

StatusOr<Tensor> CpuEncoder::Forward(const PackedBatch& batch) {
  RETURN_IF_ERROR(ValidatePackedBatch(config(), batch, position_.defined() ? position_.size(0) : 0,
                                      token_type_.defined() ? token_type_.size(0) : 0));
  const EncoderConfig& c = config();
  const int64_t tokens = batch.num_tokens();
  const int64_t hidden = c.hidden_size;
  Tensor out = Tensor::Zeros(DType::kFloat32, {tokens, hidden});
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    for (int b = 0; b < kNumBuffers; ++b) {  // kHidden is the output itself
      if (b == static_cast<int>(Buffer::kHidden)) continue;
      scratch_[b].resize(static_cast<size_t>(tokens * BufferWidth(c, static_cast<Buffer>(b))));
      buffers_[b] = scratch_[b].data();
    }
    buffers_[static_cast<int>(Buffer::kHidden)] = out.mutable_data<float>();
    batch_ = &batch;
    RunEncoder(c, *this);
  } catch (const std::exception& e) {
    batch_ = nullptr;
    return Internal(std::string("encoder forward failed: ") + e.what());
  }
  batch_ = nullptr;
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<Encoder>> Encoder::Create(const EncoderConfig& config, TensorMap weights,
                                                   const EncoderOptions& options) {
  RETURN_IF_ERROR(CheckDeviceDType(options.device, options.dtype));
  RETURN_IF_ERROR(CheckFp32Linears(config, options.fp32_linears));
  if (options.device == Device::kCuda) {
    return CreateCudaEncoder(config, std::move(weights), options);
  }
  auto encoder = std::make_unique<CpuEncoder>(config, options);
  RETURN_IF_ERROR(encoder->Init(weights));
  return std::unique_ptr<Encoder>(std::move(encoder));
}

}  // namespace encoderd
