#include "engine/torch/torch_encoder_baseline.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstring>

namespace encoderd {
namespace {

at::ScalarType ToTorch(DType dtype) {
  return dtype == DType::kBFloat16 ? at::kBFloat16 : at::kFloat;
}

// A float32 copy of an engine tensor as an at::Tensor of `dtype`.
at::Tensor ToAten(const Tensor& t, at::ScalarType dtype) {
  const Tensor f = t.To(DType::kFloat32);
  at::Tensor a = at::empty(f.shape(), at::kFloat);
  std::memcpy(a.data_ptr<float>(), f.data<float>(), f.nbytes());
  return a.to(dtype);
}

struct LayerWeights {
  at::Tensor qkv_w, qkv_b, out_w, out_b, norm1_w, norm1_b, ffn_in_w, ffn_in_b, ffn_out_w, ffn_out_b,
      norm2_w, norm2_b;
};

class TorchEncoderBaselineImpl final : public TorchEncoderBaseline {
 public:
  TorchEncoderBaselineImpl(EncoderConfig config, at::ScalarType dtype)
      : config_(std::move(config)), dtype_(dtype) {}

  Status Init(const TensorMap& weights) {
    auto get = [&](const std::string& name, at::Tensor* out) -> Status {
      auto it = weights.find(name);
      if (it == weights.end()) return NotFound("baseline: missing weight " + name);
      *out = ToAten(it->second, dtype_);
      return Status::Ok();
    };
    RETURN_IF_ERROR(get("embeddings.word", &word_));
    if (config_.position_rule != PositionRule::kNone) {
      RETURN_IF_ERROR(get("embeddings.position", &position_));
    }
    if (config_.type_vocab_size > 0) RETURN_IF_ERROR(get("embeddings.token_type", &token_type_));
    if (config_.embedding_norm) {
      RETURN_IF_ERROR(get("embeddings.norm.weight", &emb_norm_w_));
      RETURN_IF_ERROR(get("embeddings.norm.bias", &emb_norm_b_));
    }
    for (int64_t i = 0; i < config_.num_layers; ++i) {
      LayerWeights l;
      auto name = [&](const char* suffix) { return LayerWeightName(i, suffix); };
      RETURN_IF_ERROR(get(name("attention.qkv.weight"), &l.qkv_w));
      RETURN_IF_ERROR(get(name("attention.qkv.bias"), &l.qkv_b));
      RETURN_IF_ERROR(get(name("attention.out.weight"), &l.out_w));
      RETURN_IF_ERROR(get(name("attention.out.bias"), &l.out_b));
      RETURN_IF_ERROR(get(name("norm1.weight"), &l.norm1_w));
      RETURN_IF_ERROR(get(name("norm1.bias"), &l.norm1_b));
      RETURN_IF_ERROR(get(name("ffn.in.weight"), &l.ffn_in_w));
      RETURN_IF_ERROR(get(name("ffn.in.bias"), &l.ffn_in_b));
      RETURN_IF_ERROR(get(name("ffn.out.weight"), &l.ffn_out_w));
      RETURN_IF_ERROR(get(name("ffn.out.bias"), &l.ffn_out_b));
      RETURN_IF_ERROR(get(name("norm2.weight"), &l.norm2_w));
      RETURN_IF_ERROR(get(name("norm2.bias"), &l.norm2_b));
      layers_.push_back(std::move(l));
    }
    if (config_.final_norm) {
      RETURN_IF_ERROR(get("final_norm.weight", &final_norm_w_));
      RETURN_IF_ERROR(get("final_norm.bias", &final_norm_b_));
    }
    return Status::Ok();
  }

  StatusOr<Tensor> Forward(TorchBaselineMode mode,
                           const std::vector<std::vector<int32_t>>& sequences) override {
    if (sequences.empty()) return InvalidArgument("baseline: no sequences");
    c10::InferenceMode guard;
    const int64_t batch = static_cast<int64_t>(sequences.size());
    int64_t max_len = 0;
    int64_t total = 0;
    for (const auto& s : sequences) {
      max_len = std::max<int64_t>(max_len, static_cast<int64_t>(s.size()));
      total += static_cast<int64_t>(s.size());
    }
    at::Tensor ids = at::full({batch, max_len}, config_.pad_token_id, at::kLong);
    at::Tensor positions = at::zeros({batch, max_len}, at::kLong);
    at::Tensor padding = at::ones({batch, max_len}, at::kBool);  // true = padding
    auto ids_a = ids.accessor<int64_t, 2>();
    auto pos_a = positions.accessor<int64_t, 2>();
    auto pad_a = padding.accessor<bool, 2>();
    const bool after_padding = config_.position_rule == PositionRule::kAfterPaddingIdx;
    for (int64_t b = 0; b < batch; ++b) {
      int64_t next = config_.pad_token_id + 1;  // RoBERTa's positions (PackedBatchBuilder's)
      for (int64_t t = 0; t < static_cast<int64_t>(sequences[b].size()); ++t) {
        ids_a[b][t] = sequences[b][t];
        pad_a[b][t] = false;
        const bool pad = sequences[b][t] == config_.pad_token_id;
        pos_a[b][t] = !after_padding ? t : pad ? config_.pad_token_id : next++;
      }
    }
    at::Tensor x = at::embedding(word_, ids);
    if (position_.defined()) x = x + at::embedding(position_, positions);
    if (token_type_.defined()) x = x + token_type_[0];
    if (config_.embedding_norm) {
      x = at::layer_norm(x, {config_.hidden_size}, emb_norm_w_, emb_norm_b_,
                         config_.layer_norm_eps);
    }
    switch (mode) {
      case TorchBaselineMode::kSlowPath:
        for (const auto& l : layers_) x = SlowLayer(x, l, padding);
        break;
      case TorchBaselineMode::kFastpath:
        for (const auto& l : layers_) x = FastLayer(x, l, padding);
        break;
      case TorchBaselineMode::kNestedFastpath: {
        at::Tensor nested = at::_nested_tensor_from_mask(x, padding.logical_not(), false);
        for (const auto& l : layers_) nested = FastLayer(nested, l, c10::nullopt);
        x = nested.to_padded_tensor(0.0, x.sizes());
        break;
      }
    }
    if (config_.final_norm) {
      x = at::layer_norm(x, {config_.hidden_size}, final_norm_w_, final_norm_b_,
                         config_.layer_norm_eps);
    }
    x = x.to(at::kFloat).contiguous();
    Tensor out = Tensor::Zeros(DType::kFloat32, {total, config_.hidden_size});
    float* dst = out.mutable_data<float>();
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = static_cast<int64_t>(sequences[b].size());
      std::memcpy(dst, x[b].data_ptr<float>(), sizeof(float) * len * config_.hidden_size);
      dst += len * config_.hidden_size;
    }
    return out;
  }

 private:
  at::Tensor Activation(const at::Tensor& x) const {
    return config_.activation == Activation::kGelu ? at::gelu(x) : at::relu(x);
  }

  at::Tensor SelfAttention(const at::Tensor& x, const LayerWeights& l,
                           const at::Tensor& padding) const {
    const int64_t batch = x.size(0), len = x.size(1);
    const int64_t heads = config_.num_heads, head_dim = config_.head_dim();
    auto qkv = at::linear(x, l.qkv_w, l.qkv_b).view({batch, len, 3, heads, head_dim});
    auto q = qkv.select(2, 0).transpose(1, 2);
    auto k = qkv.select(2, 1).transpose(1, 2);
    auto v = qkv.select(2, 2).transpose(1, 2);
    auto scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
    scores = scores.masked_fill(padding.view({batch, 1, 1, len}),
                                -std::numeric_limits<float>::infinity());
    auto context = at::matmul(at::softmax(scores, -1), v);
    context = context.transpose(1, 2).reshape({batch, len, config_.hidden_size});
    return at::linear(context, l.out_w, l.out_b);
  }

  at::Tensor FeedForward(const at::Tensor& x, const LayerWeights& l) const {
    return at::linear(Activation(at::linear(x, l.ffn_in_w, l.ffn_in_b)), l.ffn_out_w, l.ffn_out_b);
  }

  at::Tensor SlowLayer(const at::Tensor& x, const LayerWeights& l,
                       const at::Tensor& padding) const {
    const auto h = config_.hidden_size;
    const double eps = config_.layer_norm_eps;
    if (config_.norm_first) {
      auto y = x + SelfAttention(at::layer_norm(x, {h}, l.norm1_w, l.norm1_b, eps), l, padding);
      return y + FeedForward(at::layer_norm(y, {h}, l.norm2_w, l.norm2_b, eps), l);
    }
    auto y = at::layer_norm(x + SelfAttention(x, l, padding), {h}, l.norm1_w, l.norm1_b, eps);
    return at::layer_norm(y + FeedForward(y, l), {h}, l.norm2_w, l.norm2_b, eps);
  }

  at::Tensor FastLayer(const at::Tensor& x, const LayerWeights& l,
                       const c10::optional<at::Tensor>& padding) const {
    return at::_transformer_encoder_layer_fwd(
        x, config_.hidden_size, config_.num_heads, l.qkv_w, l.qkv_b, l.out_w, l.out_b,
        config_.activation == Activation::kGelu, config_.norm_first, config_.layer_norm_eps,
        l.norm1_w, l.norm1_b, l.norm2_w, l.norm2_b, l.ffn_in_w, l.ffn_in_b, l.ffn_out_w,
        l.ffn_out_b, padding,
        padding.has_value() ? c10::optional<int64_t>(1) : c10::optional<int64_t>());
  }

  EncoderConfig config_;
  at::ScalarType dtype_;
  at::Tensor word_, position_, token_type_, emb_norm_w_, emb_norm_b_, final_norm_w_, final_norm_b_;
  std::vector<LayerWeights> layers_;
};

// Path of the shared object that provides `symbol` (which BLAS LibTorch calls).
std::string LibraryProviding(const char* symbol) {
  void* address = dlsym(RTLD_DEFAULT, symbol);
  Dl_info info{};
  if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr) {
    return "unknown";
  }
  char resolved[4096];
  if (realpath(info.dli_fname, resolved) != nullptr) return resolved;
  return info.dli_fname;
}

}  // namespace

const char* TorchBaselineModeName(TorchBaselineMode mode) {
  switch (mode) {
    case TorchBaselineMode::kSlowPath:
      return "slow path";
    case TorchBaselineMode::kFastpath:
      return "fastpath";
    case TorchBaselineMode::kNestedFastpath:
      return "nested fastpath";
  }
  return "unknown";
}

StatusOr<std::unique_ptr<TorchEncoderBaseline>> TorchEncoderBaseline::Create(
    const EncoderConfig& config, const TensorMap& weights, DType dtype) {
  if (dtype != DType::kFloat32 && dtype != DType::kBFloat16) {
    return InvalidArgument("baseline supports float32 and bfloat16 only");
  }
  if (config.relative_attention_buckets > 0) {
    // PyTorch's encoder layers have no relative attention bias: their
    // outputs would be another model's.
    return InvalidArgument(std::string("the LibTorch baseline has no relative attention bias (") +
                           ModelFamilyName(config.family) + "): run --engines encoderd");
  }
  if (config.attention_span > 0) {
    return InvalidArgument(std::string("the LibTorch baseline has no disentangled attention (") +
                           ModelFamilyName(config.family) + "): run --engines encoderd");
  }
  auto impl = std::make_unique<TorchEncoderBaselineImpl>(config, ToTorch(dtype));
  RETURN_IF_ERROR(impl->Init(weights));
  return std::unique_ptr<TorchEncoderBaseline>(std::move(impl));
}

std::string ConfigureTorchThreads(int threads) {
  at::set_num_threads(threads);
  // Make sure a GEMM has run so that the BLAS library is resolved.
  (void)at::mm(at::ones({2, 2}), at::ones({2, 2}));
  return "LibTorch " + std::to_string(at::get_num_threads()) + " threads; sgemm_ from " +
         LibraryProviding("sgemm_");
}

}  // namespace encoderd
