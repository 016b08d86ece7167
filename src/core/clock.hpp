// Clocks of the data path.
//
// The wall-clock time stamped on every completion for diagnostics ("when did this connection last
// complete anything?"). CLOCK_REALTIME_COARSE reads the kernel's last tick through the vDSO: about 5 ns
// here against 24 ns for the precise clock, on a path that costs a few hundred nanoseconds per operation.
// Its resolution (one tick, 1 to 4 ms) is plenty for telling a stuck connection from a live one.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

namespace rdmakit {

// CLOCK_MONOTONIC (std::chrono::steady_clock) in nanoseconds: deadlines and leases. One clock for every
// process on the host, so a value written into shared memory means the same to a peer.
inline std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline std::chrono::system_clock::time_point coarse_wall_clock() noexcept {
  timespec now{};
  clock_gettime(CLOCK_REALTIME_COARSE, &now);
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::seconds(now.tv_sec) +
                                                                      std::chrono::nanoseconds(now.tv_nsec)));
}

}  // namespace rdmakit
