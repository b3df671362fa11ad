#include "server/core/model_registry.h"

#include <algorithm>
#include <string>

namespace encoderd::server {

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
    return NotFound("unknown model " + QuotedForStatus(wanted));
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& m : loaded_)
    if (m->config().name == wanted) return m;
  return Unavailable("model " + QuotedForStatus(wanted) + " is still loading");
}

std::vector<std::shared_ptr<ServedModel>> ModelRegistry::Loaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loaded_;
}

}  // namespace encoderd::server
