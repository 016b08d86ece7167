// Configuration. Every option has a name, a default and a one-line doc (see describe_options()).
// A value set in code wins; otherwise the environment variable RDMAKIT_<NAME> (upper case); otherwise the
// default. A value that does not parse, or a combination that cannot work (rnr_timeout_ms >= timeout_ms),
// is an error that names the options. Each layer has its own options (this header: the core's; the
// bootstrap's and the collectives' are documented with them); describe_options() lists all of them, and
// an RDMAKIT_* environment variable that is no option draws a warning naming the closest one.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rdmakit/completion.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"

namespace rdmakit {

// The resolved configuration of a context.
struct Config {
  std::string transport{};                   // tcp | shm | verbs | fault:<inner>
  std::string name{};                        // this context's name, sent to peers
  std::string listen_address{};              // default address of listen()
  std::string device{};                      // verbs: device name, empty = first active
  std::uint32_t port = 1;                    // verbs: port number
  std::optional<std::uint32_t> gid_index{};  // verbs: unset = choose a RoCEv2 GID automatically
  std::optional<std::uint32_t>
      mtu{};  // verbs: path MTU in bytes; unset = the port's active MTU (or the peer's)
  std::chrono::milliseconds timeout{};      // a silent peer fails pending operations after this
  std::chrono::milliseconds rnr_timeout{};  // a SEND with no posted receive fails after this
  std::chrono::milliseconds connect_timeout{};
  std::chrono::milliseconds handshake_timeout{};  // tcp: an accepted peer must say hello within this
  WaitMode wait_mode = WaitMode::Hybrid;
  std::chrono::microseconds spin{};  // Hybrid: spin this long before sleeping
  std::uint32_t cq_depth = 0;
  std::uint32_t send_queue_depth = 0;
  std::uint32_t recv_queue_depth = 0;
  std::uint32_t max_sge = 0;
  std::uint32_t inline_size = 0;   // verbs: WRITE/SEND payloads up to this go inline
  bool registration_cache = true;  // verbs: reuse registrations of the same range
  std::string log_level{};         // error | warn | info | debug
  std::string shm_allowed_uids{};  // shm: uids besides ours that may connect, "1000,1001"
};

// What the caller sets in code; anything left empty comes from the environment or the default.
struct Options {
  std::optional<std::string> transport{};
  std::optional<std::string> name{};
  std::optional<std::string> listen_address{};
  std::optional<std::string> device{};
  std::optional<std::uint32_t> port{};
  std::optional<std::uint32_t> gid_index{};
  std::optional<std::uint32_t> mtu{};
  std::optional<std::chrono::milliseconds> timeout{};
  std::optional<std::chrono::milliseconds> rnr_timeout{};
  std::optional<std::chrono::milliseconds> connect_timeout{};
  std::optional<std::chrono::milliseconds> handshake_timeout{};
  std::optional<WaitMode> wait_mode{};
  std::optional<std::chrono::microseconds> spin{};
  std::optional<std::uint32_t> cq_depth{};
  std::optional<std::uint32_t> send_queue_depth{};
  std::optional<std::uint32_t> recv_queue_depth{};
  std::optional<std::uint32_t> max_sge{};
  std::optional<std::uint32_t> inline_size{};
  std::optional<bool> registration_cache{};
  // Process-wide, not per context: set here (or RDMAKIT_LOG_LEVEL), it becomes the process's level when
  // the context opens, the last such context wins; left unset, the context keeps the level (log.hpp).
  std::optional<std::string> log_level{};
  std::optional<std::string> shm_allowed_uids{};
};

RDMAKIT_API Result<Config> resolve_config(const Options& options);

struct OptionInfo {
  std::string name{};   // e.g. "timeout_ms"
  std::string env{};    // e.g. "RDMAKIT_TIMEOUT_MS"
  std::string value{};  // effective value in `config`
  std::string default_value{};
  std::string doc{};
  std::string layer{};  // whose option: "core", "bootstrap", "coll", ...
};
// The core's options with their values in `config`.
RDMAKIT_API std::vector<OptionInfo> describe_options(const Config& config);
// Every option of every layer of the library, with its value from the environment (nothing set in code).
// An error when a variable does not parse.
RDMAKIT_API Result<std::vector<OptionInfo>> describe_options();

}  // namespace rdmakit
