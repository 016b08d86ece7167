#include "bootstrap/store_wire.hpp"

namespace rdmakit::bootstrap::wire {

Decode decode_request(std::string_view in, std::size_t max_request, Request& out, std::string& error) {
  if (in.size() < kHeaderSize) return Decode::NeedMore;
  auto op = static_cast<std::uint8_t>(in[0]);
  if (op < kSet || op > kList) {
    error = "unknown request type " + std::to_string(op);
    return Decode::Bad;
  }
  std::uint64_t key_length = get_u32(in.data() + 1);
  std::uint64_t value_length = get_u32(in.data() + 5);
  if (key_length + value_length > max_request) {
    error = "a request of " + std::to_string(key_length + value_length) + " bytes is over the limit of " +
            std::to_string(max_request) + " (store_max_request_bytes)";
    return Decode::Bad;
  }
  std::uint64_t total = kHeaderSize + key_length + value_length;
  if (in.size() < total) return Decode::NeedMore;
  out.op = static_cast<Op>(op);
  out.key = in.substr(kHeaderSize, key_length);
  out.value = in.substr(kHeaderSize + key_length, value_length);
  out.size = total;
  return Decode::Ready;
}

Decode decode_reply(std::string_view in, std::size_t max_payload, Reply& out) {
  if (in.size() < kReplyHeaderSize) return Decode::NeedMore;
  auto status = static_cast<std::uint8_t>(in[0]);
  std::uint64_t length = get_u32(in.data() + 1);
  if (status > kError || length > max_payload) return Decode::Bad;
  if (in.size() < kReplyHeaderSize + length) return Decode::NeedMore;
  out.status = static_cast<Status>(status);
  out.payload = in.substr(kReplyHeaderSize, length);
  out.size = kReplyHeaderSize + length;
  return Decode::Ready;
}

}  // namespace rdmakit::bootstrap::wire
