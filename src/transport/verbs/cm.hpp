// rdma_cm as RAII handles: an event channel with its id (member order = teardown order: the id goes
// before its channel), and waiting for the next event with a deadline instead of blocking forever.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "transport/verbs/api.hpp"

namespace rdmakit::verbs_impl {

class EventChannel {
 public:
  static Result<EventChannel> create(const Api& api);
  EventChannel(EventChannel&& other) noexcept;
  EventChannel& operator=(EventChannel&&) = delete;
  ~EventChannel();
  rdma_event_channel* get() const noexcept { return channel_; }

 private:
  EventChannel(const Api& api, rdma_event_channel* channel) noexcept : api_(&api), channel_(channel) {}
  const Api* api_;
  rdma_event_channel* channel_;
};

struct CmEvent {
  rdma_cm_event_type type{};
  int status = 0;
  rdma_cm_id* id = nullptr;  // for CONNECT_REQUEST: the new id, owned by the caller from now on
  std::vector<std::byte> private_data;
};

// An rdma_cm id on its own event channel.
class CmEndpoint {
 public:
  static Result<CmEndpoint> create(const Api& api);
  // Adopts an id that arrived with CONNECT_REQUEST and moves it to a channel of its own.
  static Result<CmEndpoint> adopt(const Api& api, rdma_cm_id* id);
  CmEndpoint(CmEndpoint&& other) noexcept;
  CmEndpoint& operator=(CmEndpoint&&) = delete;
  ~CmEndpoint();

  rdma_cm_id* id() const noexcept { return id_; }
  int fd() const noexcept { return channel_.get()->fd; }
  // The next event on this endpoint's channel; Errc::Timeout after `deadline`.
  Result<CmEvent> next_event(std::chrono::steady_clock::time_point deadline) const;
  // Waits for `expected`; any other event is an error whose message says which one and `what` failed.
  Result<CmEvent> expect(rdma_cm_event_type expected, std::chrono::steady_clock::time_point deadline,
                         const std::string& what) const;

 private:
  CmEndpoint(const Api& api, EventChannel channel, rdma_cm_id* id) noexcept
      : api_(&api), channel_(std::move(channel)), id_(id) {}
  const Api* api_;
  EventChannel channel_;
  rdma_cm_id* id_;
};

// "a.b.c.d:port" (or "host:port", resolved with getaddrinfo, IPv4) as a sockaddr_in.
Result<sockaddr_in> parse_address(std::string_view address);
std::string address_text(const sockaddr_in& address);

}  // namespace rdmakit::verbs_impl
