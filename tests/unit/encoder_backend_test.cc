// The encoder written once for every device: which weights it loads, the op
// sequence of its forward, and the checks every backend now shares.
#include "engine/runtime/encoder_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/runtime/random_weights.h"

namespace encoderd {
namespace {

EncoderConfig Tiny(bool norm_first) {
  EncoderConfig c;
  c.vocab_size = 32;
  c.hidden_size = 16;
  c.num_layers = 2;
  c.num_heads = 2;
  c.intermediate_size = 24;
  c.max_tokens = 8;
  c.max_positions = 10;
  c.position_rule = PositionRule::kFromZero;
  c.type_vocab_size = 2;
  c.pad_token_id = 0;
  c.norm_first = norm_first;
  c.final_norm = norm_first;
  c.embedding_norm = !norm_first;
  return c;
}

const char* Name(Buffer b) {
  switch (b) {
    case Buffer::kHidden:
      return "x";
    case Buffer::kQkv:
      return "qkv";
    case Buffer::kContext:
      return "ctx";
    case Buffer::kFfn:
      return "ffn";
    case Buffer::kEmbedded:
      return "embedded";
    case Buffer::kNormedBf16:
      return "normed bf16";
    case Buffer::kProjected:
      return "projected";
    case Buffer::kNormed:
      break;
  }
  return "normed";
}

// Writes down every call as text.
class RecordingBackend : public EncoderBackend {
 public:
  std::vector<std::string> calls;
  bool norms_add_residuals = false;

  Status LoadTable(EmbeddingTable table, const Tensor& t) override {
    calls.push_back("table " + std::to_string(int(table)) + " " + ShapeToString(t.shape()));
    return Status::Ok();
  }
  Status LoadLinear(int64_t layer, LinearSlot slot, const Tensor& w, const Tensor& b) override {
    calls.push_back(LinearWeightPrefix(layer, slot) + " " + ShapeToString(w.shape()) +
                    (b.defined() ? " bias" : ""));
    return Status::Ok();
  }
  Status LoadNorm(int64_t layer, NormSlot slot, const Tensor&, const Tensor&) override {
    calls.push_back("norm " + std::to_string(layer) + " " + std::to_string(int(slot)));
    return Status::Ok();
  }
  Status LoadRelativeBias(const Tensor& t) override {
    calls.push_back("relative bias " + ShapeToString(t.shape()));
    return Status::Ok();
  }
  void Embed(Buffer out) override { calls.push_back(std::string("embed ") + Name(out)); }
  void Linear(int64_t layer, LinearSlot slot, Buffer in, Epilogue e, Buffer out) override {
    calls.push_back(std::to_string(layer) + " " + LinearSlotName(slot) + " " + Name(in) + "->" +
                    Name(out) + " epilogue " + std::to_string(int(e)));
  }
  void FeedForward(int64_t layer, Buffer in, Epilogue activation, Buffer hidden, Buffer out,
                   bool add_to_out) override {
    calls.push_back(std::to_string(layer) + " ffn " + Name(in) + "->" + Name(hidden) + "->" +
                    Name(out) + (add_to_out ? " added" : "") + " epilogue " +
                    std::to_string(int(activation)));
  }
  void Norm(int64_t layer, NormSlot slot, Buffer in, Buffer out) override {
    calls.push_back(std::to_string(layer) + " norm " + std::to_string(int(slot)) + " " + Name(in) +
                    "->" + Name(out));
  }
  bool NormsAddResiduals() const override { return norms_add_residuals; }
  void AddNorm(int64_t layer, NormSlot slot, Buffer in, Buffer residual, Buffer out) override {
    calls.push_back(std::to_string(layer) + " norm " + std::to_string(int(slot)) + " " + Name(in) +
                    "+" + Name(residual) + "->" + Name(out));
  }
  Status LoadPositionProjections(int64_t layer, const Tensor& t) override {
    calls.push_back("position projections " + std::to_string(layer) + " " +
                    ShapeToString(t.shape()));
    return Status::Ok();
  }
  void Attention(int64_t layer, Buffer qkv, Buffer out) override {
    calls.push_back(std::to_string(layer) + " attention " + Name(qkv) + "->" + Name(out));
  }
};

TEST(EncoderBackendTest, LoadsEveryWeightOnceInOrderAndLeavesTheHead) {
  EncoderConfig c = Tiny(/*norm_first=*/false);
  TensorMap weights = RandomEncoderWeights(c, 1);
  weights.erase(LayerWeightName(1, "ffn.out") + ".bias");  // a Linear without bias
  weights["head.dense.weight"] = Tensor::Zeros(DType::kFloat32, {16, 16});
  RecordingBackend backend;
  ASSERT_TRUE(LoadEncoderWeights(c, weights, backend).ok());
  const std::vector<std::string> want = {
      "table 0 [32, 16]",
      "table 1 [10, 16]",
      "table 2 [2, 16]",
      "norm -1 0",
      LayerWeightName(0, "attention.qkv") + " [48, 16] bias",
      LayerWeightName(0, "attention.out") + " [16, 16] bias",
      LayerWeightName(0, "ffn.in") + " [24, 16] bias",
      LayerWeightName(0, "ffn.out") + " [16, 24] bias",
      "norm 0 1",
      "norm 0 2",
      LayerWeightName(1, "attention.qkv") + " [48, 16] bias",
      LayerWeightName(1, "attention.out") + " [16, 16] bias",
      LayerWeightName(1, "ffn.in") + " [24, 16] bias",
      LayerWeightName(1, "ffn.out") + " [16, 24]",
      "norm 1 1",
      "norm 1 2",
  };
  EXPECT_EQ(backend.calls, want);
  ASSERT_EQ(weights.size(), 1u);
  EXPECT_EQ(weights.begin()->first, "head.dense.weight");
}

// MPNet-style: the relative attention bias loads last, checked against the
// buckets and heads.
TEST(EncoderBackendTest, LoadsTheRelativeAttentionBias) {
  EncoderConfig c = Tiny(/*norm_first=*/false);
  c.relative_attention_buckets = 32;
  TensorMap weights = RandomEncoderWeights(c, 1);
  RecordingBackend backend;
  ASSERT_TRUE(LoadEncoderWeights(c, weights, backend).ok());
  EXPECT_EQ(backend.calls.back(), "relative bias [32, " + std::to_string(c.num_heads) + "]");
  EXPECT_TRUE(weights.empty());

  weights = RandomEncoderWeights(c, 1);
  weights["encoder.relative_attention_bias"] = Tensor::Zeros(DType::kFloat32, {32, 3});
  const Status wrong = LoadEncoderWeights(c, weights, backend);
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.message().find("encoder.relative_attention_bias"), std::string::npos);
  weights.erase("encoder.relative_attention_bias");
  EXPECT_EQ(LoadEncoderWeights(c, weights, backend).code(), StatusCode::kNotFound);
}

// DeBERTa-style: the relative embeddings, LayerNorm'd, go to every layer
// right after its qkv weight (whose projections make its position tables);
// a missing or misshapen table is refused by name.
TEST(EncoderBackendTest, LoadsTheRelativeEmbeddingsIntoEveryLayer) {
  EncoderConfig c = Tiny(/*norm_first=*/false);
  c.family = ModelFamily::kDeberta;
  c.position_rule = PositionRule::kNone;
  c.max_positions = 0;
  c.type_vocab_size = 0;
  c.attention_span = 4;
  c.position_buckets = 4;
  c.max_relative_positions = 8;
  c.content_to_position = c.position_to_content = true;
  c.relative_norm = true;
  TensorMap weights = RandomEncoderWeights(c, 1);
  RecordingBackend backend;
  ASSERT_TRUE(LoadEncoderWeights(c, weights, backend).ok());
  const std::vector<std::string> want = {
      "table 0 [32, 16]",
      "norm -1 0",
      LayerWeightName(0, "attention.qkv") + " [48, 16] bias",
      "position projections 0 [8, 16]",
      LayerWeightName(0, "attention.out") + " [16, 16] bias",
  };
  EXPECT_EQ(std::vector<std::string>(backend.calls.begin(), backend.calls.begin() + 5), want);
  EXPECT_EQ(
      std::count(backend.calls.begin(), backend.calls.end(), "position projections 1 [8, 16]"), 1);
  EXPECT_TRUE(weights.empty());

  weights = RandomEncoderWeights(c, 1);
  weights["encoder.rel_embeddings"] = Tensor::Zeros(DType::kFloat32, {6, 16});
  const Status wrong = LoadEncoderWeights(c, weights, backend);
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.message().find("encoder.rel_embeddings"), std::string::npos);
  weights = RandomEncoderWeights(c, 1);
  weights.erase("encoder.rel_norm.bias");
  EXPECT_EQ(LoadEncoderWeights(c, weights, backend).code(), StatusCode::kNotFound);
}

// ELECTRA-style: narrower embeddings, then a Linear to the hidden size.
TEST(EncoderBackendTest, ProjectedEmbeddingsLoadAndRunThroughTheProjection) {
  EncoderConfig c = Tiny(/*norm_first=*/false);
  c.num_layers = 1;
  c.embedding_size = 8;
  TensorMap weights = RandomEncoderWeights(c, 3);
  RecordingBackend backend;
  ASSERT_TRUE(LoadEncoderWeights(c, weights, backend).ok());
  const std::vector<std::string> loaded(backend.calls.begin(), backend.calls.begin() + 5);
  EXPECT_EQ(loaded,
            (std::vector<std::string>{"table 0 [32, 8]", "table 1 [10, 8]", "table 2 [2, 8]",
                                      "norm -1 0", "embeddings.project [16, 8] bias"}));
  EXPECT_TRUE(weights.empty());
  EXPECT_EQ(BufferWidth(c, Buffer::kEmbedded), 8);
  backend.calls.clear();
  RunEncoder(c, backend);
  ASSERT_GE(backend.calls.size(), 3u);
  EXPECT_EQ(backend.calls[0], "embed embedded");
  EXPECT_EQ(backend.calls[1], "-1 embeddings.project embedded->x epilogue 0");
  EXPECT_EQ(backend.calls[2], "0 attention.qkv x->qkv epilogue 0");

  c.embedding_size = 16;  // equal to hidden: no projection, no buffer
  EXPECT_EQ(BufferWidth(c, Buffer::kEmbedded), 0);
  backend.calls.clear();
  RunEncoder(c, backend);
  EXPECT_EQ(backend.calls[0], "embed x");
}

// A backend's refusal names the weight it was loading.
TEST(EncoderBackendTest, ABackendErrorNamesTheWeight) {
  class Refusing : public RecordingBackend {
    Status LoadLinear(int64_t, LinearSlot slot, const Tensor&, const Tensor&) override {
      return slot == LinearSlot::kFfnIn ? Internal("out of device memory") : Status::Ok();
    }
  } backend;
  const EncoderConfig c = Tiny(/*norm_first=*/false);
  TensorMap weights = RandomEncoderWeights(c, 5);
  const Status status = LoadEncoderWeights(c, weights, backend);
  EXPECT_EQ(status.code(), StatusCode::kInternal);
  EXPECT_EQ(status.message(), LayerWeightName(0, "ffn.in") + ": out of device memory");
}

TEST(EncoderBackendTest, PostNormLayerSequence) {
  EncoderConfig c = Tiny(/*norm_first=*/false);
  c.num_layers = 1;
  c.activation = Activation::kRelu;
  RecordingBackend backend;
  RunEncoder(c, backend);
  const std::vector<std::string> want = {
      "embed x",
      "0 attention.qkv x->qkv epilogue 0",
      "0 attention qkv->ctx",
      "0 attention.out ctx->x epilogue 3",
      "0 norm 1 x->x",
      "0 ffn x->ffn->x added epilogue 2",
      "0 norm 2 x->x",
  };
  EXPECT_EQ(backend.calls, want);
  // A backend whose norms add the residuals: each sublayer's output goes
  // to kProjected, and the norm takes the sum.
  RecordingBackend norms_add;
  norms_add.norms_add_residuals = true;
  RunEncoder(c, norms_add);
  const std::vector<std::string> want_norms_add = {
      "embed x",
      "0 attention.qkv x->qkv epilogue 0",
      "0 attention qkv->ctx",
      "0 attention.out ctx->projected epilogue 0",
      "0 norm 1 projected+x->x",
      "0 ffn x->ffn->projected epilogue 2",
      "0 norm 2 projected+x->x",
  };
  EXPECT_EQ(norms_add.calls, want_norms_add);
  EXPECT_EQ(BufferWidth(c, Buffer::kProjected), c.hidden_size);
  EXPECT_EQ(BufferWidth(Tiny(/*norm_first=*/true), Buffer::kProjected), 0);
  // Pre-norm layers keep the residuals in the epilogues whatever the
  // backend says: their norms do not write the residual stream.
  RecordingBackend pre_norm;
  pre_norm.norms_add_residuals = true;
  RunEncoder(Tiny(/*norm_first=*/true), pre_norm);
  for (const std::string& call : pre_norm.calls) {
    EXPECT_EQ(call.find("projected"), std::string::npos) << call;
  }
}

TEST(EncoderBackendTest, PreNormLayerSequenceEndsWithTheFinalNorm) {
  EncoderConfig c = Tiny(/*norm_first=*/true);
  c.num_layers = 1;
  RecordingBackend backend;
  RunEncoder(c, backend);
  const std::vector<std::string> want = {
      "embed x",
      "0 norm 1 x->normed",
      "0 attention.qkv normed->qkv epilogue 0",
      "0 attention qkv->ctx",
      "0 attention.out ctx->x epilogue 3",
      "0 norm 2 x->normed",
      "0 ffn normed->ffn->x added epilogue 1",
      "-1 norm 3 x->x",
  };
  EXPECT_EQ(backend.calls, want);
}

// The stop check is asked before each half of each layer; the forward ends
// at the first true, with no op of the rest (not the final norm) run.
TEST(EncoderBackendTest, AStopCheckEndsTheForwardBetweenHalfLayers) {
  EncoderConfig c = Tiny(/*norm_first=*/true);
  c.num_layers = 2;
  RecordingBackend whole;
  int asks = 0;
  EXPECT_TRUE(RunEncoder(c, whole, nullptr, [&asks] {
    ++asks;
    return false;
  }));
  EXPECT_EQ(asks, 2 * c.num_layers);
  EXPECT_EQ(whole.calls.back(), "-1 norm 3 x->x");
  for (int stop_at = 1; stop_at <= 2 * c.num_layers; ++stop_at) {
    SCOPED_TRACE("true at ask " + std::to_string(stop_at));
    RecordingBackend backend;
    asks = 0;
    EXPECT_FALSE(RunEncoder(c, backend, nullptr, [&] { return ++asks == stop_at; }));
    EXPECT_EQ(asks, stop_at);
    // Embed, then per half layer: norm, qkv, attention, out; norm, ffn.
    size_t want = 1;
    for (int half = 0; half < stop_at - 1; ++half) want += half % 2 == 0 ? 4 : 2;
    ASSERT_EQ(backend.calls.size(), want);
    EXPECT_TRUE(std::equal(backend.calls.begin(), backend.calls.end(), whole.calls.begin()));
  }
  // Through a profile too: it counts the forward and the ops that ran.
  RecordingBackend profiled;
  OpProfile profile;
  asks = 0;
  EXPECT_FALSE(RunEncoder(c, profiled, &profile, [&asks] { return ++asks == 3; }));
  EXPECT_EQ(profile.forwards, 1);
  EXPECT_EQ(profile.calls[static_cast<int>(EncoderOp::kQkv)], 1);  // asks 1 and 2 said go
  EXPECT_EQ(profile.calls[static_cast<int>(EncoderOp::kFeedForward)], 1);
}

// A profile times each op apart without changing the sequence the backend
// sees, and counts the calls and forwards.
TEST(EncoderBackendTest, AProfileCountsEachOpAndLeavesTheSequence) {
  EncoderConfig c = Tiny(/*norm_first=*/false);
  c.embedding_size = 8;  // the projection counts as embeddings
  RecordingBackend plain, profiled;
  RunEncoder(c, plain);
  OpProfile profile;
  RunEncoder(c, profiled, &profile);
  RunEncoder(c, profiled, &profile);
  const std::vector<std::string> once(profiled.calls.begin(),
                                      profiled.calls.begin() + plain.calls.size());
  EXPECT_EQ(once, plain.calls);
  EXPECT_EQ(profiled.calls.size(), 2 * plain.calls.size());
  EXPECT_EQ(profile.forwards, 2);
  const auto calls = [&](EncoderOp op) { return profile.calls[static_cast<int>(op)]; };
  EXPECT_EQ(calls(EncoderOp::kEmbed), 2 * 2);  // Embed and the projection
  EXPECT_EQ(calls(EncoderOp::kQkv), 2 * c.num_layers);
  EXPECT_EQ(calls(EncoderOp::kAttention), 2 * c.num_layers);
  EXPECT_EQ(calls(EncoderOp::kOut), 2 * c.num_layers);
  EXPECT_EQ(calls(EncoderOp::kNorm), 2 * 2 * c.num_layers);  // post-norm: no final norm
  EXPECT_EQ(calls(EncoderOp::kFeedForward), 2 * c.num_layers);
  EXPECT_STREQ(EncoderOpName(EncoderOp::kFeedForward), "ffn");
  // A backend whose norms add the residuals: the profile passes that on
  // (the sequence is the norms-add one) and counts AddNorm as a norm.
  RecordingBackend plain_add, profiled_add;
  plain_add.norms_add_residuals = profiled_add.norms_add_residuals = true;
  RunEncoder(c, plain_add);
  OpProfile add_profile;
  RunEncoder(c, profiled_add, &add_profile);
  EXPECT_EQ(profiled_add.calls, plain_add.calls);
  EXPECT_NE(plain_add.calls, plain.calls);
  EXPECT_EQ(add_profile.calls[static_cast<int>(EncoderOp::kNorm)], 2 * c.num_layers);
}

// The CPU encoder did not check Linear shapes against the config (only the
// CUDA one did); both now refuse a mismatch at load, naming the weight.
TEST(EncoderBackendTest, CpuEncoderRefusesAWeightOfTheWrongShape) {
  const EncoderConfig c = Tiny(/*norm_first=*/false);
  TensorMap weights = RandomEncoderWeights(c, 2);
  const std::string name = LayerWeightName(1, "ffn.in") + ".weight";
  weights[name] = Tensor::Zeros(DType::kFloat32, {c.intermediate_size, c.hidden_size + 1});
  auto encoder = Encoder::Create(c, std::move(weights), EncoderOptions{});
  ASSERT_FALSE(encoder.ok());
  EXPECT_EQ(encoder.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(encoder.status().message().find(name + " is [24, 17] but the config needs [24, 16]"),
            std::string::npos)
      << encoder.status().message();
}

TEST(EncoderBackendTest, MissingNormIsNotFound) {
  const EncoderConfig c = Tiny(/*norm_first=*/true);
  TensorMap weights = RandomEncoderWeights(c, 3);
  weights.erase("final_norm.bias");
  auto encoder = Encoder::Create(c, std::move(weights), EncoderOptions{});
  ASSERT_FALSE(encoder.ok());
  EXPECT_EQ(encoder.status().code(), StatusCode::kNotFound);
  EXPECT_NE(encoder.status().message().find("final_norm.bias"), std::string::npos);
}

// A tanh layer activation used to run as ReLU without a word.
TEST(EncoderBackendTest, RefusesALayerActivationItCannotRun) {
  EncoderConfig c = Tiny(/*norm_first=*/false);
  c.activation = Activation::kTanh;
  auto encoder = Encoder::Create(c, RandomEncoderWeights(c, 4), EncoderOptions{});
  ASSERT_FALSE(encoder.ok());
  EXPECT_EQ(encoder.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(encoder.status().message().find("gelu or relu, not tanh"), std::string::npos)
      << encoder.status().message();
}

}  // namespace
}  // namespace encoderd
