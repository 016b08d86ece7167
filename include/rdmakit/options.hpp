// Configuration. Every option has a name, a default and a one-line doc (see describe_options()).
// A value set in code wins; otherwise the environment variable RDMAKIT_<NAME> (upper case); otherwise the
// default. A value that does not parse, or a combination that cannot work (rnr_timeout_ms >= timeout_ms),
// is an error that names the options. Each layer has its own options (this header: the core's; each
// transport's in its own table, set by name with Options::set; the bootstrap's and the collectives' are
// documented with them); describe_options() lists all of them, and
// an RDMAKIT_* environment variable that is no option draws a warning naming the closest one.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rdmakit/completion.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"

namespace rdmakit {

// Options by name, their values as text: "device" -> "rxe0", "handshake_timeout_ms" -> "500".
using NamedOptions = std::map<std::string, std::string, std::less<>>;

// The resolved configuration of a context. The fields are the core's options, which every transport
// obeys; a transport's own options (verbs' device, tcp's handshake_timeout_ms, ...) are declared in that
// transport's table and travel here by name, so this struct does not grow when a transport adds one.
struct Config {
  std::string transport{};                  // tcp | shm | verbs | fault:<inner>
  std::string name{};                       // this context's name, sent to peers
  std::string listen_address{};             // default address of listen()
  std::chrono::milliseconds timeout{};      // a silent peer fails pending operations after this
  std::chrono::milliseconds rnr_timeout{};  // a SEND with no posted receive fails after this
  std::chrono::milliseconds connect_timeout{};
  WaitMode wait_mode = WaitMode::Hybrid;
  std::chrono::microseconds spin{};  // Hybrid: spin this long before sleeping
  std::uint32_t cq_depth = 0;
  std::uint32_t send_queue_depth = 0;
  std::uint32_t recv_queue_depth = 0;
  std::uint32_t max_sge = 0;
  std::string log_level{};  // error | warn | info | debug
  // Which path device memory may take (docs/gpu.md): "auto" (the transport's), "direct" (GPUDirect RDMA or
  // CUDA IPC: the CPU never copies it) or "staged" (through host memory). A registration whose path does
  // not match is refused, naming what is missing.
  std::string gpu_path{};
  // The transport options that were set (by name in code, else RDMAKIT_<NAME>), as text, for every built
  // transport; options left out take their table's default. The transport parses its own at open (a bad
  // value is then InvalidArgument naming it); resolve_config() already checks those of the transport
  // `transport` names (and of its inner transport, for fault:<inner>).
  NamedOptions transport_options{};
};

// What the caller sets in code; anything left empty comes from the environment or the default.
struct Options {
  std::optional<std::string> transport{};
  std::optional<std::string> name{};
  std::optional<std::string> listen_address{};
  std::optional<std::chrono::milliseconds> timeout{};
  std::optional<std::chrono::milliseconds> rnr_timeout{};
  std::optional<std::chrono::milliseconds> connect_timeout{};
  std::optional<WaitMode> wait_mode{};
  std::optional<std::chrono::microseconds> spin{};
  std::optional<std::uint32_t> cq_depth{};
  std::optional<std::uint32_t> send_queue_depth{};
  std::optional<std::uint32_t> recv_queue_depth{};
  std::optional<std::uint32_t> max_sge{};
  // Process-wide, not per context: set here (or RDMAKIT_LOG_LEVEL), it becomes the process's level when
  // the context opens, the last such context wins; left unset, the context keeps the level (log.hpp).
  std::optional<std::string> log_level{};
  std::optional<std::string> gpu_path{};
  // Options set by name, as text (what set() fills): any option of a built transport's table, or a core
  // option (a typed field above, when set, wins over the same name here). resolve_config() refuses a name
  // that no built transport nor the core declares (InvalidArgument naming the closest option); an option
  // of a transport other than the one opened is ignored, as its RDMAKIT_<NAME> variable is, so that one
  // Options can open several transports.
  NamedOptions named{};

  // Sets option `name` to `value` as RDMAKIT_<NAME>=<value> would: set("device", "rxe0").
  RDMAKIT_API Options& set(std::string name, std::string value);
};

RDMAKIT_API Result<Config> resolve_config(const Options& options);

struct OptionInfo {
  std::string name{};   // e.g. "timeout_ms"
  std::string env{};    // e.g. "RDMAKIT_TIMEOUT_MS"
  std::string value{};  // effective value in `config`
  std::string default_value{};
  std::string doc{};
  std::string layer{};  // whose option: "core", a transport's name ("verbs"), "bootstrap", "coll", ...
};
// The core's options with their values in `config`, then the options of the transport `config.transport`
// names (and of its inner one), with their values in config.transport_options or their defaults.
RDMAKIT_API std::vector<OptionInfo> describe_options(const Config& config);
// Every option of every layer of the library, with its value from the environment (nothing set in code).
// An error when a variable does not parse.
RDMAKIT_API Result<std::vector<OptionInfo>> describe_options();

}  // namespace rdmakit
