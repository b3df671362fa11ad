#include "engine/runtime/host_head.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <string>

#include "kernels/activations.h"
#include "kernels/pooling.h"

namespace encoderd {

namespace k = kernels;

Status ValidatePackedBatch(const EncoderConfig& c, const PackedBatch& batch, int64_t position_rows,
                           int64_t type_rows) {
  const size_t tokens = batch.token_ids.size();
  if (batch.num_sequences() == 0 || tokens == 0) return InvalidArgument("empty batch");
  if (batch.cu_seqlens.size() != static_cast<size_t>(batch.num_sequences()) + 1 ||
      batch.cu_seqlens.front() != 0 || batch.cu_seqlens.back() != static_cast<int32_t>(tokens) ||
      batch.position_ids.size() != tokens || batch.token_type_ids.size() != tokens ||
      (!batch.pool_start.empty() &&
       batch.pool_start.size() != static_cast<size_t>(batch.num_sequences()))) {
    return InvalidArgument("malformed packed batch");
  }
  for (const int32_t start : batch.pool_start) {
    if (start < 0) return InvalidArgument("pool_start " + std::to_string(start) + " < 0");
  }
  int32_t longest = 0;
  for (int64_t s = 0; s < batch.num_sequences(); ++s) {
    const int32_t length = batch.length(s);
    if (length <= 0) return InvalidArgument("empty sequence in batch");
    if (length > c.max_tokens) {
      return InvalidArgument("sequence of " + std::to_string(length) +
                             " tokens exceeds the model's limit of " +
                             std::to_string(c.max_tokens));
    }
    longest = std::max(longest, length);
  }
  if (batch.max_seqlen != longest) return InvalidArgument("max_seqlen does not match cu_seqlens");
  const int64_t types = std::max<int64_t>(type_rows, 1);
  for (size_t t = 0; t < tokens; ++t) {
    if (batch.token_ids[t] < 0 || batch.token_ids[t] >= c.vocab_size) {
      return InvalidArgument("token id " + std::to_string(batch.token_ids[t]) +
                             " outside the vocabulary of " + std::to_string(c.vocab_size));
    }
    if (position_rows > 0 &&
        (batch.position_ids[t] < 0 || batch.position_ids[t] >= position_rows)) {
      return InvalidArgument("position id " + std::to_string(batch.position_ids[t]) +
                             " outside the position table");
    }
    if (batch.token_type_ids[t] < 0 || batch.token_type_ids[t] >= types) {
      return InvalidArgument("token type id " + std::to_string(batch.token_type_ids[t]) +
                             " outside the token type table");
    }
  }
  return Status::Ok();
}

bool HoldsMaskedPad(const EncoderConfig& c, const PackedBatch& batch) {
  return c.mask_pad_keys &&
         std::find(batch.token_ids.begin(), batch.token_ids.end(),
                   static_cast<int32_t>(c.pad_token_id)) != batch.token_ids.end();
}

bool PadKeyBias(const EncoderConfig& c, const PackedBatch& batch, std::vector<float>* bias) {
  if (!HoldsMaskedPad(c, batch)) return false;
  const auto pad = static_cast<int32_t>(c.pad_token_id);
  const auto begin = batch.token_ids.begin();
  bias->assign(batch.token_ids.size(), 0.f);
  for (int64_t s = 0; s < batch.num_sequences(); ++s) {
    const auto first = begin + batch.cu_seqlens[s], last = begin + batch.cu_seqlens[s + 1];
    if (std::all_of(first, last, [pad](int32_t id) { return id == pad; })) continue;
    for (auto t = first; t != last; ++t)
      if (*t == pad) (*bias)[t - begin] = -std::numeric_limits<float>::infinity();
  }
  return true;
}

Tensor Fp32AnyAlignment(const Tensor& t) {
  return t.dtype() == DType::kFloat32 && t.IsContiguous() ? t : t.To(DType::kFloat32);
}

StatusOr<std::unique_ptr<k::PackedWeight>> PackLinear(const k::Context& ctx,
                                                      const std::string& name, const Tensor& weight,
                                                      const Tensor& bias, DType type) {
  const Tensor w = Fp32AnyAlignment(weight);
  if (w.dim() != 2) return InvalidArgument(name + ".weight is not a matrix: " + w.Describe());
  Tensor b;
  if (bias.defined()) {
    b = Fp32AnyAlignment(bias);
    if (b.numel() != w.size(0)) return InvalidArgument(name + ".bias has the wrong size");
  }
  std::unique_ptr<k::PackedWeight> packed;
  try {
    packed = k::PackedWeight::Pack(ctx, w.data<float>(), b.defined() ? b.data<float>() : nullptr,
                                   w.size(0), w.size(1), type);
  } catch (const std::exception& e) {
    return Internal("packing " + name + ": " + e.what());
  }
  weight.ReleasePages();
  if (bias.defined()) bias.ReleasePages();
  return packed;
}

StatusOr<std::unique_ptr<k::PackedWeight>> PackLinear(const k::Context& ctx, TensorMap& weights,
                                                      const std::string& prefix, DType type) {
  auto w_it = weights.find(prefix + ".weight");
  if (w_it == weights.end()) return NotFound("missing weight " + prefix + ".weight");
  auto b_it = weights.find(prefix + ".bias");
  ASSIGN_OR_RETURN(auto packed, PackLinear(ctx, prefix, w_it->second,
                                           b_it != weights.end() ? b_it->second : Tensor(), type));
  weights.erase(w_it);
  if (b_it != weights.end()) weights.erase(b_it);
  return packed;
}

StatusOr<std::unique_ptr<HostHead>> HostHead::Create(const EncoderConfig& config,
                                                     TensorMap& weights, DType dtype,
                                                     int num_threads) {
  std::unique_ptr<HostHead> head(new HostHead(config, num_threads));
  const DType type = dtype == DType::kBFloat16 ? DType::kBFloat16 : DType::kFloat32;
  for (size_t i = 0; i < config.pool_dense.size(); ++i) {
    ASSIGN_OR_RETURN(auto packed,
                     PackLinear(head->ctx_, weights, "pool_dense." + std::to_string(i), type));
    head->pool_dense_.push_back(std::move(packed));
  }
  if (config.num_labels > 0) {
    ASSIGN_OR_RETURN(head->dense_, PackLinear(head->ctx_, weights, "head.dense", type));
    ASSIGN_OR_RETURN(head->out_, PackLinear(head->ctx_, weights, "head.out", type));
  }
  return head;
}

size_t HostHead::weight_bytes() const {
  size_t bytes = (dense_ ? dense_->bytes() : 0) + (out_ ? out_->bytes() : 0);
  for (const auto& w : pool_dense_) bytes += w->bytes();
  return bytes;
}

StatusOr<Tensor> HostHead::Pool(const Tensor& hidden, const PackedBatch& batch, Pooling pooling,
                                bool normalize) {
  std::lock_guard<std::mutex> lock(mutex_);
  ASSIGN_OR_RETURN(Tensor pooled, PoolLocked(hidden, batch, pooling));
  return EmbeddingLocked(std::move(pooled), normalize);
}

StatusOr<Tensor> HostHead::Classify(const Tensor& hidden, const PackedBatch& batch) {
  if (!out_) return FailedPrecondition("model has no classification head");
  std::lock_guard<std::mutex> lock(mutex_);
  ASSIGN_OR_RETURN(Tensor first, PoolLocked(hidden, batch, Pooling::kCls));
  return ClassifyLocked(first);
}

StatusOr<Tensor> HostHead::PoolRows(const Tensor& hidden, const PackedBatch& batch,
                                    Pooling pooling) {
  std::lock_guard<std::mutex> lock(mutex_);
  return PoolLocked(hidden, batch, pooling);
}

StatusOr<Tensor> HostHead::EmbeddingFromPooled(const Tensor& pooled, bool normalize) {
  RETURN_IF_ERROR(CheckPooledRows(pooled, "EmbeddingFromPooled"));
  std::lock_guard<std::mutex> lock(mutex_);
  // Normalizing writes in place: into a copy when no pool_dense layer makes
  // a new tensor first, so that the caller's rows stay as they were.
  if (pool_dense_.empty() && normalize) {
    Tensor own = Tensor::Zeros(DType::kFloat32, pooled.shape());
    const Tensor in = pooled.ToContiguous();
    std::memcpy(own.mutable_data<float>(), in.data<float>(), in.nbytes());
    return EmbeddingLocked(std::move(own), normalize);
  }
  return EmbeddingLocked(pooled.ToContiguous(), normalize);
}

StatusOr<Tensor> HostHead::ClassifyFromFirst(const Tensor& first) {
  if (!out_) return FailedPrecondition("model has no classification head");
  RETURN_IF_ERROR(CheckPooledRows(first, "ClassifyFromFirst"));
  std::lock_guard<std::mutex> lock(mutex_);
  return ClassifyLocked(first.ToContiguous());
}

Status HostHead::CheckPooledRows(const Tensor& rows, const char* what) const {
  if (rows.dim() != 2 || rows.size(0) <= 0 || rows.size(1) != config_.hidden_size ||
      rows.dtype() != DType::kFloat32) {
    return InvalidArgument(std::string(what) + ": expected float32 [sequences, " +
                           std::to_string(config_.hidden_size) + "] rows, got " + rows.Describe());
  }
  return Status::Ok();
}

StatusOr<Tensor> HostHead::PoolLocked(const Tensor& hidden, const PackedBatch& batch,
                                      Pooling pooling) {
  const int64_t h = config_.hidden_size;
  if (hidden.dim() != 2 || hidden.size(0) != batch.num_tokens() || hidden.size(1) != h ||
      hidden.dtype() != DType::kFloat32) {
    return InvalidArgument("Pool: hidden states do not match the batch");
  }
  const int64_t sequences = batch.num_sequences();
  if (!batch.pool_start.empty() && static_cast<int64_t>(batch.pool_start.size()) != sequences) {
    return InvalidArgument("Pool: pool_start does not match the batch");
  }
  Tensor out = Tensor::Zeros(DType::kFloat32, {sequences, h});
  try {
    k::Pool(ctx_, DType::kFloat32, hidden.data<float>(), batch.cu_seqlens.data(),
            batch.pool_start.empty() ? nullptr : batch.pool_start.data(), sequences, h, pooling,
            out.mutable_data<float>());
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("Pool: ") + e.what());
  }
  return out;
}

StatusOr<Tensor> HostHead::EmbeddingLocked(Tensor out, bool normalize) {
  const int64_t sequences = out.size(0);
  for (size_t i = 0; i < pool_dense_.size(); ++i) {
    const EncoderConfig::PoolDense& dense = config_.pool_dense[i];
    Tensor next = Tensor::Zeros(DType::kFloat32, {sequences, dense.out});
    float* y = next.mutable_data<float>();
    try {
      k::Linear(ctx_, DType::kFloat32, out.data<float>(), sequences, *pool_dense_[i],
                Epilogue::kNone, nullptr, y);
    } catch (const std::exception& e) {
      return Internal(std::string("Pool: dense layer: ") + e.what());
    }
    if (dense.tanh) k::TanhInPlace(y, sequences * dense.out);
    out = std::move(next);
  }
  if (normalize) k::L2NormalizeRows(out.mutable_data<float>(), sequences, out.size(1));
  return out;
}

StatusOr<Tensor> HostHead::ClassifyLocked(const Tensor& first) {
  const int64_t sequences = first.size(0);
  const int64_t n = sequences * config_.hidden_size;
  Tensor dense = Tensor::Zeros(DType::kFloat32, {sequences, config_.hidden_size});
  Tensor scores = Tensor::Zeros(DType::kFloat32, {sequences, config_.num_labels});
  try {
    float* d = dense.mutable_data<float>();
    k::Linear(ctx_, DType::kFloat32, first.data<float>(), sequences, *dense_, Epilogue::kNone,
              nullptr, d);
    switch (config_.head_activation) {
      case Activation::kTanh:
        k::TanhInPlace(d, n);
        break;
      case Activation::kRelu:
        k::ReluInPlace(d, n);
        break;
      case Activation::kGelu:
        k::GeluInPlace(d, n);
        break;
    }
    float* s = scores.mutable_data<float>();
    k::Linear(ctx_, DType::kFloat32, d, sequences, *out_, Epilogue::kNone, nullptr, s);
    switch (config_.head_output()) {
      case HeadOutput::kSoftmax:
        k::SoftmaxRows(s, sequences, config_.num_labels);
        break;
      case HeadOutput::kSigmoid:
        for (int64_t i = 0; i < sequences * config_.num_labels; ++i)
          s[i] = 1.0f / (1.0f + std::exp(-s[i]));
        break;
      case HeadOutput::kTanh:
        k::TanhInPlace(s, sequences * config_.num_labels);
        break;
      case HeadOutput::kLogits:
        break;
    }
  } catch (const std::exception& e) {
    return Internal(std::string("classification head failed: ") + e.what());
  }
  return scores;
}

}  // namespace encoderd
