// rdmakit-perf's control messages as the peer sends them: decode_message, then the checks each side
// applies (check_hello, check_begin against a Hello, check_verdict), and the layout a Hello would size.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "perf/control.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rdmakit::perf;
  // The first message is the Hello, the rest (if any) a Begin checked against it.
  const std::size_t n = sizeof(ControlMessage);
  auto bytes = std::as_bytes(std::span(data, size));
  auto hello = decode_message(bytes.first(std::min(size, n)));
  if (!hello) return 0;
  if (auto ok = check_hello(*hello); ok) {
    auto layout = plan_layout(hello->connections, hello->size, true);
    if (!layout || layout->total < layout->slot_bytes || layout->slot_bytes < hello->size) std::abort();
    if (size >= 2 * n) {
      if (auto begin = decode_message(bytes.subspan(n, n)); begin && check_begin(*begin, *hello))
        if (begin->size > layout->send_offset) std::abort();  // a checked Begin fits its area
    }
  }
  (void)check_verdict(*hello);
  (void)hello->get_text();
  return 0;
}
