// encoderd.yaml -> ModelCard (docs/model_card.md), and loading a model
// directory with its card. Unknown keys and bad values are errors naming the
// file, the line and the key.
#pragma once

#include <string>

#include "core/status.h"
#include "engine/model/model_card.h"
#include "engine/model/model_spec.h"

namespace encoderd::server {

inline constexpr const char kModelCardFile[] = "encoderd.yaml";

// Parses the text of a card; `source` names it in errors ("encoderd.yaml").
StatusOr<ModelCard> ParseModelCard(const std::string& yaml_text, const std::string& source);

// Reads and parses the card at `path`.
StatusOr<ModelCard> ReadModelCard(const std::string& path);

// LoadModelBundle(dir, card) with dir/encoderd.yaml as the card when present.
StatusOr<ModelBundle> LoadModelDirectory(const std::string& dir);

}  // namespace encoderd::server
