// Daemon configuration: defaults, YAML, environment and flag precedence, and
// errors that name the key (and the line, for YAML).
#include "server/config/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "server/config/access_secrets.h"
#include "server/config/config_loader.h"

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

// A config given as a pipe (--config /dev/stdin, or <(...)) is read to its
// end; a missing one says so.
TEST(ConfigTest, ConfigFromAPipe) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string text = "listen:\n  port: 6001\n";
  ASSERT_EQ(::write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fds[1]);
  auto c = LoadServerConfig({"--config", "/dev/fd/" + std::to_string(fds[0])}, FakeEnv({}));
  ::close(fds[0]);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listen.port, 6001);
  c = LoadServerConfig({"--config", ::testing::TempDir() + "/no_such.yaml"}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("no_such.yaml does not exist"), std::string::npos)
      << c.status().message();
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

TEST(ConfigTest, ModelKeysReachEveryModelWhereverTheyComeFrom) {
  // ENCODERD_DTYPE set models[0] only, not models[1] made by --set (all
  // environment came before any flag); a flag's model.* key set only the
  // models made before it.
  const std::vector<std::string> second = {"--set", "models[1].name=b", "--set",
                                           "models[1].directory=/m/b"};
  auto env = FakeEnv({{"ENCODERD_DTYPE", "bfloat16"}, {"ENCODERD_NUM_THREADS", "1"}});
  auto c = LoadServerConfig(second, env);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->models.size(), 2u);
  for (const ModelConfig& m : c->models) {
    EXPECT_EQ(m.dtype, DType::kBFloat16) << m.name;
    EXPECT_EQ(m.num_threads, 1) << m.name;
  }
  for (const bool flag_first : {true, false}) {
    std::vector<std::string> args = second;
    args.insert(flag_first ? args.begin() : args.end(), {"--dtype", "int8"});
    c = LoadServerConfig(args, FakeEnv({}));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_EQ(c->models.size(), 2u);
    EXPECT_EQ(c->models[0].dtype, DType::kInt8);
    EXPECT_EQ(c->models[1].dtype, DType::kInt8);
  }
  // A models[N] key still outranks model.* from a source below it.
  std::vector<std::string> own = second;
  own.insert(own.end(), {"--set", "models[1].dtype=float32"});
  c = LoadServerConfig(own, env);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models[0].dtype, DType::kBFloat16);
  EXPECT_EQ(c->models[1].dtype, DType::kFloat32);
}

TEST(ConfigTest, TheMetricsLabelForNoModelIsNoModelName) {
  // A model named "(none)" shared its series with calls naming no model.
  auto c = LoadServerConfig({"--model-name", "(none)"}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("models[0].name"), std::string::npos) << c.status().message();
}

TEST(ConfigTest, AKeyGivenTwiceInYamlIsAnError) {
  // The second `models:` list replaced the first without a word.
  const std::string models =
      WriteTemp("twice.yaml",
                "models:\n  - name: a\n    directory: /m/a\nlisten:\n  port: 6000\nmodels:\n"
                "  - name: b\n    directory: /m/b\n");
  auto c = LoadServerConfig({"--config", models}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("twice.yaml:6: 'models' is given twice"), std::string::npos)
      << c.status().message();
  const std::string port = WriteTemp("port_twice.yaml", "listen:\n  port: 6000\n  port: 7000\n");
  c = LoadServerConfig({"--config", port}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("'listen.port' is given twice"), std::string::npos)
      << c.status().message();
}

TEST(ConfigTest, AnEmptyEnvironmentVariableIsUnset) {
  // `docker run -e ENCODERD_DTYPE=` (to clear an image's preset) was
  // refused: "bad value '' for 'model.dtype'".
  auto c = LoadServerConfig(
      {}, FakeEnv({{"ENCODERD_DTYPE", ""}, {"ENCODERD_PORT", ""}, {"ENCODERD_CONFIG", ""}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const ServerConfig defaults;
  EXPECT_EQ(c->models[0].dtype, DType::kFloat32);
  EXPECT_EQ(c->listen.port, defaults.listen.port);
}

TEST(ConfigTest, BatchTimeLimitFromYamlEnvironmentAndFlags) {
  auto c = LoadServerConfig({}, FakeEnv({}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models[0].max_batch_time_us, 0);  // the default: off
  const std::string path =
      WriteTemp("batch_time.yaml", "models:\n  - name: a\n    max_batch_time_us: 100000\n");
  c = LoadServerConfig({"--config", path}, FakeEnv({}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models[0].max_batch_time_us, 100000);
  c = LoadServerConfig({}, FakeEnv({{"ENCODERD_MAX_BATCH_TIME_US", "250000"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models[0].max_batch_time_us, 250000);
  c = LoadServerConfig({"--max-batch-time-us", "50000"}, FakeEnv({}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models[0].max_batch_time_us, 50000);
  for (const char* bad : {"-1", "9300000000000000"}) {  // the last would overflow the clock
    c = LoadServerConfig({"--max-batch-time-us", bad}, FakeEnv({}));
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find("max_batch_time_us"), std::string::npos)
        << c.status().ToString();
  }
}

TEST(ConfigTest, CalibrationBudgetFromYamlEnvironmentAndFlags) {
  auto c = LoadServerConfig({}, FakeEnv({}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models[0].calibration_budget_ms, 10000);
  const std::string path =
      WriteTemp("calibration.yaml", "models:\n  - name: a\n    calibration_budget_ms: 0\n");
  c = LoadServerConfig({"--config", path}, FakeEnv({}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models[0].calibration_budget_ms, 0);
  c = LoadServerConfig({}, FakeEnv({{"ENCODERD_CALIBRATION_BUDGET_MS", "2500"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models[0].calibration_budget_ms, 2500);
  c = LoadServerConfig({"--calibration-budget-ms", "1500"}, FakeEnv({}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models[0].calibration_budget_ms, 1500);
  for (const char* bad : {"-1", "3600001"}) {
    c = LoadServerConfig({"--calibration-budget-ms", bad}, FakeEnv({}));
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find("calibration_budget_ms"), std::string::npos)
        << c.status().ToString();
  }
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

  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--max-send-message-bytes", "1048575"},
        {"--max-send-message-bytes", "4194304", "--max-receive-message-bytes", "4194305"}}) {
    c = LoadServerConfig(flags, FakeEnv({}));
    ASSERT_FALSE(c.ok()) << flags[1];
    EXPECT_NE(c.status().message().find("'listen.max_send_message_bytes' must be at least "
                                        "1048576 and at least listen.max_receive_message_bytes"),
              std::string::npos)
        << c.status().ToString();
  }
  c = LoadServerConfig({}, FakeEnv({{"ENCODERD_MAX_SEND_MESSAGE_BYTES", "4194304"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listen.max_send_message_bytes, 4194304);

  c = LoadServerConfig({"--dtype", "int4"}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("dtype"), std::string::npos);

  c = LoadServerConfig({"--set", "listen.tls.cert_file=/c.pem"}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("'listen.tls.key_file' must be set"), std::string::npos)
      << c.status().ToString();

  c = LoadServerConfig({"--config", WriteTemp("syntax.yaml", "listen: [1,\n")}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("syntax.yaml"), std::string::npos);
}

// Values past their field's type or unit: refused with the key named, not
// wrapped. Before, a port of 4294967296 became 0 (a free port), replicas of
// 4294967297 became 1, max_queue_time_us of 2^63 - 1 became a negative
// limit that refused every call, a grace of inf ended the drain at once,
// and models[100000000000] aborted the process (bad_alloc).
TEST(ConfigTest, OutOfRangeValuesAreRefusedNotWrapped) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--port", "4294967296"},
       "bad value '4294967296' for 'listen.port' (expected an integer "
       "in -2147483648..2147483647)"},
      {{"--replicas", "4294967297"}, "'model.replicas'"},
      {{"--max-connections", "-4294967295"}, "'listen.max_connections'"},
      {{"--max-connections-per-address", "-1"}, "'listen.max_connections_per_address'"},
      {{"--set", "model.max_queue_time_us=9223372036854775807"},
       "'models[0].max_queue_time_us' must be 0 to 3600000000 (an hour)"},
      {{"--max-queue-delay-us", "3600000001"}, "'models[0].max_queue_delay_us'"},
      {{"--set", "model.overload_queue_time_us=100000000000"},
       "'models[0].overload_queue_time_us'"},
      {{"--shutdown-grace-s", "inf"}, "'shutdown.grace_s' must be in 0..86400 seconds"},
      {{"--shutdown-grace-s", "1e12"}, "'shutdown.grace_s'"},
      {{"--set", "models[100000000000].name=x"},
       "'models[100000000000].name': models are numbered from 0 without gaps (the next is "
       "models[1])"},
      {{"--set", "models[9223372036854775807].name=x"}, "without gaps"},
      // A batch the CUDA encoder refuses whole failed every request in it.
      {{"--device", "cuda", "--dtype", "float16", "--max-batch-sequences", "65536",
        "--max-batch-tokens", "262144"},
       "'models[0].max_batch_sequences' must be at most 65535 on cuda"},
  };
  for (const auto& [flags, part] : cases) {
    auto c = LoadServerConfig(flags, FakeEnv({}));
    ASSERT_FALSE(c.ok()) << flags.back();
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().ToString();
    EXPECT_NE(c.status().message().find(part), std::string::npos) << c.status().ToString();
  }
  // The bounds themselves, and the next model, are accepted.
  auto c = LoadServerConfig(
      {"--max-queue-delay-us", "3600000000", "--shutdown-grace-s", "86400", "--set",
       "models[1].name=second", "--set", "models[1].directory=models/langid"},
      FakeEnv({}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models.size(), 2u);
  EXPECT_EQ(c->models[0].max_queue_delay_us, 3600000000);
}

// device and dtype are typed, and the pair is checked when the config is
// read: cuda with the default float32 used to pass here and fail only when
// the model loaded (the shipped GPU image and overlay set no dtype).
TEST(ConfigTest, DeviceAndDTypeAreCheckedTogetherWhenRead) {
  auto c = LoadServerConfig({"--device", "cuda"}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("dtype float32 is not supported on cuda (float16, bfloat16)"),
            std::string::npos)
      << c.status().ToString();

  c = LoadServerConfig({"--device", "cuda", "--dtype", "fp16"}, FakeEnv({}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models[0].device, Device::kCuda);
  EXPECT_EQ(c->models[0].dtype, DType::kFloat16);

  c = LoadServerConfig({}, FakeEnv({{"ENCODERD_DTYPE", "bf16"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models[0].device, Device::kCpu);
  EXPECT_EQ(c->models[0].dtype, DType::kBFloat16);

  c = LoadServerConfig({"--dtype", "float16"}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not supported on cpu (float32, bfloat16, int8)"),
            std::string::npos)
      << c.status().ToString();

  c = LoadServerConfig({"--dtype", "int8", "--set", "models[0].int8_fp32_linears=ffn.out"},
                       FakeEnv({}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models[0].dtype, DType::kInt8);
  EXPECT_EQ(c->models[0].int8_fp32_linears, "ffn.out");
  c = LoadServerConfig({"--device", "cuda", "--dtype", "int8"}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not supported on cuda (float16, bfloat16)"),
            std::string::npos)
      << c.status().ToString();
  c = LoadServerConfig({"--dtype", "int8", "--set", "models[0].int8_fp32_linears=layers.x.ffn.in"},
                       FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("'layers.x.ffn.in' names no Linear layer"), std::string::npos)
      << c.status().ToString();
  c = LoadServerConfig({"--set", "models[0].int8_fp32_linears=ffn.out"}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("only with dtype int8"), std::string::npos)
      << c.status().ToString();

  c = LoadServerConfig({"--device", "tpu"}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("expected cpu or cuda"), std::string::npos)
      << c.status().ToString();
}

TEST(ConfigTest, ReflectionIsOffUnlessSet) {
  auto c = LoadServerConfig({}, FakeEnv({}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->listen.reflection);
  c = LoadServerConfig({}, FakeEnv({{"ENCODERD_REFLECTION", "true"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->listen.reflection);
}

TEST(ConfigTest, AccessKeysFromYamlEnvironmentAndFlags) {
  const std::string path = WriteTemp("access.yaml",
                                     "listen:\n"
                                     "  health_port: 8081\n"
                                     "  tls:\n"
                                     "    cert_file: /yaml/cert.pem\n"
                                     "    key_file: /yaml/key.pem\n"
                                     "    client_ca_file: /yaml/ca.pem\n"
                                     "    require_client_cert: true\n"
                                     "  auth:\n"
                                     "    bearer_token_file: /yaml/token\n");
  auto c = LoadServerConfig({"--config", path}, FakeEnv({}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listen.health_port, 8081);
  EXPECT_EQ(c->listen.tls.cert_file, "/yaml/cert.pem");
  EXPECT_EQ(c->listen.tls.key_file, "/yaml/key.pem");
  EXPECT_EQ(c->listen.tls.client_ca_file, "/yaml/ca.pem");
  EXPECT_TRUE(c->listen.tls.require_client_cert);
  EXPECT_EQ(c->listen.auth.bearer_token_file, "/yaml/token");
  EXPECT_NE(c->Summary().find("tls=mutual health_port=8081 auth=bearer"), std::string::npos)
      << c->Summary();

  auto env = FakeEnv({{"ENCODERD_CONFIG", path},
                      {"ENCODERD_BEARER_TOKEN_FILE", "/env/token"},
                      {"ENCODERD_TLS_CERT_FILE", "/env/cert.pem"},
                      {"ENCODERD_HEALTH_PORT", "9090"}});
  c = LoadServerConfig({"--tls-cert-file", "/flag/cert.pem"}, env);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listen.auth.bearer_token_file, "/env/token");
  EXPECT_EQ(c->listen.health_port, 9090);
  EXPECT_EQ(c->listen.tls.cert_file, "/flag/cert.pem");
  EXPECT_EQ(c->listen.tls.key_file, "/yaml/key.pem");

  c = LoadServerConfig({"--config", WriteTemp("tlsfoo.yaml", "listen:\n  tls:\n    cert: x\n")},
                       FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tlsfoo.yaml:3: unknown key 'listen.tls.cert'"),
            std::string::npos)
      << c.status().ToString();
}

TEST(ConfigTest, AccessValidationNamesTheKey) {
  struct Case {
    std::vector<std::string> args;
    std::string key;
  };
  const Case cases[] = {
      {{"--tls-key-file", "/k.pem"}, "'listen.tls.cert_file' must be set"},
      {{"--tls-client-ca-file", "/ca.pem"}, "'listen.tls.client_ca_file' needs"},
      {{"--tls-cert-file", "/c", "--tls-key-file", "/k", "--tls-require-client-cert", "true"},
       "'listen.tls.require_client_cert' needs listen.tls.client_ca_file"},
      {{"--tls-require-client-cert", "maybe"}, "listen.tls.require_client_cert"},
      {{"--health-port", "70000"}, "'listen.health_port' must be in 0..65535"},
      {{"--health-port", "6000", "--port", "6000"}, "'listen.health_port' must differ"},
  };
  for (const Case& c : cases) {
    auto config = LoadServerConfig(c.args, FakeEnv({}));
    ASSERT_FALSE(config.ok()) << c.key;
    EXPECT_NE(config.status().message().find(c.key), std::string::npos)
        << config.status().ToString();
  }
}

TEST(ConfigTest, ConnectionLifetimeFromYamlEnvironmentAndFlags) {
  auto defaults = LoadServerConfig({}, FakeEnv({}));
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->listen.max_connection_age_s, 0);  // off unless set
  EXPECT_EQ(defaults->listen.max_connection_age_grace_s, 30);
  EXPECT_EQ(defaults->listen.send_timeout_s, 30);
  const std::string path = WriteTemp("lifetime.yaml",
                                     "listen:\n"
                                     "  max_connection_age_s: 300\n"
                                     "  max_connection_idle_s: 600\n");
  auto c = LoadServerConfig({"--config", path, "--max-connection-age-grace-s", "2.5"},
                            FakeEnv({{"ENCODERD_MAX_CONNECTION_AGE_S", "120"},
                                     {"ENCODERD_KEEPALIVE_TIME_S", "60"},
                                     {"ENCODERD_KEEPALIVE_TIMEOUT_S", "5"},
                                     {"ENCODERD_SEND_TIMEOUT_S", "7.5"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listen.max_connection_age_s,
            120);  // the environment over the file
  EXPECT_EQ(c->listen.max_connection_age_grace_s, 2.5);
  EXPECT_EQ(c->listen.max_connection_idle_s, 600);
  EXPECT_EQ(c->listen.keepalive_time_s, 60);
  EXPECT_EQ(c->listen.keepalive_timeout_s, 5);
  EXPECT_EQ(c->listen.send_timeout_s, 7.5);
  EXPECT_NE(c->Summary().find("max_connection_age_s=120"), std::string::npos) << c->Summary();
  EXPECT_NE(c->Summary().find("send_timeout_s=7.5"), std::string::npos) << c->Summary();
  auto too_short = LoadServerConfig({"--send-timeout-s", "0.5"}, FakeEnv({}));
  ASSERT_FALSE(too_short.ok());
  EXPECT_NE(too_short.status().message().find("listen.send_timeout_s"), std::string::npos)
      << too_short.status().ToString();
  for (const char* flag :
       {"--max-connection-age-s", "--max-connection-age-grace-s", "--max-connection-idle-s",
        "--keepalive-time-s", "--keepalive-timeout-s", "--send-timeout-s"}) {
    for (const char* bad : {"-1", "1e9", "nan"}) {
      auto refused = LoadServerConfig({flag, bad}, FakeEnv({}));
      ASSERT_FALSE(refused.ok()) << flag << " " << bad;
      EXPECT_NE(refused.status().message().find("must be in 0..31536000 seconds"),
                std::string::npos)
          << refused.status().ToString();
    }
  }
}

TEST(AccessSecretsTest, ReadsEveryFileAndTrimsTheToken) {
  ListenConfig listen;
  listen.tls.cert_file = WriteTemp("cert.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n");
  listen.tls.key_file = WriteTemp("key.pem", "-----BEGIN PRIVATE KEY-----\nMIIE\n");
  listen.tls.client_ca_file = WriteTemp("ca.pem", "-----BEGIN CERTIFICATE-----\nMIIC\n");
  listen.auth.bearer_token_file = WriteTemp("token", "  abc.DEF-123\n");
  auto secrets = ReadAccessSecrets(listen);
  ASSERT_TRUE(secrets.ok()) << secrets.status().ToString();
  EXPECT_EQ(secrets->tls_cert_pem, "-----BEGIN CERTIFICATE-----\nMIIB\n");
  EXPECT_EQ(secrets->tls_key_pem, "-----BEGIN PRIVATE KEY-----\nMIIE\n");
  EXPECT_EQ(secrets->tls_client_ca_pem, "-----BEGIN CERTIFICATE-----\nMIIC\n");
  EXPECT_EQ(secrets->bearer_token, "abc.DEF-123");

  auto none = ReadAccessSecrets(ListenConfig{});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->tls_cert_pem.empty() && none->bearer_token.empty());
}

TEST(AccessSecretsTest, BadFilesNameTheKeyAndTheFileButNotTheContents) {
  struct Case {
    std::string TlsConfig::*tls_field;  // null: the bearer token file
    std::string path;
    std::string key;
    std::string why;
  };
  const std::string missing = ::testing::TempDir() + "/does-not-exist.pem";
  const Case cases[] = {
      {&TlsConfig::cert_file, missing, "listen.tls.cert_file", "cannot be opened"},
      {&TlsConfig::key_file, WriteTemp("empty.key", " \n"), "listen.tls.key_file", "is empty"},
      {&TlsConfig::client_ca_file, WriteTemp("notpem.pem", "hunter2"), "listen.tls.client_ca_file",
       "holds no PEM certificate"},
      {&TlsConfig::key_file, WriteTemp("cert-as-key.pem", "-----BEGIN CERTIFICATE-----\n"),
       "listen.tls.key_file", "holds no PEM private key"},
      {nullptr, missing, "listen.auth.bearer_token_file", "cannot be opened"},
      {nullptr, WriteTemp("empty-token", "\n\n"), "listen.auth.bearer_token_file", "is empty"},
      {nullptr, WriteTemp("two-words", "hunter2 hunter3\n"), "listen.auth.bearer_token_file",
       "cannot carry"},
      {nullptr, ::testing::TempDir(), "listen.auth.bearer_token_file", "cannot be read"},
  };
  for (const Case& c : cases) {
    ListenConfig listen;
    if (c.tls_field != nullptr) {
      listen.tls.*c.tls_field = c.path;
    } else {
      listen.auth.bearer_token_file = c.path;
    }
    auto secrets = ReadAccessSecrets(listen);
    ASSERT_FALSE(secrets.ok()) << c.key << " " << c.path;
    const std::string& message = secrets.status().message();
    EXPECT_NE(message.find("'" + c.key + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("'" + c.path + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(c.why), std::string::npos) << message;
    EXPECT_EQ(message.find("hunter2"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace encoderd::server
