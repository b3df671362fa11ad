#include "server/core/model_registry.h"

#include <algorithm>
#include <string>

namespace encoderd::server {
namespace {

// A client's model name for a status message: at most 64 bytes of it (cut
// at a character's start), so that a long one cannot make the answer's
// trailers larger than a client takes (then it reads RESOURCE_EXHAUSTED
// where NOT_FOUND was meant).
std::string Quoted(const std::string& name) {
  constexpr size_t kShown = 64;
  if (name.size() <= kShown) return "'" + name + "'";
  size_t cut = kShown;
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
  return "'" + name.substr(0, cut) + "...' (" + std::to_string(name.size()) + " bytes)";
}

}  // namespace

ModelRegistry::ModelRegistry(std::vector<std::string> configured)
    : configured_(std::move(configured)) {}

void ModelRegistry::Add(std::shared_ptr<ServedModel> model) {
  std::lock_guard<std::mutex> lock(mu_);
  loaded_.push_back(std::move(model));
  std::sort(loaded_.begin(), loaded_.end(), [this](const auto& a, const auto& b) {
    return std::find(configured_.begin(), configured_.end(), a->config().name) <
           std::find(configured_.begin(), configured_.end(), b->config().name);
  });
}

StatusOr<std::shared_ptr<ServedModel>> ModelRegistry::Find(const std::string& name) const {
  if (draining_.load()) return Unavailable("the server is shutting down");
  std::string wanted = name;
  if (wanted.empty()) {
    if (configured_.size() != 1)
      return InvalidArgument("this server serves several models: name one in 'model'");
    wanted = configured_[0];
  }
  if (std::find(configured_.begin(), configured_.end(), wanted) == configured_.end())
    return NotFound("unknown model " + Quoted(wanted));
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& m : loaded_)
    if (m->config().name == wanted) return m;
  return Unavailable("model " + Quoted(wanted) + " is still loading");
}

std::vector<std::shared_ptr<ServedModel>> ModelRegistry::Loaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loaded_;
}

}  // namespace encoderd::server
