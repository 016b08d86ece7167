// rdmakit-perf's command line and statistics: pure logic, no transport.
#include <gtest/gtest.h>

#include <string_view>
#include <vector>

#include "perf/params.hpp"
#include "perf/pattern.hpp"
#include "perf/report.hpp"
#include "perf/stats.hpp"

namespace rdmakit::perf {
namespace {

Result<Params> parse(std::vector<std::string_view> args) { return parse_args(args); }

TEST(PerfParams, ServerAndClientForms) {
  auto server = parse({"write_bw"});
  ASSERT_TRUE(server) << server.error().describe();
  EXPECT_EQ(server->test, perf::Test::WriteBw);
  EXPECT_TRUE(server->server.empty());
  auto client = parse({"read_lat", "10.0.0.1", "-s", "64K", "-n", "77", "--mode", "block", "--json"});
  ASSERT_TRUE(client) << client.error().describe();
  EXPECT_EQ(client->test, perf::Test::ReadLat);
  EXPECT_EQ(client->server, "10.0.0.1");
  EXPECT_EQ(client->sizes, std::vector<std::uint64_t>{65536});
  EXPECT_EQ(client->iterations, 77u);
  EXPECT_EQ(client->mode, CompletionMode::Block);
  EXPECT_EQ(client->format, OutputFormat::Json);
}

TEST(PerfParams, SweepDurationDepthConnections) {
  auto p = parse(
      {"send_bw", "host", "-a", "-D", "2", "-q", "4", "--tx-depth=64", "--cq-mod", "256", "--no-verify"});
  ASSERT_TRUE(p) << p.error().describe();
  EXPECT_EQ(p->sizes.front(), 2u);
  EXPECT_EQ(p->sizes.back(), 8u << 20);
  EXPECT_EQ(p->duration.count(), 2000);
  EXPECT_EQ(p->connections, 4u);
  EXPECT_EQ(p->tx_depth, 64u);
  EXPECT_EQ(p->cq_mod, 64u);  // never more than the window
  EXPECT_FALSE(p->verify);
  EXPECT_EQ(effective_warmup(*p), 128u);
}

TEST(PerfParams, AtomicIsAlwaysEightBytes) {
  auto p = parse({"atomic_lat", "h", "-s", "4096"});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->sizes, std::vector<std::uint64_t>{8});
}

TEST(PerfParams, UseCudaPlacesThisSidesBufferInDeviceMemory) {
  auto p = parse({"write_bw", "h", "--use-cuda"});
  ASSERT_TRUE(p) << p.error().describe();
  EXPECT_EQ(p->memory, MemoryKind::Cuda);
  auto perftest_spelling = parse({"read_bw", "--use_cuda=0"});
  ASSERT_TRUE(perftest_spelling) << perftest_spelling.error().describe();
  EXPECT_EQ(perftest_spelling->memory, MemoryKind::Cuda);
  EXPECT_EQ(parse({"read_bw"})->memory, MemoryKind::Host);
  // The CPU would have to touch device memory: refused with the reason.
  EXPECT_FALSE(parse({"read_bw", "--use_cuda=1"}));
  auto polling = parse({"write_lat", "h", "--use-cuda"});
  ASSERT_FALSE(polling);
  EXPECT_NE(polling.error().message().find("polls"), std::string::npos) << polling.error().message();
  EXPECT_FALSE(parse({"atomic_lat", "h", "--use-cuda"}));
  EXPECT_TRUE(parse({"atomic_lat", "--use-cuda"})) << "the server's counter may be device memory";
}

// --working-set sizes both sides' buffers (max_size) and gives each size its number of positions.
TEST(PerfParams, WorkingSetSizesTheBuffersAndCountsPositions) {
  auto p = parse({"write_bw", "h", "-s", "64K", "--working-set", "1G"});
  ASSERT_TRUE(p) << p.error().describe();
  EXPECT_EQ(p->working_set, std::uint64_t{1} << 30);
  EXPECT_EQ(max_size(*p), std::uint64_t{1} << 30);
  EXPECT_EQ(positions_per_lane(p->working_set, 65536), 16384u);
  EXPECT_EQ(positions_per_lane(p->working_set, 3000), (std::uint64_t{1} << 30) / 3000);
  EXPECT_EQ(positions_per_lane(0, 65536), 1u) << "no working set: one slot";
  EXPECT_EQ(positions_per_lane(4096, 65536), 1u) << "a message larger than the working set: one slot";
  EXPECT_EQ(max_size(*parse({"read_bw", "-s", "8M", "--working-set", "1M"})), 8u << 20);
}

TEST(PerfParams, ErrorsNameTheArgument) {
  auto expect_error = [](std::vector<std::string_view> args, std::string_view fragment) {
    auto p = parse_args(args);
    ASSERT_FALSE(p) << "accepted " << args.size() << " args";
    EXPECT_NE(p.error().message().find(fragment), std::string::npos) << p.error().message();
  };
  expect_error({"write_bw", "-s", "12x"}, "size");
  expect_error({"nonsense"}, "nonsense");
  expect_error({"write_bw", "-q"}, "-q");
  expect_error({"write_bw", "-t", "0"}, "-t");
  expect_error({"write_bw", "--frobnicate"}, "--frobnicate");
  expect_error({"write_lat", "h", "-q", "2"}, "one connection");
  expect_error({"send_bw", "h", "-b"}, "-b");
  expect_error({"write_bw", "--mode", "sometimes"}, "sometimes");
  expect_error({}, "name a test");
  expect_error({"write_lat", "--working-set", "1M"}, "--working-set");
  expect_error({"send_bw", "--working-set", "1M"}, "--working-set");
  expect_error({"write_bw", "--working-set", "3G"}, "2 GiB");
}

TEST(PerfStats, LatencyPercentiles) {
  std::vector<double> samples;
  for (int i = 1000; i >= 1; --i) samples.push_back(i);
  auto s = summarize_latency(samples);
  EXPECT_EQ(s.min_us, 1);
  EXPECT_EQ(s.max_us, 1000);
  EXPECT_EQ(s.median_us, 500);
  EXPECT_EQ(s.p99_us, 990);
  EXPECT_EQ(s.p999_us, 999);
  EXPECT_DOUBLE_EQ(s.average_us, 500.5);
  std::vector<double> none;
  EXPECT_EQ(summarize_latency(none).max_us, 0);
}

TEST(PerfStats, BandwidthAverageAndPeak) {
  // 1600 ops of 1 MB: the first 800 in 1 s, the rest in 0.5 s.
  std::vector<Mark> marks;
  for (int i = 1; i <= 16; ++i)
    marks.push_back(
        Mark{std::uint64_t(i) * 100, i <= 8 ? i * 125'000'000LL : 1'000'000'000LL + (i - 8) * 62'500'000LL});
  auto bw = summarize_bandwidth(1'000'000, marks);
  EXPECT_EQ(bw.ops, 1600u);
  EXPECT_DOUBLE_EQ(bw.seconds, 1.5);
  EXPECT_NEAR(bw.average_bytes_per_second, 1600e6 / 1.5, 1);
  EXPECT_NEAR(bw.peak_bytes_per_second, 1600e6, 1);  // the fast half
  EXPECT_NEAR(to_gbit(bw.peak_bytes_per_second), 12.8, 1e-9);
}

TEST(PerfPattern, DependsOnSizeAndFindsTheBadByte) {
  std::vector<unsigned char> a(1000);
  fill_pattern(a.data(), a.size(), 1000);
  EXPECT_EQ(check_pattern(a.data(), a.size(), 1000, "x"), "");
  EXPECT_NE(check_pattern(a.data(), a.size(), 512, "x"), "");
  a[617] ^= 1;
  EXPECT_EQ(find_mismatch(a.data(), a.size(), 1000), std::optional<std::size_t>(617));
}

TEST(PerfReport, JsonAndCsvCarryEveryFigure) {
  Report report;
  report.info =
      RunInfo{.test = "write_bw", .transport = "tcp", .mode = "poll", .threads = "1", .connections = 2};
  Row row{.bytes = 4096, .iterations = 10};
  row.bandwidth = BandwidthSummary{.bytes = 4096,
                                   .ops = 10,
                                   .seconds = 1,
                                   .average_bytes_per_second = 40960,
                                   .peak_bytes_per_second = 50000,
                                   .messages_per_second = 10};
  row.verified = true;
  report.rows.push_back(row);
  std::string json = to_json(report);
  EXPECT_NE(json.find("\"bw_avg_bytes_per_s\": 40960"), std::string::npos) << json;
  EXPECT_NE(json.find("\"verified\": true"), std::string::npos);
  std::string csv = to_csv(report);
  EXPECT_NE(csv.find("write_bw,tcp,poll,2,4096,10,"), std::string::npos) << csv;
  EXPECT_NE(table_row(row).find("4096"), std::string::npos);
}

}  // namespace
}  // namespace rdmakit::perf
