#include "transport/verbs/cm.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>

#include <charconv>
#include <cstring>
#include <utility>

#include "core/net.hpp"

namespace rdmakit::verbs_impl {

Result<EventChannel> EventChannel::create(const Api& api) {
  rdma_event_channel* channel = api.create_event_channel();
  if (!channel) return fail_errno("rdma_create_event_channel", errno);
  EventChannel owned(api, channel);
  // Non-blocking, so next_event() can wait with a deadline through poll().
  int flags = fcntl(channel->fd, F_GETFL);
  if (fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) != 0)
    return fail_errno("fcntl(cm channel, O_NONBLOCK)", errno);
  return owned;
}

EventChannel::EventChannel(EventChannel&& other) noexcept
    : api_(other.api_), channel_(std::exchange(other.channel_, nullptr)) {}

EventChannel::~EventChannel() {
  if (channel_) api_->destroy_event_channel(channel_);
}

Result<CmEndpoint> CmEndpoint::create(const Api& api) {
  auto channel = EventChannel::create(api);
  if (!channel) return std::unexpected(channel.error());
  rdma_cm_id* id = nullptr;
  if (api.create_id(channel->get(), &id, nullptr, RDMA_PS_TCP) != 0)
    return fail_errno("rdma_create_id", errno);
  return CmEndpoint(api, std::move(*channel), id);
}

Result<CmEndpoint> CmEndpoint::adopt(const Api& api, rdma_cm_id* id) {
  auto channel = EventChannel::create(api);
  if (!channel) {
    api.destroy_id(id);
    return std::unexpected(channel.error());
  }
  if (api.migrate_id(id, channel->get()) != 0) {
    int err = errno;
    api.destroy_id(id);
    return fail_errno("rdma_migrate_id", err);
  }
  return CmEndpoint(api, std::move(*channel), id);
}

CmEndpoint::CmEndpoint(CmEndpoint&& other) noexcept
    : api_(other.api_), channel_(std::move(other.channel_)), id_(std::exchange(other.id_, nullptr)) {}

CmEndpoint::~CmEndpoint() {
  if (id_) api_->destroy_id(id_);
}

Result<CmEvent> CmEndpoint::next_event(std::chrono::steady_clock::time_point deadline) const {
  for (;;) {
    rdma_cm_event* event = nullptr;
    if (api_->get_cm_event(channel_.get(), &event) == 0) {
      CmEvent copy{event->event, event->status, event->id, {}};
      auto* data = static_cast<const std::byte*>(event->param.conn.private_data);
      if (data) copy.private_data.assign(data, data + event->param.conn.private_data_len);
      api_->ack_cm_event(event);
      return copy;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return fail_errno("rdma_get_cm_event", errno);
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return fail(Errc::Timeout, "no rdma_cm event in time");
    pollfd fd{channel_.get()->fd, POLLIN, 0};
    if (::poll(&fd, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 1000000))) < 0 && errno != EINTR)
      return fail_errno("poll(cm channel)", errno);
  }
}

Result<CmEvent> CmEndpoint::expect(rdma_cm_event_type expected,
                                   std::chrono::steady_clock::time_point deadline,
                                   const std::string& what) const {
  auto event = next_event(deadline);
  if (!event) {
    if (event.error().code() == Errc::Timeout)
      return fail(Errc::Timeout, what + ": no " + api_->event_str(expected) + " within connect_timeout_ms");
    return event;
  }
  if (event->type == expected) return event;
  return fail(Errc::ConnectionRefused, what + ": rdma_cm reported " + api_->event_str(event->type) +
                                           " (status " + std::to_string(event->status) + ") instead of " +
                                           api_->event_str(expected));
}

Result<sockaddr_in> parse_address(std::string_view address) {
  auto parsed = net::parse_host_port(address);
  if (!parsed) return std::unexpected(parsed.error());
  sockaddr_in out{};
  out.sin_family = AF_INET;
  out.sin_port = htons(parsed->port);
  if (parsed->host.empty() || parsed->host == "*") return out;
  auto resolved = net::resolve(parsed->host, parsed->port, AF_INET);
  if (!resolved)
    return fail(Errc::NotFound,
                "address '" + std::string(address) + "': cannot resolve host '" + parsed->host + "'");
  std::memcpy(&out, &resolved->storage, sizeof(out));
  return out;
}

std::string address_text(const sockaddr_in& address) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &address.sin_addr, text, sizeof(text));
  return std::string(text) + ":" + std::to_string(ntohs(address.sin_port));
}

}  // namespace rdmakit::verbs_impl
