#include "engine/runtime/encoder_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention.h"
#include "kernels/embeddings.h"
#include "kernels/layer_norm.h"

namespace encoderd {
namespace {

// The tensor `name` when it has exactly `shape`.
StatusOr<Tensor> Checked(const TensorMap& weights, const std::string& name,
                         const std::vector<int64_t>& shape) {
  auto it = weights.find(name);
  if (it == weights.end()) return NotFound("missing weight " + name);
  if (it->second.shape() != shape) {
    return InvalidArgument(name + " is " + ShapeToString(it->second.shape()) +
                           " but the config needs " + ShapeToString(shape));
  }
  return it->second;
}

class WeightWalk {
 public:
  WeightWalk(const EncoderConfig& c, TensorMap& weights, EncoderBackend& backend)
      : c_(c), weights_(weights), backend_(backend) {}

  Status Table(EmbeddingTable table, const std::string& name, int64_t rows) {
    ASSIGN_OR_RETURN(Tensor t, Checked(weights_, name, {rows, c_.embedding_width()}));
    RETURN_IF_ERROR(backend_.LoadTable(table, t).WithContext(name));
    weights_.erase(name);
    return Status::Ok();
  }

  Status Linear(int64_t layer, LinearSlot slot, int64_t out, int64_t in) {
    const std::string prefix = LinearWeightPrefix(layer, slot);
    ASSIGN_OR_RETURN(Tensor w, Checked(weights_, prefix + ".weight", {out, in}));
    Tensor b;
    if (weights_.count(prefix + ".bias")) {
      ASSIGN_OR_RETURN(b, Checked(weights_, prefix + ".bias", {out}));
    }
    RETURN_IF_ERROR(backend_.LoadLinear(layer, slot, w, b).WithContext(prefix));
    weights_.erase(prefix + ".weight");
    weights_.erase(prefix + ".bias");
    return Status::Ok();
  }

  Status Norm(int64_t layer, NormSlot slot, const std::string& prefix) {
    const int64_t width = slot == NormSlot::kEmbedding ? c_.embedding_width() : c_.hidden_size;
    ASSIGN_OR_RETURN(Tensor gamma, Checked(weights_, prefix + ".weight", {width}));
    ASSIGN_OR_RETURN(Tensor beta, Checked(weights_, prefix + ".bias", {width}));
    RETURN_IF_ERROR(backend_.LoadNorm(layer, slot, gamma, beta).WithContext(prefix));
    weights_.erase(prefix + ".weight");
    weights_.erase(prefix + ".bias");
    return Status::Ok();
  }

  // DeBERTa's relative embeddings, LayerNorm'd in fp32 on the host where
  // the model has encoder.rel_norm (as its encoder does before every layer
  // reads them).
  StatusOr<Tensor> RelativeEmbeddings() {
    const std::string name = "encoder.rel_embeddings";
    const int64_t rows = 2 * c_.attention_span, h = c_.hidden_size;
    ASSIGN_OR_RETURN(Tensor table, Checked(weights_, name, {rows, h}));
    const Tensor wide = table.To(DType::kFloat32).ToContiguous();
    Tensor out = Tensor::Zeros(DType::kFloat32, {rows, h});
    std::copy(wide.data<float>(), wide.data<float>() + rows * h, out.mutable_data<float>());
    if (c_.relative_norm) {
      ASSIGN_OR_RETURN(Tensor gamma, Checked(weights_, "encoder.rel_norm.weight", {h}));
      ASSIGN_OR_RETURN(Tensor beta, Checked(weights_, "encoder.rel_norm.bias", {h}));
      const Tensor g = gamma.To(DType::kFloat32).ToContiguous();
      const Tensor b = beta.To(DType::kFloat32).ToContiguous();
      float* x = out.mutable_data<float>();
      for (int64_t r = 0; r < rows; ++r, x += h) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < h; ++i) mean += x[i];
        mean /= h;
        for (int64_t i = 0; i < h; ++i) var += (x[i] - mean) * (x[i] - mean);
        const double inv = 1.0 / std::sqrt(var / h + c_.layer_norm_eps);
        for (int64_t i = 0; i < h; ++i) {
          x[i] = static_cast<float>((x[i] - mean) * inv) * g.data<float>()[i] + b.data<float>()[i];
        }
      }
      weights_.erase("encoder.rel_norm.weight");
      weights_.erase("encoder.rel_norm.bias");
    }
    weights_.erase(name);
    return out;
  }

  Status RelativeBias() {
    const std::string name = "encoder.relative_attention_bias";
    ASSIGN_OR_RETURN(Tensor t,
                     Checked(weights_, name, {c_.relative_attention_buckets, c_.num_heads}));
    RETURN_IF_ERROR(backend_.LoadRelativeBias(t).WithContext(name));
    weights_.erase(name);
    return Status::Ok();
  }

 private:
  const EncoderConfig& c_;
  TensorMap& weights_;
  EncoderBackend& backend_;
};

// Pre-norm: x += attn(LN1(x)); x += ffn(LN2(x)).
// Post-norm: x = LN1(x + attn(x)); x = LN2(x + ffn(x)), the residual
// added by the Linear layer's epilogue, or by the norm where the backend
// says so (NormsAddResiduals: into kProjected, then the norm of its sum).
// A layer runs as its two halves, which RunEncoder may stop between.
bool NormsAdd(const EncoderConfig& c, const EncoderBackend& ops) {
  return !c.norm_first && ops.NormsAddResiduals();
}

void RunAttentionHalf(const EncoderConfig& c, int64_t l, EncoderBackend& ops) {
  Buffer attention_in = Buffer::kHidden;
  if (c.norm_first) {
    ops.Norm(l, NormSlot::kNorm1, Buffer::kHidden, Buffer::kNormed);
    attention_in = Buffer::kNormed;
  }
  ops.Linear(l, LinearSlot::kQkv, attention_in, Epilogue::kNone, Buffer::kQkv);
  ops.Attention(l, Buffer::kQkv, Buffer::kContext);
  if (NormsAdd(c, ops)) {
    ops.Linear(l, LinearSlot::kOut, Buffer::kContext, Epilogue::kNone, Buffer::kProjected);
    ops.AddNorm(l, NormSlot::kNorm1, Buffer::kProjected, Buffer::kHidden, Buffer::kHidden);
  } else {
    ops.Linear(l, LinearSlot::kOut, Buffer::kContext, Epilogue::kResidual, Buffer::kHidden);
    if (!c.norm_first) ops.Norm(l, NormSlot::kNorm1, Buffer::kHidden, Buffer::kHidden);
  }
}

void RunFeedForwardHalf(const EncoderConfig& c, int64_t l, EncoderBackend& ops) {
  const Epilogue activation = c.activation == Activation::kGelu ? Epilogue::kGelu : Epilogue::kRelu;
  Buffer ffn_in = Buffer::kHidden;
  if (c.norm_first) {
    ops.Norm(l, NormSlot::kNorm2, Buffer::kHidden, Buffer::kNormed);
    ffn_in = Buffer::kNormed;
  }
  if (NormsAdd(c, ops)) {
    ops.FeedForward(l, ffn_in, activation, Buffer::kFfn, Buffer::kProjected, /*add_to_out=*/false);
    ops.AddNorm(l, NormSlot::kNorm2, Buffer::kProjected, Buffer::kHidden, Buffer::kHidden);
  } else {
    ops.FeedForward(l, ffn_in, activation, Buffer::kFfn, Buffer::kHidden, /*add_to_out=*/true);
    if (!c.norm_first) ops.Norm(l, NormSlot::kNorm2, Buffer::kHidden, Buffer::kHidden);
  }
}

// A backend's ops, each timed into a profile.
class TimedOps final : public EncoderBackend {
 public:
  TimedOps(EncoderBackend& ops, OpProfile& profile) : ops_(ops), profile_(profile) {}

  Status LoadTable(EmbeddingTable table, const Tensor& t) override {
    return ops_.LoadTable(table, t);
  }
  Status LoadLinear(int64_t layer, LinearSlot slot, const Tensor& weight,
                    const Tensor& bias) override {
    return ops_.LoadLinear(layer, slot, weight, bias);
  }
  Status LoadNorm(int64_t layer, NormSlot slot, const Tensor& gamma, const Tensor& beta) override {
    return ops_.LoadNorm(layer, slot, gamma, beta);
  }
  Status LoadRelativeBias(const Tensor& table) override { return ops_.LoadRelativeBias(table); }
  Status LoadPositionProjections(int64_t layer, const Tensor& relative) override {
    return ops_.LoadPositionProjections(layer, relative);
  }
  void Embed(Buffer out) override {
    Timed(EncoderOp::kEmbed, [&] { ops_.Embed(out); });
  }
  void Linear(int64_t layer, LinearSlot slot, Buffer in, Epilogue epilogue, Buffer out) override {
    Timed(OpOf(slot), [&] { ops_.Linear(layer, slot, in, epilogue, out); });
  }
  void FeedForward(int64_t layer, Buffer in, Epilogue activation, Buffer hidden, Buffer out,
                   bool add_to_out) override {
    Timed(EncoderOp::kFeedForward,
          [&] { ops_.FeedForward(layer, in, activation, hidden, out, add_to_out); });
  }
  void AddNorm(int64_t layer, NormSlot slot, Buffer in, Buffer residual, Buffer out) override {
    Timed(EncoderOp::kNorm, [&] { ops_.AddNorm(layer, slot, in, residual, out); });
  }
  bool NormsAddResiduals() const override { return ops_.NormsAddResiduals(); }
  void Norm(int64_t layer, NormSlot slot, Buffer in, Buffer out) override {
    Timed(EncoderOp::kNorm, [&] { ops_.Norm(layer, slot, in, out); });
  }
  void Attention(int64_t layer, Buffer qkv, Buffer out) override {
    Timed(EncoderOp::kAttention, [&] { ops_.Attention(layer, qkv, out); });
  }

 private:
  static EncoderOp OpOf(LinearSlot slot) {
    switch (slot) {
      case LinearSlot::kQkv:
        return EncoderOp::kQkv;
      case LinearSlot::kOut:
        return EncoderOp::kOut;
      case LinearSlot::kEmbeddingProject:
        return EncoderOp::kEmbed;
      case LinearSlot::kFfnIn:
      case LinearSlot::kFfnOut:
        break;
    }
    return EncoderOp::kFeedForward;
  }

  template <typename Fn>
  void Timed(EncoderOp op, Fn&& fn) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const int i = static_cast<int>(op);
    profile_.seconds[i] +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++profile_.calls[i];
  }

  EncoderBackend& ops_;
  OpProfile& profile_;
};

}  // namespace

const char* EncoderOpName(EncoderOp op) {
  switch (op) {
    case EncoderOp::kEmbed:
      return "embeddings";
    case EncoderOp::kQkv:
      return "attention.qkv";
    case EncoderOp::kAttention:
      return "attention";
    case EncoderOp::kOut:
      return "attention.out";
    case EncoderOp::kNorm:
      return "layer norms";
    case EncoderOp::kFeedForward:
      break;
  }
  return "ffn";
}

Status CheckDeviceDType(Device device, DType dtype) {
  const bool cpu = device == Device::kCpu;
  const DType first = cpu ? DType::kFloat32 : DType::kFloat16;
  if (dtype == first || dtype == DType::kBFloat16 || (cpu && dtype == DType::kInt8))
    return Status::Ok();
  return InvalidArgument(std::string("dtype ") + std::string(DTypeName(dtype)) +
                         " is not supported on " + DeviceName(device) + " (" +
                         std::string(DTypeName(first)) + ", bfloat16" + (cpu ? ", int8" : "") +
                         ")");
}

int64_t BufferWidth(const EncoderConfig& c, Buffer buffer) {
  switch (buffer) {
    case Buffer::kHidden:
    case Buffer::kContext:
    case Buffer::kNormedBf16:
      return c.hidden_size;
    case Buffer::kQkv:
      return 3 * c.hidden_size;
    case Buffer::kFfn:
      return c.intermediate_size;
    case Buffer::kEmbedded:
      return c.projects_embeddings() ? c.embedding_size : 0;
    case Buffer::kProjected:
      return c.norm_first ? 0 : c.hidden_size;
    case Buffer::kNormed:
      break;
  }
  return c.norm_first ? c.hidden_size : 0;
}

const char* LinearSlotName(LinearSlot slot) {
  switch (slot) {
    case LinearSlot::kQkv:
      return "attention.qkv";
    case LinearSlot::kOut:
      return "attention.out";
    case LinearSlot::kFfnIn:
      return "ffn.in";
    case LinearSlot::kFfnOut:
      return "ffn.out";
    case LinearSlot::kEmbeddingProject:
      break;
  }
  return "embeddings.project";
}

StatusOr<std::vector<std::string>> ParseFp32Linears(const std::string& list) {
  std::vector<std::string> names;
  std::string name;
  std::istringstream in(list);
  const LinearSlot slots[] = {LinearSlot::kQkv, LinearSlot::kOut, LinearSlot::kFfnIn,
                              LinearSlot::kFfnOut, LinearSlot::kEmbeddingProject};
  while (std::getline(in, name, ',')) {
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    if (name.empty()) continue;
    bool known = false;
    for (LinearSlot slot : slots) {
      const std::string slot_name = LinearSlotName(slot);
      if (name == slot_name) known = true;
      // layers.<N>.<slot>
      const std::string tail = "." + slot_name;
      if (slot != LinearSlot::kEmbeddingProject && name.rfind("layers.", 0) == 0 &&
          name.size() > tail.size() + 7 &&
          name.compare(name.size() - tail.size(), tail.size(), tail) == 0) {
        const std::string layer = name.substr(7, name.size() - tail.size() - 7);
        known |= !layer.empty() && layer.find_first_not_of("0123456789") == std::string::npos;
      }
    }
    if (!known) {
      return InvalidArgument("'" + name +
                             "' names no Linear layer (attention.qkv, attention.out, ffn.in, "
                             "ffn.out, embeddings.project, or layers.N.<one of the first four>)");
    }
    names.push_back(name);
  }
  return names;
}

Status CheckFp32Linears(const EncoderConfig& c, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    if (name.rfind("layers.", 0) != 0) continue;
    const std::string index = name.substr(7, name.find('.', 7) - 7);
    // ParseFp32Linears let only digits through; nine of them cannot overflow.
    if (index.empty() || index.size() > 9 || index != std::to_string(std::stoll(index)) ||
        std::stoll(index) >= c.num_layers) {
      return InvalidArgument("int8 fp32 layer '" + name + "': the model has layers 0.." +
                             std::to_string(c.num_layers - 1));
    }
  }
  return Status::Ok();
}

bool KeepsFp32(const EncoderOptions& options, int64_t layer, LinearSlot slot) {
  const std::string prefix = LinearWeightPrefix(layer, slot);
  for (const std::string& name : options.fp32_linears)
    if (name == prefix || name == LinearSlotName(slot)) return true;
  return false;
}

std::string LinearWeightPrefix(int64_t layer, LinearSlot slot) {
  if (slot == LinearSlot::kEmbeddingProject) return LinearSlotName(slot);
  return LayerWeightName(layer, LinearSlotName(slot));
}

Status LoadEncoderWeights(const EncoderConfig& c, TensorMap& weights, EncoderBackend& backend) {
  RETURN_IF_ERROR(c.Validate());
  if (c.activation != Activation::kGelu && c.activation != Activation::kRelu) {
    return InvalidArgument(std::string("the layers' activation must be gelu or relu, not ") +
                           ActivationName(c.activation));
  }
  WeightWalk walk(c, weights, backend);
  RETURN_IF_ERROR(walk.Table(EmbeddingTable::kWord, "embeddings.word", c.vocab_size));
  if (c.position_rule != PositionRule::kNone) {
    RETURN_IF_ERROR(walk.Table(EmbeddingTable::kPosition, "embeddings.position", c.max_positions));
  }
  if (c.type_vocab_size > 0) {
    RETURN_IF_ERROR(
        walk.Table(EmbeddingTable::kTokenType, "embeddings.token_type", c.type_vocab_size));
  }
  if (c.embedding_norm) RETURN_IF_ERROR(walk.Norm(-1, NormSlot::kEmbedding, "embeddings.norm"));
  if (c.projects_embeddings()) {
    RETURN_IF_ERROR(
        walk.Linear(-1, LinearSlot::kEmbeddingProject, c.hidden_size, c.embedding_size));
  }
  Tensor relative;
  if (c.attention_span > 0) {
    ASSIGN_OR_RETURN(relative, walk.RelativeEmbeddings());
  }
  const int64_t h = c.hidden_size, f = c.intermediate_size;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    RETURN_IF_ERROR(walk.Linear(i, LinearSlot::kQkv, 3 * h, h));
    if (c.attention_span > 0) {
      RETURN_IF_ERROR(backend.LoadPositionProjections(i, relative)
                          .WithContext(LayerWeightName(i, "attention.qkv")));
    }
    RETURN_IF_ERROR(walk.Linear(i, LinearSlot::kOut, h, h));
    RETURN_IF_ERROR(walk.Linear(i, LinearSlot::kFfnIn, f, h));
    RETURN_IF_ERROR(walk.Linear(i, LinearSlot::kFfnOut, h, f));
    RETURN_IF_ERROR(walk.Norm(i, NormSlot::kNorm1, LayerWeightName(i, "norm1")));
    RETURN_IF_ERROR(walk.Norm(i, NormSlot::kNorm2, LayerWeightName(i, "norm2")));
  }
  if (c.final_norm) RETURN_IF_ERROR(walk.Norm(-1, NormSlot::kFinal, "final_norm"));
  if (c.relative_attention_buckets > 0) RETURN_IF_ERROR(walk.RelativeBias());
  return Status::Ok();
}

bool RunEncoder(const EncoderConfig& c, EncoderBackend& backend, OpProfile* profile,
                const Encoder::StopCheck& stop) {
  if (profile != nullptr) {
    TimedOps timed(backend, *profile);
    const bool ran = RunEncoder(c, timed, nullptr, stop);
    ++profile->forwards;
    return ran;
  }
  if (c.projects_embeddings()) {
    backend.Embed(Buffer::kEmbedded);
    backend.Linear(-1, LinearSlot::kEmbeddingProject, Buffer::kEmbedded, Epilogue::kNone,
                   Buffer::kHidden);
  } else {
    backend.Embed(Buffer::kHidden);
  }
  const auto stopped = [&stop] { return stop && stop(); };
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (stopped()) return false;
    RunAttentionHalf(c, l, backend);
    if (stopped()) return false;
    RunFeedForwardHalf(c, l, backend);
  }
  if (c.final_norm) backend.Norm(-1, NormSlot::kFinal, Buffer::kHidden, Buffer::kHidden);
  return true;
}

Status Encoder::CheckOutputs(const Outputs& outputs) {
  for (size_t i = 0; i < outputs.poolings.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (outputs.poolings[i] == outputs.poolings[j]) {
        return InvalidArgument(std::string("pooling mode ") + PoolingName(outputs.poolings[i]) +
                               " asked twice in one forward");
      }
    }
  }
  return Status::Ok();
}

StatusOr<Encoder::Result> BackendEncoder::Forward(const PackedBatch& batch, const Outputs& outputs,
                                                  const StopCheck& stop) {
  RETURN_IF_ERROR(CheckOutputs(outputs));
  ASSIGN_OR_RETURN(Tensor hidden, HiddenStates(batch, stop));
  Result result;
  for (Pooling pooling : outputs.poolings) {
    ASSIGN_OR_RETURN(result.pooled[pooling], head_->PoolRows(hidden, batch, pooling));
  }
  if (outputs.hidden_states) result.hidden_states = std::move(hidden);
  return result;
}

BackendEncoder::BackendEncoder(const EncoderConfig& config, const EncoderOptions& options,
                               DType activations)
    : Encoder(config, options),
      activations_(activations),
      weights_(std::max<int64_t>(config.num_layers, 0)) {}

Status BackendEncoder::Load(TensorMap& weights, DType head_dtype, int head_threads) {
  RETURN_IF_ERROR(LoadEncoderWeights(config(), weights, *this));
  bf16_normed_ = options().bf16_activations && config().num_layers > 0 &&
                 weights_.linear(0, LinearSlot::kQkv)->bf16_values();
  bf16_attention_ =
      bf16_normed_ && kernels::AttentionTakesBf16Values(context(), config().head_dim());
  // oneDNN's fp32 and bf16 GEMMs add a residual (a sum post-op) at a cost
  // the norms' extra read is under (docs/architecture.md); the int8 kernels
  // add it in their epilogue without one, where the change showed no gain,
  // and on CUDA it is unmeasured: those keep it there.
  norms_add_residuals_ = context().device() == Device::kCpu && options().dtype != DType::kInt8;
  ASSIGN_OR_RETURN(head_, HostHead::Create(config(), weights, head_dtype, head_threads));
  return Status::Ok();
}

DType BackendEncoder::BufferType(Buffer buffer) const {
  const bool attention = buffer == Buffer::kQkv || buffer == Buffer::kContext;
  return buffer == Buffer::kNormedBf16 || (bf16_attention_ && attention) ? DType::kBFloat16
                                                                         : activations_;
}

int64_t BackendEncoder::BufferRowBytes(Buffer buffer) const {
  if (buffer == Buffer::kNormedBf16 && !bf16_normed_) return 0;
  if (buffer == Buffer::kProjected && !norms_add_residuals_) return 0;
  if (buffer == Buffer::kNormed && bf16_normed_) return 0;  // only its copy is written (Norm)
  return BufferWidth(config(), buffer) * static_cast<int64_t>(DTypeSize(BufferType(buffer)));
}

void BackendEncoder::SetTable(EmbeddingTable table, const void* data, int64_t rows) {
  tables_[static_cast<int>(table)] = Table{data, rows};
}

void BackendEncoder::SetNorm(int64_t layer, NormSlot slot, const float* gamma, const float* beta) {
  weights_.norm(layer, slot) = NormRef{gamma, beta};
}

void BackendEncoder::ReleaseWeights() {
  weights_ = SlotWeights<std::unique_ptr<kernels::PackedWeight>, NormRef>(0);
  for (Table& t : tables_) t = Table{};
}

int64_t BackendEncoder::table_rows(EmbeddingTable table) const {
  return tables_[static_cast<int>(table)].rows;
}

bool BackendEncoder::LinearsRunOnTeam(int64_t rows) const {
  const auto runs = [rows](const std::unique_ptr<kernels::PackedWeight>& w) {
    return w == nullptr || kernels::LinearRunsOnTeam(*w, rows);
  };
  if (!runs(weights_.linear(0, LinearSlot::kEmbeddingProject))) return false;
  for (int64_t l = 0; l < config().num_layers; ++l) {
    for (const LinearSlot slot :
         {LinearSlot::kQkv, LinearSlot::kOut, LinearSlot::kFfnIn, LinearSlot::kFfnOut}) {
      if (!runs(weights_.linear(l, slot))) return false;
    }
  }
  return true;
}

Status BackendEncoder::LoadLinear(int64_t layer, LinearSlot slot, const Tensor& weight,
                                  const Tensor& bias) {
  // int8 keeps the layers fp32_linears names in fp32; every other weight is
  // stored as the encoder's dtype.
  const DType type = options().dtype == DType::kInt8 && KeepsFp32(options(), layer, slot)
                         ? DType::kFloat32
                         : options().dtype;
  ASSIGN_OR_RETURN(auto packed,
                   PackLinear(context(), LinearWeightPrefix(layer, slot), weight, bias, type));
  weight_bytes_ += packed->bytes();
  weights_.linear(layer, slot) = std::move(packed);
  return Status::Ok();
}

Status BackendEncoder::LoadRelativeBias(const Tensor& table) {
  const EncoderConfig& c = config();
  const Tensor t = table.To(DType::kFloat32).ToContiguous();
  const float* rows = t.data<float>();
  const int64_t heads = c.num_heads, center = c.max_tokens - 1, width = 2 * center + 1;
  relative_bias_.assign(static_cast<size_t>(heads * width), 0.f);
  for (int64_t d = -center; d <= center; ++d) {
    const int64_t bucket =
        RelativePositionBucket(d, c.relative_attention_buckets, c.relative_attention_max_distance);
    for (int64_t h = 0; h < heads; ++h)
      relative_bias_[static_cast<size_t>(h * width + center + d)] = rows[bucket * heads + h];
  }
  return Status::Ok();
}

float BackendEncoder::AttentionScale() const {
  const EncoderConfig& c = config();
  const int terms = c.attention_span > 0
                        ? 1 + static_cast<int>(c.content_to_position) + c.position_to_content
                        : 1;
  // transformers' DeBERTa: torch.sqrt(torch.tensor(head_dim, dtype=float) * scale_factor).
  return 1.0f / std::sqrt(static_cast<float>(c.head_dim()) * static_cast<float>(terms));
}

Status BackendEncoder::LoadPositionProjections(int64_t layer, const Tensor& relative) {
  const EncoderConfig& c = config();
  if (context().device() != Device::kCpu) {
    return Unimplemented(
        std::string("DeBERTa's disentangled attention runs on the CPU only, not ") +
        DeviceName(context().device()));
  }
  const int64_t rows = relative.size(0), h = c.hidden_size, heads = c.num_heads, d = c.head_dim();
  // q | k | v of every relative embedding, through the layer's packed weight.
  std::vector<float> qkv(static_cast<size_t>(rows * 3 * h));
  kernels::Linear(context(), DType::kFloat32, relative.data<float>(), rows,
                  *weights_.linear(layer, LinearSlot::kQkv), Epilogue::kNone, nullptr,
                  DType::kFloat32, qkv.data());
  if (position_tables_.empty()) position_tables_.resize(static_cast<size_t>(c.num_layers));
  PositionTables& tables = position_tables_.at(static_cast<size_t>(layer));
  const float scale = AttentionScale();
  // [heads][d][rows]: column `row` of head h's table is that embedding's
  // projection; a term the model does not compute is all zeros.
  const auto transposed = [&](int64_t part, bool used, std::vector<float>* out) {
    out->assign(static_cast<size_t>(heads * d * rows), 0.f);
    if (!used) return;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t hd = 0; hd < h; ++hd) {
        (*out)[static_cast<size_t>(hd * rows + r)] = qkv[r * 3 * h + part * h + hd] * scale;
      }
    }
  };
  // q_i . Kr (content to position) reads the keys' projection; k_j . Qr
  // the queries'.
  transposed(1, c.content_to_position, &tables.key);
  transposed(0, c.position_to_content, &tables.query);
  weight_bytes_ += (tables.key.size() + tables.query.size()) * sizeof(float);
  if (disentangled_index_.empty()) {
    const int64_t center = c.max_tokens - 1;
    disentangled_index_.resize(static_cast<size_t>(2 * center + 1));
    for (int64_t r = -center; r <= center; ++r) {
      const int64_t column = DisentangledColumn(r, c);
      // The kernels take each item's window of columns from its ends.
      if (r > -center && column < disentangled_index_[static_cast<size_t>(center + r - 1)]) {
        disentangled_index_.clear();
        return Internal("the relative embeddings' rows decrease at relative position " +
                        std::to_string(r));
      }
      disentangled_index_[static_cast<size_t>(center + r)] = static_cast<int32_t>(column);
    }
  }
  return Status::Ok();
}

void BackendEncoder::Embed(Buffer out) {
  Wrote(out);
  const EncoderConfig& c = config();
  const Table& word = tables_[static_cast<int>(EmbeddingTable::kWord)];
  const Table& position = tables_[static_cast<int>(EmbeddingTable::kPosition)];
  const Table& token_type = tables_[static_cast<int>(EmbeddingTable::kTokenType)];
  kernels::EmbeddingTables tables;
  tables.word = word.data;
  tables.word_rows = word.rows;
  tables.position = position.data;
  tables.position_rows = position.rows;
  tables.token_type = token_type.data;
  tables.token_type_rows = token_type.rows;
  tables.hidden = c.embedding_width();
  const NormRef& norm = weights_.norm(-1, NormSlot::kEmbedding);
  kernels::EmbeddingLayerNorm(context(), activations_, tables, run_.token_ids,
                              position.data ? run_.position_ids : nullptr,
                              token_type.data ? run_.token_type_ids : nullptr, run_.tokens,
                              c.embedding_norm ? norm.gamma : nullptr,
                              c.embedding_norm ? norm.beta : nullptr, c.layer_norm_eps, Data(out));
  if (c.zero_pad_embeddings && run_.key_bias != nullptr) {  // the masked keys' rows (host)
    const int64_t row = BufferRowBytes(out);
    auto* rows = static_cast<std::byte*>(Data(out));
    for (int64_t t = 0; t < run_.tokens; ++t)
      if (std::isinf(run_.key_bias[t])) std::memset(rows + t * row, 0, static_cast<size_t>(row));
  }
}

void BackendEncoder::Linear(int64_t layer, LinearSlot slot, Buffer in, Epilogue epilogue,
                            Buffer out) {
  const Buffer x = LinearInput(in);
  Wrote(out);
  void* y = Data(out);
  kernels::Linear(context(), BufferType(x), Data(x), run_.tokens, *weights_.linear(layer, slot),
                  epilogue, epilogue == Epilogue::kResidual ? y : nullptr, BufferType(out), y);
}

void BackendEncoder::FeedForward(int64_t layer, Buffer in, Epilogue activation, Buffer hidden,
                                 Buffer out, bool add_to_out) {
  const Buffer x = LinearInput(in);
  Wrote(hidden);
  Wrote(out);
  kernels::FeedForward(context(), BufferType(x), Data(x), run_.tokens,
                       *weights_.linear(layer, LinearSlot::kFfnIn), activation,
                       *weights_.linear(layer, LinearSlot::kFfnOut), activations_, Data(hidden),
                       Data(out), add_to_out);
}

void BackendEncoder::Norm(int64_t layer, NormSlot slot, Buffer in, Buffer out) {
  NormOf(layer, slot, Data(in), nullptr, out);
}

void BackendEncoder::AddNorm(int64_t layer, NormSlot slot, Buffer in, Buffer residual, Buffer out) {
  NormOf(layer, slot, Data(in), Data(residual), out);
}

void BackendEncoder::NormOf(int64_t layer, NormSlot slot, const void* in, const void* residual,
                            Buffer out) {
  const NormRef& norm = weights_.norm(layer, slot);
  // The final norm's output goes to the head, not to a Linear layer.
  const bool copy = bf16_normed_ && slot != NormSlot::kFinal;
  // Pre-norm layers' normed input is read only by Linear layers, from the
  // copy (LinearInput): kNormed then has no float32 rows (BufferRowBytes).
  const bool copy_only = copy && out == Buffer::kNormed;
  kernels::AddLayerNorm(context(), activations_, in, residual, norm.gamma, norm.beta, run_.tokens,
                        config().hidden_size, config().layer_norm_eps,
                        copy_only ? nullptr : Data(out),
                        copy ? Data(Buffer::kNormedBf16) : nullptr);
  run_.normed_bf16_of = copy ? out : Buffer::kNormedBf16;
}

void BackendEncoder::Attention(int64_t layer, Buffer qkv, Buffer out) {
  const EncoderConfig& c = config();
  const float scale = AttentionScale();
  // bfloat16 and int8 models multiply in bf16 (int8: docs/int8.md); the
  // CPU falls back to fp32 where it lacks AVX512-BF16.
  const DType matmuls = options().dtype == DType::kBFloat16 || options().dtype == DType::kInt8
                            ? DType::kBFloat16
                            : activations_;
  Wrote(out);
  const kernels::RelativeBias bias{relative_bias_.data(), c.max_tokens - 1};
  kernels::DisentangledBias disentangled;
  if (!position_tables_.empty()) {
    const PositionTables& t = position_tables_.at(static_cast<size_t>(layer));
    disentangled = {t.key.data(), t.query.data(), 2 * c.attention_span, disentangled_index_.data(),
                    c.max_tokens - 1};
  }
  const kernels::KeyBias key_bias{run_.key_bias};
  kernels::Attention(context(), BufferType(qkv), matmuls, Data(qkv), run_.cu_seqlens,
                     run_.sequences, run_.tokens, run_.max_seqlen, c.num_heads, c.head_dim(), scale,
                     Data(out), relative_bias_.empty() ? nullptr : &bias,
                     position_tables_.empty() ? nullptr : &disentangled,
                     run_.key_bias == nullptr ? nullptr : &key_bias);
}

}  // namespace encoderd
