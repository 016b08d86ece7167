// Configuration. Every option has a name, a default and a one-line doc (see describe_options()).
// A value set in code wins; otherwise the environment variable RDMAKIT_<NAME> (upper case); otherwise the
// default. A value that does not parse is an error that names the option.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rdmakit/completion.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit {

// The resolved configuration of a context.
struct Config {
  std::string transport{};                   // tcp | shm | verbs | fault:<inner>
  std::string name{};                        // this context's name, sent to peers
  std::string listen_address{};              // default address of listen()
  std::string device{};                      // verbs: device name, empty = first active
  std::uint32_t port = 1;                    // verbs: port number
  std::int32_t gid_index = -1;               // verbs: -1 = choose a RoCEv2 GID automatically
  std::uint32_t mtu = 0;                     // verbs: path MTU in bytes, 0 = the port's active MTU
  std::chrono::milliseconds timeout{};       // a silent peer fails pending operations after this
  std::chrono::milliseconds rnr_timeout{};   // a SEND with no posted receive fails after this
  std::chrono::milliseconds connect_timeout{};
  std::chrono::milliseconds handshake_timeout{};  // tcp: an accepted peer must say hello within this
  WaitMode wait_mode = WaitMode::Hybrid;
  std::chrono::microseconds spin{};          // Hybrid: spin this long before sleeping
  std::uint32_t cq_depth = 0;
  std::uint32_t send_queue_depth = 0;
  std::uint32_t recv_queue_depth = 0;
  std::uint32_t max_sge = 0;
  std::uint32_t inline_size = 0;             // verbs: WRITE/SEND payloads up to this go inline
  bool registration_cache = true;            // verbs: reuse registrations of the same range
  std::string log_level{};                   // error | warn | info | debug
  std::string job_secret{};                  // shared by a job's processes; never logged or printed
  std::uint64_t store_max_bytes = 0;         // rendezvous store: keys + values held in total
  std::uint64_t store_max_request_bytes = 0; // rendezvous store: one request's key + value
  std::uint64_t store_max_client_buffer_bytes = 0;  // rendezvous store: unread replies held per client
  std::uint32_t store_max_clients = 0;       // rendezvous store: connected clients
  std::string shm_allowed_uids{};            // shm: uids besides ours that may connect, "1000,1001"
};

// What the caller sets in code; anything left empty comes from the environment or the default.
struct Options {
  std::optional<std::string> transport{};
  std::optional<std::string> name{};
  std::optional<std::string> listen_address{};
  std::optional<std::string> device{};
  std::optional<std::uint32_t> port{};
  std::optional<std::int32_t> gid_index{};
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
  std::optional<std::string> log_level{};
  std::optional<std::string> job_secret{};
  std::optional<std::uint64_t> store_max_bytes{};
  std::optional<std::uint64_t> store_max_request_bytes{};
  std::optional<std::uint64_t> store_max_client_buffer_bytes{};
  std::optional<std::uint32_t> store_max_clients{};
  std::optional<std::string> shm_allowed_uids{};
};

Result<Config> resolve_config(const Options& options);

struct OptionInfo {
  std::string name{};      // e.g. "timeout_ms"
  std::string env{};       // e.g. "RDMAKIT_TIMEOUT_MS"
  std::string value{};     // effective value in `config`
  std::string default_value{};
  std::string doc{};
};
std::vector<OptionInfo> describe_options(const Config& config);

}  // namespace rdmakit
