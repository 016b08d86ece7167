// libFuzzer target: the first message of the shm handshake, as the peer sent it (a Hello or a Refusal).
// decode_hello() is everything the handshake checks before it looks at descriptors; it must return an
// error for any bytes that are not a valid hello, never crash or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/shm/handshake.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // The first byte picks the role we expect the peer to have; the rest is the message.
  std::uint32_t role = data[0] & 1;
  auto message = std::as_bytes(std::span(data + 1, size - 1));
  auto hello = rdmakit::shm::decode_hello(message, role);
  if (hello) {
    // A valid hello is NUL-terminated and describes arenas that fit our limits.
    volatile std::size_t length = __builtin_strlen(hello->name);
    (void)length;
    if (hello->rw_arena_size > rdmakit::shm::kMaxArenaSize ||
        hello->ro_arena_size > rdmakit::shm::kMaxArenaSize)
      __builtin_trap();
  }
  (void)rdmakit::shm::parse_uid_list(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
