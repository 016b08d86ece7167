// rdmakit-perf end to end in one process: a server thread and a client over the tcp transport (and any
// other transport named in RDMAKIT_TEST_PERF_TRANSPORTS, e.g. "tcp,shm"), every test, data checked.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <sstream>
#include <thread>

#include "fake_cudart/fake_cudart.hpp"
#include "perf/params.hpp"
#include "perf/pattern.hpp"
#include "perf/roles.hpp"
#include "perf/run.hpp"
#include "perf/session.hpp"

namespace rdmakit::perf {
namespace {

std::vector<std::string> transports() {
  const char* env = std::getenv("RDMAKIT_TEST_PERF_TRANSPORTS");
  std::vector<std::string> out;
  std::stringstream list(env ? env : "tcp");
  for (std::string name; std::getline(list, name, ',');) out.push_back(name);
  return out;
}

// Runs server and client; returns the client's report.
Result<Report> run_pair(const std::string& transport, std::vector<std::string_view> args) {
  std::string transport_arg = "--transport=" + transport;
  args.push_back(transport_arg);
  auto server_args = args;
  server_args.erase(server_args.begin() + 1);  // no server address: the server side
  auto client_params = parse_args(args);
  auto server_params = parse_args(server_args);
  if (!client_params) return std::unexpected(client_params.error());
  if (!server_params) return std::unexpected(server_params.error());
  auto server_context = open_context(*server_params);
  if (!server_context) return std::unexpected(server_context.error());
  auto listener = (*server_context)->listen();
  if (!listener) return std::unexpected(listener.error());
  client_params->server = (*listener)->address();
  Result<void> served;
  std::thread server([&] { served = run_server(*server_params, *server_context, **listener); });
  auto client_context = open_context(*client_params);
  Result<Report> report = client_context ? run_client(*client_params, *client_context)
                                         : Result<Report>(std::unexpected(client_context.error()));
  server.join();
  if (!served) return std::unexpected(served.error());
  return report;
}

class PerfLoopback : public ::testing::TestWithParam<std::string> {};

TEST_P(PerfLoopback, EveryTestRunsAndVerifies) {
  const std::vector<std::vector<std::string_view>> cases = {
      {"write_bw", "x", "-s", "4096", "-n", "100"},
      {"write_bw", "x", "-a", "--max-size", "256K", "-n", "40", "-q", "3", "-t", "16", "--cq-mod", "4"},
      {"write_bw", "x", "-s", "1000", "-n", "100", "-b", "--mode", "block"},
      {"read_bw", "x", "-s", "65536", "-n", "100", "-q", "2", "-b"},
      {"send_bw", "x", "-a", "--max-size", "64K", "-n", "100", "-q", "2"},
      {"send_bw", "x", "-s", "512", "-D", "1", "--mode", "block"},
      {"write_lat", "x", "-a", "--max-size", "8K", "-n", "50"},
      {"write_lat", "x", "-s", "8", "-D", "1"},
      {"read_lat", "x", "-s", "3000", "-n", "50", "--mode", "block"},
      {"send_lat", "x", "-a", "--max-size", "16K", "-n", "50"},
      {"send_lat", "x", "-s", "8", "-D", "1", "--mode", "block"},
      {"atomic_lat", "x", "-n", "100"},
  };
  for (const auto& args : cases) {
    SCOPED_TRACE(std::string(args[0]) + " case of " + std::to_string(args.size()) + " args");
    auto report = run_pair(GetParam(), args);
    ASSERT_TRUE(report) << report.error().describe();
    ASSERT_FALSE(report->rows.empty());
    for (const Row& row : report->rows) {
      EXPECT_TRUE(row.verified) << row.bytes;
      EXPECT_GT(row.iterations, 0u);
      if (row.bandwidth) {
        EXPECT_GT(row.bandwidth->average_bytes_per_second, 0);
      }
      if (row.latency) {
        EXPECT_GT(row.latency->median_us, 0);
      }
    }
  }
}

// The window is refilled as completions free room (perftest's way), in chains of --post-list, with one
// signaled operation every cq_mod and on the last: a count that cq_mod does not divide runs exactly, and
// a timed run stops on a signaled operation (else the run would wait for a completion that never comes).
TEST_P(PerfLoopback, WindowRefillRunsExactCountsAndTimedStops) {
  auto exact = run_pair(GetParam(), {"write_bw", "x", "-s", "4096", "-n", "250", "-t", "128", "--cq-mod",
                                     "100", "--post-list", "7", "-w", "13"});
  ASSERT_TRUE(exact) << exact.error().describe();
  ASSERT_EQ(exact->rows.size(), 1u);
  EXPECT_EQ(exact->rows[0].iterations, 250u);
  EXPECT_TRUE(exact->rows[0].verified);
  auto reads = run_pair(GetParam(), {"read_bw", "x", "-s", "100", "-n", "301", "-t", "64", "--cq-mod", "64"});
  ASSERT_TRUE(reads) << reads.error().describe();
  EXPECT_EQ(reads->rows.at(0).iterations, 301u);
  auto timed = run_pair(GetParam(), {"write_bw", "x", "-s", "64", "-D", "1", "-t", "128", "--cq-mod", "100"});
  ASSERT_TRUE(timed) << timed.error().describe();
  ASSERT_EQ(timed->rows.size(), 1u);
  EXPECT_GT(timed->rows[0].iterations, 0u);
  EXPECT_EQ(timed->rows[0].iterations % 100, 0u) << "a timed run ends on a signaled operation";
  EXPECT_TRUE(timed->rows[0].verified);
}

// --working-set: each connection's operations walk the working set, one message after the next, on both
// sides (-b too); the check covers every position the run reached.
TEST_P(PerfLoopback, WorkingSetWalksEveryPositionOfBothBuffers) {
  struct Case {
    std::vector<std::string_view> args;
    std::uint64_t working_set;
  };
  const std::vector<Case> cases = {
      {{"write_bw", "x", "-s", "4096", "-n", "40", "-w", "8", "--working-set", "256K"}, 256 << 10},
      {{"write_bw", "x", "-a", "--max-size", "64K", "-n", "64", "-w", "8", "--working-set", "128K", "-q",
        "2"},
       128 << 10},
      {{"write_bw", "x", "-s", "1000", "-n", "80", "-w", "8", "--working-set", "64K", "-b"}, 64 << 10},
      {{"read_bw", "x", "-s", "8192", "-n", "40", "-w", "8", "--working-set", "384K", "-q", "2", "-b"},
       384 << 10},
      {{"write_bw", "x", "-s", "64K", "-D", "1", "--working-set", "1M"}, 1 << 20},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.args[0]) + " over a working set of " + std::to_string(c.working_set));
    auto report = run_pair(GetParam(), c.args);
    ASSERT_TRUE(report) << report.error().describe();
    EXPECT_EQ(report->info.working_set, c.working_set);
    for (const Row& row : report->rows) EXPECT_TRUE(row.verified) << row.bytes;
  }
}

// The check itself: a position the run reached but that never received the pattern is named; positions
// beyond the operations made are not judged.
TEST_P(PerfLoopback, WorkingSetCheckNamesAPositionThatWasNotWritten) {
  auto params = parse_args(std::vector<std::string_view>{"write_bw", "--transport", GetParam()});
  ASSERT_TRUE(params) << params.error().describe();
  auto context = open_context(*params);
  ASSERT_TRUE(context) << context.error().describe();
  Session session;
  session.data.resize(1);  // one lane; its connection is not used by the check
  session.working_set = 64 << 10;
  session.slot_bytes = 64 << 10;
  auto region = (*context)->allocate(session.slot_bytes, Access::LocalWrite);
  ASSERT_TRUE(region) << region.error().describe();
  session.local = *region;
  constexpr std::uint64_t kSize = 4096;  // 16 positions
  prepare_size(session, perf::Test::WriteBw, false, Role::Server, kSize);
  auto* area = static_cast<std::uint8_t*>(session.local->data());
  for (std::uint64_t p = 0; p < 15; ++p) fill_pattern(area + p * kSize, kSize, kSize);  // not position 15
  auto problem = verify_size(session, perf::Test::WriteBw, false, Role::Server, kSize, 40, 40);
  EXPECT_NE(problem.find("position 15"), std::string::npos) << problem;
  EXPECT_EQ(verify_size(session, perf::Test::WriteBw, false, Role::Server, kSize, 15, 15), "")
      << "15 operations reach positions 0-14 only";
}

// --use-cuda (perftest's --use_cuda): each side's buffer in device memory of the fake CUDA runtime, which
// faults when the CPU touches it; the data is filled and checked through the runtime's copies.
TEST_P(PerfLoopback, DeviceMemoryOnBothSidesMovesAndVerifies) {
  ::setenv("RDMAKIT_CUDA_RUNTIME", fake_cudart_file(), 1);
  ::setenv("RDMAKIT_CUDA_DRIVER", fake_cudart_file(), 1);
  const std::vector<std::vector<std::string_view>> cases = {
      {"write_bw", "x", "-s", "65536", "-n", "40", "--use-cuda"},
      {"read_bw", "x", "-s", "65536", "-n", "40", "-q", "2", "--use-cuda"},
      {"send_bw", "x", "-s", "3000", "-n", "40", "--use-cuda"},
      {"read_lat", "x", "-s", "3000", "-n", "20", "--use-cuda"},
      {"send_lat", "x", "-s", "100", "-n", "20", "--use-cuda"},
  };
  for (const auto& args : cases) {
    SCOPED_TRACE(std::string(args[0]) + " with device memory");
    auto report = run_pair(GetParam(), args);
    ASSERT_TRUE(report) << report.error().describe();
    EXPECT_TRUE(report->info.memory.starts_with("cuda (")) << report->info.memory;
    ASSERT_EQ(report->rows.size(), 1u);
    EXPECT_TRUE(report->rows[0].verified);
  }
}

TEST_P(PerfLoopback, ServerRefusesAnotherTest) {
  auto server_params = parse_args(std::vector<std::string_view>{"read_bw", "--transport", GetParam()});
  auto client_params =
      parse_args(std::vector<std::string_view>{"write_bw", "x", "--transport", GetParam(), "-n", "10"});
  ASSERT_TRUE(server_params && client_params);
  auto server_context = open_context(*server_params);
  ASSERT_TRUE(server_context);
  auto listener = (*server_context)->listen();
  ASSERT_TRUE(listener);
  client_params->server = (*listener)->address();
  Result<void> served;
  std::thread server([&] { served = run_server(*server_params, *server_context, **listener); });
  auto client_context = open_context(*client_params);
  ASSERT_TRUE(client_context);
  auto report = run_client(*client_params, *client_context);
  server.join();
  ASSERT_FALSE(report);
  EXPECT_NE(report.error().message().find("read_bw"), std::string::npos) << report.error().describe();
  EXPECT_FALSE(served);
}

INSTANTIATE_TEST_SUITE_P(Transports, PerfLoopback, ::testing::ValuesIn(transports()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace rdmakit::perf
