// Daemon configuration: defaults, YAML, environment and flag precedence, and
// errors that name the key (and the line, for YAML).
#include "server/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "server/config_loader.h"

namespace encoderd::server {
namespace {

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ConfigTest, DefaultsMatchTheShippedDefaultYaml) {
  auto defaults = LoadServerConfig({}, FakeEnv({}));
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->listen.address, "0.0.0.0");
  EXPECT_EQ(defaults->listen.port, 50051);
  EXPECT_EQ(defaults->listen.metrics_port, 9400);
  ASSERT_EQ(defaults->models.size(), 1u);
  EXPECT_EQ(defaults->models[0].directory, "models/langid");
  EXPECT_EQ(defaults->models[0].replicas, 1);

  auto from_file =
      LoadServerConfig({"--config", ENCODERD_SOURCE_DIR "/config/default.yaml"}, FakeEnv({}));
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  EXPECT_EQ(from_file->Summary(), defaults->Summary());
}

TEST(ConfigTest, YamlOverridesDefaults) {
  const std::string path = WriteTemp("override.yaml",
                                     "listen:\n"
                                     "  port: 6000\n"
                                     "  reflection: false\n"
                                     "models:\n"
                                     "  - name: a\n"
                                     "    directory: /m/a\n"
                                     "    max_batch_tokens: 4096\n"
                                     "  - name: b\n"
                                     "    directory: /m/b\n"
                                     "    replicas: 2\n"
                                     "shutdown:\n"
                                     "  grace_s: 2.5\n");
  auto c = LoadServerConfig({"--config", path}, FakeEnv({}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listen.port, 6000);
  EXPECT_FALSE(c->listen.reflection);
  EXPECT_EQ(c->listen.metrics_port, 9400);
  ASSERT_EQ(c->models.size(), 2u);
  EXPECT_EQ(c->models[0].name, "a");
  EXPECT_EQ(c->models[0].max_batch_tokens, 4096);
  EXPECT_EQ(c->models[0].replicas, 1);
  EXPECT_EQ(c->models[1].directory, "/m/b");
  EXPECT_EQ(c->models[1].replicas, 2);
  EXPECT_EQ(c->models[1].max_batch_tokens, 8192);
  EXPECT_DOUBLE_EQ(c->shutdown.grace_s, 2.5);
}

TEST(ConfigTest, EnvironmentOverridesYamlAndFlagsOverrideEnvironment) {
  const std::string path = WriteTemp("port.yaml", "listen:\n  port: 6000\nlog:\n  level: warn\n");
  auto env = FakeEnv({{"ENCODERD_CONFIG", path},
                      {"ENCODERD_PORT", "7000"},
                      {"ENCODERD_MODEL_DIR", "/env/model"},
                      {"ENCODERD_MAX_BATCH_TOKENS", "1024"}});
  auto c = LoadServerConfig({}, env);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listen.port, 7000);
  EXPECT_EQ(c->log.level, "warn");
  EXPECT_EQ(c->models[0].directory, "/env/model");
  EXPECT_EQ(c->models[0].max_batch_tokens, 1024);

  c = LoadServerConfig({"--port", "8000", "--model-dir=/flag/model", "--set",
                        "models[0].max_queue_delay_us=0", "--log-level", "debug"},
                       env);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listen.port, 8000);
  EXPECT_EQ(c->models[0].directory, "/flag/model");
  EXPECT_EQ(c->models[0].max_queue_delay_us, 0);
  EXPECT_EQ(c->models[0].max_batch_tokens, 1024);
  EXPECT_EQ(c->log.level, "debug");
}

TEST(ConfigTest, UnknownKeyNamesTheKeyAndTheLine) {
  const std::string path = WriteTemp("unknown.yaml",
                                     "listen:\n"
                                     "  port: 6000\n"
                                     "models:\n"
                                     "  - name: a\n"
                                     "    max_batch_tokenz: 10\n");
  auto c = LoadServerConfig({"--config", path}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("unknown.yaml:5"), std::string::npos)
      << c.status().ToString();
  EXPECT_NE(c.status().message().find("models[0].max_batch_tokenz"), std::string::npos);

  c = LoadServerConfig({"--config", WriteTemp("top.yaml", "\nlisten:\n  port: 1\nfoo: 3\n")},
                       FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("top.yaml:4: unknown key 'foo'"), std::string::npos)
      << c.status().ToString();

  c = LoadServerConfig({"--bogus", "1"}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("--bogus"), std::string::npos);
}

TEST(ConfigTest, BadValuesNameTheKey) {
  auto c =
      LoadServerConfig({"--config", WriteTemp("bad.yaml", "listen:\n  port: lots\n")}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("bad.yaml:2"), std::string::npos) << c.status().ToString();
  EXPECT_NE(c.status().message().find("listen.port"), std::string::npos);

  c = LoadServerConfig({}, FakeEnv({{"ENCODERD_REPLICAS", "0"}}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("models[0].replicas"), std::string::npos)
      << c.status().ToString();

  c = LoadServerConfig({"--port", "70000"}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("listen.port"), std::string::npos);

  c = LoadServerConfig({"--dtype", "int4"}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("dtype"), std::string::npos);

  c = LoadServerConfig({"--set", "listen.tls_cert_file=/c.pem"}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not supported yet"), std::string::npos);

  c = LoadServerConfig({"--config", WriteTemp("syntax.yaml", "listen: [1,\n")}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("syntax.yaml"), std::string::npos);
}

}  // namespace
}  // namespace encoderd::server
