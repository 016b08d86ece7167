#include "perf/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace rdmakit::perf {

double percentile(std::span<const double> sorted, double p) {
  if (sorted.empty()) return 0;
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size()) - 1e-9));
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

LatencySummary summarize_latency(std::vector<double>& samples_us) {
  if (samples_us.empty()) return {};
  std::sort(samples_us.begin(), samples_us.end());
  double sum = std::accumulate(samples_us.begin(), samples_us.end(), 0.0);
  return LatencySummary{.min_us = samples_us.front(),
                        .median_us = percentile(samples_us, 50),
                        .average_us = sum / static_cast<double>(samples_us.size()),
                        .p99_us = percentile(samples_us, 99),
                        .p999_us = percentile(samples_us, 99.9),
                        .max_us = samples_us.back()};
}

BandwidthSummary summarize_bandwidth(std::uint64_t message_bytes, std::span<const Mark> marks) {
  BandwidthSummary out;
  out.bytes = message_bytes;
  if (marks.empty()) return out;
  const Mark& last = marks.back();
  out.ops = last.ops;
  out.seconds = static_cast<double>(last.ns) / 1e9;
  if (last.ns <= 0) return out;
  out.messages_per_second = static_cast<double>(last.ops) / out.seconds;
  out.average_bytes_per_second = out.messages_per_second * static_cast<double>(message_bytes);
  // Two-pointer scan over the tightest stretch of at least min_ops operations ending at each mark; the
  // start of the run (0 ops at 0 ns) is the first candidate beginning.
  const std::uint64_t min_ops = std::max<std::uint64_t>(1, last.ops / 16);
  auto point = [&](std::size_t i) { return i == 0 ? Mark{0, 0} : marks[i - 1]; };
  double best = out.messages_per_second;
  std::size_t begin = 0;
  for (std::size_t end = 1; end <= marks.size(); ++end) {
    while (begin + 1 < end && point(end).ops - point(begin + 1).ops >= min_ops) ++begin;
    std::uint64_t ops = point(end).ops - point(begin).ops;
    std::int64_t ns = point(end).ns - point(begin).ns;
    if (ops >= min_ops && ns > 0)
      best = std::max(best, static_cast<double>(ops) * 1e9 / static_cast<double>(ns));
  }
  out.peak_bytes_per_second = best * static_cast<double>(message_bytes);
  return out;
}

}  // namespace rdmakit::perf
