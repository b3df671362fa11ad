#include "engine/io/state_dict.h"

#include <vector>

namespace encoderd {
namespace {

constexpr int kMaxDepth = 64;
constexpr size_t kMaxVisits = size_t{1} << 20;
// The bytes of all the names built while flattening. The pickle's memo lets
// one dict appear under many keys, so names could otherwise grow without
// bound: 20 levels of {K1: d, K2: d} with 1 MiB keys, a 2 MiB pickle, name
// 2^20 entries of up to 20 MiB each. A real state dict's names take far
// less (BERT-base, bench/make_inputs.py's checkpoint: 197 names, 9,050
// bytes).
constexpr size_t kMaxNameBytes = size_t{64} << 20;

const char* KindName(PickleKind kind) {
  switch (kind) {
    case PickleKind::kNone:
      return "None";
    case PickleKind::kBool:
      return "bool";
    case PickleKind::kInt:
    case PickleKind::kBigInt:
      return "int";
    case PickleKind::kFloat:
      return "float";
    case PickleKind::kString:
      return "str";
    case PickleKind::kBytes:
      return "bytes";
    case PickleKind::kTuple:
      return "tuple";
    case PickleKind::kList:
      return "list";
    case PickleKind::kSet:
      return "set";
    case PickleKind::kDict:
      return "dict";
    case PickleKind::kGlobal:
      return "global";
    case PickleKind::kPlaceholder:
      return "placeholder object";
    case PickleKind::kStorage:
      return "storage";
    case PickleKind::kTensor:
      return "tensor";
  }
  return "value";
}

bool HoldsTensorDirectly(const PickleValue* dict) {
  for (size_t i = 1; i < dict->items.size(); i += 2) {
    if (dict->items[i]->kind == PickleKind::kTensor) return true;
  }
  return false;
}

std::vector<std::string> Split(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1) {
    parts.push_back(path.substr(start, dot - start));
  }
  parts.push_back(path.substr(start));
  return parts;
}

class Flattener {
 public:
  explicit Flattener(const StorageBytes& storages) : storages_(storages) {}

  Status Visit(const PickleValue* v, const std::string& name, int depth) {
    if (++visits_ > kMaxVisits) return ResourceExhausted("state dict has too many entries");
    if (v->kind == PickleKind::kTensor) {
      if (name.empty()) return InvalidArgument("the state dict is a single tensor, not a dict");
      auto t = ResolveTensor(*v, storages_);
      if (!t.ok()) return t.status().WithContext("tensor '" + name + "'");
      out_[name] = std::move(*t);  // a later duplicate wins, as in a Python dict
      return Status::Ok();
    }
    if (v->kind != PickleKind::kDict) return Status::Ok();  // other values carry no weights
    if (depth > kMaxDepth) return DataLoss("dicts nested too deeply at '" + name + "'");
    for (size_t i = 0; i + 1 < v->items.size(); i += 2) {
      const PickleValue* k = v->items[i];
      std::string key;
      if (k->kind == PickleKind::kString) {
        key = k->str;
      } else if (k->kind == PickleKind::kInt) {
        key = std::to_string(k->int_value);
      } else {
        continue;  // e.g. tuple keys: not parameter names
      }
      const size_t length = name.empty() ? key.size() : name.size() + 1 + key.size();
      if (length > kMaxNameBytes - name_bytes_) {
        return ResourceExhausted("state dict names add up to more than " +
                                 std::to_string(kMaxNameBytes >> 20) +
                                 " MiB (dicts shared under many keys?)");
      }
      name_bytes_ += length;
      RETURN_IF_ERROR(Visit(v->items[i + 1], name.empty() ? key : name + "." + key, depth + 1));
    }
    return Status::Ok();
  }
  TensorMap Take() { return std::move(out_); }

 private:
  const StorageBytes& storages_;
  TensorMap out_;
  size_t visits_ = 0;
  size_t name_bytes_ = 0;
};

}  // namespace

StatusOr<const PickleValue*> SelectStateDict(const PickleValue* root, const std::string& key) {
  if (root->kind != PickleKind::kDict) {
    return InvalidArgument(std::string("the checkpoint's top-level object is a ") +
                           KindName(root->kind) + ", not a dict");
  }
  if (key.empty()) {
    if (HoldsTensorDirectly(root)) return root;
    for (const char* candidate : {"state_dict", "model"}) {
      const PickleValue* v = DictGet(root, candidate);
      if (v != nullptr && v->kind == PickleKind::kDict) return v;
    }
    return root;
  }
  const std::vector<std::string> parts = Split(key);
  const PickleValue* current = root;
  std::string walked;
  for (size_t i = 0; i < parts.size();) {
    // Longest run of components that names an entry (keys may contain dots).
    const PickleValue* next = nullptr;
    size_t j = parts.size();
    std::string joined;
    for (; j > i; --j) {
      joined = parts[i];
      for (size_t k = i + 1; k < j; ++k) joined += "." + parts[k];
      next = DictGet(current, joined);
      if (next != nullptr) break;
    }
    if (next == nullptr) {
      return NotFound("state_dict_key '" + key + "': no entry '" + parts[i] + "'" +
                      (walked.empty() ? std::string() : " under '" + walked + "'"));
    }
    walked += (walked.empty() ? "" : ".") + joined;
    if (next->kind != PickleKind::kDict) {
      return InvalidArgument("state_dict_key '" + key + "': '" + walked + "' is a " +
                             KindName(next->kind) + ", not a dict");
    }
    current = next;
    i = j;
  }
  return current;
}

StatusOr<TensorMap> FlattenStateDict(const PickleValue* dict, const StorageBytes& storages) {
  Flattener flattener(storages);
  RETURN_IF_ERROR(flattener.Visit(dict, "", 0));
  return flattener.Take();
}

StatusOr<TensorMap> SelectPrefix(TensorMap tensors, const std::string& key) {
  if (key.empty()) return tensors;
  const std::string prefix = key + ".";
  TensorMap out;
  for (auto& [name, t] : tensors) {
    if (name.compare(0, prefix.size(), prefix) == 0) out.emplace(name.substr(prefix.size()), t);
  }
  if (out.empty())
    return NotFound("state_dict_key '" + key + "': no tensor named '" + prefix + "*'");
  return out;
}

}  // namespace encoderd
