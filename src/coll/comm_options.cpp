#include "coll/comm_options.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "bootstrap/auth.hpp"
#include "coll/mesh.hpp"
#include "core/fd.hpp"
#include "core/log.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit::coll::detail {
namespace {

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::optional<std::string>(value) : std::nullopt;
}

template <typename Int>
Result<void> number_from_env(const char* name, Int& field, Int fallback, Int minimum) {
  if (field != 0) return {};
  auto text = env(name);
  if (!text) return field = fallback, Result<void>{};
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), field);
  if (ec != std::errc() || end != text->data() + text->size() || field < minimum)
    return fail(Errc::InvalidArgument, std::string(name) + "='" + *text + "' is not a number >= " +
                                           std::to_string(minimum));
  return {};
}

Result<Algorithm> parse_algorithm(const std::string& text) {
  if (text == "auto") return Algorithm::Auto;
  if (text == "ring") return Algorithm::Ring;
  if (text == "rd") return Algorithm::RecursiveDoubling;
  if (text == "hd") return Algorithm::HalvingDoubling;
  return fail(Errc::InvalidArgument, "RDMAKIT_COLL_ALGO='" + text + "' is not auto, ring, rd or hd");
}

// shm is the default for same-host peers; a build without it falls back to the network transport.
std::string default_local_transport(const std::string& network) {
  auto probe = Context::open(Options{.transport = "shm"});
  if (probe) return "shm";
  log::info("coll", "shm transport unavailable (" + probe.error().message() + "); same-host peers use " + network);
  return network;
}

}  // namespace

Result<CommOptions> resolve_options(const CommOptions& given) {
  CommOptions o = given;
  if (o.network_transport.empty()) o.network_transport = env("RDMAKIT_TRANSPORT").value_or("tcp");
  if (o.local_transport.empty()) o.local_transport = env("RDMAKIT_COLL_LOCAL_TRANSPORT").value_or("");
  if (o.local_transport.empty()) o.local_transport = default_local_transport(o.network_transport);
  long timeout = o.timeout.count(), boot = o.bootstrap_timeout.count();
  if (auto ok = number_from_env("RDMAKIT_COLL_TIMEOUT_MS", timeout, 60000L, 1L); !ok) return std::unexpected(ok.error());
  if (auto ok = number_from_env("RDMAKIT_BOOTSTRAP_TIMEOUT_MS", boot, 60000L, 1L); !ok) return std::unexpected(ok.error());
  o.timeout = std::chrono::milliseconds(timeout);
  o.bootstrap_timeout = std::chrono::milliseconds(boot);
  if (o.spin.count() < 0) {
    long spin = 0;
    if (auto ok = number_from_env("RDMAKIT_COLL_SPIN_US", spin, 5000L, 0L); !ok) return std::unexpected(ok.error());
    o.spin = std::chrono::microseconds(spin);
  }
  if (auto ok = number_from_env<std::size_t>("RDMAKIT_COLL_CHUNK_BYTES", o.chunk_bytes, 512 * 1024, 64); !ok)
    return std::unexpected(ok.error());
  if (o.chunk_bytes % 64 != 0 || o.chunk_bytes > (1u << 30))
    return fail(Errc::InvalidArgument, "coll: chunk_bytes (RDMAKIT_COLL_CHUNK_BYTES) must be a multiple of 64 "
                                       "up to 1 GiB, got " + std::to_string(o.chunk_bytes));
  if (auto ok = number_from_env<std::uint32_t>("RDMAKIT_COLL_SLOTS", o.slots, 4, 1); !ok) return std::unexpected(ok.error());
  if (o.slots > 256) return fail(Errc::InvalidArgument, "coll: slots (RDMAKIT_COLL_SLOTS) must be 1..256");
  if (auto ok = number_from_env<std::size_t>("RDMAKIT_COLL_SMALL_BYTES", o.small_bytes, 64 * 1024, 1); !ok)
    return std::unexpected(ok.error());
  if (o.algorithm == Algorithm::Auto)
    if (auto text = env("RDMAKIT_COLL_ALGO")) {
      auto algorithm = parse_algorithm(*text);
      if (!algorithm) return std::unexpected(algorithm.error());
      o.algorithm = *algorithm;
    }
  if (o.host_id.empty()) o.host_id = env("RDMAKIT_COLL_HOST_ID").value_or(default_host_id());
  if (o.listen_address.empty()) o.listen_address = env("RDMAKIT_LISTEN_ADDRESS").value_or("");
  auto secret = bootstrap::auth::job_secret(o.job_secret);
  if (!secret) return std::unexpected(secret.error());
  o.job_secret = std::move(*secret);
  return o;
}

std::string route_address(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) return {};
  Fd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  bool ok = fd && ::connect(fd.get(), found->ai_addr, found->ai_addrlen) == 0;
  freeaddrinfo(found);
  sockaddr_in local{};
  socklen_t length = sizeof(local);
  if (!ok || getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &length) != 0) return {};
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  return text;
}

}  // namespace rdmakit::coll::detail
