// The models the daemon serves, by name, and whether it is draining. Models
// are added as they finish loading; handlers look them up per call.
// Thread-safe. Free of gRPC.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/core/served_model.h"

namespace encoderd::server {

class ModelRegistry {
 public:
  // `configured`: the names that will be served (in config order).
  explicit ModelRegistry(std::vector<std::string> configured);

  // Publishes a loaded model (its name must be one of `configured`).
  void Add(std::shared_ptr<ServedModel> model);

  // The model a request asks for: `name`, or the only configured model when
  // `name` is empty. NOT_FOUND for an unknown name, UNAVAILABLE while it is
  // loading or the daemon is draining, INVALID_ARGUMENT when `name` is empty
  // and several models are served.
  StatusOr<std::shared_ptr<ServedModel>> Find(const std::string& name) const;

  // Loaded models, in config order.
  std::vector<std::shared_ptr<ServedModel>> Loaded() const;

  // After this, Find() answers UNAVAILABLE.
  void StartDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }

 private:
  const std::vector<std::string> configured_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<ServedModel>> loaded_;  // guarded by mu_
  std::atomic<bool> draining_{false};
};

}  // namespace encoderd::server
