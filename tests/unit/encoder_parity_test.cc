// The native encoders against PyTorch's forward (tests/fixtures/fx_models.py)
// on every fixture model, over a ragged batch: on the CPU fp32 within 1e-4 of
// the activation scale, bf16 with cosine similarity >= 0.999 per sequence,
// int8 (dynamic quantization of the encoder's Linear layers) >= kInt8MinCosine;
// on a GPU (skipped without one) fp16 and bf16 >= 0.999, the reached cosine
// and max error printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>

#include "engine/runtime/encoder.h"
#include "engine/runtime/host_head.h"
#include "engine/runtime/packed_batch.h"
#include "kernels/cpu_features.h"
#include "server/config/model_card_yaml.h"
#include "tests/unit/model_fixtures.h"
#if ENCODERD_WITH_CUDA
#include "kernels/cuda/cuda_context.h"
#endif

namespace encoderd {
namespace {

// int8 encoders (per-channel weights, per-row activations) against PyTorch
// fp32, per sequence: the least cosine similarity accepted.
constexpr double kInt8MinCosine = 0.99;

using testing::FixtureModelNames;
using testing::ModelsDir;
using testing::ReadJsonFile;
using testing::ReadTensorDump;

struct Reference {
  std::vector<std::vector<int32_t>> sequences;
  std::vector<std::vector<int32_t>> token_types;
  TensorMap outputs;
};

Reference LoadReference(const std::string& model) {
  const std::string dir = ModelsDir() + "/" + model + ".reference";
  const auto inputs = ReadJsonFile(dir + "/inputs.json");
  Reference ref;
  ref.sequences = inputs["sequences"].get<std::vector<std::vector<int32_t>>>();
  if (inputs.contains("token_type_ids")) {
    ref.token_types = inputs["token_type_ids"].get<std::vector<std::vector<int32_t>>>();
  }
  ref.outputs = ReadTensorDump(dir + "/outputs");
  return ref;
}

PackedBatch Pack(const EncoderConfig& config, const Reference& ref,
                 const std::vector<size_t>& which) {
  PackedBatchBuilder builder(config.position_rule, static_cast<int32_t>(config.pad_token_id));
  for (size_t i : which) {
    const auto& types = ref.token_types.empty() ? std::vector<int32_t>() : ref.token_types[i];
    EXPECT_TRUE(builder.Add(ref.sequences[i], types, {0, static_cast<int32_t>(i)}).ok());
  }
  return builder.Build();
}

double MaxAbs(const float* a, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(a[i])));
  return m;
}

double MaxAbsDiff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

double Cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb + 1e-30);
}

using ParityParam = std::tuple<std::string, DType, Device>;

class EncoderParityTest : public ::testing::TestWithParam<ParityParam> {
 protected:
  void SetUp() override {
    const auto& [model, dtype, device] = GetParam();
    if (device == Device::kCuda) {
#if ENCODERD_WITH_CUDA
      std::string reason;
      if (kernels::CudaDeviceCount(&reason) == 0) {
        GTEST_SKIP() << "no CUDA device visible (" << reason << ")";
      }
#else
      GTEST_SKIP() << "built without the CUDA backend";
#endif
    }
    dtype_ = dtype;
    device_ = device;
    auto bundle = server::LoadModelDirectory(ModelsDir() + "/" + model);
    ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
    config_ = bundle->config;
    EncoderOptions options;
    options.device = device;
    options.dtype = dtype;
    options.num_threads = 2;
    auto encoder = Encoder::Create(bundle->config, bundle->weights, options);
    if (device == Device::kCuda &&
        (config_.relative_attention_buckets > 0 || config_.attention_span > 0)) {
      // MPNet's relative attention bias and DeBERTa's disentangled attention
      // run only on the CPU: a clear refusal.
      ASSERT_EQ(encoder.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(encoder.status().message().find("only on the CPU"), std::string::npos);
      GTEST_SKIP() << encoder.status().message();
    }
    ASSERT_TRUE(encoder.ok()) << encoder.status().ToString();
    encoder_ = std::move(*encoder);
    ref_ = LoadReference(model);
    for (size_t i = 0; i < ref_.sequences.size(); ++i) {
      // Pad tokens a model masks as keys: the CPU's attention masks them;
      // requests refuse them where the device does not (request_validation.h).
      const auto& ids = ref_.sequences[i];
      if (device == Device::kCuda && config_.mask_pad_keys &&
          std::count(ids.begin(), ids.end(), config_.pad_token_id) > 0)
        continue;
      all_.push_back(i);
    }
  }

  // The reference output `name`; a fixture without it fails the test (it
  // dereferenced the map's end).
  const Tensor& Expected(const std::string& name) {
    auto it = ref_.outputs.find(name);
    if (it == ref_.outputs.end()) throw std::runtime_error("the reference has no output " + name);
    return it->second;
  }

  // The least cosine similarity to PyTorch fp32 this dtype must reach.
  double MinCosine() const { return dtype_ == DType::kInt8 ? kInt8MinCosine : 0.999; }

  // Checks `actual` against the reference `name`; keeps the lowest cosine and
  // the largest error relative to `scale` for the report.
  void Compare(const std::string& name, const float* actual, int64_t count, double scale) {
    const Tensor& expected = Expected(name);
    ASSERT_EQ(expected.numel(), count) << name;
    const double diff = MaxAbsDiff(actual, expected.data<float>(), count);
    const double cosine = Cosine(actual, expected.data<float>(), count);
    lowest_cosine_ = std::min(lowest_cosine_, cosine);
    worst_relative_ = std::max(worst_relative_, diff / scale);
    if (dtype_ == DType::kFloat32) {
      EXPECT_LE(diff, 1e-4 * scale) << name;
    } else {
      EXPECT_GE(cosine, MinCosine()) << name;
    }
  }

  void TearDown() override {
    if (lowest_cosine_ > 1.5) return;  // nothing compared
    std::printf(
        "[ parity   ] %s %s %s: lowest cosine %.6f, max abs error %.3g x activation scale\n",
        std::get<0>(GetParam()).c_str(), DeviceName(device_), DTypeName(dtype_).data(),
        lowest_cosine_, worst_relative_);
  }

  DType dtype_ = DType::kFloat32;
  Device device_ = Device::kCpu;
  double lowest_cosine_ = 2.0, worst_relative_ = 0.0;
  EncoderConfig config_;
  std::unique_ptr<Encoder> encoder_;
  Reference ref_;
  std::vector<size_t> all_;
};

TEST_P(EncoderParityTest, RaggedBatchMatchesPyTorch) {
  const PackedBatch batch = Pack(config_, ref_, all_);
  auto hidden = encoder_->Forward(batch);
  ASSERT_TRUE(hidden.ok()) << hidden.status().ToString();
  const int64_t h = config_.hidden_size;
  double scale = 1.0;
  for (size_t i = 0; i < all_.size(); ++i) {
    const Tensor& e = Expected("hidden." + std::to_string(all_[i]));
    scale = std::max(scale, MaxAbs(e.data<float>(), e.numel()));
  }
  for (size_t i = 0; i < all_.size(); ++i) {
    const int64_t offset = batch.cu_seqlens[i] * h;
    Compare("hidden." + std::to_string(all_[i]), hidden->data<float>() + offset,
            batch.length(i) * h, scale);
  }
  const int64_t pw = config_.pooled_width();  // after any sentence-transformers Dense
  for (Pooling pooling : kAllPoolings) {
    const std::string prefix = std::string("pooled_") + PoolingName(pooling) + ".";
    auto pooled = encoder_->Pool(*hidden, batch, pooling, /*normalize=*/false);
    ASSERT_TRUE(pooled.ok()) << pooled.status().ToString();
    for (size_t i = 0; i < all_.size(); ++i) {
      // mean_sqrt_len grows with sqrt(length): relative to its own scale too.
      const Tensor& e = Expected(prefix + std::to_string(all_[i]));
      Compare(prefix + std::to_string(all_[i]), pooled->data<float>() + i * pw, pw,
              std::max(scale, MaxAbs(e.data<float>(), e.numel())));
    }
  }
  if (config_.default_normalize) {  // what Embed serves by default: unit length
    auto pooled = encoder_->Pool(*hidden, batch, config_.default_pooling, /*normalize=*/true);
    ASSERT_TRUE(pooled.ok()) << pooled.status().ToString();
    const std::string prefix = std::string("pooled_") + PoolingName(config_.default_pooling) + ".";
    for (size_t i = 0; i < all_.size(); ++i) {
      const Tensor& e = Expected(prefix + std::to_string(all_[i]));
      double norm2 = 0;
      for (int64_t j = 0; j < pw; ++j)
        norm2 += static_cast<double>(e.data<float>()[j]) * e.data<float>()[j];
      std::vector<float> unit(pw);
      for (int64_t j = 0; j < pw; ++j) {
        unit[j] = static_cast<float>(e.data<float>()[j] / std::sqrt(norm2));
      }
      const float* got = pooled->data<float>() + i * pw;
      if (dtype_ == DType::kFloat32) {
        EXPECT_LE(MaxAbsDiff(got, unit.data(), pw), 1e-5) << prefix << i;
      } else {
        EXPECT_GE(Cosine(got, unit.data(), pw), MinCosine()) << prefix << i;
      }
      double length2 = 0;
      for (int64_t j = 0; j < pw; ++j) length2 += static_cast<double>(got[j]) * got[j];
      EXPECT_NEAR(std::sqrt(length2), 1.0, 1e-4) << prefix << i;
    }
  }
  if (config_.num_labels > 0) {
    auto probs = encoder_->Classify(*hidden, batch);
    ASSERT_TRUE(probs.ok()) << probs.status().ToString();
    const int64_t labels = config_.num_labels;
    for (size_t i = 0; i < all_.size(); ++i) {
      const Tensor& logits = Expected("logits." + std::to_string(all_[i]));
      ASSERT_EQ(logits.numel(), labels);
      std::vector<float> expected(logits.data<float>(), logits.data<float>() + labels);
      switch (config_.head_output()) {
        case HeadOutput::kSigmoid:  // e.g. a cross-encoder's relevance score
          for (float& v : expected)
            v = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(v))));
          break;
        case HeadOutput::kSoftmax: {
          const float top = *std::max_element(expected.begin(), expected.end());
          double sum = 0;
          for (float& v : expected) sum += (v = std::exp(v - top));
          for (float& v : expected) v = static_cast<float>(v / sum);
          break;
        }
        case HeadOutput::kTanh:
          for (float& v : expected) v = std::tanh(v);
          break;
        case HeadOutput::kLogits:
          break;
      }
      const DType dtype = dtype_;
      // On the GPU the residual stream itself is bf16 (the CPU keeps it in
      // fp32): its raw logits are as far off as int8's.
      const bool coarse =
          dtype == DType::kInt8 || (device_ == Device::kCuda && dtype == DType::kBFloat16);
      double tolerance = dtype == DType::kFloat32 ? 1e-5 : coarse ? 5e-2 : 2e-2;
      // int8 raw logits: relative to their size.
      if (coarse && config_.head_output() == HeadOutput::kLogits)
        tolerance *= std::max(1.0, MaxAbs(expected.data(), labels));
      EXPECT_LE(MaxAbsDiff(probs->data<float>() + i * labels, expected.data(), labels), tolerance)
          << "sequence " << all_[i];
    }
  } else {
    EXPECT_EQ(encoder_->Classify(*hidden, batch).status().code(), StatusCode::kFailedPrecondition);
  }
}

// Also in int8: activations are quantized per row, so what a sequence gets
// does not depend on what it is batched with. On a GPU the GEMM library may
// pick another algorithm for another row count: equal up to 16-bit rounding.
// The int8 kernels (VNNI, or AVX2 + FMA) make exact integer sums, whatever
// the rows. Without either, int8 runs on oneDNN's fp32 GEMM, which may differ
// in the last bits between row counts: there the next layer's quantization
// can move a value by a whole step, and int8 is compared as on a GPU.
TEST_P(EncoderParityTest, SequenceAloneEqualsSequenceInBatch) {
  if (dtype_ == DType::kBFloat16 && device_ == Device::kCpu) {
    GTEST_SKIP() << "checked in fp32 and int8";
  }
  const kernels::CpuFeatures& cpu = kernels::GetCpuFeatures();
  const bool int8_exact = (cpu.avx512f && cpu.avx512bw && cpu.avx512_vnni) || (cpu.avx2 && cpu.fma);
  const PackedBatch batch = Pack(config_, ref_, all_);
  auto together = encoder_->Forward(batch);
  ASSERT_TRUE(together.ok());
  const int64_t h = config_.hidden_size;
  for (size_t i = 0; i < all_.size(); ++i) {
    auto alone = encoder_->Forward(Pack(config_, ref_, {all_[i]}));
    ASSERT_TRUE(alone.ok());
    const float* in_batch = together->data<float>() + batch.cu_seqlens[i] * h;
    if (device_ == Device::kCuda || (dtype_ == DType::kInt8 && !int8_exact)) {
      EXPECT_GE(Cosine(alone->data<float>(), in_batch, batch.length(i) * h), 0.9999)
          << "sequence " << all_[i];
    } else {
      EXPECT_LE(MaxAbsDiff(alone->data<float>(), in_batch, batch.length(i) * h), 1e-5)
          << "sequence " << all_[i];
    }
  }
}

// The key bias of a batch whose model masks pad keys: -infinity at each pad
// token of a sequence holding another token; a sequence of pad tokens alone
// keeps its keys (requests refuse it); nothing where no pad or no masking.
TEST(PadKeyBiasTest, MasksPadTokensOfSequencesWithOtherTokens) {
  EncoderConfig c;
  c.pad_token_id = 1;
  c.mask_pad_keys = true;
  PackedBatchBuilder builder(PositionRule::kAfterPaddingIdx, 1);
  for (const std::vector<int32_t>& ids : {std::vector<int32_t>{0, 1, 5, 1}, {1, 1}, {3}})
    ASSERT_TRUE(builder.Add(ids, {}, {}).ok());
  const PackedBatch batch = builder.Build();
  std::vector<float> bias;
  EXPECT_TRUE(HoldsMaskedPad(c, batch));
  ASSERT_TRUE(PadKeyBias(c, batch, &bias));
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bias, (std::vector<float>{0, -inf, 0, -inf, 0, 0, 0}));
  c.mask_pad_keys = false;
  EXPECT_FALSE(HoldsMaskedPad(c, batch));
  EXPECT_FALSE(PadKeyBias(c, batch, &bias));
  c.mask_pad_keys = true;
  PackedBatchBuilder unpadded_builder(PositionRule::kAfterPaddingIdx, 1);
  ASSERT_TRUE(unpadded_builder.Add({0, 5, 2}, {}, {}).ok());
  const PackedBatch unpadded = unpadded_builder.Build();
  ASSERT_EQ(unpadded.num_tokens(), 3);
  EXPECT_FALSE(HoldsMaskedPad(c, unpadded));
  EXPECT_FALSE(PadKeyBias(c, unpadded, &bias));
  // Pad tokens alone: held (a CUDA encoder refuses the batch), nothing masked.
  PackedBatchBuilder pads_alone_builder(PositionRule::kAfterPaddingIdx, 1);
  ASSERT_TRUE(pads_alone_builder.Add({1, 1}, {}, {}).ok());
  const PackedBatch pads_alone = pads_alone_builder.Build();
  EXPECT_TRUE(HoldsMaskedPad(c, pads_alone));
  ASSERT_TRUE(PadKeyBias(c, pads_alone, &bias));
  EXPECT_EQ(bias, (std::vector<float>{0, 0}));
}

// A Hugging Face RoBERTa whose card says mask_pad_keys: true (transformers
// given attention_mask = ids != pad): the fixture's sequences holding pad
// tokens (inside one, at the end of another) give their other tokens the
// states of the sequence without its pads; without the card they do not.
TEST(MaskPadKeysTest, AHuggingFaceModelWithTheCardMasksItsPads) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "encoderd_parity_mask_pad_keys";
  fs::remove_all(dir);
  fs::copy(ModelsDir() + "/hf_roberta_safetensors", dir, fs::copy_options::recursive);
  std::ofstream(dir / "encoderd.yaml", std::ios::app) << "\nmask_pad_keys: true\n";
  const Reference ref = LoadReference("hf_roberta_safetensors");
  for (const bool masked : {true, false}) {
    auto bundle =
        server::LoadModelDirectory(masked ? dir.string() : ModelsDir() + "/hf_roberta_safetensors");
    ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
    ASSERT_EQ(bundle->config.mask_pad_keys, masked);
    const EncoderConfig& c = bundle->config;
    EncoderOptions options;
    options.num_threads = 2;
    auto encoder = Encoder::Create(c, bundle->weights, options);
    ASSERT_TRUE(encoder.ok()) << encoder.status().ToString();
    const auto pad = static_cast<int32_t>(c.pad_token_id);
    int padded_sequences = 0;
    for (const auto& ids : ref.sequences) {
      if (std::count(ids.begin(), ids.end(), pad) == 0) continue;
      ++padded_sequences;
      std::vector<int32_t> kept;
      for (const int32_t id : ids)
        if (id != pad) kept.push_back(id);
      const auto forward = [&](const std::vector<int32_t>& sequence) {
        PackedBatchBuilder builder(c.position_rule, pad);
        EXPECT_TRUE(builder.Add(sequence, {}, {}).ok());
        auto hidden = (*encoder)->Forward(builder.Build());
        EXPECT_TRUE(hidden.ok()) << hidden.status().ToString();
        return std::move(hidden).value();
      };
      const Tensor with_pads = forward(ids), without = forward(kept);
      const int64_t h = c.hidden_size;
      double diff = 0;
      for (size_t i = 0, k = 0; i < ids.size(); ++i) {
        if (ids[i] == pad) continue;
        diff = std::max(
            diff, MaxAbsDiff(with_pads.data<float>() + i * h, without.data<float>() + k++ * h, h));
      }
      const double scale = std::max(1.0, MaxAbs(without.data<float>(), without.numel()));
      if (masked) {
        EXPECT_LE(diff, 1e-5 * scale) << ids.size() << " tokens";
      } else {
        EXPECT_GT(diff, 1e-3 * scale) << ids.size() << " tokens";
      }
    }
    EXPECT_EQ(padded_sequences, 2);
  }
  fs::remove_all(dir);
}

TEST_P(EncoderParityTest, RejectsIdsOutsideTheVocabulary) {
  PackedBatchBuilder builder(config_.position_rule, static_cast<int32_t>(config_.pad_token_id));
  ASSERT_TRUE(builder.Add({0, static_cast<int32_t>(config_.vocab_size)}, {}, {}).ok());
  auto result = encoder_->Forward(builder.Build());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
}

std::string ParamName(const ::testing::TestParamInfo<ParityParam>& info) {
  const auto& [model, dtype, device] = info.param;
  return model + "_" + std::string(DTypeName(dtype)) + (device == Device::kCuda ? "_cuda" : "");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EncoderParityTest,
                         ::testing::Combine(::testing::ValuesIn(FixtureModelNames()),
                                            ::testing::Values(DType::kFloat32, DType::kBFloat16,
                                                              DType::kInt8),
                                            ::testing::Values(Device::kCpu)),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(CudaFixtures, EncoderParityTest,
                         ::testing::Combine(::testing::ValuesIn(FixtureModelNames()),
                                            ::testing::Values(DType::kFloat16, DType::kBFloat16),
                                            ::testing::Values(Device::kCuda)),
                         ParamName);

}  // namespace
}  // namespace encoderd
