// rdmakit-perf's control messages as the peer sends them: the input is up to three frames of the one
// message channel back to back (each as long as its header says, or what is left), a Hello, a Begin and
// an End. Each is decoded (decode_message: the frame codec, then the fields) and put through the checks its
// receiver applies (check_hello, check_begin against the Hello, check_end against the Begin,
// check_verdict). A message that decodes must re-encode to the same bytes; a Hello that passes must size
// a layout, and a Begin that passes must fit the area that layout gives it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "perf/control.hpp"

namespace {
// The next frame: as many bytes as its header announces (bounded by what is left).
std::span<const std::byte> next_frame(std::span<const std::byte>& input) {
  std::size_t n = input.size();
  if (n >= rdmakit::detail::kFrameHeader) {
    std::uint16_t length = 0;
    std::memcpy(&length, input.data() + 6, 2);
    n = std::min(n, rdmakit::detail::kFrameHeader + length);
  }
  auto frame = input.first(n);
  input = input.subspan(n);
  return frame;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rdmakit::perf;
  auto input = std::as_bytes(std::span(data, size));
  auto message = [&] {
    auto bytes = next_frame(input);
    auto decoded = decode_message(bytes);
    if (decoded) {
      auto again = encode_message(*decoded);
      // The text's last byte is forced to NUL on decode; every other byte must survive the round trip.
      if (again.size() != bytes.size() || std::memcmp(again.data(), bytes.data(), bytes.size() - 1) != 0)
        std::abort();
    }
    return decoded;
  };
  auto hello = message();
  if (!hello) return 0;
  (void)check_verdict(*hello);
  (void)hello->get_text();
  if (!check_hello(*hello)) return 0;
  auto layout = plan_layout(hello->connections, hello->size, true);
  if (!layout || layout->total < layout->slot_bytes || layout->send_offset < hello->size) std::abort();
  auto begin = message();
  if (!begin || !check_begin(*begin, *hello)) return 0;
  if (begin->size > layout->send_offset) std::abort();  // a checked Begin fits its area
  if (auto end = message()) (void)check_end(*end, *begin);
  return 0;
}
