// Every op of kernels/ on CUDA against the same op on the CPU, through the
// one device-neutral entry point, on random ragged shapes (sequence lengths
// 1, 2, odd and 512), for fp16 and bf16. Skipped without a GPU.
#include <gtest/gtest.h>

#if ENCODERD_WITH_CUDA

#include <cmath>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu_context.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/embeddings.h"
#include "kernels/layer_norm.h"
#include "kernels/linear.h"
#include "kernels/pooling.h"
#include "tests/unit/cuda_test_util.h"

namespace encoderd {
namespace {

namespace k = kernels;
using cuda_test::Download;
using cuda_test::Random;
using cuda_test::Rounded;
using cuda_test::Tolerance;
using cuda_test::Upload;
using cuda_test::UploadRaw;

const std::vector<int32_t> kRaggedLengths = {1, 2, 37, 512, 5, 129};

std::vector<int32_t> CuSeqlens(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu = {0};
  for (int32_t l : lengths) cu.push_back(cu.back() + l);
  return cu;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, DType dtype,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= Tolerance(dtype, want[i]))) {
      if (++bad <= 5) {
        ADD_FAILURE() << what << " " << cuda_test::Name(dtype) << " element " << i << ": got "
                      << got[i] << ", want " << want[i];
      }
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

class CudaOpsTest : public testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    ENCODERD_SKIP_WITHOUT_GPU();
    ctx_ = k::CudaContext::Create(0);
  }
  DType dtype() const { return GetParam(); }

  k::CpuContext cpu_{2};
  std::unique_ptr<k::CudaContext> ctx_;
};

TEST_P(CudaOpsTest, GemmEpiloguesMatchCpuLinear) {
  const int64_t in = 64, out = 96;
  const auto w = Rounded(*ctx_, dtype(), Random(out * in, -0.2f, 0.2f, 1));
  const auto b = Rounded(*ctx_, dtype(), Random(out, -0.5f, 0.5f, 2));
  auto packed = k::PackedWeight::Pack(cpu_, w.data(), b.data(), out, in, DType::kFloat32);
  auto dpacked = k::PackedWeight::Pack(*ctx_, w.data(), b.data(), out, in, dtype());
  EXPECT_EQ(dpacked->device(), Device::kCuda);
  EXPECT_EQ(dpacked->bytes(), static_cast<size_t>((out * in + out) * 2));
  for (int64_t rows : {1, 2, 37, 512}) {
    const auto x = Rounded(*ctx_, dtype(), Random(rows * in, -1.0f, 1.0f, 3 + rows));
    const auto r = Rounded(*ctx_, dtype(), Random(rows * out, -1.0f, 1.0f, 4 + rows));
    auto dx = Upload(*ctx_, dtype(), x);
    for (Epilogue epilogue :
         {Epilogue::kNone, Epilogue::kGelu, Epilogue::kRelu, Epilogue::kResidual}) {
      SCOPED_TRACE(testing::Message() << "rows " << rows << " epilogue " << int(epilogue));
      std::vector<float> want(rows * out);
      k::Linear(cpu_, DType::kFloat32, x.data(), rows, *packed, epilogue, r.data(), want.data());
      // The residual case runs in place, as the encoder does.
      auto dy = Upload(*ctx_, dtype(), r);
      k::Linear(*ctx_, dtype(), dx.get(), rows, *dpacked, epilogue, dy.get(), dy.get());
      ExpectClose(Download(*ctx_, dtype(), dy.get(), rows * out), want, dtype(), "gemm");
    }
  }
}

// The feed-forward pair on CUDA is its two Linears: the CPU's, with the
// hidden activations rounded to the device's dtype in between, in place (y
// is x) as the encoder runs it.
TEST_P(CudaOpsTest, FeedForwardMatchesCpuLinears) {
  const int64_t h = 64, f = 96;
  const auto w_in = Rounded(*ctx_, dtype(), Random(f * h, -0.2f, 0.2f, 11));
  const auto b_in = Rounded(*ctx_, dtype(), Random(f, -0.5f, 0.5f, 12));
  const auto w_out = Rounded(*ctx_, dtype(), Random(h * f, -0.1f, 0.1f, 13));
  const auto b_out = Rounded(*ctx_, dtype(), Random(h, -0.5f, 0.5f, 14));
  auto in = k::PackedWeight::Pack(cpu_, w_in.data(), b_in.data(), f, h, DType::kFloat32);
  auto out = k::PackedWeight::Pack(cpu_, w_out.data(), b_out.data(), h, f, DType::kFloat32);
  auto din = k::PackedWeight::Pack(*ctx_, w_in.data(), b_in.data(), f, h, dtype());
  auto dout = k::PackedWeight::Pack(*ctx_, w_out.data(), b_out.data(), h, f, dtype());
  for (int64_t rows : {1, 37, 512}) {
    SCOPED_TRACE(testing::Message() << "rows " << rows);
    const auto x = Rounded(*ctx_, dtype(), Random(rows * h, -1.0f, 1.0f, 15 + rows));
    std::vector<float> hidden(rows * f), want = x;
    k::Linear(cpu_, DType::kFloat32, x.data(), rows, *in, Epilogue::kGelu, nullptr, hidden.data());
    hidden = Rounded(*ctx_, dtype(), hidden);
    k::Linear(cpu_, DType::kFloat32, hidden.data(), rows, *out, Epilogue::kResidual, want.data(),
              want.data());
    auto dx = Upload(*ctx_, dtype(), x);
    k::DeviceBuffer dhidden(ctx_.get(), rows * f * 2);
    k::FeedForward(*ctx_, dtype(), dx.get(), rows, *din, Epilogue::kGelu, *dout, dhidden.get(),
                   dx.get());
    ExpectClose(Download(*ctx_, dtype(), dx.get(), rows * h), want, dtype(), "ffn");
  }
}

// GELU is the exact erf form on both devices. Where x <= -3 the tanh
// approximation (cuBLASLt's GELU epilogue) is off by more than 10%, far
// beyond the rounding of either 16-bit type.
TEST_P(CudaOpsTest, GeluIsTheErfFormNotTheTanhApproximation) {
  const int64_t n = 8, rows = 16;
  std::vector<float> identity(n * n, 0.0f);
  for (int64_t i = 0; i < n; ++i) identity[i * n + i] = 1.0f;
  const auto x = Rounded(*ctx_, dtype(), Random(rows * n, -4.5f, -3.0f, 5));
  auto dx = Upload(*ctx_, dtype(), x);
  auto dw = k::PackedWeight::Pack(*ctx_, identity.data(), nullptr, n, n, dtype());
  k::DeviceBuffer dy(ctx_.get(), rows * n * 2);
  k::Linear(*ctx_, dtype(), dx.get(), rows, *dw, Epilogue::kGelu, nullptr, dy.get());
  const auto got = Download(*ctx_, dtype(), dy.get(), rows * n);
  for (size_t i = 0; i < got.size(); ++i) {
    const double v = x[i];
    const double want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    EXPECT_NEAR(got[i], want, 0.02 * std::abs(want)) << "x = " << v;
  }
}

// Every supported head size, sequences shorter than a tile, ending inside
// one and spanning eight; with amplitude 3 the scores span hundreds, so the
// running max moves between key tiles (the online softmax's rescaling). The
// output starts as NaN: every row must be written. Both warp layouts (one
// and two m-tiles per warp; the second for head sizes up to 64).
// Sets an environment variable for a scope, then restores what it was, on
// every way out of the scope (a failed ASSERT included).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

TEST_P(CudaOpsTest, AttentionMatchesCpuOnRaggedBatch) {
  const auto cu = CuSeqlens(kRaggedLengths);
  const int64_t batch = kRaggedLengths.size(), tokens = cu.back();
  auto dcu = UploadRaw(*ctx_, cu.data(), cu.size() * sizeof(int32_t));
  for (const char* mtiles : {"2", "1"}) {
    ScopedEnv env("ENCODERD_CUDA_ATTENTION_MTILES", mtiles);
    ASSERT_EQ(k::CudaAttentionMTiles(), std::atoi(mtiles));
    for (int64_t head_dim : {16, 32, 48, 64, 80, 96, 112, 128}) {
      for (float amplitude : {1.0f, 3.0f}) {
        const int64_t heads = 3, width = heads * head_dim;
        SCOPED_TRACE(testing::Message() << "m-tiles " << mtiles << " head_dim " << head_dim
                                        << " amplitude " << amplitude);
        const auto qkv =
            Rounded(*ctx_, dtype(), Random(tokens * 3 * width, -amplitude, amplitude, head_dim));
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        std::vector<float> want(tokens * width);
        k::Attention(cpu_, DType::kFloat32, DType::kFloat32, qkv.data(), cu.data(), batch, tokens,
                     512, heads, head_dim, scale, want.data());
        auto dqkv = Upload(*ctx_, dtype(), qkv);
        auto dout = Upload(*ctx_, dtype(), std::vector<float>(tokens * width, NAN));
        k::Attention(*ctx_, dtype(), dtype(), dqkv.get(), dcu.as<int32_t>(), batch, tokens, 512,
                     heads, head_dim, scale, dout.get());
        ExpectClose(Download(*ctx_, dtype(), dout.get(), tokens * width), want, dtype(),
                    "attention");
      }
    }
  }
  EXPECT_FALSE(k::CudaAttentionSupports(8));
  EXPECT_FALSE(k::CudaAttentionSupports(24));
  EXPECT_FALSE(k::CudaAttentionSupports(256));
}

TEST_P(CudaOpsTest, AddLayerNormMatchesCpuInPlace) {
  for (int64_t hidden : {768, 101, 64, 1000, 1024, 2048}) {
    const int64_t rows = 517;
    const auto x = Rounded(*ctx_, dtype(), Random(rows * hidden, -2.0f, 3.0f, 7));
    const auto r = Rounded(*ctx_, dtype(), Random(rows * hidden, -1.0f, 1.0f, 8));
    const auto g = Random(hidden, 0.5f, 1.5f, 9), b = Random(hidden, -0.5f, 0.5f, 10);
    for (bool with_residual : {false, true}) {
      std::vector<float> want(rows * hidden);
      k::AddLayerNorm(cpu_, DType::kFloat32, x.data(), with_residual ? r.data() : nullptr, g.data(),
                      b.data(), rows, hidden, 1e-5f, want.data());
      auto dx = Upload(*ctx_, dtype(), x);
      auto dr = Upload(*ctx_, dtype(), r);
      auto dg = UploadRaw(*ctx_, g.data(), hidden * sizeof(float));
      auto db = UploadRaw(*ctx_, b.data(), hidden * sizeof(float));
      k::AddLayerNorm(*ctx_, dtype(), dx.get(), with_residual ? dr.get() : nullptr, dg.as<float>(),
                      db.as<float>(), rows, hidden, 1e-5f, dx.get());
      ExpectClose(Download(*ctx_, dtype(), dx.get(), rows * hidden), want, dtype(), "layer norm");
    }
  }
}

TEST_P(CudaOpsTest, EmbeddingLayerNormMatchesCpu) {
  const int64_t hidden = 96, vocab = 300, positions = 520, types = 2;
  const auto cu = CuSeqlens(kRaggedLengths);
  const int64_t tokens = cu.back();
  const auto word = Rounded(*ctx_, dtype(), Random(vocab * hidden, -1.0f, 1.0f, 11));
  const auto pos = Rounded(*ctx_, dtype(), Random(positions * hidden, -1.0f, 1.0f, 12));
  const auto type = Rounded(*ctx_, dtype(), Random(types * hidden, -1.0f, 1.0f, 13));
  const auto g = Random(hidden, 0.5f, 1.5f, 14), b = Random(hidden, -0.5f, 0.5f, 15);
  std::vector<int32_t> ids(tokens), pids(tokens), tids(tokens);
  std::mt19937 rng(16);
  for (int64_t t = 0; t < tokens; ++t) {
    ids[t] = rng() % vocab;
    tids[t] = rng() % types;
  }
  for (size_t b = 0; b < kRaggedLengths.size(); ++b) {  // RoBERTa's: 2, 3, ... per sequence
    for (int32_t t = cu[b]; t < cu[b + 1]; ++t) pids[t] = 2 + (t - cu[b]);
  }
  k::EmbeddingTables tables{word.data(), vocab, pos.data(), positions, type.data(), types, hidden};
  std::vector<float> want(tokens * hidden);
  k::EmbeddingLayerNorm(cpu_, DType::kFloat32, tables, ids.data(), pids.data(), tids.data(), tokens,
                        g.data(), b.data(), 1e-5f, want.data());
  auto dword = Upload(*ctx_, dtype(), word), dpos = Upload(*ctx_, dtype(), pos),
       dtype_table = Upload(*ctx_, dtype(), type);
  auto dids = UploadRaw(*ctx_, ids.data(), tokens * 4),
       dpids = UploadRaw(*ctx_, pids.data(), tokens * 4),
       dtids = UploadRaw(*ctx_, tids.data(), tokens * 4);
  auto dg = UploadRaw(*ctx_, g.data(), hidden * 4), db = UploadRaw(*ctx_, b.data(), hidden * 4);
  k::DeviceBuffer dout(ctx_.get(), tokens * hidden * 2);
  k::EmbeddingTables dtables{dword.get(),       vocab, dpos.get(), positions,
                             dtype_table.get(), types, hidden};
  k::EmbeddingLayerNorm(*ctx_, dtype(), dtables, dids.as<int32_t>(), dpids.as<int32_t>(),
                        dtids.as<int32_t>(), tokens, dg.as<float>(), db.as<float>(), 1e-5f,
                        dout.get());
  ExpectClose(Download(*ctx_, dtype(), dout.get(), tokens * hidden), want, dtype(), "embeddings");
}

TEST_P(CudaOpsTest, PoolingMatchesCpu) {
  for (int64_t hidden : {80, 768, 7}) {
    SCOPED_TRACE(testing::Message() << "hidden " << hidden);
    const auto cu = CuSeqlens(kRaggedLengths);
    const int64_t batch = kRaggedLengths.size(), tokens = cu.back();
    const auto x = Rounded(*ctx_, dtype(), Random(tokens * hidden, -1.0f, 1.0f, 17));
    auto dx = Upload(*ctx_, dtype(), x);
    auto dcu = UploadRaw(*ctx_, cu.data(), cu.size() * sizeof(int32_t));
    // pool_start: none, and one per sequence, some past its last token.
    std::vector<int32_t> starts(batch);
    for (int64_t b = 0; b < batch; ++b) starts[b] = static_cast<int32_t>((b * 7) % 40);
    auto dstarts = UploadRaw(*ctx_, starts.data(), starts.size() * sizeof(int32_t));
    for (const bool from_start : {false, true}) {
      for (Pooling mode : kAllPoolings) {
        std::vector<float> want(batch * hidden), got(batch * hidden);
        k::Pool(cpu_, DType::kFloat32, x.data(), cu.data(), from_start ? starts.data() : nullptr,
                batch, hidden, mode, want.data());
        k::DeviceBuffer dout(ctx_.get(), got.size() * sizeof(float));
        k::Pool(*ctx_, dtype(), dx.get(), dcu.as<int32_t>(),
                from_start ? dstarts.as<int32_t>() : nullptr, batch, hidden, mode,
                dout.as<float>());
        ctx_->CopyToHost(got.data(), dout.get(), got.size() * sizeof(float));
        ctx_->Synchronize();
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-5f * std::max(1.0f, std::abs(want[i])))
              << static_cast<int>(mode) << " " << i << (from_start ? " from pool_start" : "");
      }
    }
  }
}

TEST_P(CudaOpsTest, OpsRefuseAnotherDevicesWeightsAndDtypes) {
  const std::vector<float> w(8 * 4, 0.5f);
  auto cpu_weight = k::PackedWeight::Pack(cpu_, w.data(), nullptr, 8, 4, DType::kFloat32);
  auto gpu_weight = k::PackedWeight::Pack(*ctx_, w.data(), nullptr, 8, 4, dtype());
  k::DeviceBuffer dx(ctx_.get(), 4 * 2), dy(ctx_.get(), 8 * 2);
  EXPECT_THROW(
      k::Linear(*ctx_, dtype(), dx.get(), 1, *cpu_weight, Epilogue::kNone, nullptr, dy.get()),
      std::invalid_argument);
  std::vector<float> x(4), y(8);
  EXPECT_THROW(k::Linear(cpu_, DType::kFloat32, x.data(), 1, *gpu_weight, Epilogue::kNone, nullptr,
                         y.data()),
               std::invalid_argument);
  EXPECT_THROW(k::Linear(*ctx_, DType::kFloat32, dx.get(), 1, *gpu_weight, Epilogue::kNone, nullptr,
                         dy.get()),
               std::invalid_argument);  // fp32 activations do not run on CUDA
  EXPECT_THROW(k::PackedWeight::Pack(*ctx_, w.data(), nullptr, 8, 4, DType::kInt8),
               std::invalid_argument);
}

TEST_P(CudaOpsTest, AllocatorReusesFreedBlocks) {
  void* a = ctx_->Allocate(1000);
  ctx_->Free(a);
  void* b = ctx_->Allocate(1024);  // same size class
  EXPECT_EQ(a, b);
  void* c = ctx_->Allocate(1024);
  EXPECT_NE(b, c);
  ctx_->Free(b);
  ctx_->Free(c);
}

// The row kernels take a null gamma for "no LayerNorm" (the embeddings'
// case): AddLayerNorm without gamma stored x + residual unnormalised on
// CUDA, where the CPU normalises (gamma 1). It is refused there instead.
TEST_P(CudaOpsTest, AddLayerNormWithoutGammaIsRefused) {
  k::DeviceBuffer x(ctx_.get(), 4 * 64 * DTypeSize(dtype()));
  EXPECT_THROW(
      k::AddLayerNorm(*ctx_, dtype(), x.get(), nullptr, nullptr, nullptr, 4, 64, 1e-5f, x.get()),
      std::invalid_argument);
}

// Uploading a weight leaves its fp32 staging block in the cache, where no
// later allocation of the encoder reuses it (XLM-R-large's vocabulary: ~1 GB
// per replica); the encoder releases the cache once loaded.
TEST_P(CudaOpsTest, ReleaseCachedReturnsTheUploadsStagingBlocks) {
  const std::vector<float> host = Random(1 << 20, -1.f, 1.f, 31);
  k::DeviceBuffer out(ctx_.get(), host.size() * DTypeSize(dtype()));
  k::CudaUploadAs(*ctx_, dtype(), host.data(), static_cast<int64_t>(host.size()), out.get());
  EXPECT_GE(ctx_->cached_bytes(), host.size() * sizeof(float));
  ctx_->ReleaseCached();
  EXPECT_EQ(ctx_->cached_bytes(), 0u);
  void* again = ctx_->Allocate(host.size() * sizeof(float));  // from CUDA again
  EXPECT_NE(again, nullptr);
  ctx_->Free(again);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaOpsTest, testing::Values(DType::kFloat16, DType::kBFloat16),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(cuda_test::Name(info.param));
                         });

}  // namespace
}  // namespace encoderd

#else  // !ENCODERD_WITH_CUDA

TEST(CudaOpsTest, BuiltWithoutCuda) {
  GTEST_SKIP() << "this build has no CUDA backend (nvcc not found at build time)";
}

#endif  // ENCODERD_WITH_CUDA
