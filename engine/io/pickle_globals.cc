#include "engine/io/pickle_globals.h"

#include <unordered_map>

namespace encoderd {
namespace {

using Args = std::vector<const PickleValue*>;

Status ArgError(const std::string& what) { return DataLoss("bad arguments: " + what); }

StatusOr<int64_t> AsInt(const PickleValue* v, const char* what) {
  if (v->kind != PickleKind::kInt) return ArgError(std::string(what) + " is not an int");
  return v->int_value;
}

StatusOr<std::vector<int64_t>> AsIntTuple(const PickleValue* v, const char* what) {
  if (v->kind != PickleKind::kTuple && v->kind != PickleKind::kList) {
    return ArgError(std::string(what) + " is not a tuple");
  }
  std::vector<int64_t> out;
  out.reserve(v->items.size());
  for (const PickleValue* item : v->items) {
    ASSIGN_OR_RETURN(int64_t x, AsInt(item, what));
    out.push_back(x);
  }
  return out;
}

// _rebuild_tensor(storage, storage_offset, size, stride, ...): the arguments
// after `stride` (requires_grad, backward hooks, metadata) do not affect the data.
StatusOr<const PickleValue*> RebuildTensor(const Args& a, PickleArena* arena) {
  if (a.size() < 4) return ArgError("tensor rebuild needs at least 4 arguments");
  if (a[0]->kind != PickleKind::kStorage) return ArgError("tensor rebuild without a storage");
  PickleValue* t = arena->New(PickleKind::kTensor);
  t->storage = a[0];
  t->dtype = a[0]->dtype;
  ASSIGN_OR_RETURN(t->storage_offset, AsInt(a[1], "storage_offset"));
  ASSIGN_OR_RETURN(t->shape, AsIntTuple(a[2], "size"));
  ASSIGN_OR_RETURN(t->strides, AsIntTuple(a[3], "stride"));
  if (t->shape.size() != t->strides.size()) return ArgError("size and stride differ in rank");
  return t;
}

// _rebuild_parameter(data, requires_grad, backward_hooks[, state]): the tensor itself.
StatusOr<const PickleValue*> RebuildParameter(const Args& a, PickleArena*) {
  if (a.empty() || a[0]->kind != PickleKind::kTensor) {
    return ArgError("parameter rebuild without a tensor");
  }
  return a[0];
}

// collections.OrderedDict() / OrderedDict(list of pairs); builtins.dict likewise.
StatusOr<const PickleValue*> MakeDict(const Args& a, PickleArena* arena, ElementBudget* budget) {
  PickleValue* d = arena->New(PickleKind::kDict);
  if (a.empty()) return d;
  if (a.size() != 1 || (a[0]->kind != PickleKind::kList && a[0]->kind != PickleKind::kTuple)) {
    return ArgError("dict() takes a list of pairs");
  }
  RETURN_IF_ERROR(budget->Take(2 * a[0]->items.size()));
  for (const PickleValue* pair : a[0]->items) {
    if (pair->kind != PickleKind::kTuple || pair->items.size() != 2) {
      return ArgError("dict() item is not a pair");
    }
    d->items.push_back(pair->items[0]);
    d->items.push_back(pair->items[1]);
  }
  return d;
}

// tuple(x), list(x), set(x), frozenset(x), torch.Size(x): a copy of x's elements.
StatusOr<const PickleValue*> MakeSequence(PickleKind kind, const Args& a, PickleArena* arena,
                                          ElementBudget* budget) {
  PickleValue* s = arena->New(kind);
  if (a.empty()) return s;
  if (a.size() != 1 || !a[0]->IsContainer() || a[0]->kind == PickleKind::kDict) {
    return ArgError("sequence constructor takes one sequence");
  }
  RETURN_IF_ERROR(budget->Take(a[0]->items.size()));
  s->items = a[0]->items;
  return s;
}

// _codecs.encode(text, "latin1"): how protocol-2 pickles carry bytes objects.
StatusOr<const PickleValue*> CodecsEncode(const Args& a, PickleArena* arena) {
  if (a.size() != 2 || a[0]->kind != PickleKind::kString || a[1]->kind != PickleKind::kString) {
    return ArgError("_codecs.encode takes (str, encoding)");
  }
  if (a[1]->str != "latin1" && a[1]->str != "latin-1" && a[1]->str != "iso-8859-1") {
    return ArgError("_codecs.encode with unsupported encoding '" + a[1]->str + "'");
  }
  PickleValue* b = arena->New(PickleKind::kBytes);
  const std::string& in = a[0]->str;
  for (size_t i = 0; i < in.size(); ++i) {
    const auto c = static_cast<unsigned char>(in[i]);
    if (c < 0x80) {
      b->str.push_back(static_cast<char>(c));
    } else if ((c & 0xe0) == 0xc0 && i + 1 < in.size() && c <= 0xc3) {
      b->str.push_back(static_cast<char>(((c & 0x1f) << 6) | (in[++i] & 0x3f)));
    } else {
      return ArgError("_codecs.encode: text is not latin-1");
    }
  }
  return b;
}

const std::unordered_map<std::string, DType>& StorageTypes() {
  static const auto* types = new std::unordered_map<std::string, DType>{
      {"torch.FloatStorage", DType::kFloat32},     {"torch.HalfStorage", DType::kFloat16},
      {"torch.BFloat16Storage", DType::kBFloat16}, {"torch.DoubleStorage", DType::kFloat64},
      {"torch.LongStorage", DType::kInt64},        {"torch.IntStorage", DType::kInt32},
      {"torch.ShortStorage", DType::kInt16},       {"torch.CharStorage", DType::kInt8},
      {"torch.ByteStorage", DType::kUInt8},        {"torch.BoolStorage", DType::kBool},
  };
  return *types;
}

const char* const kCallables[] = {
    "collections.OrderedDict",
    "torch._utils._rebuild_tensor",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_parameter",
    "torch._utils._rebuild_parameter_with_state",
    "torch.Size",
    "_codecs.encode",
    "builtins.set",
    "builtins.frozenset",
    "builtins.list",
    "builtins.tuple",
    "builtins.dict",
};

}  // namespace

Status ElementBudget::Take(size_t n) {
  if (n > left_) return ResourceExhausted("pickle builds more elements than its size allows");
  left_ -= n;
  return Status::Ok();
}

bool IsAllowedGlobal(const std::string& name) {
  for (const char* c : kCallables) {
    if (name == c) return true;
  }
  return StorageTypes().count(name) > 0;
}

std::optional<DType> StorageTypeDType(const std::string& name) {
  auto it = StorageTypes().find(name);
  if (it == StorageTypes().end()) return std::nullopt;
  return it->second;
}

StatusOr<const PickleValue*> CallGlobal(const std::string& name, const PickleValue* args,
                                        PickleArena* arena, ElementBudget* budget) {
  const Args& a = args->items;
  if (name == "torch._utils._rebuild_tensor" || name == "torch._utils._rebuild_tensor_v2") {
    return RebuildTensor(a, arena);
  }
  if (name == "torch._utils._rebuild_parameter" ||
      name == "torch._utils._rebuild_parameter_with_state") {
    return RebuildParameter(a, arena);
  }
  if (name == "collections.OrderedDict" || name == "builtins.dict") {
    return MakeDict(a, arena, budget);
  }
  if (name == "torch.Size" || name == "builtins.tuple") {
    return MakeSequence(PickleKind::kTuple, a, arena, budget);
  }
  if (name == "builtins.list") return MakeSequence(PickleKind::kList, a, arena, budget);
  if (name == "builtins.set" || name == "builtins.frozenset") {
    return MakeSequence(PickleKind::kSet, a, arena, budget);
  }
  if (name == "_codecs.encode") return CodecsEncode(a, arena);
  return DataLoss("global '" + name + "' is not callable");
}

}  // namespace encoderd
