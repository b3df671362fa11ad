// The CUDA backend of the encoder (encoder_backend.h): fp16/bf16 weights
// uploaded once, one stream per encoder, every op of RunEncoder on the device
// over the packed tokens.
// The forward's result comes back in fp32 through page-locked buffers: every
// token's row when the caller reads hidden states, else only each sequence's
// pooled rows, pooled on the device (a batch of 72k tokens of BERT-base
// brings back 786 KB instead of 222 MB). pool_dense layers and the
// classification head work on those rows on the host with the CPU kernels.
#include "engine/runtime/cuda_encoder.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/runtime/encoder_backend.h"
#include "engine/runtime/grow_only_buffer.h"
#include "engine/runtime/host_head.h"
#include "kernels/cast.h"
#include "kernels/context.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/pooling.h"

namespace encoderd {
namespace {

namespace k = kernels;

// Page-locked host memory that grows on demand.
using PinnedBuffer = GrowOnlyBuffer<k::CudaContext::AllocateHost, k::CudaContext::FreeHost>;

// Page-locked blocks that Forward's outputs live in: the device copies the
// hidden states straight into the returned Tensor's memory (no second copy,
// no fresh pages to fault in), and when the last copy of that Tensor goes
// its block comes back here for a later forward (allocating page-locked
// memory takes milliseconds). Blocks outlive the encoder if a Tensor does.
class PinnedPool : public std::enable_shared_from_this<PinnedPool> {
 public:
  ~PinnedPool() {
    for (const auto& [capacity, ptr] : free_) k::CudaContext::FreeHost(ptr);
  }

  // A Storage of exactly `bytes` bytes (contents undefined). Throws what
  // AllocateHost throws.
  std::shared_ptr<const Storage> Take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The smallest free block that fits and is at most twice the size
      // asked (blocks come in whole granules).
      auto it = free_.lower_bound(bytes);
      if (it != free_.end() && it->first <= 2 * std::max(bytes, kGranule)) {
        auto block = std::make_shared<Block>(shared_from_this(), it->second, it->first, bytes);
        free_bytes_ -= it->first;
        free_.erase(it);
        return block;
      }
    }
    const size_t capacity = (bytes + kGranule - 1) / kGranule * kGranule;
    return std::make_shared<Block>(shared_from_this(), k::CudaContext::AllocateHost(capacity),
                                   capacity, bytes);
  }

 private:
  static constexpr size_t kGranule = size_t{1} << 20;
  static constexpr size_t kMaxFree = 4;                     // blocks kept for reuse
  static constexpr size_t kMaxFreeBytes = size_t{1} << 30;  // and their bytes

  class Block final : public Storage {
   public:
    Block(std::shared_ptr<PinnedPool> pool, void* ptr, size_t capacity, size_t size)
        : pool_(std::move(pool)), ptr_(ptr), capacity_(capacity), size_(size) {}
    ~Block() override { pool_->Give(ptr_, capacity_); }
    const std::byte* data() const override { return static_cast<const std::byte*>(ptr_); }
    size_t size() const override { return size_; }

   private:
    std::shared_ptr<PinnedPool> pool_;
    void* ptr_;
    size_t capacity_, size_;
  };

  // Keeps the block for reuse. Past kMaxFree blocks the smallest go back to
  // CUDA (cheap to make again), past kMaxFreeBytes the largest.
  void Give(void* ptr, size_t capacity) {
    std::vector<void*> drop;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      free_.emplace(capacity, ptr);
      free_bytes_ += capacity;
      while (free_.size() > kMaxFree || free_bytes_ > kMaxFreeBytes) {
        auto victim = free_bytes_ > kMaxFreeBytes ? std::prev(free_.end()) : free_.begin();
        free_bytes_ -= victim->first;
        drop.push_back(victim->second);
        free_.erase(victim);
      }
    }
    for (void* p : drop) k::CudaContext::FreeHost(p);
  }

  std::mutex mutex_;
  std::multimap<size_t, void*> free_;  // capacity -> block
  size_t free_bytes_ = 0;
};

class CudaEncoder final : public BackendEncoder {
 public:
  CudaEncoder(const EncoderConfig& config, const EncoderOptions& options,
              std::unique_ptr<k::CudaContext> ctx)
      : BackendEncoder(config, options, options.dtype), ctx_(std::move(ctx)) {}
  ~CudaEncoder() override { ReleaseWeights(); }  // they free through ctx_

  Status Init(TensorMap& weights) {
    // The head runs on the host in fp32 (a few rows per batch).
    RETURN_IF_ERROR(Load(weights, DType::kFloat32, /*head_threads=*/1));
    // The fp32 staging blocks of the uploads (each table's and weight's
    // size: an XLM-R-large vocabulary's ~1 GB) would stay in the context's
    // cache for good, out of reach of another replica's allocations.
    try {
      ctx_->ReleaseCached();
    } catch (const std::exception& e) {
      return Internal(std::string("device cuda: ") + e.what());
    }
    return Status::Ok();
  }

  using BackendEncoder::Forward;
  StatusOr<Result> Forward(const PackedBatch& batch, const Outputs& outputs,
                           const StopCheck& stop) override;

 private:
  StatusOr<Tensor> HiddenStates(const PackedBatch& batch, const StopCheck& stop) override;
  kernels::Context context() override { return *ctx_; }
  Status LoadTable(EmbeddingTable table, const Tensor& t) override;
  Status LoadNorm(int64_t layer, NormSlot slot, const Tensor& gamma, const Tensor& beta) override;

  // Queues the forward of run_ (the batch already uploaded into ids_) up to the fp32
  // wanted_ asks for, in out_f32_ and pooled_f32_: directly, or through a
  // recorded graph for a small batch whose shape and outputs came before.
  void QueueForward(const PackedBatch& batch);
  void QueueOps();

  // Uploads `t` (any float dtype) as options().dtype, or as fp32 with
  // as_float, and keeps it for the encoder's life.
  StatusOr<const void*> Upload(const Tensor& t, bool as_float);
  DType dtype() const { return options().dtype; }

  // Declared first so that it is destroyed last: every buffer below frees
  // through it.
  std::unique_ptr<k::CudaContext> ctx_;
  std::mutex mutex_;                   // serialises use of ctx_, the scratch buffers and run_
  std::vector<k::DeviceBuffer> kept_;  // tables and norms
  // The forward in progress (with run_) and its buffers, grown to the
  // largest batch seen.
  const Outputs* wanted_ = nullptr;
  // pooled_f32_: [poolings][sequences, hidden], in wanted_->poolings' order.
  k::DeviceBuffer ids_, buffers_[kNumBuffers], out_f32_, pooled_f32_;
  PinnedBuffer host_in_;
  std::shared_ptr<PinnedPool> outputs_ = std::make_shared<PinnedPool>();

  // Graphs of small batches (launching a forward's ~10 kernels per layer one
  // by one costs more than their work), by (tokens, sequences, longest,
  // outputs): a shape is recorded the second time it comes. A graph holds the buffers'
  // addresses: when a buffer moves, every graph goes. Opt-in: they pay where
  // shapes repeat (W2 on an H100: 0.55 -> 0.42 ms), but serving 16 clients'
  // single texts records new shapes all the time (7% fewer requests/s, p99.9
  // 20 -> 45 ms).
  static constexpr int64_t kMaxGraphTokens = 4096;
  static constexpr size_t kMaxGraphs = 256;
  bool graphs_enabled_ = GraphsEnabled();  // off for good if recording fails
  using GraphKey = std::array<int64_t, 4>;
  std::map<GraphKey, std::unique_ptr<k::CudaGraph>> graphs_;
  std::map<GraphKey, int> shapes_seen_;
  std::vector<const void*> graph_addresses_;

  // ENCODERD_CUDA_GRAPHS=1 turns the graphs on.
  static bool GraphsEnabled() {
    const char* v = std::getenv("ENCODERD_CUDA_GRAPHS");
    return v != nullptr && std::string(v) == "1";
  }
};

StatusOr<const void*> CudaEncoder::Upload(const Tensor& source, bool as_float) {
  const Tensor t = source.To(DType::kFloat32);
  const int64_t n = t.numel();
  const size_t bytes = static_cast<size_t>(n) * (as_float ? sizeof(float) : DTypeSize(dtype()));
  try {
    k::DeviceBuffer buf(ctx_.get(), bytes);
    if (as_float) {
      ctx_->CopyToDevice(buf.get(), t.data<float>(), bytes);
    } else {
      k::CudaUploadAs(*ctx_, dtype(), t.data<float>(), n, buf.get());
    }
    ctx_->Synchronize();  // `t` and the checkpoint's pages may go now
    weight_bytes_ += bytes;
    source.ReleasePages();
    kept_.push_back(std::move(buf));
    return kept_.back().get();
  } catch (const std::exception& e) {
    return Internal(std::string("uploading to the GPU: ") + e.what());
  }
}

Status CudaEncoder::LoadTable(EmbeddingTable table, const Tensor& t) {
  ASSIGN_OR_RETURN(const void* data, Upload(t, /*as_float=*/false));
  SetTable(table, data, t.size(0));
  return Status::Ok();
}

Status CudaEncoder::LoadNorm(int64_t layer, NormSlot slot, const Tensor& gamma,
                             const Tensor& beta) {
  ASSIGN_OR_RETURN(const void* g, Upload(gamma, /*as_float=*/true));
  ASSIGN_OR_RETURN(const void* b, Upload(beta, /*as_float=*/true));
  SetNorm(layer, slot, static_cast<const float*>(g), static_cast<const float*>(b));
  return Status::Ok();
}

void CudaEncoder::QueueOps() {
  RunEncoder(config(), *this);
  const int64_t hidden = config().hidden_size, sequences = run_.sequences;
  if (wanted_->hidden_states) {
    k::CastToFloat(context(), dtype(), Data(Buffer::kHidden), run_.tokens * hidden,
                   out_f32_.as<float>());
  }
  for (size_t i = 0; i < wanted_->poolings.size(); ++i) {
    k::Pool(context(), dtype(), Data(Buffer::kHidden), run_.cu_seqlens, run_.pool_start, sequences,
            hidden, wanted_->poolings[i],
            pooled_f32_.as<float>() + static_cast<int64_t>(i) * sequences * hidden);
  }
}

void CudaEncoder::QueueForward(const PackedBatch& batch) {
  if (!graphs_enabled_ || batch.num_tokens() > kMaxGraphTokens) return QueueOps();
  std::vector<const void*> addresses = {ids_.get(), out_f32_.get(), pooled_f32_.get()};
  for (const k::DeviceBuffer& b : buffers_) addresses.push_back(b.get());
  if (addresses != graph_addresses_ || graphs_.size() >= kMaxGraphs ||
      shapes_seen_.size() >= 16 * kMaxGraphs) {
    graphs_.clear();
    shapes_seen_.clear();
    graph_addresses_ = std::move(addresses);
  }
  // The outputs as a number: bit 0 hidden states, then 4 bits per pooling.
  int64_t outputs = wanted_->hidden_states ? 1 : 0;
  for (size_t i = 0; i < wanted_->poolings.size(); ++i) {
    outputs |= (static_cast<int64_t>(wanted_->poolings[i]) + 1) << (1 + 4 * i);
  }
  const GraphKey key = {batch.num_tokens(), batch.num_sequences(), batch.max_seqlen, outputs};
  auto graph = graphs_.find(key);
  if (graph == graphs_.end()) {
    if (++shapes_seen_[key] < 2) return QueueOps();
    std::unique_ptr<k::CudaGraph> recorded;
    try {
      recorded = ctx_->Capture([this] { QueueOps(); });
    } catch (const std::exception&) {
      // Nothing ran while recording: go on op by op, and without graphs from
      // now on (an op that throws would throw again below, with its message).
      graphs_enabled_ = false;
      graphs_.clear();
      return QueueOps();
    }
    graph = graphs_.emplace(key, std::move(recorded)).first;
  }
  ctx_->Launch(*graph->second);
}

StatusOr<Tensor> CudaEncoder::HiddenStates(const PackedBatch& batch, const StopCheck& stop) {
  Outputs outputs;
  outputs.hidden_states = true;
  ASSIGN_OR_RETURN(Result result, Forward(batch, outputs, stop));
  return std::move(result.hidden_states);
}

StatusOr<Encoder::Result> CudaEncoder::Forward(const PackedBatch& batch, const Outputs& outputs,
                                               const StopCheck& stop) {
  if (batch.num_sequences() > kMaxCudaBatchSequences)
    return InvalidArgument("more than " + std::to_string(kMaxCudaBatchSequences) +
                           " sequences in a batch");
  RETURN_IF_ERROR(ValidatePackedBatch(config(), batch, table_rows(EmbeddingTable::kPosition),
                                      table_rows(EmbeddingTable::kTokenType)));
  RETURN_IF_ERROR(CheckOutputs(outputs));
  // The attention here takes no key mask (kernels::KeyBias): requests
  // holding a masked pad token are refused before they are batched
  // (server/core/request_validation.h); any other caller is refused here.
  if (HoldsMaskedPad(config(), batch)) {
    return InvalidArgument("the batch holds the pad token (id " +
                           std::to_string(config().pad_token_id) +
                           "), which this model masks as a key, and the CUDA attention does not");
  }
  // A queued forward runs whole: the only place to stop is before it.
  if (stop && stop()) return Cancelled("the forward was stopped before it was queued");
  const EncoderConfig& c = config();
  const int64_t tokens = batch.num_tokens();
  const int64_t sequences = batch.num_sequences();
  const int64_t hidden = c.hidden_size;
  const size_t out_bytes = static_cast<size_t>(tokens * hidden) * sizeof(float);
  const size_t pooled_bytes =
      static_cast<size_t>(sequences * hidden) * sizeof(float) * outputs.poolings.size();
  // The results' page-locked blocks, copied into once the queued forward is
  // done. Declared before the try: on an error they must outlive the
  // Synchronize that ends any copy into them.
  std::shared_ptr<const Storage> hidden_block, pooled_block;
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    k::CudaContext* ctx = ctx_.get();
    // ids | position ids | token type ids | cu_seqlens | pool_start, in one
    // copy (pool_start always, zeros where the batch has none: the same ops
    // for every batch of a shape, which a CUDA graph replays).
    const size_t ints = static_cast<size_t>(3 * tokens + 2 * sequences + 1);
    auto* in = static_cast<int32_t*>(host_in_.Reserve(ints * sizeof(int32_t)));
    std::memcpy(in, batch.token_ids.data(), tokens * sizeof(int32_t));
    std::memcpy(in + tokens, batch.position_ids.data(), tokens * sizeof(int32_t));
    std::memcpy(in + 2 * tokens, batch.token_type_ids.data(), tokens * sizeof(int32_t));
    std::memcpy(in + 3 * tokens, batch.cu_seqlens.data(), (sequences + 1) * sizeof(int32_t));
    int32_t* pool_start = in + 3 * tokens + sequences + 1;
    if (batch.pool_start.empty()) {
      std::fill(pool_start, pool_start + sequences, 0);
    } else {
      std::memcpy(pool_start, batch.pool_start.data(), sequences * sizeof(int32_t));
    }
    ids_.Reserve(ctx, ints * sizeof(int32_t));
    ctx->CopyToDevice(ids_.get(), in, ints * sizeof(int32_t));
    for (int b = 0; b < kNumBuffers; ++b) {
      const int64_t bytes = BufferRowBytes(static_cast<Buffer>(b));
      if (bytes > 0) buffers_[b].Reserve(ctx, static_cast<size_t>(tokens * bytes));
    }
    if (outputs.hidden_states) out_f32_.Reserve(ctx, out_bytes);
    if (pooled_bytes > 0) pooled_f32_.Reserve(ctx, pooled_bytes);
    const int32_t* device_ints = ids_.as<int32_t>();
    run_ = Run{};
    run_.token_ids = device_ints;
    run_.position_ids = device_ints + tokens;
    run_.token_type_ids = device_ints + 2 * tokens;
    run_.cu_seqlens = device_ints + 3 * tokens;
    run_.pool_start = device_ints + 3 * tokens + sequences + 1;
    run_.tokens = tokens;
    run_.sequences = sequences;
    run_.max_seqlen = batch.max_seqlen;
    for (int b = 0; b < kNumBuffers; ++b) run_.buffers[b] = buffers_[b].get();
    wanted_ = &outputs;
    QueueForward(batch);
    run_ = Run{};
    wanted_ = nullptr;
    if (outputs.hidden_states) {
      hidden_block = outputs_->Take(out_bytes);
      ctx->CopyToHost(const_cast<std::byte*>(hidden_block->data()), out_f32_.get(), out_bytes);
    }
    if (pooled_bytes > 0) {  // every mode's rows in one block and one copy
      pooled_block = outputs_->Take(pooled_bytes);
      ctx->CopyToHost(const_cast<std::byte*>(pooled_block->data()), pooled_f32_.get(),
                      pooled_bytes);
    }
    ctx->Synchronize();
  } catch (const std::exception& e) {
    run_ = Run{};
    wanted_ = nullptr;
    // Let queued copies from host_in_ and into the blocks finish before the
    // next batch refills host_in_ and the blocks go back to the pool.
    try {
      ctx_->Synchronize();
    } catch (const std::exception&) {
    }
    return Internal(std::string("cuda encoder forward failed: ") + e.what());
  }
  Result result;
  if (hidden_block) {
    ASSIGN_OR_RETURN(result.hidden_states, Tensor::Contiguous(std::move(hidden_block),
                                                              DType::kFloat32, {tokens, hidden}));
  }
  for (size_t i = 0; i < outputs.poolings.size(); ++i) {
    ASSIGN_OR_RETURN(result.pooled[outputs.poolings[i]],
                     Tensor::View(pooled_block, DType::kFloat32, {sequences, hidden}, {hidden, 1},
                                  static_cast<int64_t>(i) * sequences * hidden));
  }
  return result;
}

}  // namespace

StatusOr<std::unique_ptr<Encoder>> CreateCudaEncoder(const EncoderConfig& config, TensorMap weights,
                                                     const EncoderOptions& options) {
  std::string reason;
  if (k::CudaDeviceCount(&reason) == 0) {
    return FailedPrecondition("device cuda: no CUDA device visible (" + reason + ")");
  }
  RETURN_IF_ERROR(CheckDeviceDType(Device::kCuda, options.dtype));
  RETURN_IF_ERROR(config.Validate());
  if (config.relative_attention_buckets > 0) {
    return InvalidArgument(std::string("device cuda: the relative attention bias of ") +
                           ModelFamilyName(config.family) +
                           " models runs only on the CPU (device: cpu)");
  }
  if (config.attention_span > 0) {
    return InvalidArgument(std::string("device cuda: the disentangled attention of ") +
                           ModelFamilyName(config.family) +
                           " models runs only on the CPU (device: cpu)");
  }
  if (!k::CudaAttentionSupports(config.head_dim())) {
    return InvalidArgument(
        "device cuda: head size " + std::to_string(config.head_dim()) +
        " is not supported by the attention kernel (a multiple of 16, at most 128)");
  }
  if (config.hidden_size > k::kCudaMaxNormHidden || config.hidden_size % 8 != 0 ||
      config.embedding_width() > k::kCudaMaxNormHidden || config.embedding_width() % 8 != 0 ||
      config.intermediate_size % 8 != 0) {
    return InvalidArgument("device cuda: hidden_size and embedding_size (at most " +
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
