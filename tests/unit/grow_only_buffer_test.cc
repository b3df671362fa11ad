// The CUDA encoder's page-locked staging buffer (engine/runtime/grow_only_buffer.h),
// with a host allocator that fails on demand in place of cudaMallocHost.
#include "engine/runtime/grow_only_buffer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <new>

namespace encoderd {
namespace {

bool fail_next = false;
int live = 0;

void* TestAllocate(size_t bytes) {
  if (fail_next) {
    fail_next = false;
    throw std::bad_alloc();
  }
  ++live;
  return std::malloc(bytes);
}

void TestRelease(void* p) {
  if (p != nullptr) --live;
  std::free(p);
}

// A failed growth left the old size recorded with no memory behind it: the
// next request of at most that size got a null pointer, and the CUDA encoder
// copied its token ids through it (a crash on a later, smaller batch once a
// pinned allocation had failed).
TEST(GrowOnlyBufferTest, AFailedGrowthLeavesNothingBehind) {
  {
    GrowOnlyBuffer<TestAllocate, TestRelease> buffer;
    void* first = buffer.Reserve(64);
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(buffer.Reserve(32), first);  // fits: no new allocation
    EXPECT_EQ(live, 1);
    fail_next = true;
    EXPECT_THROW(buffer.Reserve(4096), std::bad_alloc);
    EXPECT_EQ(live, 0);
    EXPECT_EQ(buffer.bytes(), 0u);
    void* again = buffer.Reserve(32);
    EXPECT_NE(again, nullptr);
    EXPECT_EQ(buffer.bytes(), 32u);
    EXPECT_EQ(live, 1);
  }
  EXPECT_EQ(live, 0);
}

}  // namespace
}  // namespace encoderd
