// The CUDA encoder against the CPU encoder (fp32) on random weights and a
// ragged batch: per-sequence cosine of the hidden states >= 0.999 in fp16 and
// bf16, pooled and classified outputs close. Also the load-time errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "engine/runtime/encoder.h"
#include "engine/runtime/packed_batch.h"
#include "engine/runtime/random_weights.h"

#if ENCODERD_WITH_CUDA
#include "tests/unit/cuda_test_util.h"
#endif

namespace encoderd {
namespace {

EncoderConfig SmallConfig(bool norm_first, int64_t heads) {
  EncoderConfig c = BertBaseConfig();
  c.vocab_size = 1000;
  c.hidden_size = 256;
  c.num_heads = heads;
  c.num_layers = 2;
  c.intermediate_size = 1024;
  c.max_positions = 600;
  c.max_tokens = 512;
  c.norm_first = norm_first;
  c.final_norm = norm_first;
  c.activation = norm_first ? Activation::kRelu : Activation::kGelu;
  c.num_labels = 3;
  c.labels = {"a", "b", "c"};
  return c;
}

EncoderOptions CudaOptions(DType dtype) {
  EncoderOptions options;
  options.device = Device::kCuda;
  options.dtype = dtype;
  return options;
}

TEST(CudaEncoderTest, LoadFailsClearlyWithoutGpuOrBackend) {
  const EncoderConfig c = SmallConfig(false, 4);
  auto encoder = Encoder::Create(c, RandomEncoderWeights(c, 1), CudaOptions(DType::kFloat16));
#if ENCODERD_WITH_CUDA
  std::string reason;
  if (kernels::CudaDeviceCount(&reason) > 0) {
    GTEST_SKIP() << "a CUDA device is visible: the no-GPU error path cannot be exercised";
  }
  ASSERT_FALSE(encoder.ok());
  EXPECT_EQ(encoder.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(encoder.status().message().find("no CUDA device visible"), std::string::npos)
      << encoder.status().ToString();
#else
  ASSERT_FALSE(encoder.ok());
  EXPECT_EQ(encoder.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(encoder.status().message().find("no CUDA backend"), std::string::npos);
#endif
}

#if ENCODERD_WITH_CUDA

PackedBatch RaggedBatch(const EncoderConfig& c) {
  PackedBatchBuilder builder(c.position_rule, static_cast<int32_t>(c.pad_token_id));
  uint32_t state = 12345;
  uint64_t request = 0;
  for (int len : {1, 2, 37, 512, 9}) {
    std::vector<int32_t> ids(len), types(len);
    for (int i = 0; i < len; ++i) {
      state = state * 1664525u + 1013904223u;
      ids[i] = static_cast<int32_t>(state % c.vocab_size);
      types[i] = static_cast<int32_t>((state >> 16) % 2);
    }
    EXPECT_TRUE(builder.Add(ids, types, {request++, 0}).ok());
  }
  return builder.Build();
}

double Cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

struct EncoderCase {
  bool norm_first;
  int64_t heads;  // 4 -> head_dim 64, 2 -> head_dim 128
  DType dtype;
};

class CudaEncoderParityTest : public testing::TestWithParam<EncoderCase> {};

TEST_P(CudaEncoderParityTest, MatchesCpuFp32PerSequence) {
  ENCODERD_SKIP_WITHOUT_GPU();
  const EncoderCase p = GetParam();
  const EncoderConfig c = SmallConfig(p.norm_first, p.heads);
  EncoderOptions cpu_options;
  cpu_options.num_threads = 2;
  auto cpu = Encoder::Create(c, RandomEncoderWeights(c, 7), cpu_options);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  auto gpu = Encoder::Create(c, RandomEncoderWeights(c, 7), CudaOptions(p.dtype));
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();

  const PackedBatch batch = RaggedBatch(c);
  auto want = (*cpu)->Forward(batch);
  auto got = (*gpu)->Forward(batch);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
  const int64_t h = c.hidden_size;
  for (int64_t s = 0; s < batch.num_sequences(); ++s) {
    const int64_t offset = batch.cu_seqlens[s] * h, n = batch.length(s) * h;
    EXPECT_GE(Cosine(got->data<float>() + offset, want->data<float>() + offset, n), 0.999)
        << "sequence " << s << " of length " << batch.length(s);
  }
  auto pooled_want = (*cpu)->Pool(*want, batch, Pooling::kMean, true);
  auto pooled_got = (*gpu)->Pool(*got, batch, Pooling::kMean, true);
  ASSERT_TRUE(pooled_want.ok() && pooled_got.ok());
  for (int64_t s = 0; s < batch.num_sequences(); ++s) {
    EXPECT_GE(Cosine(pooled_got->data<float>() + s * h, pooled_want->data<float>() + s * h, h),
              0.999);
  }
  auto probs_want = (*cpu)->Classify(*want, batch);
  auto probs_got = (*gpu)->Classify(*got, batch);
  ASSERT_TRUE(probs_want.ok() && probs_got.ok());
  for (int64_t i = 0; i < probs_want->numel(); ++i) {
    EXPECT_NEAR(probs_got->data<float>()[i], probs_want->data<float>()[i], 2e-2) << i;
  }
}

TEST(CudaEncoderTest, RejectsFloat32AndBadBatches) {
  ENCODERD_SKIP_WITHOUT_GPU();
  const EncoderConfig c = SmallConfig(false, 4);
  auto fp32 = Encoder::Create(c, RandomEncoderWeights(c, 1), CudaOptions(DType::kFloat32));
  ASSERT_FALSE(fp32.ok());
  EXPECT_EQ(fp32.status().code(), StatusCode::kInvalidArgument);
  auto encoder = Encoder::Create(c, RandomEncoderWeights(c, 1), CudaOptions(DType::kFloat16));
  ASSERT_TRUE(encoder.ok()) << encoder.status().ToString();
  PackedBatch batch = RaggedBatch(c);
  batch.token_ids[3] = static_cast<int32_t>(c.vocab_size);
  auto out = (*encoder)->Forward(batch);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
}

// A forward's output lives in a page-locked block that comes back for the
// next forward once the tensor is dropped, small batches' too (a block of a
// few KiB was never reused: every forward allocated page-locked memory).
TEST(CudaEncoderTest, ReusesTheOutputBlockOfADroppedResult) {
  ENCODERD_SKIP_WITHOUT_GPU();
  const EncoderConfig c = SmallConfig(false, 4);
  auto encoder = Encoder::Create(c, RandomEncoderWeights(c, 3), CudaOptions(DType::kFloat16));
  ASSERT_TRUE(encoder.ok()) << encoder.status().ToString();
  PackedBatchBuilder builder(c.position_rule, static_cast<int32_t>(c.pad_token_id));
  ASSERT_TRUE(builder.Add({5, 6, 7}, {}, {0, 0}).ok());
  const PackedBatch batch = builder.Build();
  const void* first = nullptr;
  std::vector<float> first_values;
  {
    auto out = (*encoder)->Forward(batch);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    first = out->raw_data();
    first_values.assign(out->data<float>(), out->data<float>() + out->numel());
  }
  auto again = (*encoder)->Forward(batch);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->raw_data(), first);
  // While `again` is held, the next result gets another block.
  auto third = (*encoder)->Forward(batch);
  ASSERT_TRUE(third.ok());
  EXPECT_NE(third->raw_data(), again->raw_data());
  for (size_t i = 0; i < first_values.size(); ++i) {
    ASSERT_EQ(again->data<float>()[i], first_values[i]) << i;
    ASSERT_EQ(third->data<float>()[i], first_values[i]) << i;
  }
}

// With ENCODERD_CUDA_GRAPHS=1, small batches run as recorded graphs from the
// second time their shape comes: the answers must be those of the op-by-op
// forward, for new ids in a recorded shape too, and after a larger batch
// moved the buffers.
TEST(CudaEncoderTest, RecordedGraphsAnswerAsOpByOp) {
  ENCODERD_SKIP_WITHOUT_GPU();
  const EncoderConfig c = SmallConfig(false, 4);
  const EncoderOptions options = CudaOptions(DType::kFloat16);
  setenv("ENCODERD_CUDA_GRAPHS", "1", 1);
  auto graphs = Encoder::Create(c, RandomEncoderWeights(c, 5), options);
  unsetenv("ENCODERD_CUDA_GRAPHS");
  ASSERT_TRUE(graphs.ok()) << graphs.status().ToString();
  auto direct = Encoder::Create(c, RandomEncoderWeights(c, 5), options);
  ASSERT_TRUE(direct.ok()) << direct.status().ToString();
  auto make = [&](int32_t first_id, std::vector<int> lengths) {
    PackedBatchBuilder builder(c.position_rule, static_cast<int32_t>(c.pad_token_id));
    int32_t id = first_id;
    for (int len : lengths) {
      std::vector<int32_t> ids(len);
      for (auto& v : ids) v = (id += 37) % static_cast<int32_t>(c.vocab_size);
      EXPECT_TRUE(builder.Add(ids, {}, {0, 0}).ok());
    }
    return builder.Build();
  };
  const PackedBatch x = make(1, {3, 7}), y = make(500, {3, 7}), big = make(9, {512, 512, 40});
  for (const PackedBatch* batch : {&x, &x, &y, &x, &big, &y, &y, &x}) {
    auto got = (*graphs)->Forward(*batch);
    auto want = (*direct)->Forward(*batch);
    ASSERT_TRUE(got.ok() && want.ok()) << got.status().ToString();
    ASSERT_EQ(got->numel(), want->numel());
    for (int64_t i = 0; i < want->numel(); ++i) {
      ASSERT_NEAR(got->data<float>()[i], want->data<float>()[i], 1e-5) << i;
    }
  }
  // The same shape asking for other outputs is another graph: pooled rows
  // only, two modes, in both orders, and with the hidden states, after the
  // hidden-states graph of x; a batch of more sequences moves the pooled
  // rows' buffer in between (every graph must go). y_started is y's shape
  // with pool_start (include_prompt = false): its graph reads the starts
  // copied in with the ids.
  const PackedBatch wide = make(3, {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2});
  const PackedBatch y_started = [&y] {
    PackedBatch started = y;
    started.pool_start = {2, 5};
    return started;
  }();
  Encoder::Outputs mean_cls, cls_mean, both;
  mean_cls.poolings = {Pooling::kMean, Pooling::kCls};
  cls_mean.poolings = {Pooling::kCls, Pooling::kMean};
  both.poolings = {Pooling::kMean, Pooling::kCls};
  both.hidden_states = true;
  for (const Encoder::Outputs* outputs :
       {&mean_cls, &mean_cls, &cls_mean, &both, &mean_cls, &cls_mean, &both, &both}) {
    for (const PackedBatch* batch : {&x, &y, outputs == &both ? &x : &wide, &y_started, &y}) {
      auto got = (*graphs)->Forward(*batch, *outputs);
      auto want = (*direct)->Forward(*batch, *outputs);
      ASSERT_TRUE(got.ok() && want.ok()) << got.status().ToString();
      ASSERT_EQ(got->hidden_states.defined(), outputs->hidden_states);
      if (outputs->hidden_states) {
        for (int64_t i = 0; i < want->hidden_states.numel(); ++i) {
          ASSERT_NEAR(got->hidden_states.data<float>()[i], want->hidden_states.data<float>()[i],
                      1e-5)
              << i;
        }
      }
      for (Pooling pooling : {Pooling::kMean, Pooling::kCls}) {
        const Tensor& g = got->pooled.at(pooling);
        const Tensor& w = want->pooled.at(pooling);
        ASSERT_EQ(g.numel(), w.numel());
        for (int64_t i = 0; i < w.numel(); ++i) {
          ASSERT_NEAR(g.data<float>()[i], w.data<float>()[i], 1e-5) << i;
        }
      }
    }
  }
}

// Pooled on the device, every mode, with and without the hidden states: the
// rows the host pools from the same hidden states (fp32 sums in another
// order), and the hidden states those of Forward(batch).
TEST(CudaEncoderTest, PoolsOnTheDeviceAsTheHostDoes) {
  ENCODERD_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    const EncoderConfig c = SmallConfig(false, 4);
    auto encoder = Encoder::Create(c, RandomEncoderWeights(c, 9), CudaOptions(dtype));
    ASSERT_TRUE(encoder.ok()) << encoder.status().ToString();
    PackedBatch batch = RaggedBatch(c);
    auto hidden = (*encoder)->Forward(batch);
    ASSERT_TRUE(hidden.ok()) << hidden.status().ToString();
    Encoder::Outputs all;
    all.poolings.assign(std::begin(kAllPoolings), std::end(kAllPoolings));
    // Every token, then from each sequence's pool_start (include_prompt =
    // false), some past the sequence's last token.
    for (const std::vector<int32_t>& starts :
         {std::vector<int32_t>{}, std::vector<int32_t>{3, 1, 5, 100, 20}}) {
      batch.pool_start = starts;
      for (bool with_hidden : {false, true}) {
        all.hidden_states = with_hidden;
        auto got = (*encoder)->Forward(batch, all);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        ASSERT_EQ(got->hidden_states.defined(), with_hidden);
        if (with_hidden) {
          ASSERT_EQ(got->hidden_states.numel(), hidden->numel());
          EXPECT_EQ(std::memcmp(got->hidden_states.data<float>(), hidden->data<float>(),
                                hidden->nbytes()),
                    0);
        }
        for (Pooling pooling : kAllPoolings) {
          auto want = (*encoder)->Pool(*hidden, batch, pooling, /*normalize=*/false);
          ASSERT_TRUE(want.ok());
          const Tensor& rows = got->pooled.at(pooling);
          ASSERT_EQ(rows.shape(), want->shape());
          for (int64_t i = 0; i < want->numel(); ++i) {
            const float w = want->data<float>()[i];
            ASSERT_NEAR(rows.data<float>()[i], w, 1e-5f + 1e-5f * std::fabs(w))
                << "pooling " << static_cast<int>(pooling) << " element " << i
                << (starts.empty() ? "" : " from pool_start");
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaEncoderParityTest,
                         testing::Values(EncoderCase{false, 4, DType::kFloat16},
                                         EncoderCase{false, 4, DType::kBFloat16},
                                         EncoderCase{true, 2, DType::kFloat16},
                                         EncoderCase{true, 2, DType::kBFloat16}),
                         [](const testing::TestParamInfo<EncoderCase>& info) {
                           return std::string(info.param.norm_first ? "PreNorm" : "PostNorm") +
                                  "Dim" + std::to_string(256 / info.param.heads) +
                                  (info.param.dtype == DType::kBFloat16 ? "Bf16" : "Fp16");
                         });

#endif  // ENCODERD_WITH_CUDA

}  // namespace
}  // namespace encoderd
