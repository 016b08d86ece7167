// Output of a run: a perftest-like table printed row by row, or JSON / CSV at the end.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "perf/params.hpp"
#include "perf/stats.hpp"

namespace rdmakit::perf {

struct RunInfo {
  std::string test;
  std::string transport;
  std::string mode;     // "poll", "block", or "poll (memory)" for write_lat
  std::string threads;  // who runs on each side, e.g. "1 app + transport's progress thread(s)"
  std::uint32_t connections = 1;
  std::uint32_t tx_depth = 0;
  std::uint32_t cq_mod = 0;
  bool bidirectional = false;
  bool verify = true;
  std::string memory = "host";    // this side's buffer: "host", or "cuda (<path>)" with --use-cuda
  std::uint64_t working_set = 0;  // --working-set bytes per connection; 0: one message-sized slot
};

struct Row {
  std::uint64_t bytes = 0;
  std::uint64_t iterations = 0;
  std::optional<BandwidthSummary> bandwidth;       // this side's
  std::optional<BandwidthSummary> peer_bandwidth;  // bidirectional: the server's direction
  std::optional<LatencySummary> latency;
  bool verified = false;
};

struct Report {
  RunInfo info;
  std::vector<Row> rows;
};

std::string table_header(const RunInfo& info, bool bandwidth);
std::string table_row(const Row& row);
std::string to_json(const Report& report);
std::string to_csv(const Report& report);

}  // namespace rdmakit::perf
