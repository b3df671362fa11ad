// libFuzzer target: any byte string through every checkpoint reader. The
// contract under test: ReadCheckpointBytes returns OK or an error naming the
// input, never crashes, hangs or reads out of bounds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "engine/io/checkpoint_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::make_shared<encoderd::OwnedStorage>(size);
  if (size > 0) std::memcpy(bytes->mutable_data(), data, size);
  auto result = encoderd::ReadCheckpointBytes(bytes, "fuzz-input");
  if (!result.ok() && result.status().message().find("fuzz-input") == std::string::npos) {
    std::abort();  // every error must name the file
  }
  if (result.ok()) {
    // Touch every element so out-of-bounds views would be caught by ASan.
    for (const auto& [name, tensor] : result->tensors) {
      const encoderd::Tensor c = tensor.ToContiguous();
      volatile uint8_t sink = 0;
      for (size_t i = 0; i < c.nbytes(); ++i) sink ^= static_cast<uint8_t>(c.raw_data()[i]);
      (void)sink;
    }
  }
  return 0;
}
