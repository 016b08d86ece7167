// The fault matrix's survivor side: the operations a case posts, how their completions are collected
// under a deadline, and the checks that every case makes afterwards (faults.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rdmakit/context.hpp"
#include "reliability/fault_layout.hpp"

namespace rdmakit::faults {

using Clock = std::chrono::steady_clock;

// One posted operation and what became of it.
struct Op {
  Opcode opcode = Opcode::Write;
  std::uint64_t local = 0;   // offset in the survivor's region
  std::uint64_t remote = 0;  // offset in the peer's region
  std::uint32_t length = 0;
  std::uint64_t expected_old = 0;  // atomics: the old value a success must return
  std::uint64_t id = 0;
  Status status = Status::GeneralError;
  Clock::time_point done{};
};

// The survivor: its context, region and connection, the peer, and the test's view of the peer's memory.
struct Rig {
  std::string transport;
  std::chrono::milliseconds timeout{};
  int memfd = -1;
  unsigned char* peer_memory = nullptr;  // the memfd, mapped here too
  PeerProcess peer;
  std::shared_ptr<Context> context;
  std::shared_ptr<MemoryRegion> local;
  std::shared_ptr<Connection> connection;
  std::vector<Op> ops;
  int fetch_adds = 0, compare_swaps = 0, sends = 0;

  // Makes the memfd, fills both sides' patterns, starts the peer and connects to it.
  std::string start(const std::string& transport, std::chrono::milliseconds timeout,
                    const std::string& listen = {}, const std::string& netns = {});
  ~Rig();

  // Each returns an empty string or what went wrong posting.
  std::string write(std::uint64_t offset, std::uint32_t length);
  std::string read(std::uint64_t offset, std::uint32_t length);
  std::string fetch_add();
  std::string compare_swap();
  std::string send(std::uint32_t length);
  // Every kind of operation, interleaved: 4 WRITEs and 4 READs of 1 MiB (round r: WRITEs at 4r MiB, READs at
  // 16 + 4r MiB), 4 SENDs and 16 + 16 atomics. Rounds 0 to 3.
  std::string post_mix(int round);

  // Waits for the completions of the first `count` ops not yet collected, in post order, until `deadline`;
  // "" or which op hung.
  std::string collect(Clock::time_point deadline, std::size_t count = SIZE_MAX);
  // When the first failure completed (Clock::time_point{} if none failed).
  Clock::time_point first_failure() const;
};

// How long a case waits for completions before it calls them hung: far beyond any bound below, so that a
// late detection is measured and reported as late rather than as a hang.
inline constexpr std::chrono::seconds kHangSlack{10};

// The latest a fault may be detected (or a stall ridden out): the timeout plus max(1 s, timeout / 2), plus
// RDMAKIT_TEST_FAULT_SLACK_MS when set (scripts/test.sh sets it for the sanitizer builds, several times
// slower). Measured on a loaded 2-core machine: kills 0-130 ms, a stop past a 1 s timeout ~1.0 s.
Clock::duration detection_bound(std::chrono::milliseconds timeout);
// "" when `took` is within detection_bound(timeout), else what was too late.
std::string check_bound(const char* what, Clock::duration took, std::chrono::milliseconds timeout);

// The checks every case makes (each returns "" or what failed):
// statuses: successes, then one failure (TransportRetryExceeded or Flushed), then only Flushed.
std::string check_status_order(const Rig& rig, bool failure_required);
// Every success's bytes landed where they should; nothing outside the touched ranges changed, on either
// side; the counters hold between the successful and the posted atomics (exactly the successes when `exact`).
std::string check_memory(const Rig& rig, bool exact_counters);

}  // namespace rdmakit::faults
