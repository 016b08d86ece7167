// Options: defaults, code over environment over default, errors that name the option, describe_options.
#include "bootstrap/options.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "coll/comm_options.hpp"
#include "core/log.hpp"
#include "core/option_table.hpp"
#include "rdmakit/context.hpp"
#include "rdmakit/log.hpp"
#include "rdmakit/options.hpp"
#include "rdmakit/transports.hpp"

namespace rdmakit {
namespace {

// Clears every RDMAKIT_ variable of an option (of every layer) for the test's duration and restores them
// afterwards.
class OptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const options::Table* table : options::option_tables())
      for (const auto& option : table->declared()) {
        if (const char* value = std::getenv(option.env.c_str())) saved_[option.env] = value;
        unsetenv(option.env.c_str());
        names_.push_back(option.env);
      }
  }
  void TearDown() override {
    for (const auto& env : names_) unsetenv(env.c_str());
    for (const auto& [env, value] : saved_) setenv(env.c_str(), value.c_str(), 1);
  }
  static void set(const char* env, const char* value) { setenv(env, value, 1); }

  std::map<std::string, std::string> saved_;
  std::vector<std::string> names_;
};

TEST_F(OptionsTest, DefaultsAreDocumentedValues) {
  auto config = resolve_config({});
  ASSERT_TRUE(config.has_value()) << config.error().describe();
  EXPECT_EQ(config->transport, "tcp");
  EXPECT_FALSE(config->name.empty());  // <hostname>:<pid>
  EXPECT_EQ(config->listen_address, "127.0.0.1:0");
  EXPECT_EQ(config->port, 1u);
  EXPECT_FALSE(config->gid_index.has_value());
  EXPECT_FALSE(config->mtu.has_value());
  EXPECT_EQ(config->timeout, std::chrono::milliseconds(4000));
  EXPECT_EQ(config->rnr_timeout, std::chrono::milliseconds(1000));
  EXPECT_EQ(config->connect_timeout, std::chrono::milliseconds(10000));
  EXPECT_EQ(config->wait_mode, WaitMode::Hybrid);
  EXPECT_EQ(config->spin, std::chrono::microseconds(50));
  EXPECT_EQ(config->cq_depth, 4096u);
  EXPECT_EQ(config->send_queue_depth, 1024u);
  EXPECT_EQ(config->recv_queue_depth, 1024u);
  EXPECT_EQ(config->max_sge, 16u);
  EXPECT_EQ(config->inline_size, 64u);
  EXPECT_TRUE(config->registration_cache);
  EXPECT_EQ(config->log_level, "warn");
}

TEST_F(OptionsTest, CodeBeatsEnvironmentBeatsDefault) {
  set("RDMAKIT_TIMEOUT_MS", "123");
  set("RDMAKIT_WAIT_MODE", "spin");
  set("RDMAKIT_REGISTRATION_CACHE", "off");
  set("RDMAKIT_NAME", "from-env");
  auto from_env = resolve_config({});
  ASSERT_TRUE(from_env.has_value()) << from_env.error().describe();
  EXPECT_EQ(from_env->timeout, std::chrono::milliseconds(123));
  EXPECT_EQ(from_env->wait_mode, WaitMode::Spin);
  EXPECT_FALSE(from_env->registration_cache);
  EXPECT_EQ(from_env->name, "from-env");

  auto from_code = resolve_config({.name = "from-code",
                                   .timeout = std::chrono::milliseconds(77),
                                   .wait_mode = WaitMode::Block,
                                   .registration_cache = true});
  ASSERT_TRUE(from_code.has_value()) << from_code.error().describe();
  EXPECT_EQ(from_code->timeout, std::chrono::milliseconds(77));
  EXPECT_EQ(from_code->wait_mode, WaitMode::Block);
  EXPECT_TRUE(from_code->registration_cache);
  EXPECT_EQ(from_code->name, "from-code");
}

TEST_F(OptionsTest, CodeWinsEvenOverABadEnvironmentValue) {
  set("RDMAKIT_CQ_DEPTH", "lots");
  auto config = resolve_config({.cq_depth = 8});
  ASSERT_TRUE(config.has_value()) << config.error().describe();
  EXPECT_EQ(config->cq_depth, 8u);
}

// A bad value is an error naming the option and the variable, never a silent default.
TEST_F(OptionsTest, BadEnvironmentValueNamesOptionAndVariable) {
  const std::pair<const char*, const char*> bad[] = {
      {"RDMAKIT_CQ_DEPTH", "lots"},
      {"RDMAKIT_CQ_DEPTH", "12x"},
      {"RDMAKIT_CQ_DEPTH", ""},
      {"RDMAKIT_CQ_DEPTH", "-1"},
      {"RDMAKIT_PORT", "4294967296"},
      {"RDMAKIT_TIMEOUT_MS", "-5"},
      {"RDMAKIT_TIMEOUT_MS", "1.5"},
      {"RDMAKIT_WAIT_MODE", "sometimes"},
      {"RDMAKIT_REGISTRATION_CACHE", "maybe"},
      {"RDMAKIT_GID_INDEX", "one"},
      {"RDMAKIT_SPIN_US", " 5"},
  };
  for (const auto& [env, value] : bad) {
    SCOPED_TRACE(std::string(env) + "=" + value);
    set(env, value);
    auto config = resolve_config({});
    ASSERT_FALSE(config.has_value());
    EXPECT_EQ(config.error().code(), Errc::InvalidArgument);
    std::string option = std::string(env).substr(8);
    for (char& c : option) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_NE(config.error().message().find(option), std::string::npos) << config.error().message();
    EXPECT_NE(config.error().message().find(env), std::string::npos) << config.error().message();
    unsetenv(env);
  }
}

TEST_F(OptionsTest, RangeChecksNameTheOption) {
  struct Case {
    Options options;
    const char* option;
  };
  const Case cases[] = {
      {{.transport = ""}, "transport"},
      {{.cq_depth = 0}, "cq_depth"},
      {{.send_queue_depth = 0}, "send_queue_depth"},
      {{.recv_queue_depth = 0}, "recv_queue_depth"},
      {{.max_sge = 0}, "max_sge"},
      {{.timeout = std::chrono::milliseconds(0)}, "timeout_ms"},
      {{.mtu = 1000}, "mtu"},
      {{.log_level = "loud"}, "log_level"},
      {{.shm_allowed_uids = "1000,bob"}, "shm_allowed_uids"},
      {{.shm_allowed_uids = "1000,"}, "shm_allowed_uids"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.option);
    auto config = resolve_config(c.options);
    ASSERT_FALSE(config.has_value());
    EXPECT_EQ(config.error().code(), Errc::InvalidArgument);
    EXPECT_NE(config.error().message().find(c.option), std::string::npos) << config.error().message();
  }
  EXPECT_FALSE(resolve_config({.mtu = 0}).has_value()) << "0 is no MTU; unset follows the port";
  for (std::uint32_t mtu : {256u, 512u, 1024u, 2048u, 4096u})
    EXPECT_TRUE(resolve_config({.mtu = mtu}).has_value()) << mtu;
  set("RDMAKIT_MTU", "999");
  auto from_env = resolve_config({});
  ASSERT_FALSE(from_env.has_value());
  EXPECT_NE(from_env.error().message().find("RDMAKIT_MTU"), std::string::npos) << from_env.error().message();
}

TEST_F(OptionsTest, TheJobSecretIsNeverPrinted) {
  set("RDMAKIT_JOB_SECRET", "a secret of twenty-six chars");
  auto all = describe_options();
  ASSERT_TRUE(all.has_value()) << all.error().describe();
  bool listed = false;
  for (const auto& option : *all) {
    EXPECT_EQ(option.value.find("twenty-six"), std::string::npos) << option.name << " printed the secret";
    if (option.name != "job_secret") continue;
    listed = true;
    EXPECT_EQ(option.value, "(set)");
  }
  EXPECT_TRUE(listed);
  auto short_secret = bootstrap::resolve_bootstrap_options({.job_secret = "short"});
  ASSERT_FALSE(short_secret.has_value());
  EXPECT_NE(short_secret.error().message().find("RDMAKIT_JOB_SECRET"), std::string::npos);
  EXPECT_EQ(short_secret.error().message().find("short"), std::string::npos) << "the error shows the secret";
}

TEST_F(OptionsTest, DescribeListsEveryOptionWithDocEnvAndDefault) {
  auto config = resolve_config({.timeout = std::chrono::milliseconds(321), .wait_mode = WaitMode::Spin});
  ASSERT_TRUE(config.has_value());
  auto options = describe_options(*config);
  std::set<std::string> names;
  for (const auto& option : options) {
    SCOPED_TRACE(option.name);
    EXPECT_TRUE(names.insert(option.name).second) << "listed twice";
    EXPECT_FALSE(option.doc.empty());
    std::string env = "RDMAKIT_";
    for (char c : option.name) env += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(option.env, env);
  }
  // One entry per field of Config.
  const char* expected[] = {"transport",
                            "name",
                            "listen_address",
                            "device",
                            "port",
                            "gid_index",
                            "mtu",
                            "timeout_ms",
                            "rnr_timeout_ms",
                            "connect_timeout_ms",
                            "handshake_timeout_ms",
                            "wait_mode",
                            "spin_us",
                            "cq_depth",
                            "send_queue_depth",
                            "recv_queue_depth",
                            "max_sge",
                            "inline_size",
                            "registration_cache",
                            "log_level",
                            "shm_allowed_uids"};
  EXPECT_EQ(options.size(), std::size(expected));
  for (const char* name : expected) EXPECT_TRUE(names.contains(name)) << name;

  std::map<std::string, OptionInfo> by_name;
  for (const auto& option : options) by_name[option.name] = option;
  EXPECT_EQ(by_name["timeout_ms"].value, "321");
  EXPECT_EQ(by_name["timeout_ms"].default_value, "4000");
  EXPECT_EQ(by_name["wait_mode"].value, "spin");
  EXPECT_EQ(by_name["wait_mode"].default_value, "hybrid");
  EXPECT_EQ(by_name["cq_depth"].value, by_name["cq_depth"].default_value);
  // Every default shown is one that resolves to itself.
  auto defaults = resolve_config({.name = "x"});
  ASSERT_TRUE(defaults.has_value());
  for (const auto& option : describe_options(*defaults)) {
    if (option.name != "name") {
      EXPECT_EQ(option.value, option.default_value) << option.name;
    }
  }
}

TEST_F(OptionsTest, RnrTimeoutMustBeBelowTimeoutAndTheErrorNamesBoth) {
  using std::chrono::milliseconds;
  for (auto [timeout, rnr] : {std::pair{1000, 1000}, std::pair{500, 2000}}) {
    auto config = resolve_config({.timeout = milliseconds(timeout), .rnr_timeout = milliseconds(rnr)});
    ASSERT_FALSE(config.has_value()) << timeout << " " << rnr;
    EXPECT_EQ(config.error().code(), Errc::InvalidArgument);
    for (const char* name : {"rnr_timeout_ms", "RDMAKIT_RNR_TIMEOUT_MS", "timeout_ms", "RDMAKIT_TIMEOUT_MS"})
      EXPECT_NE(config.error().message().find(name), std::string::npos) << config.error().message();
  }
  EXPECT_TRUE(resolve_config({.timeout = milliseconds(1001), .rnr_timeout = milliseconds(1000)}).has_value());
  set("RDMAKIT_RNR_TIMEOUT_MS", "5000");  // above the default timeout_ms (4000): the combination is refused
  auto from_env = resolve_config({});
  ASSERT_FALSE(from_env.has_value());
  EXPECT_NE(from_env.error().message().find("RDMAKIT_RNR_TIMEOUT_MS"), std::string::npos)
      << from_env.error().message();
  unsetenv("RDMAKIT_RNR_TIMEOUT_MS");
  // Left unset, rnr_timeout_ms follows a timeout_ms at or below its default down to half of it.
  set("RDMAKIT_TIMEOUT_MS", "800");
  auto follows = resolve_config({});
  ASSERT_TRUE(follows.has_value()) << follows.error().describe();
  EXPECT_EQ(follows->rnr_timeout, milliseconds(400));
  EXPECT_EQ(resolve_config({.timeout = milliseconds(2000)})->rnr_timeout, milliseconds(1000));
}

TEST_F(OptionsTest, EveryLayerIsListedOnceWithItsEffectiveValue) {
  set("RDMAKIT_COLL_SLOTS", "8");
  set("RDMAKIT_BOOTSTRAP_TIMEOUT_MS", "1234");
  auto all = describe_options();
  ASSERT_TRUE(all.has_value()) << all.error().describe();
  std::map<std::string, OptionInfo> by_env;
  for (const auto& option : *all)
    EXPECT_TRUE(by_env.emplace(option.env, option).second) << option.env << " twice";
  EXPECT_EQ(by_env["RDMAKIT_COLL_SLOTS"].value, "8");
  EXPECT_EQ(by_env["RDMAKIT_COLL_SLOTS"].layer, "coll");
  EXPECT_EQ(by_env["RDMAKIT_BOOTSTRAP_TIMEOUT_MS"].value, "1234");
  EXPECT_EQ(by_env["RDMAKIT_BOOTSTRAP_TIMEOUT_MS"].layer, "bootstrap");
  EXPECT_EQ(by_env["RDMAKIT_TIMEOUT_MS"].layer, "core");
  for (const char* env :
       {"RDMAKIT_STORE_ADDR", "RDMAKIT_JOB_SECRET", "RDMAKIT_STORE_MAX_CLIENTS", "RDMAKIT_COLL_ALGO",
        "RDMAKIT_COLL_SPIN_US", "RDMAKIT_COLL_CHUNK_BYTES", "RDMAKIT_COLL_HIERARCHICAL",
        "RDMAKIT_COLL_TIMEOUT_MS", "RDMAKIT_COLL_HOST_ID", "RDMAKIT_COLL_LOCAL_TRANSPORT"})
    EXPECT_TRUE(by_env.contains(env)) << env;
  EXPECT_EQ(by_env["RDMAKIT_STORE_ADDR"].value, "") << "unset, and no default";
  // The bootstrap timeout is read once, by the bootstrap table, for every user of it.
  EXPECT_EQ(bootstrap::bootstrap_timeout().value(), std::chrono::milliseconds(1234));
}

TEST_F(OptionsTest, LayerErrorsNameTheOption) {
  const std::pair<const char*, const char*> cases[] = {
      {"RDMAKIT_COLL_SLOTS", "0"},           {"RDMAKIT_COLL_CHUNK_BYTES", "100"},
      {"RDMAKIT_COLL_ALGO", "fastest"},      {"RDMAKIT_COLL_HIERARCHICAL", "maybe"},
      {"RDMAKIT_BOOTSTRAP_TIMEOUT_MS", "0"}, {"RDMAKIT_STORE_MAX_REQUEST_BYTES", "10"}};
  for (const auto& [env, value] : cases) {
    SCOPED_TRACE(env);
    set(env, value);
    auto all = describe_options();
    ASSERT_FALSE(all.has_value());
    EXPECT_EQ(all.error().code(), Errc::InvalidArgument);
    EXPECT_NE(all.error().message().find(env), std::string::npos) << all.error().message();
    unsetenv(env);
  }
}

TEST_F(OptionsTest, AMisspeltVariableNamesTheClosestOption) {
  set("RDMAKIT_TIMOUT_MS", "100");
  set("RDMAKIT_COLL_SLOT", "2");
  set("RDMAKIT_SOMETHING_ELSE_ENTIRELY", "1");
  set("RDMAKIT_TEST_ONLY_KNOB", "1");  // reserved for test harnesses: no warning
  set("RDMAKIT_CONFORMANCE_KEY_GUESSES", "1,2");
  auto messages = options::unknown_environment();
  for (const char* env : {"RDMAKIT_TIMOUT_MS", "RDMAKIT_COLL_SLOT", "RDMAKIT_SOMETHING_ELSE_ENTIRELY",
                          "RDMAKIT_TEST_ONLY_KNOB", "RDMAKIT_CONFORMANCE_KEY_GUESSES"})
    unsetenv(env);
  std::map<std::string, std::string> by_name;
  for (const auto& message : messages) by_name[message.substr(0, message.find(' '))] = message;
  EXPECT_EQ(by_name.size(), 3u) << ::testing::PrintToString(messages);
  EXPECT_NE(by_name["RDMAKIT_TIMOUT_MS"].find("did you mean RDMAKIT_TIMEOUT_MS?"), std::string::npos)
      << by_name["RDMAKIT_TIMOUT_MS"];
  EXPECT_NE(by_name["RDMAKIT_COLL_SLOT"].find("did you mean RDMAKIT_COLL_SLOTS?"), std::string::npos)
      << by_name["RDMAKIT_COLL_SLOT"];
  EXPECT_EQ(by_name["RDMAKIT_SOMETHING_ELSE_ENTIRELY"].find("did you mean"), std::string::npos)
      << by_name["RDMAKIT_SOMETHING_ELSE_ENTIRELY"];
}

TEST_F(OptionsTest, CommOptionsSetInCodeBeatTheEnvironment) {
  set("RDMAKIT_COLL_SLOTS", "8");
  set("RDMAKIT_COLL_ALGO", "ring");
  auto from_env = coll::detail::resolve_options({.network_transport = "tcp", .local_transport = "tcp"});
  ASSERT_TRUE(from_env.has_value()) << from_env.error().describe();
  EXPECT_EQ(from_env->slots, 8u);
  EXPECT_EQ(from_env->algorithm, coll::Algorithm::Ring);
  EXPECT_EQ(from_env->spin, std::chrono::microseconds(5000));
  // 0 is a value like any other, not "unset": spin 0 sleeps at once.
  auto from_code = coll::detail::resolve_options({.network_transport = "tcp",
                                                  .local_transport = "tcp",
                                                  .spin = std::chrono::microseconds(0),
                                                  .slots = 2,
                                                  .algorithm = coll::Algorithm::Auto});
  ASSERT_TRUE(from_code.has_value()) << from_code.error().describe();
  EXPECT_EQ(from_code->spin, std::chrono::microseconds(0));
  EXPECT_EQ(from_code->slots, 2u);
  EXPECT_EQ(from_code->algorithm, coll::Algorithm::Auto);
}

// The network transport's listen address is the core's option listen_address, read through the core's
// table (as every RDMAKIT_* setting): passed on only when named, in code (which wins) or the environment.
TEST_F(OptionsTest, CommListenAddressIsTheCoreOptionWhenNamed) {
  auto unset = coll::detail::resolve_options({.network_transport = "tcp", .local_transport = "tcp"});
  ASSERT_TRUE(unset.has_value()) << unset.error().describe();
  EXPECT_EQ(unset->listen_address, "") << "left to the transport's default";
  auto named = coll::detail::named_listen_address({});
  ASSERT_TRUE(named.has_value());
  EXPECT_FALSE(named->has_value());

  set("RDMAKIT_LISTEN_ADDRESS", "10.9.8.7:0");
  auto from_env = coll::detail::resolve_options({.network_transport = "tcp", .local_transport = "tcp"});
  ASSERT_TRUE(from_env.has_value()) << from_env.error().describe();
  EXPECT_EQ(from_env->listen_address, "10.9.8.7:0");
  auto from_code = coll::detail::resolve_options(
      {.network_transport = "tcp", .local_transport = "tcp", .listen_address = "127.0.0.2:0"});
  ASSERT_TRUE(from_code.has_value()) << from_code.error().describe();
  EXPECT_EQ(from_code->listen_address, "127.0.0.2:0");
  // Named in code as empty is still named: from_environment() then does not pick an interface for it.
  auto empty = coll::detail::named_listen_address({.listen_address = ""});
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(*empty, std::optional<std::string>(""));
  // A core option that does not parse is an error naming it, not a silent default.
  set("RDMAKIT_TIMEOUT_MS", "soon");
  auto bad = coll::detail::named_listen_address({});
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find("timeout_ms"), std::string::npos) << bad.error().message();
}

// Unset, coll_local_transport is the first built transport that reaches only this host and opens here
// (shm when built), found by its capabilities rather than its name; without one, the network transport.
TEST_F(OptionsTest, CommDefaultLocalTransportIsTheSameHostOne) {
  auto resolved = coll::detail::resolve_options({.network_transport = "tcp"});
  ASSERT_TRUE(resolved.has_value()) << resolved.error().describe();
  std::string expected = "tcp";
  for (const auto& info : built_transports()) {
    auto context =
        info.wraps_inner ? nullptr : Context::open(Options{.transport = info.name}).value_or(nullptr);
    if (context && context->capabilities().same_host_only) {
      expected = info.name;
      break;
    }
  }
  EXPECT_EQ(resolved->local_transport, expected);
  auto local = Context::open(Options{.transport = resolved->local_transport});
  ASSERT_TRUE(local.has_value()) << local.error().describe();
  EXPECT_EQ((*local)->capabilities().same_host_only, expected != "tcp");
  auto tcp = Context::open(Options{.transport = "tcp"});
  ASSERT_TRUE(tcp.has_value()) << tcp.error().describe();
  EXPECT_FALSE((*tcp)->capabilities().same_host_only);  // reaches other hosts
}

// The log level is the process's: a context opened with the default leaves the level the program chose with
// set_log_level() as it is (before, every Context::open reset it to its resolved log_level, "warn" unless
// set, so the last context opened silently undid the program's choice); one whose log_level was set, in
// code or in RDMAKIT_LOG_LEVEL, changes it.
TEST_F(OptionsTest, OnlyAContextThatSetsLogLevelChangesIt) {
  struct Restore {
    ~Restore() { set_log_level(LogLevel::Warn); }
  } restore;
  set_log_level(LogLevel::Error);
  auto plain = Context::open(Options{.transport = "tcp"});
  ASSERT_TRUE(plain.has_value()) << plain.error().describe();
  EXPECT_FALSE(log::enabled(LogLevel::Warn)) << "a context with the default log_level reset the level";
  auto in_code = Context::open(Options{.transport = "tcp", .log_level = "info"});
  ASSERT_TRUE(in_code.has_value()) << in_code.error().describe();
  EXPECT_TRUE(log::enabled(LogLevel::Info));
  EXPECT_FALSE(log::enabled(LogLevel::Debug));
  set("RDMAKIT_LOG_LEVEL", "error");
  auto from_environment = Context::open(Options{.transport = "tcp"});
  ASSERT_TRUE(from_environment.has_value()) << from_environment.error().describe();
  EXPECT_FALSE(log::enabled(LogLevel::Warn));
}

}  // namespace
}  // namespace rdmakit
