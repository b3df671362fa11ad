// The CUDA implementation of Encoder: fp16/bf16 weights uploaded once, one
// stream per encoder, every layer op on the device over the packed tokens.
// The forward's result comes back in fp32 through a page-locked buffer.
// Pooling and the classification head work on a few rows per sequence and
// run on the host with the CPU kernels, on Forward's fp32 output.
#include "engine/runtime/cuda_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "engine/runtime/host_head.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm_cublaslt.h"

namespace encoderd {
namespace {

namespace k = kernels;

struct DeviceLinear {
  k::DeviceBuffer weight, bias;  // dtype [out, in] and [out] (bias may be empty)
  int64_t out = 0, in = 0;
};

struct DeviceNorm {
  k::DeviceBuffer gamma, beta;  // fp32 [hidden]
  const float* g() const { return gamma.as<float>(); }
  const float* b() const { return beta.as<float>(); }
};

struct DeviceLayer {
  DeviceLinear qkv, out, ffn_in, ffn_out;
  DeviceNorm norm1, norm2;
};

// Page-locked host memory that grows on demand.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(k::CudaContext* ctx) : ctx_(ctx) {}
  ~PinnedBuffer() { ctx_->FreeHost(ptr_); }
  void* Reserve(size_t bytes) {
    if (bytes > bytes_) {
      ctx_->FreeHost(ptr_);
      ptr_ = nullptr;
      ptr_ = ctx_->AllocateHost(bytes);
      bytes_ = bytes;
    }
    return ptr_;
  }

 private:
  k::CudaContext* ctx_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class CudaEncoder final : public Encoder {
 public:
  CudaEncoder(const EncoderConfig& config, const EncoderOptions& options,
              std::unique_ptr<k::CudaContext> ctx)
      : Encoder(config, options),
        ctx_(std::move(ctx)),
        dtype_(options.dtype == DType::kBFloat16 ? k::CudaDType::kBFloat16
                                                 : k::CudaDType::kFloat16),
        host_in_(ctx_.get()),
        host_out_(ctx_.get()) {}

  Status Init(TensorMap& weights);

  StatusOr<Tensor> Forward(const PackedBatch& batch) override;
  StatusOr<Tensor> Pool(const Tensor& hidden, const PackedBatch& batch, Pooling pooling,
                        bool normalize) override {
    return head_->Pool(hidden, batch, pooling, normalize);
  }
  StatusOr<Tensor> Classify(const Tensor& hidden, const PackedBatch& batch) override {
    return head_->Classify(hidden, batch);
  }
  size_t weight_bytes() const override { return weight_bytes_; }

 private:
  // Uploads weight `name` (any float dtype) as dtype_, or as fp32 with as_float.
  StatusOr<k::DeviceBuffer> Upload(TensorMap& weights, const std::string& name, bool as_float,
                                   int64_t* rows = nullptr);
  StatusOr<DeviceLinear> UploadLinear(TensorMap& weights, const std::string& prefix);
  StatusOr<DeviceNorm> UploadNorm(TensorMap& weights, const std::string& prefix);
  Status CheckBatch(const PackedBatch& batch) const;
  void RunLayer(const DeviceLayer& layer, int64_t tokens, const PackedBatch& batch);
  void Linear(const DeviceLinear& w, const void* x, int64_t rows, k::GemmEpilogue epilogue,
              void* y);

  // Declared first so that it is destroyed last: every buffer below frees
  // through it.
  std::unique_ptr<k::CudaContext> ctx_;
  k::CudaDType dtype_;
  std::mutex mutex_;  // serialises use of ctx_ and the scratch buffers
  k::DeviceBuffer word_, position_, token_type_;
  int64_t position_rows_ = 0, token_type_rows_ = 0;
  DeviceNorm embedding_norm_, final_norm_;
  std::vector<DeviceLayer> layers_;
  size_t weight_bytes_ = 0;
  // Scratch, grown to the largest batch seen.
  k::DeviceBuffer ids_, x_, qkv_, context_, ffn_, normed_, out_f32_;
  PinnedBuffer host_in_, host_out_;
  // Pooling and the classification head, on the host.
  std::unique_ptr<HostHead> head_;
};

StatusOr<k::DeviceBuffer> CudaEncoder::Upload(TensorMap& weights, const std::string& name,
                                              bool as_float, int64_t* rows) {
  auto it = weights.find(name);
  if (it == weights.end()) return NotFound("missing weight " + name);
  const Tensor t = it->second.To(DType::kFloat32);
  if (rows) *rows = t.dim() > 0 ? t.size(0) : 0;
  const int64_t n = t.numel();
  const size_t bytes = static_cast<size_t>(n) * (as_float ? sizeof(float) : 2);
  try {
    k::DeviceBuffer buf(ctx_.get(), bytes);
    if (as_float) {
      ctx_->CopyToDevice(buf.get(), t.data<float>(), bytes);
    } else {
      k::CudaUploadAs(*ctx_, dtype_, t.data<float>(), n, buf.get());
    }
    ctx_->Synchronize();  // `t` and the checkpoint's pages may go now
    weight_bytes_ += bytes;
    it->second.ReleasePages();
    weights.erase(it);
    return buf;
  } catch (const std::exception& e) {
    return Internal("uploading " + name + " to the GPU: " + e.what());
  }
}

StatusOr<DeviceLinear> CudaEncoder::UploadLinear(TensorMap& weights, const std::string& prefix) {
  DeviceLinear lin;
  auto w = weights.find(prefix + ".weight");
  if (w == weights.end()) return NotFound("missing weight " + prefix + ".weight");
  if (w->second.dim() != 2) {
    return InvalidArgument(prefix + ".weight is not a matrix: " + w->second.Describe());
  }
  lin.out = w->second.size(0);
  lin.in = w->second.size(1);
  ASSIGN_OR_RETURN(lin.weight, Upload(weights, prefix + ".weight", false));
  if (weights.count(prefix + ".bias")) {
    int64_t rows = 0;
    ASSIGN_OR_RETURN(lin.bias, Upload(weights, prefix + ".bias", false, &rows));
    if (rows != lin.out) return InvalidArgument(prefix + ".bias has the wrong size");
  }
  return lin;
}

StatusOr<DeviceNorm> CudaEncoder::UploadNorm(TensorMap& weights, const std::string& prefix) {
  DeviceNorm norm;
  int64_t rows = 0;
  ASSIGN_OR_RETURN(norm.gamma, Upload(weights, prefix + ".weight", true, &rows));
  if (rows != config().hidden_size) return InvalidArgument(prefix + ".weight has the wrong size");
  ASSIGN_OR_RETURN(norm.beta, Upload(weights, prefix + ".bias", true, &rows));
  if (rows != config().hidden_size) return InvalidArgument(prefix + ".bias has the wrong size");
  return norm;
}

Status CudaEncoder::Init(TensorMap& weights) {
  const EncoderConfig& c = config();
  ASSIGN_OR_RETURN(word_, Upload(weights, "embeddings.word", false));
  if (c.position_rule != PositionRule::kNone) {
    ASSIGN_OR_RETURN(position_, Upload(weights, "embeddings.position", false, &position_rows_));
  }
  if (c.type_vocab_size > 0) {
    ASSIGN_OR_RETURN(token_type_,
                     Upload(weights, "embeddings.token_type", false, &token_type_rows_));
  }
  if (c.embedding_norm) {
    ASSIGN_OR_RETURN(embedding_norm_, UploadNorm(weights, "embeddings.norm"));
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    DeviceLayer layer;
    ASSIGN_OR_RETURN(layer.qkv, UploadLinear(weights, LayerWeightName(i, "attention.qkv")));
    ASSIGN_OR_RETURN(layer.out, UploadLinear(weights, LayerWeightName(i, "attention.out")));
    ASSIGN_OR_RETURN(layer.ffn_in, UploadLinear(weights, LayerWeightName(i, "ffn.in")));
    ASSIGN_OR_RETURN(layer.ffn_out, UploadLinear(weights, LayerWeightName(i, "ffn.out")));
    const int64_t h = c.hidden_size, f = c.intermediate_size;
    if (layer.qkv.out != 3 * h || layer.qkv.in != h || layer.out.out != h || layer.out.in != h ||
        layer.ffn_in.out != f || layer.ffn_in.in != h || layer.ffn_out.out != h ||
        layer.ffn_out.in != f) {
      return InvalidArgument(LayerWeightName(i, "*") + ": weight shapes do not match the config");
    }
    ASSIGN_OR_RETURN(layer.norm1, UploadNorm(weights, LayerWeightName(i, "norm1")));
    ASSIGN_OR_RETURN(layer.norm2, UploadNorm(weights, LayerWeightName(i, "norm2")));
    layers_.push_back(std::move(layer));
  }
  if (c.final_norm) {
    ASSIGN_OR_RETURN(final_norm_, UploadNorm(weights, "final_norm"));
  }
  // The head runs on the host in fp32 (a few rows per batch).
  ASSIGN_OR_RETURN(head_, HostHead::Create(c, weights, DType::kFloat32, /*num_threads=*/1));
  weight_bytes_ += head_->weight_bytes();
  return Status::Ok();
}

Status CudaEncoder::CheckBatch(const PackedBatch& batch) const {
  if (batch.num_sequences() > 65535) return InvalidArgument("more than 65535 sequences in a batch");
  return ValidatePackedBatch(config(), batch, position_rows_, token_type_rows_);
}

void CudaEncoder::Linear(const DeviceLinear& w, const void* x, int64_t rows,
                         k::GemmEpilogue epilogue, void* y) {
  k::GemmLt(*ctx_, dtype_, x, rows, w.weight.get(), w.bias.get(), w.out, w.in, epilogue,
            epilogue == k::GemmEpilogue::kBiasResidual ? y : nullptr, y);
}

// The same sequence of ops as CpuEncoder::RunLayer, on x_ in place.
void CudaEncoder::RunLayer(const DeviceLayer& layer, int64_t tokens, const PackedBatch& batch) {
  const EncoderConfig& c = config();
  const int64_t hidden = c.hidden_size;
  const float eps = c.layer_norm_eps;
  const auto activation =
      c.activation == Activation::kGelu ? k::GemmEpilogue::kBiasGelu : k::GemmEpilogue::kBiasRelu;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
  void* x = x_.get();
  const int32_t* cu = ids_.as<int32_t>() + 3 * tokens;
  const void* attn_in = x;
  if (c.norm_first) {
    k::CudaAddLayerNorm(*ctx_, dtype_, x, nullptr, layer.norm1.g(), layer.norm1.b(), tokens, hidden,
                        eps, normed_.get());
    attn_in = normed_.get();
  }
  Linear(layer.qkv, attn_in, tokens, k::GemmEpilogue::kBias, qkv_.get());
  k::CudaAttention(*ctx_, dtype_, qkv_.get(), cu, batch.num_sequences(), batch.max_seqlen,
                   c.num_heads, c.head_dim(), scale, context_.get());
  Linear(layer.out, context_.get(), tokens, k::GemmEpilogue::kBiasResidual, x);
  const void* ffn_in = x;
  if (c.norm_first) {
    k::CudaAddLayerNorm(*ctx_, dtype_, x, nullptr, layer.norm2.g(), layer.norm2.b(), tokens, hidden,
                        eps, normed_.get());
    ffn_in = normed_.get();
  } else {
    k::CudaAddLayerNorm(*ctx_, dtype_, x, nullptr, layer.norm1.g(), layer.norm1.b(), tokens, hidden,
                        eps, x);
  }
  Linear(layer.ffn_in, ffn_in, tokens, activation, ffn_.get());
  Linear(layer.ffn_out, ffn_.get(), tokens, k::GemmEpilogue::kBiasResidual, x);
  if (!c.norm_first) {
    k::CudaAddLayerNorm(*ctx_, dtype_, x, nullptr, layer.norm2.g(), layer.norm2.b(), tokens, hidden,
                        eps, x);
  }
}

StatusOr<Tensor> CudaEncoder::Forward(const PackedBatch& batch) {
  RETURN_IF_ERROR(CheckBatch(batch));
  const EncoderConfig& c = config();
  const int64_t tokens = batch.num_tokens();
  const int64_t sequences = batch.num_sequences();
  const int64_t hidden = c.hidden_size;
  const size_t act = static_cast<size_t>(tokens) * 2;  // bytes per feature column
  Tensor out = Tensor::Zeros(DType::kFloat32, {tokens, hidden});
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    k::CudaContext* ctx = ctx_.get();
    // ids | position ids | token type ids | cu_seqlens, in one copy.
    const size_t ints = static_cast<size_t>(3 * tokens + sequences + 1);
    auto* in = static_cast<int32_t*>(host_in_.Reserve(ints * sizeof(int32_t)));
    std::memcpy(in, batch.token_ids.data(), tokens * sizeof(int32_t));
    std::memcpy(in + tokens, batch.position_ids.data(), tokens * sizeof(int32_t));
    std::memcpy(in + 2 * tokens, batch.token_type_ids.data(), tokens * sizeof(int32_t));
    std::memcpy(in + 3 * tokens, batch.cu_seqlens.data(), (sequences + 1) * sizeof(int32_t));
    ids_.Reserve(ctx, ints * sizeof(int32_t));
    ctx->CopyToDevice(ids_.get(), in, ints * sizeof(int32_t));
    x_.Reserve(ctx, act * hidden);
    qkv_.Reserve(ctx, act * 3 * hidden);
    context_.Reserve(ctx, act * hidden);
    ffn_.Reserve(ctx, act * c.intermediate_size);
    if (c.norm_first) normed_.Reserve(ctx, act * hidden);

    const int32_t* ids = ids_.as<int32_t>();
    k::CudaEmbeddingTables tables;
    tables.word = word_.get();
    tables.position = position_.get();
    tables.token_type = token_type_.get();
    tables.hidden = hidden;
    k::CudaEmbeddingLayerNorm(*ctx, dtype_, tables, ids, position_.get() ? ids + tokens : nullptr,
                              token_type_.get() ? ids + 2 * tokens : nullptr, tokens,
                              c.embedding_norm ? embedding_norm_.g() : nullptr,
                              c.embedding_norm ? embedding_norm_.b() : nullptr, c.layer_norm_eps,
                              x_.get());
    for (const DeviceLayer& layer : layers_) RunLayer(layer, tokens, batch);
    if (c.final_norm) {
      k::CudaAddLayerNorm(*ctx, dtype_, x_.get(), nullptr, final_norm_.g(), final_norm_.b(), tokens,
                          hidden, c.layer_norm_eps, x_.get());
    }
    const size_t out_bytes = static_cast<size_t>(tokens * hidden) * sizeof(float);
    out_f32_.Reserve(ctx, out_bytes);
    k::CudaCastToFloat(*ctx, dtype_, x_.get(), tokens * hidden, out_f32_.as<float>());
    void* host = host_out_.Reserve(out_bytes);
    ctx->CopyToHost(host, out_f32_.get(), out_bytes);
    ctx->Synchronize();
    std::memcpy(out.mutable_data<float>(), host, out_bytes);
  } catch (const std::exception& e) {
    // Let queued copies from host_in_ finish before the next batch refills it.
    try {
      ctx_->Synchronize();
    } catch (const std::exception&) {
    }
    return Internal(std::string("cuda encoder forward failed: ") + e.what());
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<Encoder>> CreateCudaEncoder(const EncoderConfig& config, TensorMap weights,
                                                     const EncoderOptions& options) {
  std::string reason;
  if (k::CudaDeviceCount(&reason) == 0) {
    return FailedPrecondition("device cuda: no CUDA device visible (" + reason + ")");
  }
  if (options.dtype != DType::kFloat16 && options.dtype != DType::kBFloat16) {
    return InvalidArgument(std::string("dtype ") + std::string(DTypeName(options.dtype)) +
                           " is not supported on cuda (float16, bfloat16)");
  }
  RETURN_IF_ERROR(config.Validate());
  if (config.head_dim() * config.num_heads != config.hidden_size) {
    return InvalidArgument("num_heads does not divide hidden_size");
  }
  if (!k::CudaAttentionSupports(config.head_dim())) {
    return InvalidArgument("device cuda: head size " + std::to_string(config.head_dim()) +
                           " is not supported by the attention kernel (32, 64, 128)");
  }
  if (config.hidden_size > k::kCudaMaxNormHidden || config.hidden_size % 8 != 0 ||
      config.intermediate_size % 8 != 0) {
    return InvalidArgument("device cuda: hidden_size (at most " +
                           std::to_string(k::kCudaMaxNormHidden) +
                           ") and intermediate_size must be multiples of 8");
  }
  std::unique_ptr<k::CudaContext> ctx;
  try {
    ctx = k::CudaContext::Create(/*device=*/0);
  } catch (const std::exception& e) {
    return FailedPrecondition(std::string("device cuda: ") + e.what());
  }
  auto encoder = std::make_unique<CudaEncoder>(config, options, std::move(ctx));
  RETURN_IF_ERROR(encoder->Init(weights));
  return std::unique_ptr<Encoder>(std::move(encoder));
}

}  // namespace encoderd
