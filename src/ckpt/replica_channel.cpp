#include "ckpt/replica_channel.hpp"

#include <algorithm>
#include <vector>

namespace rdmakit::ckpt::detail {
namespace {

constexpr std::uint64_t kSendOffset = 0;
constexpr std::uint64_t kRecvOffset = kMessageBytes;
constexpr std::size_t kWindow = 16;
constexpr auto kOperationTimeout = std::chrono::seconds(60);

Result<void> completed(Connection& connection, std::uint64_t id, const std::string& what) {
  auto done = connection.wait(id, kOperationTimeout);
  if (!done) return fail(done.error().code(), "ckpt replica: " + what + ": " + done.error().message());
  if (!done->ok())
    return fail(Errc::TransportFailure,
                "ckpt replica: " + what + " failed (" + std::string(to_string(done->status)) + ")");
  return {};
}

}  // namespace

Result<Channel> Channel::create(Context& context, std::shared_ptr<Connection> connection, std::size_t extra) {
  auto region = context.allocate(kExtraOffset + extra, Access::LocalWrite);
  if (!region) return std::unexpected(region.error());
  return Channel(std::move(connection), std::move(*region));
}

Result<void> Channel::expect() {
  if (recv_posted_) return {};
  auto id = connection_->post_recv(region_->slice(kRecvOffset, kMessageBytes));
  if (!id) return std::unexpected(id.error());
  pending_recv_ = *id;
  recv_posted_ = true;
  return {};
}

Result<Message> Channel::receive(std::chrono::milliseconds timeout) {
  if (auto ok = expect(); !ok) return std::unexpected(ok.error());
  auto done = connection_->wait(pending_recv_, timeout);
  if (!done) return std::unexpected(done.error());
  recv_posted_ = false;
  if (!done->ok())
    return fail(Errc::ConnectionBroken,
                "ckpt replica: receive failed (" + std::string(to_string(done->status)) + ")");
  const auto* bytes = static_cast<const std::byte*>(region_->data()) + kRecvOffset;
  return decode_message(bytes, done->bytes);
}

std::optional<Result<Message>> Channel::try_receive() {
  if (!recv_posted_) return std::nullopt;
  Completion done[1];
  // The connection's own receive queue, and one receive posted at a time: a completion is that receive.
  if (connection_->recv_cq().poll(done) == 0) return std::nullopt;
  recv_posted_ = false;
  if (!done[0].ok())
    return fail(Errc::ConnectionBroken,
                "ckpt replica: receive failed (" + std::string(to_string(done[0].status)) + ")");
  const auto* bytes = static_cast<const std::byte*>(region_->data()) + kRecvOffset;
  return decode_message(bytes, done[0].bytes);
}

Result<void> Channel::send_nowait(const Message& message) {
  if (send_posted_) {
    auto done = connection_->wait(pending_send_, std::chrono::seconds(1));
    if (!done) return std::unexpected(done.error());
    if (!done->ok()) return fail(Errc::ConnectionBroken, "ckpt replica: a reply was not delivered");
    send_posted_ = false;
  }
  auto bytes = encode_message(message);
  std::copy(bytes.begin(), bytes.end(), static_cast<std::byte*>(region_->data()) + kSendOffset);
  auto id = connection_->send(region_->slice(kSendOffset, kMessageBytes));
  if (!id) return std::unexpected(id.error());
  pending_send_ = *id;
  send_posted_ = true;
  return {};
}

Result<void> Channel::send(const Message& message) {
  auto bytes = encode_message(message);
  std::copy(bytes.begin(), bytes.end(), static_cast<std::byte*>(region_->data()) + kSendOffset);
  auto id = connection_->send(region_->slice(kSendOffset, kMessageBytes));
  if (!id) return std::unexpected(id.error());
  return completed(*connection_, *id, "sending a message");
}

Result<Message> Channel::call(const Message& message, std::chrono::milliseconds timeout) {
  if (auto ok = expect(); !ok) return std::unexpected(ok.error());
  if (auto ok = send(message); !ok) return std::unexpected(ok.error());
  return receive(timeout);
}

Result<void> transfer(Connection& connection, bool write, const MemoryRegion& local,
                      std::uint64_t local_offset, RemoteAddress remote, std::uint64_t size,
                      std::uint64_t piece) {
  std::vector<std::uint64_t> window;
  for (std::uint64_t done = 0; done < size;) {
    window.clear();
    std::uint64_t last = 0;
    for (std::size_t k = 0; k < kWindow && done < size; ++k) {
      auto length = static_cast<std::uint32_t>(std::min(piece, size - done));
      Segment segment = local.slice(local_offset + done, length);
      RemoteAddress at{remote.addr + done, remote.rkey, remote.owner_epoch};
      bool signaled = k + 1 == kWindow || done + length == size;
      WorkRequest request{.opcode = write ? Opcode::Write : Opcode::Read,
                          .local = {&segment, 1},
                          .remote = at,
                          .signaled = signaled};
      auto id = connection.post({&request, 1});
      if (!id) return std::unexpected(id.error());
      last = *id;
      done += length;
    }
    if (auto ok = completed(connection, last, write ? "writing the replica" : "reading the replica"); !ok)
      return ok;
  }
  return {};
}

}  // namespace rdmakit::ckpt::detail
