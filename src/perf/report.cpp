#include "perf/report.hpp"

#include <cstdio>

namespace rdmakit::perf {
namespace {

std::string fixed(double value, int decimals = 2) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

std::string pad(const std::string& text, std::size_t width) {
  return text.size() >= width ? text + " " : std::string(width - text.size(), ' ') + text;
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Both directions of a bidirectional run, summed as perftest -b does.
BandwidthSummary total(const Row& row) {
  BandwidthSummary sum = *row.bandwidth;
  if (row.peer_bandwidth) {
    sum.average_bytes_per_second += row.peer_bandwidth->average_bytes_per_second;
    sum.peak_bytes_per_second += row.peer_bandwidth->peak_bytes_per_second;
    sum.messages_per_second += row.peer_bandwidth->messages_per_second;
  }
  return sum;
}

std::string json_row(const Row& row) {
  std::string out = "{\"bytes\": " + std::to_string(row.bytes) +
                    ", \"iterations\": " + std::to_string(row.iterations) +
                    ", \"verified\": " + (row.verified ? "true" : "false");
  if (row.bandwidth) {
    BandwidthSummary bw = total(row);
    out += ", \"seconds\": " + fixed(bw.seconds, 6) +
           ", \"bw_peak_bytes_per_s\": " + fixed(bw.peak_bytes_per_second, 0) +
           ", \"bw_avg_bytes_per_s\": " + fixed(bw.average_bytes_per_second, 0) +
           ", \"bw_avg_mb_s\": " + fixed(to_mb(bw.average_bytes_per_second)) +
           ", \"bw_avg_gbit_s\": " + fixed(to_gbit(bw.average_bytes_per_second), 3) +
           ", \"msg_rate_mpps\": " + fixed(bw.messages_per_second / 1e6, 4);
  }
  if (row.latency) {
    const LatencySummary& l = *row.latency;
    out += ", \"lat_min_us\": " + fixed(l.min_us, 3) + ", \"lat_median_us\": " + fixed(l.median_us, 3) +
           ", \"lat_avg_us\": " + fixed(l.average_us, 3) + ", \"lat_p99_us\": " + fixed(l.p99_us, 3) +
           ", \"lat_p999_us\": " + fixed(l.p999_us, 3) + ", \"lat_max_us\": " + fixed(l.max_us, 3);
  }
  return out + "}";
}

}  // namespace

std::string table_header(const RunInfo& info, bool bandwidth) {
  std::string out =
      "# rdmakit-perf " + info.test + "  transport=" + info.transport + "  mode=" + info.mode +
      "  connections=" + std::to_string(info.connections) + "  tx_depth=" + std::to_string(info.tx_depth) +
      (bandwidth ? "  cq_mod=" + std::to_string(info.cq_mod) : std::string()) +
      (info.bidirectional ? "  bidirectional" : "") + "  verify=" + (info.verify ? "on" : "off") +
      (info.memory != "host" ? "  memory=" + info.memory : std::string()) +
      (info.working_set ? "  working_set=" + std::to_string(info.working_set) : std::string()) +
      "\n# threads: " + info.threads + "\n";
  if (bandwidth)
    return out + pad("#bytes", 10) + pad("#iterations", 13) + pad("BW peak[MB/s]", 15) +
           pad("BW avg[MB/s]", 15) + pad("BW avg[Gb/s]", 14) + pad("MsgRate[Mpps]", 15) + "\n";
  return out + pad("#bytes", 10) + pad("#iterations", 13) + pad("t_min[us]", 11) + pad("t_median[us]", 14) +
         pad("t_avg[us]", 11) + pad("t_p99[us]", 11) + pad("t_p99.9[us]", 13) + pad("t_max[us]", 11) + "\n";
}

std::string table_row(const Row& row) {
  std::string out = pad(std::to_string(row.bytes), 10) + pad(std::to_string(row.iterations), 13);
  if (row.bandwidth) {
    BandwidthSummary bw = total(row);
    return out + pad(fixed(to_mb(bw.peak_bytes_per_second)), 15) +
           pad(fixed(to_mb(bw.average_bytes_per_second)), 15) +
           pad(fixed(to_gbit(bw.average_bytes_per_second)), 14) +
           pad(fixed(bw.messages_per_second / 1e6, 6), 15) + "\n";
  }
  const LatencySummary& l = *row.latency;
  return out + pad(fixed(l.min_us), 11) + pad(fixed(l.median_us), 14) + pad(fixed(l.average_us), 11) +
         pad(fixed(l.p99_us), 11) + pad(fixed(l.p999_us), 13) + pad(fixed(l.max_us), 11) + "\n";
}

std::string to_json(const Report& report) {
  const RunInfo& i = report.info;
  std::string out =
      "{\"tool\": \"rdmakit-perf\", \"test\": " + quoted(i.test) + ", \"transport\": " + quoted(i.transport) +
      ", \"mode\": " + quoted(i.mode) + ", \"threads\": " + quoted(i.threads) +
      ", \"connections\": " + std::to_string(i.connections) +
      ", \"tx_depth\": " + std::to_string(i.tx_depth) + ", \"cq_mod\": " + std::to_string(i.cq_mod) +
      ", \"bidirectional\": " + (i.bidirectional ? "true" : "false") +
      ", \"verify\": " + (i.verify ? "true" : "false") + ", \"memory\": " + quoted(i.memory) +
      ", \"working_set\": " + std::to_string(i.working_set) + ", \"results\": [";
  for (std::size_t r = 0; r < report.rows.size(); ++r)
    out += (r ? ",\n  " : "\n  ") + json_row(report.rows[r]);
  return out + "]}\n";
}

std::string to_csv(const Report& report) {
  std::string out =
      "test,transport,mode,connections,bytes,iterations,bw_peak_mb_s,bw_avg_mb_s,bw_avg_gbit_s,"
      "msg_rate_mpps,lat_min_us,lat_median_us,lat_avg_us,lat_p99_us,lat_p999_us,lat_max_us,verified\n";
  for (const Row& row : report.rows) {
    out += report.info.test + "," + report.info.transport + "," + report.info.mode + "," +
           std::to_string(report.info.connections) + "," + std::to_string(row.bytes) + "," +
           std::to_string(row.iterations) + ",";
    if (row.bandwidth) {
      BandwidthSummary bw = total(row);
      out += fixed(to_mb(bw.peak_bytes_per_second)) + "," + fixed(to_mb(bw.average_bytes_per_second)) + "," +
             fixed(to_gbit(bw.average_bytes_per_second), 3) + "," + fixed(bw.messages_per_second / 1e6, 4) +
             ",";
    } else {
      out += ",,,,";
    }
    if (row.latency) {
      const LatencySummary& l = *row.latency;
      out += fixed(l.min_us, 3) + "," + fixed(l.median_us, 3) + "," + fixed(l.average_us, 3) + "," +
             fixed(l.p99_us, 3) + "," + fixed(l.p999_us, 3) + "," + fixed(l.max_us, 3) + ",";
    } else {
      out += ",,,,,,";
    }
    out += row.verified ? "yes\n" : "no\n";
  }
  return out;
}

}  // namespace rdmakit::perf
