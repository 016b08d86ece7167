// Turning raw timings into the figures perftest prints. Pure functions, unit-tested.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace rdmakit::perf {

struct LatencySummary {
  double min_us = 0, median_us = 0, average_us = 0, p99_us = 0, p999_us = 0, max_us = 0;
};
// Sorts `samples_us` in place. Empty input gives all zeros.
LatencySummary summarize_latency(std::vector<double>& samples_us);
// The nearest-rank percentile of sorted samples (p in 0..100).
double percentile(std::span<const double> sorted, double p);

// Progress marks taken at completions: after `ops` operations, `ns` nanoseconds had passed since the start.
struct Mark {
  std::uint64_t ops = 0;
  std::int64_t ns = 0;
};

struct BandwidthSummary {
  std::uint64_t bytes = 0;  // message size
  std::uint64_t ops = 0;    // operations timed
  double seconds = 0;
  double average_bytes_per_second = 0;
  double peak_bytes_per_second = 0;
  double messages_per_second = 0;
};
// Peak: the best rate over any stretch of at least 1/16 of the run (shorter stretches measure the
// completion batching, not the transport). Marks must be ordered; the last one ends the run.
BandwidthSummary summarize_bandwidth(std::uint64_t message_bytes, std::span<const Mark> marks);

// Units as perftest and the scripts use them: MB = 10^6 bytes, Gb = 10^9 bits, Mpps = 10^6 messages.
inline double to_mb(double bytes_per_second) { return bytes_per_second / 1e6; }
inline double to_gbit(double bytes_per_second) { return bytes_per_second * 8 / 1e9; }

}  // namespace rdmakit::perf
