// What one rdmakit-perf run measures, parsed from a perftest-like command line. Plain data, no devices:
// the tool, the library and the unit tests all start from a Params.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rdmakit/completion.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/memory.hpp"

namespace rdmakit::perf {

enum class Test : std::uint8_t { WriteBw, ReadBw, SendBw, WriteLat, ReadLat, SendLat, AtomicLat };
std::string_view to_string(Test test) noexcept;
std::optional<Test> parse_test(std::string_view name) noexcept;
bool is_bandwidth(Test test) noexcept;

enum class OutputFormat : std::uint8_t { Table, Json, Csv };

// How a side waits for completions. Poll: spin on the completion queue (perftest's default);
// Block: sleep in the kernel until a completion arrives (perftest -e).
enum class CompletionMode : std::uint8_t { Poll, Block };
std::string_view to_string(CompletionMode mode) noexcept;

struct Params {
  Test test = Test::WriteBw;
  std::string server;          // empty: this side is the server
  std::uint16_t port = 18515;  // perftest's default port
  std::string listen_host = "127.0.0.1";
  std::vector<std::uint64_t> sizes{65536};
  std::uint64_t iterations = 0;           // 0: the test's default (see effective_iterations)
  std::chrono::milliseconds duration{0};  // nonzero: run this long per size instead of counting
  std::uint64_t warmup = 0;               // 0: the default (see effective_warmup)
  std::uint32_t connections = 1;
  std::uint32_t tx_depth = 128;
  std::uint32_t cq_mod = 16;  // bandwidth tests: one signaled op in every cq_mod (perftest --cq-mod)
  // bandwidth tests: at most this many operations per post (perftest -l, whose default is 1); 0: cq_mod
  std::uint32_t post_list = 0;
  bool bidirectional = false;
  std::string transport;  // empty: RDMAKIT_TRANSPORT, else tcp
  std::string device;     // verbs device
  CompletionMode mode = CompletionMode::Poll;
  OutputFormat format = OutputFormat::Table;
  bool verify = true;
  bool help = false;
  // This side's buffer: host memory, or CUDA device memory (--use-cuda, perftest's --use_cuda), which the
  // transport moves along its device path (docs/gpu.md). Each side chooses its own, as with perftest.
  MemoryKind memory = MemoryKind::Host;
  // write_bw / read_bw (--working-set): each connection's operations walk this many bytes of both sides'
  // buffers, one message-sized position after the next, instead of reusing one message-sized slot. A
  // working set larger than the last-level cache measures DRAM, which is what moving a KV cache or a
  // checkpoint sees; 0 keeps perftest's one slot (a cache figure for small messages).
  std::uint64_t working_set = 0;
};

// Bandwidth tests default to 5000 operations per size, latency tests to 1000 round trips (perftest's
// defaults).
std::uint64_t effective_iterations(const Params& params) noexcept;
std::uint64_t effective_warmup(const Params& params) noexcept;
// The largest message of the run, or the working set when larger: it sizes the registered buffers.
std::uint64_t max_size(const Params& params) noexcept;

// Powers of two from `from` to `to` inclusive (perftest -a sweeps 2 B .. 8 MiB).
// How many message-sized positions a connection's operations cycle through: the working set's, else 1.
std::uint64_t positions_per_lane(std::uint64_t working_set, std::uint64_t size) noexcept;

std::vector<std::uint64_t> size_sweep(std::uint64_t from, std::uint64_t to);
// "4096", "64K", "1M", "16m" -> bytes.
Result<std::uint64_t> parse_size(std::string_view text);

// argv[1..]: <test> [server-address] [options]. Errors name the offending argument.
Result<Params> parse_args(std::span<const std::string_view> args);
std::string usage();

}  // namespace rdmakit::perf
