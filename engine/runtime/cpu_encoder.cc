// The CPU backend of the encoder (encoder_backend.h): fp32 tables and norms
// in host memory (a table stays where the checkpoint maps it), fp32
// activations in scratch buffers (some bf16, BackendEncoder::BufferType);
// the Linear layers are packed for oneDNN by BackendEncoder.
#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "engine/runtime/cuda_encoder.h"
#include "engine/runtime/encoder.h"
#include "engine/runtime/encoder_backend.h"
#include "engine/runtime/host_head.h"
#include "kernels/context.h"
#include "kernels/cpu_context.h"

namespace encoderd {
namespace {

namespace k = kernels;

// Allocates whole cache lines: each activation buffer starts on a line, and
// so does each of its rows whose bytes are a multiple of 64 (the attention
// kernels stream such rows out past the caches).
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlignment); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const CacheLineAllocator<U>&) const {
    return false;
  }
};

// Forwards of up to this many tokens run as a team (CpuContext::RunAsTeam)
// where every Linear layer allows it: the most rows the few-row kernels
// take (kernels/cpu/few_rows_gemm_avx512.h).
constexpr int64_t kTeamMaxTokens = 36;

class CpuEncoder final : public BackendEncoder {
 public:
  CpuEncoder(const EncoderConfig& config, const EncoderOptions& options)
      : BackendEncoder(config, options, DType::kFloat32), ctx_(options.num_threads) {}
  ~CpuEncoder() override { ReleaseWeights(); }  // before ctx_ goes

  Status Init(TensorMap& weights) { return Load(weights, options().dtype, options().num_threads); }

  // The CPU's ops return when they are done.
  bool ProfileOps(OpProfile* profile) override {
    std::lock_guard<std::mutex> lock(mutex_);
    profile_ = profile;
    return true;
  }

 private:
  StatusOr<Tensor> HiddenStates(const PackedBatch& batch, const StopCheck& stop) override;
  kernels::Context context() override { return ctx_; }
  Status LoadTable(EmbeddingTable table, const Tensor& t) override;
  Status LoadNorm(int64_t layer, NormSlot slot, const Tensor& gamma, const Tensor& beta) override;

  // `t` as contiguous fp32, aligned unless `any_alignment`, kept for the
  // encoder's life (shared with the checkpoint when it stored fp32).
  const float* Keep(const Tensor& t, bool any_alignment);

  k::CpuContext ctx_;
  std::mutex mutex_;          // serialises use of ctx_, the scratch buffers, run_ and profile_
  std::vector<Tensor> kept_;  // tables and norms
  std::vector<float, CacheLineAllocator<float>> scratch_[kNumBuffers];
  std::vector<float> key_bias_;   // run_.key_bias's values (PadKeyBias)
  OpProfile* profile_ = nullptr;  // ProfileOps'
};

const float* CpuEncoder::Keep(const Tensor& source, bool any_alignment) {
  // An embedding table stays where the checkpoint maps it even when it is not
  // 4-byte aligned (the kernel reads rows with memcpy): only the rows used
  // become resident, instead of a full copy at load.
  Tensor t = any_alignment ? Fp32AnyAlignment(source) : source.To(DType::kFloat32);
  // A converted or realigned copy: the file's pages are no longer needed.
  if (t.raw_data() != source.raw_data()) source.ReleasePages();
  weight_bytes_ += t.nbytes();
  kept_.push_back(t);
  return t.data<float>();
}

Status CpuEncoder::LoadTable(EmbeddingTable table, const Tensor& t) {
  SetTable(table, Keep(t, /*any_alignment=*/true), t.size(0));
  return Status::Ok();
}

Status CpuEncoder::LoadNorm(int64_t layer, NormSlot slot, const Tensor& gamma, const Tensor& beta) {
  SetNorm(layer, slot, Keep(gamma, false), Keep(beta, false));
  return Status::Ok();
}

StatusOr<Tensor> CpuEncoder::HiddenStates(const PackedBatch& batch, const StopCheck& stop) {
  RETURN_IF_ERROR(ValidatePackedBatch(config(), batch, table_rows(EmbeddingTable::kPosition),
                                      table_rows(EmbeddingTable::kTokenType)));
  const EncoderConfig& c = config();
  const int64_t tokens = batch.num_tokens();
  Tensor out = Tensor::Zeros(DType::kFloat32, {tokens, c.hidden_size});
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    run_ = Run{};
    for (int b = 0; b < kNumBuffers; ++b) {  // kHidden is the output itself
      if (b == static_cast<int>(Buffer::kHidden)) continue;
      const int64_t bytes = tokens * BufferRowBytes(static_cast<Buffer>(b));
      scratch_[b].resize(static_cast<size_t>((bytes + sizeof(float) - 1) / sizeof(float)));
      run_.buffers[b] = scratch_[b].data();
    }
    run_.buffers[static_cast<int>(Buffer::kHidden)] = out.mutable_data<float>();
    run_.token_ids = batch.token_ids.data();
    run_.position_ids = batch.position_ids.data();
    run_.token_type_ids = batch.token_type_ids.data();
    run_.cu_seqlens = batch.cu_seqlens.data();
    run_.tokens = tokens;
    run_.sequences = batch.num_sequences();
    run_.max_seqlen = batch.max_seqlen;
    if (PadKeyBias(c, batch, &key_bias_)) run_.key_bias = key_bias_.data();
    // A few rows: dozens of short parallel regions, on threads held for the
    // whole forward (docs/architecture.md, "Few rows").
    bool ran = false;
    if (tokens <= kTeamMaxTokens && LinearsRunOnTeam(tokens)) {
      ctx_.RunAsTeam([&] { ran = RunEncoder(c, *this, profile_, stop); });
    } else {
      ran = RunEncoder(c, *this, profile_, stop);
    }
    run_ = Run{};
    if (!ran) return Cancelled("the forward was stopped before its last layer");
  } catch (const std::exception& e) {
    run_ = Run{};
    return Internal(std::string("encoder forward failed: ") + e.what());
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<Encoder>> Encoder::Create(const EncoderConfig& config, TensorMap weights,
                                                   const EncoderOptions& options) {
  RETURN_IF_ERROR(CheckDeviceDType(options.device, options.dtype));
  RETURN_IF_ERROR(CheckFp32Linears(config, options.fp32_linears));
  try {
    if (options.device == Device::kCuda) {
      return CreateCudaEncoder(config, std::move(weights), options);
    }
    auto encoder = std::make_unique<CpuEncoder>(config, options);
    RETURN_IF_ERROR(encoder->Init(weights));
    return std::unique_ptr<Encoder>(std::move(encoder));
  } catch (const std::bad_alloc&) {  // weights packed beyond this host's memory
    return ResourceExhausted("not enough host memory for the model's packed weights");
  }
}

}  // namespace encoderd
