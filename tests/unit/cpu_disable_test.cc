// ctest's fallback runs of this binary (unit_cpu_fallback, unit_cpu_avx2,
// unit_cpu_portable: tests/CMakeLists.txt) set ENCODERD_CPU_DISABLE; each
// runs this test too, so that a run whose switch did not take effect fails
// instead of testing the native paths once more.
#include <gtest/gtest.h>

#include "tests/cpu_disable_check.h"

namespace encoderd {
namespace {

TEST(CpuDisableTest, TheFeaturesNamedAreOff) { test_support::ExpectCpuDisableHonoured(); }

}  // namespace
}  // namespace encoderd
