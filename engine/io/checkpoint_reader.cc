// Format detection and the steps every format shares: choosing the state
// dict, flattening names, converting float64 to float32.
#include "engine/io/checkpoint_reader.h"

#include <map>
#include <string_view>
#include <tuple>
#include <vector>

#include "engine/io/checkpoint_formats.h"
#include "engine/io/state_dict.h"

namespace encoderd {
namespace {

// What an omegaconf node holds: a DictConfig its entries (`_content`), a
// value node its value (`_val`); anything else itself. A few steps at most:
// a hostile pickle may make a node hold itself.
const PickleValue* Unwrap(const PickleValue* v) {
  for (int step = 0; step < 4 && v != nullptr && v->kind == PickleKind::kPlaceholder; ++step) {
    const PickleValue* inner = DictGet(v, "_content");
    if (inner == nullptr) inner = DictGet(v, "_val");
    if (inner == nullptr) break;
    v = inner;
  }
  return v;
}

// fairseq 0.8-0.9: "args", an argparse.Namespace. 0.10 on: "cfg", an
// omegaconf DictConfig (its values in value nodes) or, from 0.12, a plain
// dict; its "model" section a DictConfig, a dict, or (models still built
// from argparse, as RoBERTa) a Namespace.
// Checkpoint::fairseq_args and fairseq_text_args from the pickle's root.
void ReadFairseqArgs(const PickleValue* root, Checkpoint* ckpt) {
  const PickleValue* section = DictGet(root, "args");
  if (section == nullptr || section->kind != PickleKind::kPlaceholder)
    section = Unwrap(DictGet(Unwrap(DictGet(root, "cfg")), "model"));
  if (section == nullptr ||
      (section->kind != PickleKind::kDict && section->kind != PickleKind::kPlaceholder))
    return;
  for (size_t i = 0; i + 1 < section->items.size(); i += 2) {
    const PickleValue* key = section->items[i];
    const PickleValue* value = Unwrap(section->items[i + 1]);
    if (key->kind != PickleKind::kString || value == nullptr) continue;
    if (value->kind == PickleKind::kInt || value->kind == PickleKind::kBool) {
      ckpt->fairseq_args[key->str] = value->int_value;
    } else if (value->kind == PickleKind::kString) {
      ckpt->fairseq_text_args[key->str] = value->str;
    }
  }
}

StatusOr<Checkpoint> FromPickled(StatusOr<PickledCheckpoint> pickled, CheckpointFormat format,
                                 const ReadOptions& options) {
  if (!pickled.ok()) return pickled.status();
  Checkpoint ckpt;
  ckpt.format = format;
  ckpt.placeholder_globals = std::move(pickled->placeholder_globals);
  ReadFairseqArgs(pickled->root, &ckpt);
  ASSIGN_OR_RETURN(const PickleValue* dict, SelectStateDict(pickled->root, options.state_dict_key));
  ASSIGN_OR_RETURN(ckpt.tensors, FlattenStateDict(dict, pickled->storages));
  return ckpt;
}

StatusOr<Checkpoint> FromFlat(StatusOr<TensorMap> tensors, CheckpointFormat format,
                              const ReadOptions& options) {
  if (!tensors.ok()) return tensors.status();
  Checkpoint ckpt;
  ckpt.format = format;
  ASSIGN_OR_RETURN(ckpt.tensors, SelectPrefix(std::move(*tensors), options.state_dict_key));
  return ckpt;
}

StatusOr<Checkpoint> Dispatch(const std::shared_ptr<const Storage>& bytes,
                              const ReadOptions& options) {
  if (bytes->size() == 0) return DataLoss("empty file");
  if (ZipArchive::LooksLikeZip(*bytes)) {
    ASSIGN_OR_RETURN(ZipArchive zip, ZipArchive::Open(bytes));
    if (IsTorchScriptArchive(zip)) {
      return FromFlat(ReadTorchScript(bytes), CheckpointFormat::kTorchScript, options);
    }
    return FromPickled(ReadTorchZip(zip), CheckpointFormat::kTorchZip, options);
  }
  if (LooksLikeTorchLegacy(*bytes)) {
    return FromPickled(ReadTorchLegacy(bytes), CheckpointFormat::kTorchLegacy, options);
  }
  if (LooksLikeSafetensors(*bytes)) {
    return FromFlat(ReadSafetensors(bytes), CheckpointFormat::kSafetensors, options);
  }
  // A clone without `git lfs pull` holds a small text file where the
  // weights should be.
  constexpr std::string_view kLfsPointer = "version https://git-lfs.github.com/spec/";
  if (bytes->size() >= kLfsPointer.size() &&
      std::string_view(reinterpret_cast<const char*>(bytes->data()), kLfsPointer.size()) ==
          kLfsPointer) {
    return InvalidArgument(
        "a Git LFS pointer, not the weights: fetch them (git lfs pull) or download the file");
  }
  if (LooksLikeTar(*bytes)) {
    return Unimplemented(
        "tar checkpoint format of PyTorch < 0.4 is not supported; re-save it with a newer "
        "torch.save");
  }
  return InvalidArgument(
      "unrecognized checkpoint format (expected a torch.save zip or legacy file, a "
      "TorchScript archive, or safetensors)");
}

}  // namespace

const char* CheckpointFormatName(CheckpointFormat format) {
  switch (format) {
    case CheckpointFormat::kTorchZip:
      return "torch-zip";
    case CheckpointFormat::kTorchLegacy:
      return "torch-legacy";
    case CheckpointFormat::kTorchScript:
      return "torchscript";
    case CheckpointFormat::kSafetensors:
      return "safetensors";
  }
  return "unknown";
}

StatusOr<Checkpoint> ReadCheckpointBytes(std::shared_ptr<const Storage> bytes,
                                         const std::string& name, const ReadOptions& options) {
  if (!bytes) return InvalidArgument(name + ": no data");
  auto ckpt = Dispatch(bytes, options);
  if (!ckpt.ok()) return ckpt.status().WithContext(name);
  // float64 tensors become float32 copies, one per view: names of one view
  // (the same bytes, shape and strides: weights tied across layers) share
  // one copy. The copies may not add up to more than the file's bytes, so
  // that views overlapping in one storage cannot multiply them.
  using View = std::tuple<const std::byte*, std::vector<int64_t>, std::vector<int64_t>>;
  std::map<View, Tensor> converted;
  uint64_t copied = 0;
  for (const auto& [tensor_name, t] : ckpt->tensors) {
    if (t.dtype() != DType::kFloat64) continue;
    if (converted.emplace(View{t.raw_data(), t.shape(), t.strides()}, Tensor()).second)
      copied += t.nbytes() / 2;
  }
  if (copied > bytes->size()) {
    return DataLoss(name + ": its float64 tensors would be copied to " + std::to_string(copied) +
                    " bytes of float32, more than the file's " + std::to_string(bytes->size()) +
                    " (views overlapping in one storage are copied one by one)");
  }
  for (auto& [tensor_name, t] : ckpt->tensors) {
    if (t.dtype() != DType::kFloat64) continue;
    Tensor& copy = converted.at(View{t.raw_data(), t.shape(), t.strides()});
    if (!copy.defined()) copy = t.To(DType::kFloat32);
    t = copy;
  }
  return ckpt;
}

StatusOr<Checkpoint> ReadCheckpoint(const std::string& path, const ReadOptions& options) {
  ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  return ReadCheckpointBytes(std::move(file), path, options);
}

}  // namespace encoderd
