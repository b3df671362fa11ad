// The CPU implementation of Encoder, built on the kernels in kernels/.
#include <cmath>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "engine/runtime/cuda_encoder.h"
#include "engine/runtime/encoder.h"
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
struct Norm {
  Tensor gamma;
  Tensor beta;
  const float* g() const { return gamma.data<float>(); }
  const float* b() const { return beta.data<float>(); }
};

struct Layer {
  std::unique_ptr<k::PackedWeight> qkv, out, ffn_in, ffn_out;
  Norm norm1, norm2;
};

class CpuEncoder final : public Encoder {
 public:
  CpuEncoder(const EncoderConfig& config, const EncoderOptions& options)
      : Encoder(config, options), ctx_(options.num_threads) {}

  Status Init(TensorMap& weights);

  StatusOr<Tensor> Forward(const PackedBatch& batch) override;
  StatusOr<Tensor> Pool(const Tensor& hidden, const PackedBatch& batch, Pooling pooling,
                        bool normalize) override {
    return head_->Pool(hidden, batch, pooling, normalize);
  }
  StatusOr<Tensor> Classify(const Tensor& hidden, const PackedBatch& batch) override {
    return head_->Classify(hidden, batch);
  }
  size_t weight_bytes() const override { return weight_bytes_ + head_->weight_bytes(); }

 private:
  // `name` as contiguous fp32, aligned unless `any_alignment`.
  StatusOr<Tensor> Fp32(const TensorMap& weights, const std::string& name,
                        bool any_alignment = false);
  // Packs `prefix`.weight/.bias for Linear, then releases them from `weights`.
  StatusOr<std::unique_ptr<k::PackedWeight>> Pack(TensorMap& weights, const std::string& prefix);
  StatusOr<Norm> LoadNorm(const TensorMap& weights, const std::string& prefix);
  void RunLayer(const Layer& layer, int64_t tokens, const PackedBatch& batch, float* x);

  k::CpuContext ctx_;
  std::mutex mutex_;  // serialises use of ctx_ and the scratch buffers
  Tensor word_, position_, token_type_;
  Norm embedding_norm_, final_norm_;
  std::vector<Layer> layers_;
  std::unique_ptr<HostHead> head_;
  size_t weight_bytes_ = 0;
  std::vector<float> qkv_, context_, ffn_, normed_;
};

k::WeightType WeightTypeFor(DType dtype) {
  return dtype == DType::kBFloat16 ? k::WeightType::kBFloat16 : k::WeightType::kFloat32;
}

StatusOr<Tensor> CpuEncoder::Fp32(const TensorMap& weights, const std::string& name,
                                  bool any_alignment) {
  auto it = weights.find(name);
  if (it == weights.end()) return NotFound("missing weight " + name);
  const Tensor& source = it->second;
  // An embedding table stays where the checkpoint maps it even when it is not
  // 4-byte aligned (the kernel reads rows with memcpy): only the rows used
  // become resident, instead of a full copy at load.
  Tensor t = any_alignment ? Fp32AnyAlignment(source) : source.To(DType::kFloat32);
  // A converted or realigned copy: the file's pages are no longer needed.
  if (t.raw_data() != it->second.raw_data()) it->second.ReleasePages();
  weight_bytes_ += t.nbytes();
  return t;
}

StatusOr<std::unique_ptr<k::PackedWeight>> CpuEncoder::Pack(TensorMap& weights,
                                                            const std::string& prefix) {
  ASSIGN_OR_RETURN(auto packed, PackLinear(ctx_, weights, prefix, WeightTypeFor(options().dtype)));
  weight_bytes_ += packed->bytes();
  return packed;
}

StatusOr<Norm> CpuEncoder::LoadNorm(const TensorMap& weights, const std::string& prefix) {
  Norm norm;
  ASSIGN_OR_RETURN(norm.gamma, Fp32(weights, prefix + ".weight"));
  ASSIGN_OR_RETURN(norm.beta, Fp32(weights, prefix + ".bias"));
  return norm;
}

Status CpuEncoder::Init(TensorMap& weights) {
  const EncoderConfig& c = config();
  RETURN_IF_ERROR(c.Validate());
  ASSIGN_OR_RETURN(word_, Fp32(weights, "embeddings.word", true));
  if (c.position_rule != PositionRule::kNone) {
    ASSIGN_OR_RETURN(position_, Fp32(weights, "embeddings.position", true));
  }
  if (c.type_vocab_size > 0) {
    ASSIGN_OR_RETURN(token_type_, Fp32(weights, "embeddings.token_type", true));
  }
  if (c.embedding_norm) {
    ASSIGN_OR_RETURN(embedding_norm_, LoadNorm(weights, "embeddings.norm"));
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    Layer layer;
    ASSIGN_OR_RETURN(layer.qkv, Pack(weights, LayerWeightName(i, "attention.qkv")));
    ASSIGN_OR_RETURN(layer.out, Pack(weights, LayerWeightName(i, "attention.out")));
    ASSIGN_OR_RETURN(layer.ffn_in, Pack(weights, LayerWeightName(i, "ffn.in")));
    ASSIGN_OR_RETURN(layer.ffn_out, Pack(weights, LayerWeightName(i, "ffn.out")));
    ASSIGN_OR_RETURN(layer.norm1, LoadNorm(weights, LayerWeightName(i, "norm1")));
    ASSIGN_OR_RETURN(layer.norm2, LoadNorm(weights, LayerWeightName(i, "norm2")));
    layers_.push_back(std::move(layer));
  }
  if (c.final_norm) {
    ASSIGN_OR_RETURN(final_norm_, LoadNorm(weights, "final_norm"));
  }
  ASSIGN_OR_RETURN(head_, HostHead::Create(c, weights, options().dtype, options().num_threads));
  return Status::Ok();
}

void CpuEncoder::RunLayer(const Layer& layer, int64_t tokens, const PackedBatch& batch, float* x) {
  const EncoderConfig& c = config();
  const int64_t hidden = c.hidden_size;
  const float eps = c.layer_norm_eps;
  const auto activation =
      c.activation == Activation::kGelu ? k::LinearEpilogue::kGelu : k::LinearEpilogue::kRelu;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
  const int32_t* cu = batch.cu_seqlens.data();
  const int64_t sequences = batch.num_sequences();
  // Attention block input: x itself (post-norm) or LN1(x) (pre-norm).
  const float* attn_in = x;
  if (c.norm_first) {
    k::LayerNorm(ctx_, x, layer.norm1.g(), layer.norm1.b(), tokens, hidden, eps, normed_.data());
    attn_in = normed_.data();
  }
  k::Linear(ctx_, attn_in, tokens, *layer.qkv, k::LinearEpilogue::kNone, nullptr, qkv_.data());
  k::Attention(ctx_, qkv_.data(), cu, sequences, tokens, c.num_heads, c.head_dim(), scale,
               context_.data());
  k::Linear(ctx_, context_.data(), tokens, *layer.out, k::LinearEpilogue::kResidual, x, x);
  const float* ffn_in = x;
  if (c.norm_first) {
    k::LayerNorm(ctx_, x, layer.norm2.g(), layer.norm2.b(), tokens, hidden, eps, normed_.data());
    ffn_in = normed_.data();
  } else {
    k::LayerNorm(ctx_, x, layer.norm1.g(), layer.norm1.b(), tokens, hidden, eps, x);
  }
  k::Linear(ctx_, ffn_in, tokens, *layer.ffn_in, activation, nullptr, ffn_.data());
  k::Linear(ctx_, ffn_.data(), tokens, *layer.ffn_out, k::LinearEpilogue::kResidual, x, x);
  if (!c.norm_first) {
    k::LayerNorm(ctx_, x, layer.norm2.g(), layer.norm2.b(), tokens, hidden, eps, x);
  }
}

StatusOr<Tensor> CpuEncoder::Forward(const PackedBatch& batch) {
  RETURN_IF_ERROR(ValidatePackedBatch(config(), batch, position_.defined() ? position_.size(0) : 0,
                                      token_type_.defined() ? token_type_.size(0) : 0));
  const EncoderConfig& c = config();
  const int64_t tokens = batch.num_tokens();
  const int64_t hidden = c.hidden_size;
  Tensor out = Tensor::Zeros(DType::kFloat32, {tokens, hidden});
  float* x = out.mutable_data<float>();
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    qkv_.resize(static_cast<size_t>(tokens * 3 * hidden));
    context_.resize(static_cast<size_t>(tokens * hidden));
    ffn_.resize(static_cast<size_t>(tokens * c.intermediate_size));
    if (c.norm_first) normed_.resize(static_cast<size_t>(tokens * hidden));
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
    tables.hidden = hidden;
    k::EmbeddingLayerNorm(ctx_, tables, batch.token_ids.data(),
                          position_.defined() ? batch.position_ids.data() : nullptr,
                          token_type_.defined() ? batch.token_type_ids.data() : nullptr, tokens,
                          c.embedding_norm ? embedding_norm_.g() : nullptr,
                          c.embedding_norm ? embedding_norm_.b() : nullptr, c.layer_norm_eps, x);
    for (const Layer& layer : layers_) RunLayer(layer, tokens, batch, x);
    if (c.final_norm) {
      k::LayerNorm(ctx_, x, final_norm_.g(), final_norm_.b(), tokens, hidden, c.layer_norm_eps, x);
    }
  } catch (const std::exception& e) {
    return Internal(std::string("encoder forward failed: ") + e.what());
  }
  return out;
}

}  // namespace

const char* DeviceName(Device device) { return device == Device::kCuda ? "cuda" : "cpu"; }

StatusOr<std::unique_ptr<Encoder>> Encoder::Create(const EncoderConfig& config, TensorMap weights,
                                                   const EncoderOptions& options) {
  if (options.device == Device::kCuda) {
    return CreateCudaEncoder(config, std::move(weights), options);
  }
  if (options.dtype != DType::kFloat32 && options.dtype != DType::kBFloat16) {
    return InvalidArgument(std::string("dtype ") + std::string(DTypeName(options.dtype)) +
                           " is not supported on cpu (float32, bfloat16)");
  }
  if (config.head_dim() * config.num_heads != config.hidden_size) {
    return InvalidArgument("num_heads does not divide hidden_size");
  }
  auto encoder = std::make_unique<CpuEncoder>(config, options);
  RETURN_IF_ERROR(encoder->Init(weights));
  return std::unique_ptr<Encoder>(std::move(encoder));
}

}  // namespace encoderd
