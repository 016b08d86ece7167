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
#include "transport/tcp/options.hpp"

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
  static bool built(std::string_view transport) {
    for (const auto& info : built_transports())
      if (info.name == transport) return true;
    return false;
  }

  std::map<std::string, std::string> saved_;
  std::vector<std::string> names_;
};

TEST_F(OptionsTest, DefaultsAreDocumentedValues) {
  auto config = resolve_config({});
  ASSERT_TRUE(config.has_value()) << config.error().describe();
  EXPECT_EQ(config->transport, "tcp");
  EXPECT_FALSE(config->name.empty());  // <hostname>:<pid>
  EXPECT_EQ(config->listen_address, "127.0.0.1:0");
  EXPECT_EQ(config->timeout, std::chrono::milliseconds(4000));
  EXPECT_EQ(config->rnr_timeout, std::chrono::milliseconds(1000));
  EXPECT_EQ(config->connect_timeout, std::chrono::milliseconds(10000));
  EXPECT_EQ(config->wait_mode, WaitMode::Hybrid);
  EXPECT_EQ(config->spin, std::chrono::microseconds(50));
  EXPECT_EQ(config->cq_depth, 4096u);
  EXPECT_EQ(config->send_queue_depth, 1024u);
  EXPECT_EQ(config->recv_queue_depth, 1024u);
  EXPECT_EQ(config->max_sge, 16u);
  EXPECT_EQ(config->log_level, "warn");
  // Transport options left unset are not carried: each transport takes its table's default at open.
  EXPECT_TRUE(config->transport_options.empty()) << ::testing::PrintToString(config->transport_options);
  auto tcp = tcp::resolve_tcp_options(*config);
  ASSERT_TRUE(tcp.has_value()) << tcp.error().describe();
  EXPECT_EQ(tcp->handshake_timeout, std::chrono::milliseconds(2000));
}

TEST_F(OptionsTest, CodeBeatsEnvironmentBeatsDefault) {
  set("RDMAKIT_TIMEOUT_MS", "123");
  set("RDMAKIT_WAIT_MODE", "spin");
  set("RDMAKIT_HANDSHAKE_TIMEOUT_MS", "444");
  set("RDMAKIT_NAME", "from-env");
  auto from_env = resolve_config({});
  ASSERT_TRUE(from_env.has_value()) << from_env.error().describe();
  EXPECT_EQ(from_env->timeout, std::chrono::milliseconds(123));
  EXPECT_EQ(from_env->wait_mode, WaitMode::Spin);
  EXPECT_EQ(tcp::resolve_tcp_options(*from_env)->handshake_timeout, std::chrono::milliseconds(444));
  EXPECT_EQ(from_env->name, "from-env");

  auto from_code = resolve_config(
      Options{.name = "from-code", .timeout = std::chrono::milliseconds(77), .wait_mode = WaitMode::Block}
          .set("handshake_timeout_ms", "55"));
  ASSERT_TRUE(from_code.has_value()) << from_code.error().describe();
  EXPECT_EQ(from_code->timeout, std::chrono::milliseconds(77));
  EXPECT_EQ(from_code->wait_mode, WaitMode::Block);
  EXPECT_EQ(tcp::resolve_tcp_options(*from_code)->handshake_timeout, std::chrono::milliseconds(55));
  EXPECT_EQ(from_code->name, "from-code");
}

// A core option may be set by name too (what Python's keywords do); its typed field, when set, wins.
TEST_F(OptionsTest, CoreOptionsSetByNameParseAsTheirVariableWould) {
  auto by_name = resolve_config(Options{}.set("timeout_ms", "321").set("wait_mode", "block"));
  ASSERT_TRUE(by_name.has_value()) << by_name.error().describe();
  EXPECT_EQ(by_name->timeout, std::chrono::milliseconds(321));
  EXPECT_EQ(by_name->wait_mode, WaitMode::Block);
  EXPECT_TRUE(by_name->transport_options.empty()) << "core options are fields, not carried by name";
  auto typed = resolve_config(Options{.timeout = std::chrono::milliseconds(99)}.set("timeout_ms", "321"));
  ASSERT_TRUE(typed.has_value()) << typed.error().describe();
  EXPECT_EQ(typed->timeout, std::chrono::milliseconds(99));
  auto bad = resolve_config(Options{}.set("cq_depth", "lots"));
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code(), Errc::InvalidArgument);
  EXPECT_NE(bad.error().message().find("RDMAKIT_CQ_DEPTH"), std::string::npos) << bad.error().message();
}

// A name no table of a context declares is refused, naming the closest option: a typo set in code must not
// be dropped without a word. An option of a built transport other than the one opened is ignored (as its
// variable is), so that one Options opens several transports.
TEST_F(OptionsTest, AnUnknownNameSetInCodeNamesTheClosestOption) {
  auto typo = resolve_config(Options{}.set("handshake_timout_ms", "5"));
  ASSERT_FALSE(typo.has_value());
  EXPECT_EQ(typo.error().code(), Errc::InvalidArgument);
  EXPECT_NE(typo.error().message().find("'handshake_timout_ms'"), std::string::npos)
      << typo.error().message();
  EXPECT_NE(typo.error().message().find("did you mean handshake_timeout_ms?"), std::string::npos)
      << typo.error().message();
  auto nothing_close = resolve_config(Options{}.set("colour", "blue"));
  ASSERT_FALSE(nothing_close.has_value());
  EXPECT_EQ(nothing_close.error().message().find("did you mean"), std::string::npos)
      << nothing_close.error().message();
  // Another layer's option is not a context's.
  EXPECT_FALSE(resolve_config(Options{}.set("coll_slots", "4")).has_value());
}

TEST_F(OptionsTest, AnotherTransportsOptionIsIgnoredAndTheOpenedOnesIsChecked) {
  if (!built("shm")) GTEST_SKIP() << "shm not built";
  set("RDMAKIT_SHM_ALLOWED_UIDS", "bob");
  auto tcp = resolve_config({.transport = "tcp"});
  ASSERT_TRUE(tcp.has_value()) << tcp.error().describe();
  EXPECT_EQ(tcp->transport_options.at("shm_allowed_uids"), "bob") << "carried, unchecked, for shm";
  for (const char* transport : {"shm", "fault:shm"}) {
    if (std::string(transport).starts_with("fault") && !built("fault")) continue;
    SCOPED_TRACE(transport);
    auto shm = resolve_config({.transport = transport});
    ASSERT_FALSE(shm.has_value());
    EXPECT_EQ(shm.error().code(), Errc::InvalidArgument);
    EXPECT_NE(shm.error().message().find("RDMAKIT_SHM_ALLOWED_UIDS"), std::string::npos)
        << shm.error().message();
  }
  unsetenv("RDMAKIT_SHM_ALLOWED_UIDS");
  // Set in code: the same.
  Options options{.transport = "tcp"};
  options.set("shm_allowed_uids", "1000,");
  EXPECT_TRUE(resolve_config(options).has_value());
  options.transport = "shm";
  EXPECT_FALSE(resolve_config(options).has_value());
  // And a transport opened from a Config carrying a bad value refuses it at open, naming it.
  Config config = resolve_config({.transport = "tcp"}).value();
  config.transport_options["handshake_timeout_ms"] = "soon";
  auto bad = tcp::resolve_tcp_options(config);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find("RDMAKIT_HANDSHAKE_TIMEOUT_MS"), std::string::npos)
      << bad.error().message();
}

// Code beats the environment for a transport option too, and what is carried is the text set.
TEST_F(OptionsTest, TransportOptionsAreCarriedByName) {
  set("RDMAKIT_HANDSHAKE_TIMEOUT_MS", "700");
  auto env = resolve_config({});
  ASSERT_TRUE(env.has_value()) << env.error().describe();
  EXPECT_EQ(env->transport_options, (NamedOptions{{"handshake_timeout_ms", "700"}}));
  auto code = resolve_config(Options{}.set("handshake_timeout_ms", "800"));
  ASSERT_TRUE(code.has_value()) << code.error().describe();
  EXPECT_EQ(code->transport_options, (NamedOptions{{"handshake_timeout_ms", "800"}}));
  // describe_options(config) lists the opened transport's options with the values carried.
  std::map<std::string, OptionInfo> by_name;
  for (const auto& info : describe_options(*code)) by_name[info.name] = info;
  EXPECT_EQ(by_name["handshake_timeout_ms"].value, "800");
  EXPECT_EQ(by_name["handshake_timeout_ms"].default_value, "2000");
  EXPECT_EQ(by_name["handshake_timeout_ms"].layer, "tcp");
  EXPECT_EQ(by_name["timeout_ms"].layer, "core");
  // A Context opened so takes them: tcp refuses 0, at resolve_config and at open alike.
  EXPECT_FALSE(Context::open(Options{}.set("handshake_timeout_ms", "0")).has_value());
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
      {"RDMAKIT_HANDSHAKE_TIMEOUT_MS", "x"},
  };
  // Opening verbs checks verbs' options too (it need not open: resolve_config does not open a device).
  const char* transport = built("verbs") ? "verbs" : "tcp";
  for (const auto& [env, value] : bad) {
    SCOPED_TRACE(std::string(env) + "=" + value);
    if (std::string(transport) == "tcp" &&
        (std::string(env) == "RDMAKIT_PORT" || std::string(env) == "RDMAKIT_REGISTRATION_CACHE" ||
         std::string(env) == "RDMAKIT_GID_INDEX"))
      continue;
    set(env, value);
    // tcp's own option is checked when tcp is opened (with verbs it is another transport's: ignored).
    bool tcp_option = std::string(env) == "RDMAKIT_HANDSHAKE_TIMEOUT_MS";
    auto config = resolve_config({.transport = tcp_option ? "tcp" : transport});
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
      {{.log_level = "loud"}, "log_level"},
      {Options{}.set("handshake_timeout_ms", "0"), "handshake_timeout_ms"},
      {Options{}.set("device_chunk", "100"), "device_chunk"},
      {Options{}.set("device_ring_depth", "1"), "device_ring_depth"},
      {Options{}.set("device_ring_depth", "17"), "device_ring_depth"},
      {Options{.transport = "shm"}.set("shm_allowed_uids", "1000,bob"), "shm_allowed_uids"},
      {Options{.transport = "shm"}.set("shm_allowed_uids", "1000,"), "shm_allowed_uids"},
      {Options{.transport = "verbs"}.set("mtu", "1000"), "mtu"},
      {Options{.transport = "verbs"}.set("staging_chunk", "100"), "staging_chunk"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.option);
    if (c.options.transport && !built(*c.options.transport)) continue;
    auto config = resolve_config(c.options);
    ASSERT_FALSE(config.has_value());
    EXPECT_EQ(config.error().code(), Errc::InvalidArgument);
    EXPECT_NE(config.error().message().find(c.option), std::string::npos) << config.error().message();
  }
  if (!built("verbs")) return;
  auto verbs = [](const char* mtu) { return resolve_config(Options{.transport = "verbs"}.set("mtu", mtu)); };
  EXPECT_FALSE(verbs("0").has_value()) << "0 is no MTU; unset follows the port";
  for (const char* mtu : {"256", "512", "1024", "2048", "4096"}) EXPECT_TRUE(verbs(mtu).has_value()) << mtu;
  set("RDMAKIT_MTU", "999");
  auto from_env = resolve_config({.transport = "verbs"});
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
  // One entry per core field of Config, then tcp's own (the transport this config names).
  const char* expected[] = {"transport",
                            "name",
                            "listen_address",
                            "timeout_ms",
                            "rnr_timeout_ms",
                            "connect_timeout_ms",
                            "wait_mode",
                            "spin_us",
                            "cq_depth",
                            "send_queue_depth",
                            "recv_queue_depth",
                            "max_sge",
                            "log_level",
                            "gpu_path",
                            "handshake_timeout_ms",
                            "device_chunk",
                            "device_ring_depth"};
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
  // Each built transport's options, under its own name, from its own table.
  EXPECT_EQ(by_env["RDMAKIT_HANDSHAKE_TIMEOUT_MS"].layer, "tcp");
  if (built("verbs")) {
    for (const char* env : {"RDMAKIT_DEVICE", "RDMAKIT_PORT", "RDMAKIT_GID_INDEX", "RDMAKIT_MTU",
                            "RDMAKIT_INLINE_SIZE", "RDMAKIT_REGISTRATION_CACHE", "RDMAKIT_STAGING_CHUNK"})
      EXPECT_EQ(by_env[env].layer, "verbs") << env;
  }
  if (built("shm")) {
    EXPECT_EQ(by_env["RDMAKIT_SHM_ALLOWED_UIDS"].layer, "shm");
  }
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

// The library's one listing of Capabilities (rdmakit-info and Python print it): every field, typed, with
// the text rdmakit-info shows.
TEST(Introspection, DescribeCapabilitiesListsEveryFieldTypedAndAsText) {
  const Capabilities caps{
      .kernel_bypass = true, .max_sge = 7, .address_prefix = "shm:", .message_cost_us = 0};
  auto rows = describe_capabilities(caps);
  std::map<std::string, CapabilityInfo> by_name;
  for (const auto& row : rows) EXPECT_TRUE(by_name.emplace(row.name, row).second) << row.name << " twice";
  EXPECT_EQ(rows.size(), 16u);
  EXPECT_EQ(std::get<std::string>(by_name["device_memory_path"].value), "none");
  EXPECT_EQ(by_name["device_memory_path"].text, "none");
  EXPECT_EQ(std::get<bool>(by_name["kernel_bypass"].value), true);
  EXPECT_EQ(by_name["kernel_bypass"].text, "yes");
  EXPECT_EQ(std::get<bool>(by_name["device_keys"].value), false);
  EXPECT_EQ(std::get<std::uint64_t>(by_name["max_sge"].value), 7u);
  EXPECT_EQ(by_name["max_sge"].text, "7");
  EXPECT_EQ(std::get<std::string>(by_name["address_prefix"].value), "shm:");
  EXPECT_EQ(by_name["message_cost_us"].text, "undeclared");
  EXPECT_TRUE(by_name.contains("bandwidth_bytes_per_us"));
}

TEST(Introspection, TransportCountersAreFoundByName) {
  ConnectionStats stats;
  EXPECT_FALSE(stats.counter("ack_frames").has_value());
  stats.transport_counters = {{"ack_frames", 3}, {"acks_on_requests", 0}};
  EXPECT_EQ(stats.counter("ack_frames"), std::optional<std::uint64_t>(3));
  EXPECT_EQ(stats.counter("acks_on_requests"), std::optional<std::uint64_t>(0));
  EXPECT_FALSE(stats.counter("ack").has_value());
}

}  // namespace
}  // namespace rdmakit
