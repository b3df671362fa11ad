#include "kernels/cpu/bf16_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace encoderd::kernels {
namespace {

uint32_t Bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}

float FromBits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof(x));
  return x;
}

// The bf16 nearest to x (ties to the even one), as its upper 16 bits, chosen
// by distance in double between the two bf16 values around x; NaN -> 0x7fc0.
uint16_t NearestBf16(float x) {
  if (std::isnan(x)) return 0x7fc0;
  const uint32_t lo = Bits(x) & 0xffff0000u;  // toward zero
  if (FromBits(lo) == x) return static_cast<uint16_t>(lo >> 16);
  const uint32_t hi = lo + 0x10000u;  // away from zero (may be infinity)
  const double to_lo = std::fabs(static_cast<double>(x) - FromBits(lo));
  const double hi_value = std::isinf(FromBits(hi)) ? std::copysign(std::ldexp(1.0, 128), x)
                                                   : static_cast<double>(FromBits(hi));
  const double to_hi = std::fabs(static_cast<double>(x) - hi_value);
  const bool up = to_hi < to_lo || (to_hi == to_lo && (lo & 0x10000u) != 0);
  return static_cast<uint16_t>((up ? hi : lo) >> 16);
}

// Every kind of value: random magnitudes of both signs, exact ties with an
// even and an odd last bit, values that round up into the next binade or to
// infinity, zeros, subnormals, infinities and NaNs.
std::vector<float> Values() {
  std::vector<float> v = {0.f,
                          -0.f,
                          1.f,
                          FromBits(0x3f808000u),  // tie, even: stays 1.0
                          FromBits(0x3f818000u),  // tie, odd: rounds up
                          FromBits(0x3f80ffffu),
                          FromBits(0x3fffffffu),  // rounds up into 2.0
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          FromBits(0x7f7f7fffu),  // largest below the tie with infinity
                          std::numeric_limits<float>::denorm_min(),
                          FromBits(0x00018000u),  // subnormal tie
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN(),
                          FromBits(0x7f800001u),   // signalling NaN
                          FromBits(0xff80ffffu),   // negative NaN
                          FromBits(0x7fffffffu),   // NaN that plain rounding would carry to -0
                          FromBits(0xffffffffu)};  // and this one to +0
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits;
  while (v.size() < 1000) {
    const float x = FromBits(bits(rng));
    v.push_back(x);
  }
  return v;
}

// Every length up to 40 and every start within a vector (the vector loops'
// tails), then the whole set.
TEST(Bf16ConvertTest, RoundsToNearestEvenAndKeepsNaN) {
  const std::vector<float> values = Values();
  std::vector<uint16_t> want(values.size());
  for (size_t i = 0; i < values.size(); ++i) want[i] = NearestBf16(values[i]);
  auto check = [&](size_t begin, size_t n) {
    std::vector<uint16_t> converted(n + 1, 0xdead);
    ConvertFloatToBFloat16(values.data() + begin, converted.data(), static_cast<int64_t>(n));
    std::vector<float> rounded(n + 1, 1.f);
    RoundToBFloat16(values.data() + begin, rounded.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(converted[i], want[begin + i]) << "value " << begin + i << " of " << n;
      ASSERT_EQ(Bits(rounded[i]), static_cast<uint32_t>(want[begin + i]) << 16)
          << "value " << begin + i << " of " << n;
    }
    EXPECT_EQ(converted[n], 0xdead) << "wrote past " << n;
    EXPECT_EQ(rounded[n], 1.f) << "wrote past " << n;
  };
  for (size_t begin = 0; begin < 17; ++begin) {
    for (size_t n = 0; n <= 40; ++n) check(begin, n);
  }
  check(0, values.size());
}

TEST(Bf16ConvertTest, RoundsInPlace) {
  std::vector<float> values = Values();
  std::vector<uint16_t> want(values.size());
  for (size_t i = 0; i < values.size(); ++i) want[i] = NearestBf16(values[i]);
  RoundToBFloat16(values.data(), values.data(), static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(Bits(values[i]), static_cast<uint32_t>(want[i]) << 16) << "value " << i;
  }
}

}  // namespace
}  // namespace encoderd::kernels
