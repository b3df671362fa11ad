#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cstring>

namespace encoderd {
namespace {

std::shared_ptr<OwnedStorage> FloatStorage(std::initializer_list<float> values) {
  auto s = std::make_shared<OwnedStorage>(values.size() * sizeof(float));
  std::memcpy(s->mutable_data(), values.begin(), s->size());
  return s;
}

TEST(TensorTest, ViewRejectsOutOfBoundsExtent) {
  auto storage = FloatStorage({1, 2, 3, 4});
  EXPECT_TRUE(Tensor::View(storage, DType::kFloat32, {2, 2}, {2, 1}, 0).ok());
  auto bad = Tensor::View(storage, DType::kFloat32, {2, 2}, {2, 1}, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_FALSE(Tensor::View(storage, DType::kFloat32, {2, 2}, {2}, 0).ok());
  EXPECT_FALSE(Tensor::View(storage, DType::kFloat32, {1LL << 40, 1LL << 40}, {1, 1}, 0).ok());
}

TEST(TensorTest, TransposedViewBecomesContiguousCopy) {
  auto storage = FloatStorage({1, 2, 3, 4, 5, 6});
  auto t = Tensor::View(storage, DType::kFloat32, {3, 2}, {1, 3}, 0);  // transpose of [2,3]
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->IsContiguous());
  Tensor c = t->ToContiguous();
  ASSERT_TRUE(c.IsContiguous());
  const float* p = c.data<float>();
  EXPECT_EQ(std::vector<float>(p, p + 6), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

// A legacy checkpoint's float storage can start at an odd byte offset of the
// file; To() and ToContiguous() must hand out an aligned copy (UBSan flagged
// misaligned float loads in the embedding kernel before).
TEST(TensorTest, MisalignedDataBecomesAnAlignedCopy) {
  const float values[3] = {1.5f, -2.f, 3.25f};
  auto bytes = std::make_shared<OwnedStorage>(1 + sizeof(values));
  std::memcpy(bytes->mutable_data() + 1, values, sizeof(values));
  auto slice = std::make_shared<StorageSlice>(bytes, 1, sizeof(values));
  auto t = Tensor::Contiguous(slice, DType::kFloat32, {3});
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->IsAligned());
  for (const Tensor& c : {t->To(DType::kFloat32), t->ToContiguous()}) {
    EXPECT_TRUE(c.IsAligned());
    EXPECT_NE(c.raw_data(), t->raw_data());
    float got[3];
    std::memcpy(got, c.raw_data(), sizeof(got));
    EXPECT_EQ(std::vector<float>(got, got + 3), std::vector<float>(values, values + 3));
  }
  auto aligned = Tensor::Contiguous(FloatStorage({1, 2}), DType::kFloat32, {2});
  ASSERT_TRUE(aligned.ok());
  EXPECT_EQ(aligned->To(DType::kFloat32).raw_data(), aligned->raw_data());  // no copy
}

TEST(TensorTest, ConvertsBetweenFloatTypes) {
  auto storage = FloatStorage({1.5f, -2.25f, 65504.f, 1e-8f});
  auto t = Tensor::Contiguous(storage, DType::kFloat32, {4});
  ASSERT_TRUE(t.ok());
  Tensor half = t->To(DType::kFloat16);
  Tensor back = half.To(DType::kFloat32);
  EXPECT_EQ(back.data<float>()[0], 1.5f);
  EXPECT_EQ(back.data<float>()[1], -2.25f);
  EXPECT_EQ(back.data<float>()[2], 65504.f);
  EXPECT_NEAR(back.data<float>()[3], 1e-8f, 6e-8f);  // subnormal in half
  Tensor bf = t->To(DType::kBFloat16);
  EXPECT_EQ(bf.To(DType::kFloat32).data<float>()[1], -2.25f);
}

TEST(DTypeTest, HalfRoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;  // inf / nan
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h) << h;
  }
}

}  // namespace
}  // namespace encoderd
