// Helpers shared by the checkpoint_*_test.cc files and model_fixtures.h.
#pragma once

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace encoderd::testing {

inline std::string CheckpointPath(const std::string& name) {
  return std::string(ENCODERD_FIXTURES_DIR) + "/checkpoints/" + name;
}

inline std::vector<std::byte> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  for (size_t i = 0; i < chars.size(); ++i) bytes[i] = static_cast<std::byte>(chars[i]);
  return bytes;
}

// Reads a dump written by fxcommon.write_tensor_dump (no reader under test
// involved); an entry it cannot read throws (it was once left out, silently).
inline TensorMap ReadTensorDump(const std::string& dir) {
  std::ifstream in(dir + "/index.json");
  const nlohmann::json index = nlohmann::json::parse(in);
  TensorMap out;
  for (const auto& [name, info] : index.items()) {
    const auto dtype = ParseDType(info["dtype"].get<std::string>());
    auto bytes = ReadFileBytes(dir + "/" + info["file"].get<std::string>());
    auto storage = std::make_shared<OwnedStorage>(std::move(bytes));
    auto t = Tensor::Contiguous(storage, dtype.value(), info["shape"].get<std::vector<int64_t>>());
    out.emplace(name, std::move(t.value()));
  }
  return out;
}

}  // namespace encoderd::testing
