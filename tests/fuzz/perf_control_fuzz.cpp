// rdmakit-perf's control messages as the peer sends them: the input is up to three messages, a Hello,
// a Begin and an End. Each is decoded (decode_message) and put through the checks its receiver applies
// (check_hello, check_begin against the Hello, check_end against the Begin, check_verdict). A Hello that
// passes must size a layout, and a Begin that passes must fit the area that layout gives it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "perf/control.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rdmakit::perf;
  constexpr std::size_t n = sizeof(ControlMessage);
  auto bytes = std::as_bytes(std::span(data, size));
  auto message = [&](std::size_t i) {
    return decode_message(
        bytes.subspan(std::min(size, i * n)).first(std::min(size - std::min(size, i * n), n)));
  };
  auto hello = message(0);
  if (!hello) return 0;
  (void)check_verdict(*hello);
  (void)hello->get_text();
  if (!check_hello(*hello)) return 0;
  auto layout = plan_layout(hello->connections, hello->size, true);
  if (!layout || layout->total < layout->slot_bytes || layout->send_offset < hello->size) std::abort();
  auto begin = message(1);
  if (!begin || !check_begin(*begin, *hello)) return 0;
  if (begin->size > layout->send_offset) std::abort();  // a checked Begin fits its area
  if (auto end = message(2)) (void)check_end(*end, *begin);
  return 0;
}
