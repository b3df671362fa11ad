// ModelRegistry's lookups and their answers.
#include "server/core/model_registry.h"

#include <gtest/gtest.h>

#include <string>

namespace encoderd::server {
namespace {

TEST(ModelRegistryTest, AnswersForNamesItDoesNotServe) {
  ModelRegistry registry({"a", "b"});
  EXPECT_EQ(registry.Find("").status().code(), StatusCode::kInvalidArgument);
  const auto loading = registry.Find("b");
  EXPECT_EQ(loading.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(loading.status().message(), "model 'b' is still loading");
  const auto unknown = registry.Find("c");
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(), "unknown model 'c'");
  registry.StartDraining();
  EXPECT_EQ(registry.Find("a").status().code(), StatusCode::kUnavailable);
}

// The name a client sent was quoted whole: 20,000 bytes of it made the
// answer's trailers larger than gRPC clients take, which read
// RESOURCE_EXHAUSTED instead of NOT_FOUND. 64 bytes of it are quoted, cut
// at a character's start.
TEST(ModelRegistryTest, QuotesAtMost64BytesOfAnUnknownName) {
  ModelRegistry registry({"a"});
  const auto long_name = registry.Find(std::string(20000, 'x'));
  EXPECT_EQ(long_name.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(long_name.status().message(),
            "unknown model '" + std::string(64, 'x') + "...' (20000 bytes)");
  // "é" is 2 bytes: the 64th byte starts one, which is left out whole.
  const std::string accents = std::string(63, 'y') + "\xC3\xA9" + std::string(100, 'z');
  EXPECT_EQ(registry.Find(accents).status().message(),
            "unknown model '" + std::string(63, 'y') + "...' (165 bytes)");
  const std::string exactly = std::string(64, 'w');
  EXPECT_EQ(registry.Find(exactly).status().message(), "unknown model '" + exactly + "'");
}

}  // namespace
}  // namespace encoderd::server
