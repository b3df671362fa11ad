// WeightMapper, the family mappings on synthetic state dicts, and EncoderConfig.
#include <gtest/gtest.h>

#include "engine/model/model_spec.h"
#include "engine/model/weight_mapper.h"
#include "engine/model/weight_mapping.h"

namespace encoderd {
namespace {

// A float32 tensor whose element i is start + i.
Tensor Iota(std::vector<int64_t> shape, float start) {
  Tensor t = Tensor::Zeros(DType::kFloat32, std::move(shape));
  float* data = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) data[i] = start + static_cast<float>(i);
  return t;
}

TEST(WeightMapper, ConcatenatesQkvInOrder) {
  TensorMap ckpt = {{"q", Iota({2, 3}, 0)}, {"k", Iota({2, 3}, 100)}, {"v", Iota({2, 3}, 200)}};
  WeightMapper mapper(ckpt, "f.bin");
  ASSERT_TRUE(mapper.AddConcat("qkv", {"q", "k", "v"}, {2, 3}).ok());
  const TensorMap weights = mapper.Release();
  const Tensor& qkv = weights.at("qkv");
  ASSERT_EQ(qkv.shape(), (std::vector<int64_t>{6, 3}));
  const float* d = qkv.data<float>();
  EXPECT_EQ(d[0], 0);
  EXPECT_EQ(d[5], 5);
  EXPECT_EQ(d[6], 100);
  EXPECT_EQ(d[12], 200);
  EXPECT_EQ(d[17], 205);
}

// Each mapped weight is packed on its own, so one tensor under many layers'
// names multiplied a small checkpoint into any amount of memory (a 12.8 MB
// file of 10,000 such layers ended in bad_alloc, an abort). The mapper
// refuses once the weights it mapped pass twice the checkpoint's bytes
// (and a MiB).
TEST(WeightMapper, RefusesToMultiplySharedTensors) {
  const Tensor shared = Iota({512, 512}, 0);  // 1 MiB
  TensorMap ckpt;
  for (int layer = 0; layer < 10; ++layer) ckpt.emplace("l" + std::to_string(layer), shared);
  WeightMapper mapper(ckpt, "f.bin");
  for (int layer = 0; layer < 3; ++layer)
    ASSERT_TRUE(
        mapper.Add("w" + std::to_string(layer), "l" + std::to_string(layer), {512, 512}).ok());
  const Status fourth = mapper.Add("w3", "l3", {512, 512});
  EXPECT_EQ(fourth.code(), StatusCode::kDataLoss);
  EXPECT_EQ(fourth.message(),
            "f.bin: the weights mapped up to 'l3' are 4194304 bytes, more than twice the 1048576 "
            "bytes the checkpoint holds (tensors shared between layers?)");

  WeightMapper concat(ckpt, "f.bin");  // AddConcat's copies count before they are made
  ASSERT_TRUE(concat.AddConcat("qkv0", {"l0", "l1", "l2"}, {512, 512}).ok());
  EXPECT_EQ(concat.AddConcat("qkv1", {"l3", "l4", "l5"}, {512, 512}).code(), StatusCode::kDataLoss);
}

// Distinct tensors, and views that split one storage, map whole.
TEST(WeightMapper, MapsDistinctTensorsAndSplitViewsWhole) {
  TensorMap ckpt;
  for (int layer = 0; layer < 10; ++layer)
    ckpt.emplace("l" + std::to_string(layer), Iota({512, 512}, static_cast<float>(layer)));
  const Tensor stacked = Iota({3 * 512, 512}, 0);  // fairseq 0.8's in_proj_weight, say
  for (int part = 0; part < 3; ++part) {
    auto view = Tensor::View(stacked.storage(), DType::kFloat32, {512, 512}, {512, 1},
                             int64_t{part} * 512 * 512);
    ASSERT_TRUE(view.ok());
    ckpt.emplace("part" + std::to_string(part), *view);
  }
  WeightMapper mapper(ckpt, "f.bin");
  for (const auto& [key, t] : ckpt) EXPECT_TRUE(mapper.Add(key, key, {512, 512}).ok()) << key;
  EXPECT_EQ(mapper.Release().size(), 13u);
}

TEST(WeightMapper, ErrorsNameFileAndKey) {
  TensorMap ckpt = {{"w", Iota({2, 3}, 0)}, {"ids", Tensor::Zeros(DType::kInt64, {4})}};
  WeightMapper mapper(ckpt, "f.bin");
  auto missing = mapper.Find("nope.weight", {2, 3});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "f.bin: missing tensor 'nope.weight'");
  auto shape = mapper.Find("w", {3, kAnySize});
  EXPECT_EQ(shape.status().message(), "f.bin: tensor 'w' has shape [2, 3], expected [3, *]");
  auto rank = mapper.Find("w", {6});
  EXPECT_FALSE(rank.ok());
  auto dtype = mapper.Find("ids", {4});
  EXPECT_NE(dtype.status().message().find("'ids' is int64"), std::string::npos);
}

TEST(WeightMapper, NormAcceptsGammaBeta) {
  TensorMap ckpt = {{"ln.gamma", Iota({4}, 1)}, {"ln.beta", Iota({4}, 0)}};
  WeightMapper mapper(ckpt, "f.bin");
  ASSERT_TRUE(mapper.AddNorm("norm", "ln", 4).ok());
  const TensorMap weights = mapper.Release();
  EXPECT_TRUE(weights.at("norm.weight").BitEqual(ckpt.at("ln.gamma")));
  EXPECT_TRUE(weights.at("norm.bias").BitEqual(ckpt.at("ln.beta")));
}

TEST(WeightMapper, CountsIndexedChildren) {
  TensorMap ckpt = {{"enc.layers.0.a", Iota({1}, 0)},
                    {"enc.layers.2.a", Iota({1}, 0)},
                    {"enc.layers.10.b", Iota({1}, 0)},
                    {"enc.layers.x.a", Iota({1}, 0)},
                    {"enc.layersX.20.a", Iota({1}, 0)}};
  WeightMapper mapper(ckpt, "f.bin");
  EXPECT_EQ(mapper.CountIndexed("enc.layers."), 11);
  EXPECT_EQ(mapper.CountIndexed("dec.layers."), 0);
}

// A one-layer nn.TransformerEncoder state dict, hidden 4, FFN 6.
TensorMap TinyGenericStateDict() {
  TensorMap sd;
  float next = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    sd[name] = Iota(shape, next);
    next += 1000;
  };
  add("emb.weight", {10, 4});
  const std::string p = "enc.layers.0.";
  add(p + "self_attn.in_proj_weight", {12, 4});
  add(p + "self_attn.in_proj_bias", {12});
  add(p + "self_attn.out_proj.weight", {4, 4});
  add(p + "self_attn.out_proj.bias", {4});
  add(p + "linear1.weight", {6, 4});
  add(p + "linear1.bias", {6});
  add(p + "linear2.weight", {4, 6});
  add(p + "linear2.bias", {4});
  for (const char* norm : {"norm1", "norm2"}) {
    add(p + norm + ".weight", {4});
    add(p + norm + ".bias", {4});
  }
  return sd;
}

TEST(TransformerEncoderMapping, InfersShapesAndMapsWithoutCopies) {
  const TensorMap sd = TinyGenericStateDict();
  WeightMapper mapper(sd, "m.pt");
  WeightPrefixes prefixes;
  prefixes.token_embedding = "emb";
  prefixes.layers = "enc.layers";
  EncoderConfig config;
  ASSERT_TRUE(MapTransformerEncoderWeights(mapper, prefixes, &config).ok());
  EXPECT_EQ(config.vocab_size, 10);
  EXPECT_EQ(config.hidden_size, 4);
  EXPECT_EQ(config.num_layers, 1);
  EXPECT_EQ(config.intermediate_size, 6);
  EXPECT_EQ(config.max_positions, 0);
  EXPECT_FALSE(config.final_norm);
  const TensorMap weights = mapper.Release();
  EXPECT_EQ(weights.size(), 13u);
  EXPECT_EQ(weights.at("layers.0.attention.qkv.weight").raw_data(),
            sd.at("enc.layers.0.self_attn.in_proj_weight").raw_data());
  EXPECT_EQ(weights.at("layers.0.ffn.out.weight").raw_data(),
            sd.at("enc.layers.0.linear2.weight").raw_data());
}

TEST(TransformerEncoderMapping, WrongShapeNamesKey) {
  TensorMap sd = TinyGenericStateDict();
  sd["enc.layers.0.linear2.weight"] = Iota({4, 5}, 0);
  WeightMapper mapper(sd, "m.pt");
  WeightPrefixes prefixes;
  prefixes.token_embedding = "emb";
  prefixes.layers = "enc.layers";
  EncoderConfig config;
  Status status = MapTransformerEncoderWeights(mapper, prefixes, &config);
  EXPECT_EQ(status.message(),
            "m.pt: tensor 'enc.layers.0.linear2.weight' has shape [4, 5], expected [4, 6]");
}

EncoderConfig ValidConfig() {
  EncoderConfig c;
  c.vocab_size = 100;
  c.hidden_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.intermediate_size = 128;
  c.max_positions = 514;
  c.max_tokens = 512;
  c.pad_token_id = 1;
  c.position_rule = PositionRule::kAfterPaddingIdx;
  return c;
}

TEST(EncoderConfig, Validate) {
  EXPECT_TRUE(ValidConfig().Validate().ok());
  EncoderConfig heads = ValidConfig();
  heads.num_heads = 5;
  EXPECT_NE(heads.Validate().message().find("num_heads = 5 does not divide hidden_size 64"),
            std::string::npos);
  EncoderConfig positions = ValidConfig();
  positions.max_tokens = 513;
  EXPECT_NE(positions.Validate().message().find("max_tokens"), std::string::npos);
  EncoderConfig labels = ValidConfig();
  labels.num_labels = 2;
  EXPECT_NE(labels.Validate().message().find("labels"), std::string::npos);
  labels.labels = {"a", "b"};
  EXPECT_TRUE(labels.Validate().ok());
  EncoderConfig special = ValidConfig();
  special.special_tokens.unk = 100;
  EXPECT_NE(special.Validate().message().find("special_tokens"), std::string::npos);
  EncoderConfig relative = ValidConfig();
  relative.relative_attention_buckets = 32;
  EXPECT_TRUE(relative.Validate().ok());
  relative.relative_attention_buckets = 30;  // halves, then halves again
  EXPECT_NE(relative.Validate().message().find("relative_attention_buckets = 30"),
            std::string::npos);
  relative.relative_attention_buckets = 32;
  relative.relative_attention_max_distance = 8;  // not beyond the exact distances
  EXPECT_NE(relative.Validate().message().find("relative_attention_max_distance = 8"),
            std::string::npos);
}

// A card's max_tokens is bounded: a relative attention table is made from
// it (heads x 2 max_tokens - 1 values), so a huge one failed to allocate
// (an abort) or, past 2^62, overflowed into a small table written out of
// bounds.
TEST(EncoderConfig, MaxTokensIsBounded) {
  EncoderConfig none = ValidConfig();
  none.position_rule = PositionRule::kNone;
  none.max_positions = 0;
  none.max_tokens = kMaxTokensLimit;
  EXPECT_TRUE(none.Validate().ok());
  for (int64_t tokens : {kMaxTokensLimit + 1, int64_t{1} << 31, (int64_t{1} << 62) + 1}) {
    none.max_tokens = tokens;
    EXPECT_NE(none.Validate().message().find("max_tokens = " + std::to_string(tokens) +
                                             " is not in [1, 1048576]"),
              std::string::npos)
        << none.Validate().message();
  }
  EncoderConfig relative = ValidConfig();
  relative.position_rule = PositionRule::kNone;
  relative.max_positions = 0;
  relative.relative_attention_buckets = 32;
  relative.max_tokens = kMaxTokensLimit;  // 4 heads x 2^21 - 1 distances: within the bound
  EXPECT_TRUE(relative.Validate().ok());
  relative.hidden_size = relative.num_heads = 64;  // 64 heads x 2^21 - 1: beyond it
  EXPECT_NE(relative.Validate().message().find(
                "max_tokens = 1048576 with 64 heads makes a relative attention table"),
            std::string::npos)
      << relative.Validate().message();
  relative.hidden_size = relative.num_heads = int64_t{1} << 60;  // no overflow on the way
  EXPECT_FALSE(relative.Validate().ok());
  // DeBERTa's disentangled attention: up to kMaxDisentangledTokens, its
  // layout checked.
  EncoderConfig deberta = ValidConfig();
  deberta.family = ModelFamily::kDeberta;
  deberta.position_rule = PositionRule::kNone;
  deberta.max_positions = 0;
  deberta.attention_span = deberta.position_buckets = 256;
  deberta.max_relative_positions = 512;
  deberta.content_to_position = deberta.position_to_content = true;
  deberta.max_tokens = kMaxDisentangledTokens;
  EXPECT_TRUE(deberta.Validate().ok()) << deberta.Validate().message();
  deberta.max_tokens = kMaxDisentangledTokens + 1;
  EXPECT_NE(deberta.Validate().message().find(
                "max_tokens = 8193 is more than the 8192 tokens disentangled attention takes"),
            std::string::npos)
      << deberta.Validate().message();
  deberta.max_tokens = 512;
  deberta.position_buckets = 128;  // not the span
  EXPECT_NE(deberta.Validate().message().find("position_buckets = 128"), std::string::npos);
  deberta.position_buckets = 256;
  deberta.max_relative_positions = 128;  // not beyond the exact distances
  EXPECT_NE(deberta.Validate().message().find("max_relative_positions = 128"), std::string::npos);
  // Nor one beyond them: the log scale would divide by log(1) (until
  // 2026-12-05 a column table that decreased, and the kernels wrote out of
  // bounds).
  deberta.max_relative_positions = 129;
  EXPECT_NE(deberta.Validate().message().find("max_relative_positions = 129 is not above 129"),
            std::string::npos)
      << deberta.Validate().message();
  deberta.max_relative_positions = 130;
  EXPECT_TRUE(deberta.Validate().ok()) << deberta.Validate().message();
  deberta.max_relative_positions = 512;
  deberta.content_to_position = deberta.position_to_content = false;
  EXPECT_NE(deberta.Validate().message().find("neither disentangled term"), std::string::npos);
}

TEST(ModelSpecNames, RoundTrip) {
  for (ModelFamily f :
       {ModelFamily::kBert, ModelFamily::kRoberta, ModelFamily::kXlmRoberta,
        ModelFamily::kCamembert, ModelFamily::kData2VecText, ModelFamily::kRobertaPreLayerNorm,
        ModelFamily::kDistilbert, ModelFamily::kElectra, ModelFamily::kMpnet, ModelFamily::kDeberta,
        ModelFamily::kTorchtextRoberta, ModelFamily::kFairseqRoberta,
        ModelFamily::kTransformerEncoder}) {
    EXPECT_EQ(ParseModelFamily(ModelFamilyName(f)), f);
  }
  for (Activation a : {Activation::kGelu, Activation::kRelu, Activation::kTanh}) {
    EXPECT_EQ(ParseActivation(ActivationName(a)), a);
  }
  for (PositionRule r :
       {PositionRule::kNone, PositionRule::kFromZero, PositionRule::kAfterPaddingIdx}) {
    EXPECT_EQ(ParsePositionRule(PositionRuleName(r)), r);
  }
  EXPECT_EQ(ParsePooling("mean"), Pooling::kMean);
  for (Pooling p : kAllPoolings) EXPECT_EQ(ParsePooling(PoolingName(p)), p);
  EXPECT_FALSE(ParsePooling("median").has_value());
  EXPECT_EQ(LayerWeightName(3, "norm1.weight"), "layers.3.norm1.weight");
}

// Classify's scores follow Hugging Face's text-classification pipeline.
TEST(ModelMappingTest, HeadOutputFollowsProblemTypeAndLabelCount) {
  EXPECT_EQ(ParseProblemType("regression"), ProblemType::kRegression);
  EXPECT_EQ(ParseProblemType("multi_label_classification"), ProblemType::kMultiLabel);
  EXPECT_EQ(ParseProblemType("single_label_classification"), ProblemType::kSingleLabel);
  EXPECT_FALSE(ParseProblemType("ranking").has_value());
  EncoderConfig c;
  const auto output = [&c](int64_t labels, ProblemType problem) {
    c.num_labels = labels;
    c.problem_type = problem;
    return std::string(HeadOutputName(c.head_output()));
  };
  EXPECT_EQ(output(3, ProblemType::kUnspecified), "softmax");
  EXPECT_EQ(output(3, ProblemType::kSingleLabel), "softmax");
  EXPECT_EQ(output(3, ProblemType::kMultiLabel), "sigmoid");
  EXPECT_EQ(output(1, ProblemType::kUnspecified), "sigmoid");
  EXPECT_EQ(output(1, ProblemType::kSingleLabel), "sigmoid");  // the pipeline's order of checks
  EXPECT_EQ(output(1, ProblemType::kRegression), "logits");
  EXPECT_EQ(output(3, ProblemType::kRegression), "logits");
  // A cross-encoder's activation (score_output) decides where it is set
  // (ApplyHfConfig sets it for more outputs only in a CrossEncoder's folder).
  c.score_output = HeadOutput::kLogits;
  EXPECT_EQ(output(1, ProblemType::kUnspecified), "logits");
  EXPECT_EQ(output(3, ProblemType::kUnspecified), "logits");
  c.score_output = HeadOutput::kTanh;
  EXPECT_EQ(output(1, ProblemType::kRegression), "tanh");
}

}  // namespace
}  // namespace encoderd
