#include "engine/model/weight_mapper.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

namespace encoderd {
namespace {

bool ShapeMatches(const std::vector<int64_t>& actual, const std::vector<int64_t>& expected) {
  if (actual.size() != expected.size()) return false;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (expected[i] != kAnySize && actual[i] != expected[i]) return false;
  }
  return true;
}

std::string ExpectedToString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i] == kAnySize ? "*" : std::to_string(shape[i]);
  }
  return s + "]";
}

// The bytes of the storages under the checkpoint's tensors, each byte once
// however many storages or tensors cover it.
size_t DistinctBytes(const TensorMap& checkpoint) {
  std::vector<std::pair<const std::byte*, const std::byte*>> spans;
  for (const auto& [name, t] : checkpoint) {
    if (!t.defined()) continue;
    const std::byte* begin = t.storage()->data();
    spans.emplace_back(begin, begin + t.storage()->size());
  }
  std::sort(spans.begin(), spans.end());
  size_t bytes = 0;
  const std::byte* covered = nullptr;  // the end of what is counted
  for (const auto& [begin, end] : spans) {
    const std::byte* from = covered && covered > begin ? covered : begin;
    if (end > from) bytes += static_cast<size_t>(end - from), covered = end;
  }
  return bytes;
}

}  // namespace

WeightMapper::WeightMapper(const TensorMap& checkpoint, std::string file)
    : checkpoint_(checkpoint),
      file_(std::move(file)),
      checkpoint_bytes_(DistinctBytes(checkpoint)) {}

Status WeightMapper::Spend(const std::string& key, size_t bytes) {
  // Twice, and a MiB: no family maps a tensor twice, but the weights' own
  // bytes and the checkpoint's may differ by small tables.
  mapped_bytes_ += bytes;
  if (mapped_bytes_ > 2 * checkpoint_bytes_ + (size_t{1} << 20)) {
    return DataLoss(file_ + ": the weights mapped up to '" + key + "' are " +
                    std::to_string(mapped_bytes_) + " bytes, more than twice the " +
                    std::to_string(checkpoint_bytes_) +
                    " bytes the checkpoint holds (tensors shared between layers?)");
  }
  return Status::Ok();
}

StatusOr<Tensor> WeightMapper::Find(const std::string& key,
                                    const std::vector<int64_t>& shape) const {
  auto it = checkpoint_.find(key);
  if (it == checkpoint_.end()) {
    return NotFound(file_ + ": missing tensor '" + key + "'");
  }
  const Tensor& t = it->second;
  if (!IsFloatingPoint(t.dtype())) {
    return InvalidArgument(file_ + ": tensor '" + key + "' is " +
                           std::string(DTypeName(t.dtype())) +
                           ", expected a floating-point tensor");
  }
  if (!ShapeMatches(t.shape(), shape)) {
    return InvalidArgument(file_ + ": tensor '" + key + "' has shape " + ShapeToString(t.shape()) +
                           ", expected " + ExpectedToString(shape));
  }
  return t;
}

Status WeightMapper::Add(const std::string& canonical, const std::string& key,
                         const std::vector<int64_t>& shape) {
  ASSIGN_OR_RETURN(Tensor t, Find(key, shape));
  RETURN_IF_ERROR(Spend(key, t.nbytes()));
  weights_[canonical] = std::move(t);
  return Status::Ok();
}

Status WeightMapper::AddLinear(const std::string& canonical, const std::string& key, int64_t out,
                               int64_t in) {
  RETURN_IF_ERROR(Add(canonical + ".weight", key + ".weight", {out, in}));
  return Add(canonical + ".bias", key + ".bias", {out});
}

Status WeightMapper::AddNorm(const std::string& canonical, const std::string& key, int64_t size) {
  if (!Has(key + ".weight") && Has(key + ".gamma")) {
    RETURN_IF_ERROR(Add(canonical + ".weight", key + ".gamma", {size}));
    return Add(canonical + ".bias", key + ".beta", {size});
  }
  RETURN_IF_ERROR(Add(canonical + ".weight", key + ".weight", {size}));
  return Add(canonical + ".bias", key + ".bias", {size});
}

Status WeightMapper::AddConcat(const std::string& canonical, const std::vector<std::string>& keys,
                               const std::vector<int64_t>& part_shape) {
  std::vector<Tensor> parts;
  for (const std::string& key : keys) {
    ASSIGN_OR_RETURN(Tensor t, Find(key, part_shape));
    if (!parts.empty() && t.dtype() != parts.front().dtype()) {
      return InvalidArgument(file_ + ": tensor '" + key + "' is " +
                             std::string(DTypeName(t.dtype())) + " but '" + keys.front() + "' is " +
                             std::string(DTypeName(parts.front().dtype())));
    }
    // Copied below with memcpy, so any alignment will do; keeping the mapped
    // tensor itself lets ReleasePages give the checkpoint's pages back.
    parts.push_back(t.IsContiguous() ? t : t.ToContiguous());
  }
  std::vector<int64_t> shape = part_shape;
  shape[0] *= static_cast<int64_t>(parts.size());
  for (const Tensor& part : parts) RETURN_IF_ERROR(Spend(keys.front(), part.nbytes()));
  Tensor stacked = Tensor::Zeros(parts.front().dtype(), shape);
  std::byte* dst = stacked.mutable_data<std::byte>();
  for (const Tensor& part : parts) {
    std::memcpy(dst, part.raw_data(), part.nbytes());
    dst += part.nbytes();
    part.ReleasePages();  // the stacked copy is what the engine reads
  }
  weights_[canonical] = std::move(stacked);
  return Status::Ok();
}

std::vector<std::string> WeightMapper::ChildNames(const std::string& prefix) const {
  std::vector<std::string> names;
  for (auto it = checkpoint_.lower_bound(prefix);
       it != checkpoint_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    const size_t dot = it->first.find('.', prefix.size());
    if (dot == std::string::npos || dot == prefix.size()) continue;
    std::string name = it->first.substr(prefix.size(), dot - prefix.size());
    if (names.empty() || names.back() != name) names.push_back(std::move(name));
  }
  return names;
}

int64_t WeightMapper::CountIndexed(const std::string& prefix) const {
  int64_t count = 0;
  for (auto it = checkpoint_.lower_bound(prefix);
       it != checkpoint_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    const std::string rest = it->first.substr(prefix.size());
    size_t digits = 0;
    while (digits < rest.size() && digits < 9 && rest[digits] >= '0' && rest[digits] <= '9') {
      ++digits;
    }
    if (digits == 0 || digits >= rest.size() || rest[digits] != '.') continue;
    count = std::max<int64_t>(count, std::stoll(rest.substr(0, digits)) + 1);
  }
  return count;
}

}  // namespace encoderd
