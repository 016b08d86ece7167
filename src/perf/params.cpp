#include "perf/params.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <utility>

namespace rdmakit::perf {
namespace {

constexpr std::array<std::pair<Test, std::string_view>, 7> kTests{{
    {Test::WriteBw, "write_bw"},
    {Test::ReadBw, "read_bw"},
    {Test::SendBw, "send_bw"},
    {Test::WriteLat, "write_lat"},
    {Test::ReadLat, "read_lat"},
    {Test::SendLat, "send_lat"},
    {Test::AtomicLat, "atomic_lat"},
}};

Result<std::uint64_t> parse_number(std::string_view option, std::string_view text) {
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    return fail(Errc::InvalidArgument, std::string(option) + ": '" + std::string(text) + "' is not a number");
  return value;
}

// Consumes the value of an option: "--opt=value" or "--opt value".
class ArgReader {
 public:
  explicit ArgReader(std::span<const std::string_view> args) : args_(args) {}
  bool done() const { return next_ >= args_.size(); }
  std::string_view take() { return args_[next_++]; }
  Result<std::string_view> value(std::string_view option, std::string_view inline_value) {
    if (!inline_value.empty()) return inline_value;
    if (done()) return fail(Errc::InvalidArgument, std::string(option) + " needs a value");
    return take();
  }

 private:
  std::span<const std::string_view> args_;
  std::size_t next_ = 0;
};

Result<void> apply_flag(Params& p, std::string_view name) {
  if (name == "-a" || name == "--all")
    p.sizes = size_sweep(2, std::uint64_t{1} << 23);
  else if (name == "-b" || name == "--bidirectional")
    p.bidirectional = true;
  else if (name == "-e" || name == "--events")
    p.mode = CompletionMode::Block;
  else if (name == "--json")
    p.format = OutputFormat::Json;
  else if (name == "--csv")
    p.format = OutputFormat::Csv;
  else if (name == "--no-verify")
    p.verify = false;
  else if (name == "--use-cuda")
    p.memory = MemoryKind::Cuda;
  else if (name == "-h" || name == "--help")
    p.help = true;
  else
    return fail(Errc::InvalidArgument, "unknown option '" + std::string(name) + "' (see --help)");
  return {};
}

bool takes_value(std::string_view name) {
  static constexpr std::array<std::string_view, 25> kWithValue{
      "-s",         "--size",     "-n",          "--iters",    "-D",
      "--duration", "-w",         "--warmup",    "-q",         "--connections",
      "-t",         "--tx-depth", "--transport", "-d",         "--ib-dev",
      "-p",         "--port",     "--mode",      "--cq-mod",   "--listen",
      "--max-size", "--format",   "--post-list", "--use_cuda", "--working-set"};
  return std::find(kWithValue.begin(), kWithValue.end(), name) != kWithValue.end();
}

Result<void> apply_value(Params& p, std::string_view name, std::string_view v) {
  auto number = [&]() { return parse_number(name, v); };
  auto positive32 = [&](std::uint32_t& out) -> Result<void> {
    auto n = number();
    if (!n) return std::unexpected(n.error());
    if (*n == 0 || *n > 65536) return fail(Errc::InvalidArgument, std::string(name) + " must be 1..65536");
    out = static_cast<std::uint32_t>(*n);
    return {};
  };
  if (name == "-s" || name == "--size") {
    auto size = parse_size(v);
    if (!size) return std::unexpected(size.error());
    p.sizes = {*size};
  } else if (name == "--working-set") {
    auto size = parse_size(v);
    if (!size) return std::unexpected(size.error());
    p.working_set = *size;
  } else if (name == "--max-size") {
    auto size = parse_size(v);
    if (!size) return std::unexpected(size.error());
    p.sizes = size_sweep(2, *size);
  } else if (name == "-n" || name == "--iters") {
    auto n = number();
    if (!n || *n == 0) return fail(Errc::InvalidArgument, std::string(name) + " needs a positive number");
    p.iterations = *n;
  } else if (name == "-D" || name == "--duration") {
    auto n = number();
    if (!n || *n == 0)
      return fail(Errc::InvalidArgument, std::string(name) + " needs a positive number of seconds");
    p.duration = std::chrono::seconds(*n);
  } else if (name == "-w" || name == "--warmup") {
    auto n = number();
    if (!n) return std::unexpected(n.error());
    p.warmup = *n;
  } else if (name == "-q" || name == "--connections") {
    return positive32(p.connections);
  } else if (name == "-t" || name == "--tx-depth") {
    return positive32(p.tx_depth);
  } else if (name == "--cq-mod") {
    return positive32(p.cq_mod);
  } else if (name == "--post-list") {
    return positive32(p.post_list);
  } else if (name == "--transport") {
    p.transport = std::string(v);
  } else if (name == "-d" || name == "--ib-dev") {
    p.device = std::string(v);
  } else if (name == "-p" || name == "--port") {
    auto n = number();
    if (!n || *n == 0 || *n > 65535)
      return fail(Errc::InvalidArgument, std::string(name) + " must be 1..65535");
    p.port = static_cast<std::uint16_t>(*n);
  } else if (name == "--use_cuda") {
    // perftest's spelling takes a GPU index; this build places the buffer on the current device (0).
    if (v != "0") return fail(Errc::InvalidArgument, "--use_cuda: only device 0 is supported");
    p.memory = MemoryKind::Cuda;
  } else if (name == "--listen") {
    p.listen_host = std::string(v);
  } else if (name == "--mode") {
    if (v == "poll")
      p.mode = CompletionMode::Poll;
    else if (v == "block")
      p.mode = CompletionMode::Block;
    else
      return fail(Errc::InvalidArgument, "--mode: '" + std::string(v) + "' is neither poll nor block");
  } else if (name == "--format") {
    if (v == "table")
      p.format = OutputFormat::Table;
    else if (v == "json")
      p.format = OutputFormat::Json;
    else if (v == "csv")
      p.format = OutputFormat::Csv;
    else
      return fail(Errc::InvalidArgument, "--format: '" + std::string(v) + "' is not table, json or csv");
  }
  return {};
}

Result<void> check(Params& p) {
  if (p.test == Test::AtomicLat) p.sizes = {8};
  for (std::uint64_t size : p.sizes) {
    if (size == 0 && !is_bandwidth(p.test))
      return fail(Errc::InvalidArgument,
                  "-s: latency tests need at least 1 byte (the last byte carries the signal)");
    if (size > (std::uint64_t{1} << 31)) return fail(Errc::InvalidArgument, "-s: at most 2 GiB per message");
  }
  if (p.working_set != 0 && p.test != Test::WriteBw && p.test != Test::ReadBw)
    return fail(Errc::InvalidArgument,
                "--working-set: write_bw and read_bw walk a working set (a send or a latency round trip "
                "reuses one slot)");
  if (p.working_set > (std::uint64_t{1} << 31))
    return fail(Errc::InvalidArgument, "--working-set: at most 2 GiB per connection");
  if (p.bidirectional && p.test != Test::WriteBw && p.test != Test::ReadBw)
    return fail(Errc::InvalidArgument, "-b: bidirectional runs are supported for write_bw and read_bw");
  if (!is_bandwidth(p.test) && p.connections != 1)
    return fail(Errc::InvalidArgument, "-q: latency tests run over one connection");
  if (p.cq_mod > p.tx_depth) p.cq_mod = p.tx_depth;
  // write_lat spins on the last byte of its buffer with the CPU, which device memory does not allow.
  if (p.memory == MemoryKind::Cuda && p.test == Test::WriteLat)
    return fail(
        Errc::InvalidArgument,
        "--use-cuda: write_lat polls its buffer with the CPU; use send_lat or read_lat for device memory");
  if (p.memory == MemoryKind::Cuda && p.test == Test::AtomicLat && !p.server.empty())
    return fail(
        Errc::InvalidArgument,
        "--use-cuda: the atomic_lat client checks each fetch_add's result with the CPU; give --use-cuda "
        "to the server to target device memory");
  return {};
}

}  // namespace

std::string_view to_string(Test test) noexcept {
  for (const auto& [t, name] : kTests)
    if (t == test) return name;
  return "unknown";
}

std::optional<Test> parse_test(std::string_view name) noexcept {
  for (const auto& [t, n] : kTests)
    if (n == name) return t;
  return std::nullopt;
}

bool is_bandwidth(Test test) noexcept {
  return test == Test::WriteBw || test == Test::ReadBw || test == Test::SendBw;
}

std::string_view to_string(CompletionMode mode) noexcept {
  return mode == CompletionMode::Poll ? "poll" : "block";
}

std::uint64_t effective_iterations(const Params& params) noexcept {
  if (params.iterations != 0) return params.iterations;
  return is_bandwidth(params.test) ? 5000 : 1000;
}

std::uint64_t effective_warmup(const Params& params) noexcept {
  if (params.warmup != 0) return params.warmup;
  return is_bandwidth(params.test) ? 2 * params.tx_depth : 100;
}

std::uint64_t max_size(const Params& params) noexcept {
  return std::max(
      {std::uint64_t{8}, *std::max_element(params.sizes.begin(), params.sizes.end()), params.working_set});
}

std::uint64_t positions_per_lane(std::uint64_t working_set, std::uint64_t size) noexcept {
  if (working_set == 0 || size == 0) return 1;
  return std::max<std::uint64_t>(1, working_set / size);
}

std::vector<std::uint64_t> size_sweep(std::uint64_t from, std::uint64_t to) {
  std::vector<std::uint64_t> sizes;
  for (std::uint64_t s = std::max<std::uint64_t>(from, 1); s <= to; s *= 2) sizes.push_back(s);
  if (sizes.empty()) sizes.push_back(to);
  return sizes;
}

Result<std::uint64_t> parse_size(std::string_view text) {
  std::uint64_t scale = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'k':
      case 'K':
        scale = 1024;
        break;
      case 'm':
      case 'M':
        scale = 1024 * 1024;
        break;
      case 'g':
      case 'G':
        scale = 1024 * 1024 * 1024;
        break;
      default:
        break;
    }
    if (scale != 1) text.remove_suffix(1);
  }
  auto n = parse_number("size", text);
  if (!n) return std::unexpected(n.error());
  return *n * scale;
}

Result<Params> parse_args(std::span<const std::string_view> args) {
  Params p;
  ArgReader reader(args);
  bool have_test = false;
  while (!reader.done()) {
    std::string_view arg = reader.take();
    if (arg.size() > 1 && arg[0] == '-') {
      std::string_view name = arg, inline_value;
      if (auto eq = arg.find('='); eq != std::string_view::npos && arg.starts_with("--"))
        name = arg.substr(0, eq), inline_value = arg.substr(eq + 1);
      if (!takes_value(name)) {
        if (auto ok = apply_flag(p, name); !ok) return std::unexpected(ok.error());
        continue;
      }
      auto value = reader.value(name, inline_value);
      if (!value) return std::unexpected(value.error());
      if (auto ok = apply_value(p, name, *value); !ok) return std::unexpected(ok.error());
    } else if (!have_test) {
      auto test = parse_test(arg);
      if (!test) return fail(Errc::InvalidArgument, "unknown test '" + std::string(arg) + "' (see --help)");
      p.test = *test;
      have_test = true;
    } else if (p.server.empty()) {
      p.server = std::string(arg);
    } else {
      return fail(Errc::InvalidArgument, "unexpected argument '" + std::string(arg) + "'");
    }
  }
  if (p.help) return p;
  if (!have_test)
    return fail(Errc::InvalidArgument,
                "name a test: write_bw, read_bw, send_bw, write_lat, read_lat, "
                "send_lat or atomic_lat");
  if (auto ok = check(p); !ok) return std::unexpected(ok.error());
  return p;
}

std::string usage() {
  return "usage: rdmakit-perf <test> [server-address] [options]\n"
         "  tests: write_bw read_bw send_bw write_lat read_lat send_lat atomic_lat\n"
         "  without a server address this side is the server: it listens and serves one client\n"
         "  both sides prove RDMAKIT_JOB_SECRET, or without it (loopback, shm only) the same user's secret\n"
         "  -s, --size N[K|M|G]   message size (default 65536)\n"
         "  -a, --all             sweep sizes 2 B .. 8 MiB (--max-size N to change the top)\n"
         "  -n, --iters N         operations per size (bw: 5000, lat: 1000)\n"
         "  -D, --duration SEC    run each size for SEC seconds instead of -n\n"
         "  -w, --warmup N        untimed operations before each size (bw: 2*tx-depth, lat: 100)\n"
         "  -q, --connections N   connections driven by one thread (bw tests)\n"
         "  -t, --tx-depth N      outstanding operations per connection (default 128)\n"
         "      --cq-mod N        bw: one signaled op in every N (default 16)\n"
         "      --post-list N     bw: at most N operations per post (default: cq-mod; perftest -l: 1)\n"
         "  -b, --bidirectional   write_bw/read_bw in both directions at once\n"
         "      --transport NAME  tcp | shm | verbs (default RDMAKIT_TRANSPORT, else tcp)\n"
         "  -d, --ib-dev NAME     verbs device\n"
         "  -p, --port N          control/listen port (default 18515); --listen HOST for the server\n"
         "      --mode poll|block completion mode (-e = block); write_lat always polls memory\n"
         "      --json, --csv     machine-readable output (--format table|json|csv)\n"
         "      --no-verify       skip the data check after each size\n"
         "      --use-cuda        this side's buffer in CUDA device memory (--use_cuda=0 also accepted)\n"
         "      --working-set N   write_bw/read_bw: each connection walks N bytes of both buffers, one\n"
         "                        message after the next (default: one message-sized slot, cache-resident)\n";
}

}  // namespace rdmakit::perf
