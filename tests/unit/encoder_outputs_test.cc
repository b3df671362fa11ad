// Encoder::Forward(batch, outputs) returns only what is asked (pooled rows
// per mode, hidden states on request), and EmbeddingFromPooled /
// ClassifyFromFirst over those rows answer exactly as Pool / Classify over
// the hidden states. EncoderBatchEngine serves a mixed batch through them.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/runtime/encoder.h"
#include "engine/runtime/packed_batch.h"
#include "engine/runtime/random_weights.h"
#include "server/core/encoder_batch_engine.h"

namespace encoderd {
namespace {

// A small model with a classification head and a tanh pool_dense layer
// (`dense` false: none).
EncoderConfig SmallConfig(bool dense) {
  EncoderConfig c = BertBaseConfig();
  c.vocab_size = 100;
  c.hidden_size = 32;
  c.num_heads = 2;
  c.num_layers = 2;
  c.intermediate_size = 64;
  c.max_positions = 40;
  c.max_tokens = 32;
  c.num_labels = 3;
  c.labels = {"a", "b", "c"};
  if (dense) c.pool_dense.push_back({32, 16, true, true});
  return c;
}

TensorMap Weights(const EncoderConfig& c) {
  TensorMap weights = RandomEncoderWeights(c, 11);
  for (size_t i = 0; i < c.pool_dense.size(); ++i) {
    const EncoderConfig::PoolDense& d = c.pool_dense[i];
    Tensor w = Tensor::Zeros(DType::kFloat32, {d.out, d.in});
    Tensor b = Tensor::Zeros(DType::kFloat32, {d.out});
    for (int64_t j = 0; j < w.numel(); ++j) w.mutable_data<float>()[j] = 0.01f * (j % 17 - 8);
    for (int64_t j = 0; j < b.numel(); ++j) b.mutable_data<float>()[j] = 0.02f * (j % 5 - 2);
    weights["pool_dense." + std::to_string(i) + ".weight"] = w;
    weights["pool_dense." + std::to_string(i) + ".bias"] = b;
  }
  return weights;
}

PackedBatch Batch(const EncoderConfig& c) {
  PackedBatchBuilder builder(c.position_rule, static_cast<int32_t>(c.pad_token_id));
  uint64_t request = 0;
  for (int len : {3, 1, 17, 8}) {
    std::vector<int32_t> ids(len);
    for (int i = 0; i < len; ++i) ids[i] = static_cast<int32_t>((len * 7 + i * 13) % c.vocab_size);
    EXPECT_TRUE(builder.Add(ids, {}, {request++, 0}).ok());
  }
  return builder.Build();
}

std::unique_ptr<Encoder> Make(const EncoderConfig& c) {
  EncoderOptions options;
  options.num_threads = 1;
  auto encoder = Encoder::Create(c, Weights(c), options);
  EXPECT_TRUE(encoder.ok()) << encoder.status().ToString();
  return encoder.ok() ? std::move(*encoder) : nullptr;
}

void ExpectBitEqual(const Tensor& got, const Tensor& want) {
  ASSERT_TRUE(got.defined() && want.defined());
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(std::memcmp(got.data<float>(), want.data<float>(), want.nbytes()), 0);
}

TEST(EncoderOutputsTest, OnlyTheAskedOutputsComeBackAndMatchPoolAndClassify) {
  for (bool dense : {false, true}) {
    SCOPED_TRACE(dense ? "with a pool_dense layer" : "without pool_dense");
    const EncoderConfig c = SmallConfig(dense);
    auto encoder = Make(c);
    ASSERT_NE(encoder, nullptr);
    const PackedBatch batch = Batch(c);
    auto hidden = encoder->Forward(batch);
    ASSERT_TRUE(hidden.ok()) << hidden.status().ToString();

    Encoder::Outputs pooled_only;
    pooled_only.poolings.assign(std::begin(kAllPoolings), std::end(kAllPoolings));
    auto result = encoder->Forward(batch, pooled_only);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_FALSE(result->hidden_states.defined());
    ASSERT_EQ(result->pooled.size(), pooled_only.poolings.size());
    for (Pooling pooling : kAllPoolings) {
      SCOPED_TRACE(static_cast<int>(pooling));
      const Tensor& rows = result->pooled.at(pooling);
      EXPECT_EQ(rows.shape(), (std::vector<int64_t>{batch.num_sequences(), c.hidden_size}));
      // The rows stay as they are whatever is made of them, in any order.
      const std::vector<float> before(rows.data<float>(), rows.data<float>() + rows.numel());
      for (bool normalize : {true, false}) {
        auto want = encoder->Pool(*hidden, batch, pooling, normalize);
        auto got = encoder->EmbeddingFromPooled(rows, normalize);
        ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
        EXPECT_EQ(got->size(1), c.pooled_width());
        ExpectBitEqual(*got, *want);
      }
      EXPECT_EQ(std::memcmp(before.data(), rows.data<float>(), rows.nbytes()), 0);
    }
    auto want = encoder->Classify(*hidden, batch);
    auto got = encoder->ClassifyFromFirst(result->pooled.at(Pooling::kCls));
    ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
    ExpectBitEqual(*got, *want);

    Encoder::Outputs hidden_only;
    hidden_only.hidden_states = true;
    auto states = encoder->Forward(batch, hidden_only);
    ASSERT_TRUE(states.ok()) << states.status().ToString();
    EXPECT_TRUE(states->pooled.empty());
    ExpectBitEqual(states->hidden_states, *hidden);
  }
}

TEST(EncoderOutputsTest, PooledRowsOfTheWrongShapeOrNoHeadAreRefused) {
  EncoderConfig c = SmallConfig(false);
  auto encoder = Make(c);
  ASSERT_NE(encoder, nullptr);
  const Tensor narrow = Tensor::Zeros(DType::kFloat32, {2, c.hidden_size - 1});
  EXPECT_EQ(encoder->EmbeddingFromPooled(narrow, true).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(encoder->ClassifyFromFirst(narrow).status().code(), StatusCode::kInvalidArgument);
  const Tensor empty = Tensor::Zeros(DType::kFloat32, {0, c.hidden_size});
  EXPECT_EQ(encoder->EmbeddingFromPooled(empty, false).status().code(),
            StatusCode::kInvalidArgument);

  c.num_labels = 0;
  c.labels.clear();
  auto headless = Make(c);
  ASSERT_NE(headless, nullptr);
  const Tensor rows = Tensor::Zeros(DType::kFloat32, {2, c.hidden_size});
  EXPECT_EQ(headless->ClassifyFromFirst(rows).status().code(), StatusCode::kFailedPrecondition);
}

// One batch whose sequences ask for everything at once: each gets what it
// would get from Forward + Pool / Classify alone, with and without a
// pool_dense layer (without one, normalizing must not write into the pooled
// rows the unnormalized variant reads next).
TEST(EncoderOutputsTest, BatchEngineServesAMixedBatch) {
  for (bool dense : {true, false}) {
    SCOPED_TRACE(dense ? "with a pool_dense layer" : "without pool_dense");
    const EncoderConfig c = SmallConfig(dense);
    auto reference = Make(c);
    ASSERT_NE(reference, nullptr);
    server::EncoderBatchEngine engine(Make(c));
    const PackedBatch batch = Batch(c);
    using server::OutputKind;
    using server::OutputSpec;
    const std::vector<OutputSpec> specs = {
        {OutputKind::kEmbedding, Pooling::kMean, true},
        {OutputKind::kEmbedding, Pooling::kMean, false},
        {OutputKind::kClassification, Pooling::kCls, false},
        {OutputKind::kHiddenStates, Pooling::kCls, false},
    };
    auto out = engine.Run(batch, specs, {});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_EQ(out->size(), specs.size());

    auto hidden = reference->Forward(batch);
    ASSERT_TRUE(hidden.ok());
    const auto row = [](const Tensor& t, int64_t i) {
      const int64_t w = t.size(1);
      return std::vector<float>(t.data<float>() + i * w, t.data<float>() + (i + 1) * w);
    };
    auto normalized = reference->Pool(*hidden, batch, Pooling::kMean, true);
    auto plain = reference->Pool(*hidden, batch, Pooling::kMean, false);
    auto scores = reference->Classify(*hidden, batch);
    ASSERT_TRUE(normalized.ok() && plain.ok() && scores.ok());
    EXPECT_EQ((*out)[0], row(*normalized, 0));
    EXPECT_EQ((*out)[1], row(*plain, 1));
    EXPECT_EQ((*out)[2], row(*scores, 2));
    const int64_t h = c.hidden_size;
    const float* states = hidden->data<float>() + int64_t{batch.cu_seqlens[3]} * h;
    EXPECT_EQ((*out)[3], std::vector<float>(states, states + batch.length(3) * h));
  }
}

// A CPU forward told to stop ends with CANCELLED within half a layer of
// the check that said so, and the next forward is whole and unchanged.
TEST(EncoderOutputsTest, ACpuForwardStopsWhereItsStopCheckSaysSo) {
  EncoderConfig c = SmallConfig(false);
  c.num_layers = 4;
  auto encoder = Make(c);
  ASSERT_NE(encoder, nullptr);
  const PackedBatch batch = Batch(c);
  Encoder::Outputs outputs;
  outputs.hidden_states = true;
  auto before = encoder->Forward(batch, outputs);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  OpProfile profile;
  ASSERT_TRUE(encoder->ProfileOps(&profile));
  int asks = 0;
  auto stopped = encoder->Forward(batch, outputs, [&asks] { return ++asks == 4; });
  EXPECT_EQ(stopped.status().code(), StatusCode::kCancelled) << stopped.status().ToString();
  EXPECT_EQ(asks, 4);
  // Asks 1-3 said go: layers 0 and 1's attention, layer 0's feed-forward.
  EXPECT_EQ(profile.calls[static_cast<int>(EncoderOp::kQkv)], 2);
  EXPECT_EQ(profile.calls[static_cast<int>(EncoderOp::kFeedForward)], 1);
  encoder->ProfileOps(nullptr);
  auto after = encoder->Forward(batch, outputs);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  ExpectBitEqual(after->hidden_states, before->hidden_states);

  // The batch engine hands its stop check to the encoder.
  server::EncoderBatchEngine engine(Make(c));
  const std::vector<server::OutputSpec> specs(batch.num_sequences());
  asks = 0;
  auto out = engine.Run(batch, specs, [&asks] { return ++asks == 2; });
  EXPECT_EQ(out.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(asks, 2);
}

TEST(EncoderOutputsTest, APoolingModeAskedTwiceIsRefused) {
  const EncoderConfig c = SmallConfig(false);
  auto encoder = Make(c);
  ASSERT_NE(encoder, nullptr);
  Encoder::Outputs outputs;
  outputs.poolings = {Pooling::kMean, Pooling::kCls, Pooling::kMean};
  auto result = encoder->Forward(Batch(c), outputs);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("mean"), std::string::npos)
      << result.status().ToString();
}

// A batch's pool_start: a sequence pooled from its token 3 on (a prompt
// include_prompt = false leaves out) beside the same sequence pooled whole;
// cls is the same for both.
TEST(EncoderOutputsTest, EachSequencePoolsFromItsPoolStart) {
  const EncoderConfig c = SmallConfig(false);
  auto encoder = Make(c);
  ASSERT_NE(encoder, nullptr);
  const std::vector<int32_t> ids = {5, 17, 23, 42, 8, 61, 9};
  PackedBatchBuilder builder(c.position_rule, static_cast<int32_t>(c.pad_token_id));
  ASSERT_TRUE(builder.Add(ids, {}, {0, 0}).ok());
  ASSERT_TRUE(builder.Add(ids, {}, {1, 0}, /*pool_start=*/3).ok());
  EXPECT_FALSE(builder.Add(ids, {}, {2, 0}, -1).ok());
  const PackedBatch batch = builder.Build();
  EXPECT_EQ(batch.pool_start, (std::vector<int32_t>{0, 3}));
  Encoder::Outputs outputs;
  outputs.poolings = {Pooling::kMean, Pooling::kCls};
  outputs.hidden_states = true;
  auto result = encoder->Forward(batch, outputs);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const int64_t h = c.hidden_size, n = static_cast<int64_t>(ids.size());
  const float* states = result->hidden_states.data<float>();
  const float* mean = result->pooled.at(Pooling::kMean).data<float>();
  const float* cls = result->pooled.at(Pooling::kCls).data<float>();
  for (int64_t i = 0; i < h; ++i) {
    double whole = 0, tail = 0;
    for (int64_t t = 0; t < n; ++t) whole += states[t * h + i];
    for (int64_t t = 3; t < n; ++t) tail += states[(n + t) * h + i];
    EXPECT_NEAR(mean[i], whole / n, 1e-5);
    EXPECT_NEAR(mean[h + i], tail / (n - 3), 1e-5);
    EXPECT_NEAR(cls[i], cls[h + i], 1e-5);
  }
  PackedBatch bad = batch;
  bad.pool_start.pop_back();
  EXPECT_FALSE(encoder->Forward(bad, outputs).ok());
}

// RoBERTa's positions (create_position_ids_from_input_ids): a pad token's
// is padding_idx and the others count on without it, so token ids a client
// padded itself are embedded as Hugging Face embeds them (until 2026-12-06
// every token took the next position). BERT's count every token.
TEST(PackedBatchBuilderTest, RobertaPositionsSkipThePadToken) {
  const std::vector<int32_t> ids = {0, 5, 1, 1, 6, 2, 1};
  PackedBatchBuilder roberta(PositionRule::kAfterPaddingIdx, /*pad_token_id=*/1);
  ASSERT_TRUE(roberta.Add(ids, {}, {0, 0}).ok());
  ASSERT_TRUE(roberta.Add({0, 7, 2}, {}, {0, 1}).ok());
  EXPECT_EQ(roberta.Build().position_ids, (std::vector<int32_t>{2, 3, 1, 1, 4, 5, 1, 2, 3, 4}));
  PackedBatchBuilder bert(PositionRule::kFromZero, /*pad_token_id=*/1);
  ASSERT_TRUE(bert.Add(ids, {}, {0, 0}).ok());
  EXPECT_EQ(bert.Build().position_ids, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
}

}  // namespace
}  // namespace encoderd
