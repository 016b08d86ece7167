// Notifications: a small message an initiator attaches to a batch, delivered to the segment owner once every
// request of the batch completed (so every WRITE's bytes are in the owner's memory: a WRITE completes at
// the initiator only when the target placed its bytes, on every transport). It travels as one SEND on a
// connection of its own to the owner, opened and proven like the data connections (its proven identity
// ends in kNotifyIdentitySuffix); the owner takes it from the channel it opened on that connection once the
// peer proved the secret, checks that it names a segment the owner publishes, and queues it (at most
// max_notifications: more are dropped and counted).
#include <algorithm>
#include <thread>

#include "bootstrap/peer_proof.hpp"
#include "core/log.hpp"
#include "xfer/engine/engine_impl.hpp"

namespace rdmakit::xfer::detail {
namespace {

enum : std::uint8_t { kNotify = 1 };
// Payload: u16 segment name length, the name, then the message.
constexpr std::size_t kMaxNotifiedName = 1024;
const rdmakit::detail::FrameSpec kNotifySpec{.name = "xfer notification",
                                             .magic = 0x7846'4e31,  // "xFN1"
                                             .version = 1,
                                             .max_type = kNotify,
                                             .max_payload = 2 + kMaxNotifiedName + kMaxNotificationBytes};
// Receives an owner keeps posted per accepted connection: a sender's notifications beyond these wait in its
// transport (receiver not ready) until the owner's thread takes some.
constexpr std::uint32_t kNotifyReceives = 8;

}  // namespace

Result<std::unique_ptr<rdmakit::detail::MessageChannel>> open_owner_channel(
    Context& context, std::shared_ptr<Connection> connection) {
  auto channel = rdmakit::detail::MessageChannel::open(context, std::move(connection), kNotifySpec,
                                                       {.receives = kNotifyReceives, .keep_posted = true});
  if (!channel) return std::unexpected(channel.error());
  if (auto posted = channel->expect(kNotifyReceives); !posted) return std::unexpected(posted.error());
  return std::make_unique<rdmakit::detail::MessageChannel>(std::move(*channel));
}

void EngineImpl::run_task(std::function<void()> task) {
  {
    std::lock_guard lock(retry_mutex_);
    if (!retry_exited_) {
      tasks_.push_back(std::move(task));
      retry_ready_.notify_one();
      return;
    }
  }
  // The engine is closing and its retry thread is gone (a batch finished by the drain): the send fails at
  // once (stop_), and the batch is done rather than waiting forever.
  task();
}

// Polls every accepted connection's channel; naps when none had anything (longer when there are none).
void EngineImpl::notify_loop() {
  while (!stop_.load(std::memory_order_acquire)) {
    bool found = false, any = false;
    for (auto& rail : rails_) {
      found |= take_notifications(*rail);
      std::lock_guard lock(rail->accepted_mutex);
      any |= std::ranges::any_of(rail->accepted, [](const auto& a) { return a.channel != nullptr; });
    }
    if (!found)
      std::this_thread::sleep_for(any ? std::chrono::milliseconds(1) : std::chrono::milliseconds(10));
  }
}

bool EngineImpl::take_notifications(Rail& rail) {
  bool found = false;
  std::lock_guard lock(rail.accepted_mutex);
  for (auto it = rail.accepted.begin(); it != rail.accepted.end();) {
    if (!it->channel) {  // a data connection
      ++it;
      continue;
    }
    auto frame = it->channel->try_receive();
    if (frame && *frame) {
      found = true;
      accept_notification(it->identity, (**frame).payload);
      continue;  // take what else it has
    }
    if (!frame) {
      // The peer closed (its engine ended: the normal end of a connection), or sent a frame that breaks the
      // protocol (too long, not ours): it proved the secret but does not speak it. Its connection goes.
      if (frame.error().code() != Errc::ConnectionBroken) {
        notifications_refused_.fetch_add(1, std::memory_order_relaxed);
        log::warn("xfer", "closed a connection from '" + it->identity + "': " + frame.error().describe());
      }
      it->connection->close();
      it = rail.accepted.erase(it);
      continue;
    }
    ++it;
  }
  return found;
}

void EngineImpl::accept_notification(const std::string& sender, std::span<const std::byte> payload) {
  std::uint16_t name_length = 0;
  if (payload.size() < 2) return (void)notifications_refused_.fetch_add(1, std::memory_order_relaxed);
  std::memcpy(&name_length, payload.data(), 2);
  if (name_length > kMaxNotifiedName || payload.size() - 2 < name_length ||
      payload.size() - 2 - name_length > kMaxNotificationBytes)
    return (void)notifications_refused_.fetch_add(1, std::memory_order_relaxed);
  std::string segment(reinterpret_cast<const char*>(payload.data() + 2), name_length);
  auto message = payload.subspan(2 + name_length);
  std::lock_guard lock(notifications_mutex_);
  // Only about our own published segments: a peer cannot make us queue anything about another name.
  if (!ready_names_.contains(segment))
    return (void)notifications_refused_.fetch_add(1, std::memory_order_relaxed);
  if (notifications_.size() >= options_.max_notifications)
    return (void)notifications_dropped_.fetch_add(1, std::memory_order_relaxed);
  notifications_.push_back(Notification{sender, std::move(segment), {message.begin(), message.end()}});
  notifications_received_.fetch_add(1, std::memory_order_relaxed);
  notification_arrived_.notify_all();
}

std::optional<Notification> EngineImpl::poll_notification() {
  std::lock_guard lock(notifications_mutex_);
  if (notifications_.empty()) return std::nullopt;
  auto n = std::move(notifications_.front());
  notifications_.pop_front();
  return n;
}

Result<Notification> EngineImpl::wait_notification(std::chrono::nanoseconds timeout) {
  std::unique_lock lock(notifications_mutex_);
  if (!notification_arrived_.wait_for(lock, timeout, [&] { return !notifications_.empty(); }))
    return fail(Errc::Timeout, "wait_notification: none arrived in time");
  auto n = std::move(notifications_.front());
  notifications_.pop_front();
  return n;
}

// A connection of its own to the owner (its own queues: the rail's queue is the data path's), proven as the
// data connections are: the owner must prove it is the record's owner, and we prove the secret to it.
Result<void> EngineImpl::open_notify_channel(Peer& peer, const SegmentEntry& entry) {
  auto& rail = *peer.links.front()->rail;
  auto remote = rails_of(entry.record, entry.transport);
  const auto& address = remote.at(peer.links.front()->remote_rail)->address;
  auto connection = connect_to_owner(rail, address, entry.record.owner, kNotifyIdentitySuffix);
  if (!connection) return std::unexpected(connection.error());
  auto channel = rdmakit::detail::MessageChannel::open(
      *rail.context, *connection, kNotifySpec, {.receives = 1, .send_timeout = options_.peer_timeout});
  if (!channel) return std::unexpected(channel.error());
  peer.notify = std::make_unique<rdmakit::detail::MessageChannel>(std::move(*channel));
  return {};
}

Result<void> EngineImpl::send_notification(const SegmentEntry& entry, std::span<const std::byte> message) {
  if (stop_.load(std::memory_order_acquire)) return fail(Errc::ConnectionBroken, "xfer engine closed");
  if (entry.name.size() > kMaxNotifiedName)
    return fail(Errc::InvalidArgument,
                "notification: segment name longer than " + std::to_string(kMaxNotifiedName));
  std::vector<std::byte> payload(2 + entry.name.size() + message.size());
  auto name_length = static_cast<std::uint16_t>(entry.name.size());
  std::memcpy(payload.data(), &name_length, 2);
  std::memcpy(payload.data() + 2, entry.name.data(), entry.name.size());
  if (!message.empty()) std::memcpy(payload.data() + 2 + entry.name.size(), message.data(), message.size());
  auto& peer = *entry.peer;
  std::lock_guard lock(peer.notify_mutex);
  Result<void> sent = fail(Errc::ConnectionBroken, "no notification channel");
  // A channel from before may have broken (the owner closed it): one fresh try.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!peer.notify) {
      if (auto opened = open_notify_channel(peer, entry); !opened) {
        sent = std::unexpected(opened.error());
        break;
      }
    }
    sent = peer.notify->send(kNotify, payload);
    if (sent) return {};
    peer.notify.reset();
  }
  return std::unexpected(Error(sent.error().code(), "notification to '" + entry.record.owner +
                                                        "' about segment '" + entry.name +
                                                        "': " + sent.error().message()));
}

}  // namespace rdmakit::xfer::detail
