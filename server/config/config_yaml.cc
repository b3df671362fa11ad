// The only place the daemon's configuration is read from YAML: every scalar
// goes through SetConfigValue under its dotted key, so YAML, environment and
// flags accept exactly the same keys and values.
#include <yaml-cpp/yaml.h>

#include <set>
#include <string>

#include "server/config/config.h"

namespace encoderd::server {
namespace {

std::string Where(const std::string& source, const YAML::Node& node) {
  return source + ":" + std::to_string(node.Mark().line + 1);
}

Status ApplyNode(const YAML::Node& node, const std::string& key, const std::string& source,
                 ServerConfig* config);

Status ApplyMap(const YAML::Node& node, const std::string& prefix, const std::string& source,
                ServerConfig* config) {
  // A key given twice is an error: the second silently replaced the first
  // (a second `models:` list, the whole first one) until 2026-12-04.
  std::set<std::string> seen;
  for (const auto& item : node) {
    const std::string name = item.first.as<std::string>();
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    if (!seen.insert(name).second)
      return InvalidArgument(Where(source, item.first) + ": '" + key + "' is given twice");
    if (key == "models") {
      if (!item.second.IsSequence())
        return InvalidArgument(Where(source, item.second) + ": 'models' must be a list");
      config->models.clear();
      for (size_t i = 0; i < item.second.size(); ++i) {
        const YAML::Node& model = item.second[i];
        if (!model.IsMap())
          return InvalidArgument(Where(source, model) + ": 'models[" + std::to_string(i) +
                                 "]' must be a mapping");
        config->models.emplace_back();
        RETURN_IF_ERROR(ApplyMap(model, "models[" + std::to_string(i) + "]", source, config));
      }
      continue;
    }
    RETURN_IF_ERROR(ApplyNode(item.second, key, source, config));
  }
  return Status::Ok();
}

Status ApplyNode(const YAML::Node& node, const std::string& key, const std::string& source,
                 ServerConfig* config) {
  if (node.IsMap()) {
    // Only the sections exist as mappings; a mapping anywhere else is an unknown key.
    if (key != "listen" && key != "listen.tls" && key != "listen.auth" && key != "log" &&
        key != "metrics" && key != "shutdown")
      return InvalidArgument(Where(source, node) + ": unknown key '" + key + "'");
    return ApplyMap(node, key, source, config);
  }
  if (!node.IsScalar())
    return InvalidArgument(Where(source, node) + ": '" + key + "' must be a single value");
  return SetConfigValue(key, node.Scalar(), Where(source, node), config);
}

}  // namespace

Status ApplyYaml(const std::string& yaml_text, const std::string& source, ServerConfig* config) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(source + ":" + std::to_string(e.mark.line + 1) +
                           ": YAML syntax error: " + e.msg);
  }
  if (root.IsNull()) return Status::Ok();
  if (!root.IsMap()) return InvalidArgument(source + ": the top level must be a mapping");
  try {
    return ApplyMap(root, "", source, config);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(source + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
}

}  // namespace encoderd::server
