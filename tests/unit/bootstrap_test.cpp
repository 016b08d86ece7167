// Bootstrap: launcher environments (torchrun, mpirun, srun), Slurm host lists, and the rendezvous stores.
#include "rdmakit/bootstrap.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <thread>

#include "bootstrap/auth.hpp"
#include "bootstrap/options.hpp"
#include "bootstrap/store_wire.hpp"

namespace rdmakit::bootstrap {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(Nodelist, ExpandsSlurmsCompressedForm) {
  EXPECT_EQ(*expand_nodelist("node[01-04,07]"),
            (std::vector<std::string>{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(*expand_nodelist("a,b[9-10],c"), (std::vector<std::string>{"a", "b9", "b10", "c"}));
  EXPECT_EQ(*expand_nodelist("r[1-2]-n[1-2]"),
            (std::vector<std::string>{"r1-n1", "r1-n2", "r2-n1", "r2-n2"}));
  EXPECT_EQ(*expand_nodelist("login"), (std::vector<std::string>{"login"}));
  for (const char* bad : {"node[1-", "node]", "node[4-1]", "node[a-b]", "a,,b", ""})
    EXPECT_FALSE(expand_nodelist(bad).has_value()) << bad;
}

TEST(LaunchEnv, Torchrun) {
  auto info = detect_launch(env_of({{"RANK", "3"},
                                    {"WORLD_SIZE", "4"},
                                    {"LOCAL_RANK", "1"},
                                    {"MASTER_ADDR", "10.1.2.3"},
                                    {"MASTER_PORT", "29500"}}));
  ASSERT_TRUE(info.has_value()) << info.error().describe();
  EXPECT_EQ(info->launcher, "torchrun");
  EXPECT_EQ(info->rank, 3);
  EXPECT_EQ(info->world_size, 4);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->store_host, "10.1.2.3");
  EXPECT_EQ(info->store_port, 29500);
  auto missing = detect_launch(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}));
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message().find("MASTER_ADDR"), std::string::npos);
  EXPECT_FALSE(detect_launch(
      env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}})));
  EXPECT_FALSE(detect_launch(
      env_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}})));
}

TEST(LaunchEnv, MpirunDerivesAStorePortFromTheJobId) {
  auto info = detect_launch(env_of({{"OMPI_COMM_WORLD_RANK", "1"},
                                    {"OMPI_COMM_WORLD_SIZE", "4"},
                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                    {"OMPI_MCA_ess_base_jobid", "12345"}}));
  ASSERT_TRUE(info.has_value()) << info.error().describe();
  EXPECT_EQ(info->launcher, "mpirun");
  EXPECT_EQ(info->rank, 1);
  EXPECT_EQ(info->world_size, 4);
  EXPECT_EQ(info->store_host, "127.0.0.1");
  EXPECT_EQ(info->store_port, default_store_port("12345"));
  EXPECT_GE(info->store_port, 20000);
  EXPECT_LT(info->store_port, 32768);  // outside the ephemeral range, where outgoing connections live
  EXPECT_LT(info->store_port, 40000);
  EXPECT_NE(default_store_port("12345"), default_store_port("12346"));
}

// Option store_addr set in code: the resolved options are what detect_launch uses, over the launcher's
// MASTER_ADDR and over the derived port.
TEST(LaunchEnv, StoreAddrSetInCodeWins) {
  auto config = resolve_bootstrap_options({.store_addr = "node1:4000"});
  ASSERT_TRUE(config.has_value()) << config.error().describe();
  auto mpirun = detect_launch(
      env_of(
          {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_MCA_ess_base_jobid", "9"}}),
      *config);
  ASSERT_TRUE(mpirun.has_value()) << mpirun.error().describe();
  EXPECT_EQ(mpirun->store_host, "node1");
  EXPECT_EQ(mpirun->store_port, 4000);
  // torchrun needs MASTER_ADDR and MASTER_PORT only when store_addr is not set.
  auto torchrun =
      detect_launch(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "other"}}), *config);
  ASSERT_TRUE(torchrun.has_value()) << torchrun.error().describe();
  EXPECT_EQ(torchrun->store_host, "node1");
  EXPECT_EQ(torchrun->store_port, 4000);
  auto single = detect_launch(env_of({}), *config);
  ASSERT_TRUE(single.has_value()) << single.error().describe();
  EXPECT_EQ(single->store_host, "node1");
  EXPECT_EQ(single->store_port, 4000);
  // A value that is no host:port is an error naming the option.
  auto bad_config = resolve_bootstrap_options({.store_addr = "node1"});
  ASSERT_TRUE(bad_config.has_value());
  auto bad =
      detect_launch(env_of({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}), *bad_config);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find("store_addr"), std::string::npos) << bad.error().message();
}

// RDMAKIT_STORE_ADDR is read by the option table from the process environment; a lookup passed for the
// launcher's variables is not asked for it.
TEST(LaunchEnv, StoreAddrComesFromTheOptionTableNotTheLookup) {
  auto launcher = env_of(
      {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"RDMAKIT_STORE_ADDR", "lookup:1"}});
  ASSERT_EQ(::setenv("RDMAKIT_STORE_ADDR", "node2:5000", 1), 0);
  auto info = detect_launch(launcher);
  ::unsetenv("RDMAKIT_STORE_ADDR");
  ASSERT_TRUE(info.has_value()) << info.error().describe();
  EXPECT_EQ(info->store_host, "node2");
  EXPECT_EQ(info->store_port, 5000);
  auto without = detect_launch(launcher);
  ASSERT_TRUE(without.has_value()) << without.error().describe();
  EXPECT_EQ(without->store_host, "127.0.0.1") << "the lookup's RDMAKIT_STORE_ADDR must not be read";
}

TEST(LaunchEnv, SrunUsesTheFirstNodeOfTheJob) {
  auto info = detect_launch(env_of({{"SLURM_PROCID", "5"},
                                    {"SLURM_NTASKS", "8"},
                                    {"SLURM_LOCALID", "1"},
                                    {"SLURM_JOB_NODELIST", "gpu[07-10]"},
                                    {"SLURM_JOB_ID", "77"}}));
  ASSERT_TRUE(info.has_value()) << info.error().describe();
  EXPECT_EQ(info->launcher, "srun");
  EXPECT_EQ(info->rank, 5);
  EXPECT_EQ(info->world_size, 8);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->store_host, "gpu07");
  auto bad =
      detect_launch(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_NODELIST", "gpu[07"}}));
  EXPECT_FALSE(bad.has_value());
}

TEST(LaunchEnv, NoLauncherIsASingleRank) {
  auto info = detect_launch(env_of({}));
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->launcher, "single");
  EXPECT_EQ(info->world_size, 1);
}

TEST(Store, MemoryStoreWaitsForKeysAndTimesOut) {
  auto store = make_memory_store();
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(store->set("k", std::string("v\0w", 3)).has_value());
  });
  auto value = store->get("k", std::chrono::milliseconds(5000));
  writer.join();
  ASSERT_TRUE(value.has_value());
  EXPECT_EQ(*value, std::string("v\0w", 3));
  auto missing = store->get("nope", std::chrono::milliseconds(10));
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), Errc::Timeout);
}

TEST(Store, TcpStoreServesManyClients) {
  auto server = TcpStore::open({.host = "127.0.0.1", .port = 0, .is_server = true});
  ASSERT_TRUE(server.has_value()) << server.error().describe();
  std::uint16_t port = (*server)->bound_port();
  ASSERT_NE(port, 0);
  std::vector<std::thread> clients;
  for (int r = 0; r < 6; ++r)
    clients.emplace_back([&, r] {
      auto client =
          TcpStore::open({.host = "127.0.0.1", .port = port, .timeout = std::chrono::milliseconds(5000)});
      ASSERT_TRUE(client.has_value()) << client.error().describe();
      std::string big(100000 + static_cast<std::size_t>(r), static_cast<char>('a' + r));
      ASSERT_TRUE((*client)->set("rank/" + std::to_string(r), big).has_value());
      for (int q = 0; q < 6; ++q) {
        auto value = (*client)->get("rank/" + std::to_string(q), std::chrono::milliseconds(5000));
        ASSERT_TRUE(value.has_value()) << value.error().describe();
        EXPECT_EQ(value->size(), 100000u + static_cast<std::size_t>(q));
      }
    });
  for (auto& t : clients) t.join();
  auto missing = (*server)->get("never", std::chrono::milliseconds(50));
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), Errc::Timeout);
}

// The child of StoreServerStopsBeforeExitHandlers (run before main, so gtest never starts in it): rank 0's
// store is alive at std::exit() (as a communicator is when the application exits without destroying it)
// while a client connects in a loop. The handler registered first runs last, after OpenSSL's own: there a
// server thread still serving would make nonces with OpenSSL torn down (SIGSEGV in RAND_bytes_ex, or a
// failure, depending on timing). It asks the server for a challenge: a reply, or the connection closed,
// means the server thread still runs (exit code 4); silence for 300 ms means it was stopped before.
std::uint16_t exit_child_port = 0;

int connect_loopback(std::uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void check_server_stopped() {
  int fd = connect_loopback(exit_child_port);
  if (fd < 0) return;  // nobody listens: stopped too
  std::string hello = std::string(wire::kHelloMagic) + std::string(auth::kNonceSize, 'n');
  [[maybe_unused]] auto sent = ::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 300) != 0) std::_Exit(4);  // answered or closed: still serving during exit
}

[[noreturn]] void exit_while_clients_connect() {
  std::atexit(check_server_stopped);
  auto store = TcpStore::open({.host = "127.0.0.1", .port = 0, .is_server = true});
  if (!store) std::_Exit(10);
  exit_child_port = (*store)->bound_port();
  std::thread([] {
    for (;;) {  // connections only: nothing here uses OpenSSL
      int fd = connect_loopback(exit_child_port);
      if (fd >= 0) ::close(fd);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }).detach();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::exit(3);
}

[[maybe_unused]] const bool exit_child = [] {
  if (std::getenv("BOOTSTRAP_TEST_EXIT_CHILD") != nullptr) exit_while_clients_connect();
  return false;
}();

TEST(Store, StoreServerStopsBeforeExitHandlers) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  env_strings.emplace_back("BOOTSTRAP_TEST_EXIT_CHILD=1");
  std::vector<char*> env;
  for (auto& s : env_strings) env.push_back(s.data());
  env.push_back(nullptr);
  char self[] = "/proc/self/exe";
  char* argv[] = {self, nullptr};
  for (int round = 0; round < 3; ++round) {
    pid_t pid = -1;
    ASSERT_EQ(::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, env.data()), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    // The code given to std::exit, not a signal: what mpirun then reports for the rank.
    ASSERT_TRUE(WIFEXITED(status)) << "round " << round << ": killed by signal "
                                   << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    EXPECT_EQ(WEXITSTATUS(status), 3) << "round " << round;
  }
}

TEST(Store, AClientWhoseServerNeverComesFailsClearly) {
  // Find a port nobody listens on: open a server, note its port, close it.
  std::uint16_t port;
  {
    auto server = TcpStore::open({.host = "127.0.0.1", .port = 0, .is_server = true});
    ASSERT_TRUE(server.has_value());
    port = (*server)->bound_port();
  }
  auto client =
      TcpStore::open({.host = "127.0.0.1", .port = port, .timeout = std::chrono::milliseconds(200)});
  ASSERT_FALSE(client.has_value());
  EXPECT_EQ(client.error().code(), Errc::Timeout);
  EXPECT_NE(client.error().message().find("rendezvous store"), std::string::npos);
}

}  // namespace
}  // namespace rdmakit::bootstrap
