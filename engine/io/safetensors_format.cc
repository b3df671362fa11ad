// safetensors: u64 LE header length N, an N-byte JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the data section that the offsets index.
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/json_depth.h"
#include "engine/io/checkpoint_formats.h"

namespace encoderd {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;

std::optional<DType> SafetensorsDType(const std::string& s) {
  static const std::pair<const char*, DType> kTypes[] = {
      {"F32", DType::kFloat32}, {"F16", DType::kFloat16}, {"BF16", DType::kBFloat16},
      {"F64", DType::kFloat64}, {"I64", DType::kInt64},   {"I32", DType::kInt32},
      {"I16", DType::kInt16},   {"I8", DType::kInt8},     {"U8", DType::kUInt8},
      {"BOOL", DType::kBool},
  };
  for (const auto& [name, dtype] : kTypes) {
    if (s == name) return dtype;
  }
  return std::nullopt;
}

uint64_t HeaderLength(const Storage& bytes) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return n;  // little-endian hosts only, as the rest of the engine
}

struct Range {
  uint64_t begin, end;
  std::string name;
};

Status Bad(const std::string& name, const std::string& what) {
  return DataLoss("safetensors tensor '" + name + "': " + what);
}

}  // namespace

bool LooksLikeSafetensors(const Storage& bytes) {
  if (bytes.size() < 10) return false;
  const uint64_t n = HeaderLength(bytes);
  return n >= 2 && n <= bytes.size() - 8 && bytes.data()[8] == std::byte{'{'};
}

StatusOr<TensorMap> ReadSafetensors(std::shared_ptr<const Storage> bytes) {
  if (bytes->size() < 8) return DataLoss("safetensors: file shorter than its header length");
  const uint64_t n = HeaderLength(*bytes);
  if (n > bytes->size() - 8 || n > kMaxHeaderBytes) {
    return DataLoss("safetensors: header length " + std::to_string(n) + " exceeds the file (" +
                    std::to_string(bytes->size()) + " bytes)");
  }
  const char* text = reinterpret_cast<const char*>(bytes->data() + 8);
  if (!JsonDepthAtMost(std::string_view(text, n))) {
    return DataLoss("safetensors: header nests deeper than " + std::to_string(kMaxJsonDepth) +
                    " levels");
  }
  const nlohmann::json header = nlohmann::json::parse(text, text + n, nullptr, false);
  if (header.is_discarded() || !header.is_object()) {
    return DataLoss("safetensors: header is not a JSON object");
  }
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = bytes->size() - data_start;
  TensorMap tensors;
  std::vector<Range> ranges;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    if (!info.is_object()) return Bad(name, "entry is not an object");
    const auto dtype_it = info.find("dtype");
    const auto shape_it = info.find("shape");
    const auto offsets_it = info.find("data_offsets");
    if (dtype_it == info.end() || !dtype_it->is_string()) return Bad(name, "no dtype");
    const std::optional<DType> dtype = SafetensorsDType(dtype_it->get<std::string>());
    if (!dtype) return Bad(name, "unsupported dtype " + dtype_it->dump());
    if (shape_it == info.end() || !shape_it->is_array()) return Bad(name, "no shape");
    std::vector<int64_t> shape;
    uint64_t numel = 1;
    for (const auto& d : *shape_it) {
      if (!d.is_number_unsigned()) return Bad(name, "shape is not a list of sizes");
      const uint64_t v = d.get<uint64_t>();
      if (v > data_size) return Bad(name, "shape " + shape_it->dump() + " exceeds the file");
      numel = v == 0 ? 0 : (numel > data_size / v ? data_size + 1 : numel * v);
      shape.push_back(static_cast<int64_t>(v));
    }
    if (offsets_it == info.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
        !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
      return Bad(name, "data_offsets is not [begin, end]");
    }
    const uint64_t begin = (*offsets_it)[0].get<uint64_t>();
    const uint64_t end = (*offsets_it)[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return Bad(name, "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                           ") outside the " + std::to_string(data_size) + "-byte data section");
    }
    if (numel > data_size || numel * DTypeSize(*dtype) != end - begin) {
      return Bad(name, "shape " + shape_it->dump() + " does not match its " +
                           std::to_string(end - begin) + " bytes");
    }
    ranges.push_back({begin, end, name});
    auto storage = std::make_shared<StorageSlice>(bytes, static_cast<size_t>(data_start + begin),
                                                  static_cast<size_t>(end - begin));
    auto t = Tensor::Contiguous(std::move(storage), *dtype, std::move(shape));
    if (!t.ok()) return t.status().WithContext("safetensors tensor '" + name + "'");
    tensors.emplace(name, std::move(*t));
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      return Bad(ranges[i].name, "data overlaps tensor '" + ranges[i - 1].name + "'");
    }
  }
  return tensors;
}

}  // namespace encoderd
