// The conformance suite: the same cases over every transport. A transport is done when it passes all.
//
// Each case runs against a pair of contexts of the transport under test, connected to each other:
// "server" (the target of one-sided operations) and "client" (the initiator). Cases that need a real
// second process (a peer killed mid-transfer, a restarted peer) start tests/conformance/peer_main.cpp.
//
// Environment, for transports that need it (verbs in the Soft-RoCE VM):
//   RDMAKIT_CONFORMANCE_LISTEN         address the server listens on (default: the transport's default)
//   RDMAKIT_CONFORMANCE_SERVER_DEVICE  device of the server context (default: RDMAKIT_DEVICE), so that
//                                      client and server can sit on two different devices.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rdmakit/rdmakit.hpp"
#include "support/test_support.hpp"

namespace rdmakit::conformance {

using namespace std::chrono_literals;

// Fails the test with the error's text when a Result holds an error.
#define RDMAKIT_ASSERT_OK(expr)                                                     \
  __extension__({                                                                   \
    auto&& rdmakit_result_ = (expr);                                                \
    ASSERT_TRUE(rdmakit_result_.has_value()) << rdmakit_result_.error().describe(); \
    std::move(*rdmakit_result_);                                                    \
  })

inline constexpr auto kWait = 30s;  // generous: sanitizers and emulated RDMA are slow

struct Endpoint {
  std::shared_ptr<Context> context;
  std::shared_ptr<Connection> connection;
};

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override;

  // Options of both contexts: the transport under test and timeouts short enough for error cases.
  Options options(bool server) const;
  // Opens a context (skips the test only if the transport is not available on this machine).
  std::shared_ptr<Context> open_context(bool server, const Options& extra = {});
  // Connects a new client connection to a new server connection.
  void connect_pair(Endpoint& client, Endpoint& server, const ConnectOptions& client_options = {},
                    const ConnectOptions& server_options = {});
  // Memory of `size` bytes registered on `context` (alternating between allocate() and caller memory,
  // so both paths are covered).
  std::shared_ptr<MemoryRegion> region(Context& context, std::size_t size, Access access);

  // Waits for `id` and returns its completion (test fails on timeout).
  Completion wait(Connection& connection, std::uint64_t id);

  Endpoint client_, server_;
  std::vector<std::unique_ptr<std::byte[]>> caller_memory_;
  int region_count_ = 0;
};

// The transports every parameterized suite runs over, and gtest-friendly names for them.
std::vector<std::string> conformance_transports();
std::string transport_param_name(const ::testing::TestParamInfo<std::string>& info);

}  // namespace rdmakit::conformance
