// Every checkpoint format against tensors dumped by real PyTorch
// (tests/fixtures/fx_checkpoints.py), bit for bit.
#include "engine/io/checkpoint_reader.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "tests/unit/checkpoint_test_util.h"

namespace encoderd {
namespace {

using testing::CheckpointPath;
using testing::ReadTensorDump;

void ExpectSameTensors(const TensorMap& expected, const TensorMap& actual) {
  std::vector<std::string> want, got;
  for (const auto& [name, t] : expected) want.push_back(name);
  for (const auto& [name, t] : actual) got.push_back(name);
  ASSERT_EQ(want, got);
  for (const auto& [name, t] : expected) {
    const Tensor& a = actual.at(name);
    EXPECT_TRUE(t.BitEqual(a)) << name << ": expected " << t.Describe() << ", got " << a.Describe();
  }
}

bool HasGlobal(const Checkpoint& c, const std::string& name) {
  return std::find(c.placeholder_globals.begin(), c.placeholder_globals.end(), name) !=
         c.placeholder_globals.end();
}

struct FormatCase {
  const char* file;
  CheckpointFormat format;
};

class CheckpointFormatTest : public ::testing::TestWithParam<FormatCase> {};

TEST_P(CheckpointFormatTest, MatchesPyTorchBitForBit) {
  auto ckpt = ReadCheckpoint(CheckpointPath(GetParam().file));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->format, GetParam().format);
  EXPECT_TRUE(ckpt->placeholder_globals.empty());
  ExpectSameTensors(ReadTensorDump(CheckpointPath("expected_sd")), ckpt->tensors);
  // float64 arrives as float32; other dtypes are kept.
  EXPECT_EQ(ckpt->tensors.at("f64").dtype(), DType::kFloat32);
  EXPECT_EQ(ckpt->tensors.at("bf16").dtype(), DType::kBFloat16);
  EXPECT_EQ(ckpt->tensors.at("ids").dtype(), DType::kInt64);
  EXPECT_EQ(ckpt->tensors.at("scalar").dim(), 0);
  EXPECT_EQ(ckpt->tensors.at("empty").numel(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Checkpoint, CheckpointFormatTest,
    ::testing::Values(FormatCase{"sd_zip.pt", CheckpointFormat::kTorchZip},
                      FormatCase{"sd_legacy.pt", CheckpointFormat::kTorchLegacy},
                      FormatCase{"sd.safetensors", CheckpointFormat::kSafetensors}),
    [](const auto& info) {
      std::string name = CheckpointFormatName(info.param.format);
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

class CheckpointTorchSaveTest : public ::testing::TestWithParam<const char*> {};

// Views, storage offsets and tied weights stay views into one storage (no copy).
TEST_P(CheckpointTorchSaveTest, ViewsShareStorage) {
  auto ckpt = ReadCheckpoint(CheckpointPath(GetParam()));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const TensorMap& t = ckpt->tensors;
  const Tensor& w = t.at("enc.weight");
  const Tensor& wt = t.at("enc.weight_t");
  EXPECT_FALSE(wt.IsContiguous());
  EXPECT_EQ(wt.strides(), (std::vector<int64_t>{1, 6}));
  EXPECT_EQ(wt.storage()->data(), w.storage()->data());
  EXPECT_EQ(t.at("enc.bias").offset(), 3);
  EXPECT_EQ(t.at("emb.weight").raw_data(), t.at("head.weight").raw_data());
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, CheckpointTorchSaveTest,
                         ::testing::Values("sd_zip.pt", "sd_legacy.pt"));

class CheckpointFairseqTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CheckpointFairseqTest, DefaultPicksModelAndRecordsPlaceholders) {
  auto ckpt = ReadCheckpoint(CheckpointPath(GetParam()));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  ExpectSameTensors(ReadTensorDump(CheckpointPath("expected_small")), ckpt->tensors);
  EXPECT_TRUE(HasGlobal(*ckpt, "argparse.Namespace"));
}

TEST_P(CheckpointFairseqTest, ExplicitKey) {
  ReadOptions options;
  options.state_dict_key = "model";
  auto ckpt = ReadCheckpoint(CheckpointPath(GetParam()), options);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  ExpectSameTensors(ReadTensorDump(CheckpointPath("expected_small")), ckpt->tensors);
}

TEST_P(CheckpointFairseqTest, MissingKeyNamesKeyAndFile) {
  ReadOptions options;
  options.state_dict_key = "model.nope";
  auto ckpt = ReadCheckpoint(CheckpointPath(GetParam()), options);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ckpt.status().message().find("model.nope"), std::string::npos);
  EXPECT_NE(ckpt.status().message().find(GetParam()), std::string::npos);
  // A key naming something that is not a dict.
  options.state_dict_key = "args";
  ckpt = ReadCheckpoint(CheckpointPath(GetParam()), options);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("placeholder"), std::string::npos)
      << ckpt.status().message();
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, CheckpointFairseqTest,
                         ::testing::Values("fairseq_zip.pt", "fairseq_legacy.pt"));

TEST(CheckpointStateDictKeyTest, DottedPathThroughNestedDicts) {
  ReadOptions options;
  options.state_dict_key = "state.model";
  auto ckpt = ReadCheckpoint(CheckpointPath("nested_zip.pt"), options);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  ExpectSameTensors(ReadTensorDump(CheckpointPath("expected_small")), ckpt->tensors);

  // Without a key the nested dicts are flattened with '.'.
  ckpt = ReadCheckpoint(CheckpointPath("nested_zip.pt"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->tensors.count("state.model.encoder.weight"), 1u);
  EXPECT_EQ(ckpt->tensors.size(), 2u);
}

TEST(CheckpointStateDictKeyTest, PrefixOnFlatFormats) {
  ReadOptions options;
  options.state_dict_key = "enc";
  auto ckpt = ReadCheckpoint(CheckpointPath("sd.safetensors"), options);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->tensors.size(), 3u);
  EXPECT_EQ(ckpt->tensors.count("weight_t"), 1u);
  options.state_dict_key = "missing";
  EXPECT_EQ(ReadCheckpoint(CheckpointPath("sd.safetensors"), options).status().code(),
            StatusCode::kNotFound);
}

class CheckpointHostileTest : public ::testing::TestWithParam<const char*> {};

// os.system / eval globals become placeholders and are never called.
TEST_P(CheckpointHostileTest, GlobalsAreNeverCalled) {
  const std::string marker = CheckpointPath("hostile_marker");
  ::unlink(marker.c_str());
  auto ckpt = ReadCheckpoint(CheckpointPath(GetParam()));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_TRUE(HasGlobal(*ckpt, "posix.system"))
      << ::testing::PrintToString(ckpt->placeholder_globals);
  EXPECT_TRUE(HasGlobal(*ckpt, "builtins.eval"));
  EXPECT_EQ(ckpt->tensors.size(), 1u);
  EXPECT_EQ(ckpt->tensors.count("w"), 1u);
  struct stat st;
  EXPECT_NE(::stat(marker.c_str(), &st), 0) << "a pickle global was executed";
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, CheckpointHostileTest,
                         ::testing::Values("hostile_zip.pt", "hostile_legacy.pt"));

TEST(CheckpointTorchScriptTest, ParametersAndBuffers) {
  auto ckpt = ReadCheckpoint(CheckpointPath("scripted.pt"));
#ifdef ENCODERD_WITH_TORCH
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->format, CheckpointFormat::kTorchScript);
  ExpectSameTensors(ReadTensorDump(CheckpointPath("expected_torchscript")), ckpt->tensors);
#else
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(ckpt.status().message().find("ENCODERD_WITH_TORCH"), std::string::npos);
#endif
}

#ifdef ENCODERD_WITH_TORCH
// Each tensor of a TorchScript archive is copied out of LibTorch. A buffer
// that repeats its storage (expand(): 4 KB of archive, a float32[2^17,
// 2^17] view) was copied whole, 64 GiB; now refused. Names of one tensor
// (tied weights) share one copy.
TEST(CheckpointTorchScriptTest, ViewsThatRepeatTheirStorageAreRefusedAndTiesShareACopy) {
  auto expanded = ReadCheckpoint(CheckpointPath("scripted_expanded.pt"));
  ASSERT_FALSE(expanded.ok());
  EXPECT_EQ(expanded.status().code(), StatusCode::kDataLoss) << expanded.status().ToString();
  EXPECT_NE(expanded.status().message().find("'x'"), std::string::npos)
      << expanded.status().ToString();
  EXPECT_NE(expanded.status().message().find("repeats elements of its storage"), std::string::npos)
      << expanded.status().ToString();
  auto tied = ReadCheckpoint(CheckpointPath("scripted_tied.pt"));
  ASSERT_TRUE(tied.ok()) << tied.status().ToString();
  const Tensor& weight = tied->tensors.at("0.weight");
  const Tensor& copy = tied->tensors.at("w_copy");
  EXPECT_TRUE(weight.BitEqual(copy));
  EXPECT_EQ(weight.raw_data(), copy.raw_data());
}
#endif

}  // namespace
}  // namespace encoderd
