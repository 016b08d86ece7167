// The fault matrix's shared ground (tests/reliability/faults.cpp and its peer): the layout of the peer's
// region, the byte patterns that fill both sides, and the peer process.
//
// The peer registers a memfd that the test created and also maps, so the test can read the peer's memory
// after the peer was killed: every completion that reported success is checked against what really landed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "rdmakit/memory.hpp"

namespace rdmakit::faults {

// Both regions (the peer's memfd and the survivor's local region) have this layout.
inline constexpr std::uint64_t kMiB = 1 << 20;
inline constexpr std::uint64_t kRegionSize = 52 * kMiB;
inline constexpr std::uint64_t kDataSize = 32 * kMiB;  // [0, 32 MiB): WRITE and READ ranges
inline constexpr std::uint64_t kCounters =
    32 * kMiB;  // 8-byte words: fetch_add counter, compare_swap counter
inline constexpr std::uint64_t kResults = kCounters + 4096;  // survivor: the atomics' old values land here
inline constexpr std::uint64_t kSlots = 33 * kMiB;           // receive slots (peer) / SEND sources (survivor)
// Above 64 KiB so that shm carries a SEND on its progress thread rather than inside post(): a batch of
// them is still in flight when the peer is killed (kill_mid_send). 64 slots: [33 MiB, 49 MiB).
inline constexpr std::uint64_t kSlotSize = 256 << 10;
inline constexpr int kSlotCount = 64;  // the peer posts one receive per slot on every connection

// Seeds of the two sides' patterns: distinct, so a byte that moved the wrong way shows.
inline constexpr std::uint64_t kPeerSeed = 0x5eed0001;
inline constexpr std::uint64_t kLocalSeed = 0x5eed0002;

// The 8-byte word at byte offset `offset` (a multiple of 8) of a region filled with `seed`.
std::uint64_t pattern_word(std::uint64_t seed, std::uint64_t offset);
void fill_pattern(void* base, std::uint64_t offset, std::uint64_t length, std::uint64_t seed);
// The first byte offset in [offset, offset + length) whose word differs from `seed`'s pattern at
// `expected_offset + (i - offset)`, or -1 when all match.
std::int64_t find_mismatch(const void* base, std::uint64_t offset, std::uint64_t length, std::uint64_t seed,
                           std::uint64_t expected_offset);

// The peer: `<self> --peer <transport> <memfd> <timeout-ms> <listen-address|->`.
int run_peer(int argc, char** argv);

// A peer process started from this program; killed and reaped when destroyed.
class PeerProcess {
 public:
  // Starts `<self> --peer ...` with `memfd` inherited; `netns`: run it there (ip netns exec).
  bool start(const std::string& transport, int memfd, std::chrono::milliseconds timeout,
             const std::string& listen, const std::string& netns = {});
  ~PeerProcess();
  PeerProcess() = default;
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  // Waits for the peer's next "ACCEPTED" line (its receives are posted then).
  bool accepted();
  // SIGSTOP waits for the whole group to stop (kill() returns before every thread has); SIGKILL reaps.
  void signal(int sig);
  // Closes stdin and waits for the peer to exit by itself: after this its memory no longer changes.
  bool finish();
  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }
  const RemoteRegion& region() const { return region_; }

 private:
  bool read_line(std::string* line);
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1;
  std::string address_;
  RemoteRegion region_;
};

}  // namespace rdmakit::faults
