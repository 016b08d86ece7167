#include "ckpt/replica_channel.hpp"

#include <algorithm>
#include <array>
#include <deque>
#include <vector>

namespace rdmakit::ckpt::detail {
namespace {

constexpr std::size_t kWindow = 16;      // pieces in flight at most
constexpr std::size_t kSignalEvery = 4;  // one signaled piece per group
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

Result<Channel> Channel::create(Context& context, std::shared_ptr<Connection> connection, std::size_t extra,
                                std::chrono::milliseconds send_timeout) {
  auto channel = rdmakit::detail::MessageChannel::open(
      context, std::move(connection), kReplicaSpec,
      {.receives = 1, .extra = extra, .keep_posted = true, .send_timeout = send_timeout});
  if (!channel) return std::unexpected(channel.error());
  return Channel(std::move(*channel));
}

Result<void> Channel::expect() {
  if (channel_.posted() > 0) return {};
  return channel_.expect();
}

Result<Message> Channel::receive(std::chrono::milliseconds timeout) {
  auto frame = channel_.receive(timeout);
  if (!frame) return std::unexpected(frame.error());
  return decode_payload(*frame);
}

std::optional<Result<Message>> Channel::try_receive() {
  auto frame = channel_.try_receive();
  if (!frame) return Result<Message>(std::unexpected(frame.error()));
  if (!*frame) return std::nullopt;
  return decode_payload(**frame);
}

Result<void> Channel::send_nowait(const Message& message) {
  std::array<std::byte, kMessageBytes> payload;
  return channel_.post(static_cast<std::uint8_t>(message.type), encode_payload(message, payload));
}

Result<void> Channel::send(const Message& message) {
  std::array<std::byte, kMessageBytes> payload;
  return channel_.send(static_cast<std::uint8_t>(message.type), encode_payload(message, payload));
}

Result<Message> Channel::call(const Message& message, std::chrono::milliseconds timeout) {
  if (auto ok = expect(); !ok) return std::unexpected(ok.error());
  if (auto ok = send(message); !ok) return std::unexpected(ok.error());
  return receive(timeout);
}

Result<void> transfer(Connection& connection, bool write, const MemoryRegion& local,
                      std::uint64_t local_offset, RemoteAddress remote, std::uint64_t size,
                      std::uint64_t piece, const Placed& placed) {
  // A sliding window: a new group is posted as soon as the oldest completes, so the connection never
  // drains between groups (waiting for a whole window of 16 before the next left it idle a round trip per
  // window).
  std::deque<std::pair<std::uint64_t, std::uint64_t>> signaled;  // (id, bytes done once it completes)
  const char* what = write ? "writing the replica" : "reading the replica";
  auto oldest_done = [&]() -> Result<void> {
    if (auto ok = completed(connection, signaled.front().first, what); !ok) return ok;
    auto bytes = signaled.front().second;
    signaled.pop_front();
    return placed ? placed(bytes) : Result<void>{};
  };
  for (std::uint64_t done = 0; done < size;) {
    if ((signaled.size() + 1) * kSignalEvery > kWindow)
      if (auto ok = oldest_done(); !ok) return ok;
    for (std::size_t k = 0; k < kSignalEvery && done < size; ++k) {
      auto length = static_cast<std::uint32_t>(std::min(piece, size - done));
      Segment segment = local.slice(local_offset + done, length);
      RemoteAddress at{remote.addr + done, remote.rkey, remote.owner_epoch};
      bool signal = k + 1 == kSignalEvery || done + length == size;
      WorkRequest request{.opcode = write ? Opcode::Write : Opcode::Read,
                          .local = {&segment, 1},
                          .remote = at,
                          .signaled = signal};
      auto id = connection.post({&request, 1});
      if (!id) return std::unexpected(id.error());
      done += length;
      if (signal) signaled.emplace_back(*id, done);
    }
  }
  while (!signaled.empty())
    if (auto ok = oldest_done(); !ok) return ok;
  return {};
}

}  // namespace rdmakit::ckpt::detail
