#include "transport/verbs/cq.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <string>

#include "rdmakit/connection.hpp"

namespace rdmakit::verbs_impl {

Completion to_completion(const ibv_wc& wc, Opcode posted) noexcept {
  Completion c;
  c.id = wc.wr_id;
  c.status = map_status(wc.status);
  c.connection = Connection::connection_of(wc.wr_id);
  const bool recv = Connection::is_recv_id(wc.wr_id);
  if (recv) {
    // wc.opcode is valid only on success; a flushed receive is still a receive.
    c.opcode = c.ok() && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM ? Opcode::RecvWriteImm : Opcode::Recv;
    c.bytes = c.ok() ? wc.byte_len : 0;
    c.has_imm = c.ok() && (wc.wc_flags & IBV_WC_WITH_IMM);
    c.imm = c.has_imm ? ntohl(wc.imm_data) : 0;
    return c;
  }
  c.opcode = posted;
  if (c.ok()) {
    if (posted == Opcode::CompareSwap || posted == Opcode::FetchAdd)
      c.bytes = 8;
    else if (posted == Opcode::Read)
      c.bytes = wc.byte_len;
  }
  return c;
}

Result<std::shared_ptr<VerbsCompletionQueue>> VerbsCompletionQueue::create(std::shared_ptr<Device> device,
                                                                           std::uint32_t depth, WaitMode mode,
                                                                           std::chrono::microseconds spin) {
  const Api& api = device->api();
  std::shared_ptr<VerbsCompletionQueue> q(new VerbsCompletionQueue(device, mode, spin));
  q->channel_ = api.create_comp_channel(device->context());
  if (!q->channel_) return fail_errno("ibv_create_comp_channel(" + device->name() + ")", errno);
  // Non-blocking: several sleepers may wake for one event; the losers must not block in get_cq_event.
  int flags = fcntl(q->channel_->fd, F_GETFL);
  if (fcntl(q->channel_->fd, F_SETFL, flags | O_NONBLOCK) != 0) return fail_errno("fcntl(O_NONBLOCK)", errno);
  q->wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (q->wake_fd_ < 0) return fail_errno("eventfd (completion queue)", errno);
  q->depth_ = std::min<std::uint32_t>(depth, static_cast<std::uint32_t>(device->attr().max_cqe));
  // The CQ's context is the queue, so that an asynchronous CQ error (overflow) finds it.
  q->cq_ = api.create_cq(device->context(), static_cast<int>(q->depth_), q.get(), q->channel_, 0);
  if (!q->cq_)
    return fail_errno("ibv_create_cq(" + device->name() + ", " + std::to_string(q->depth_) + " entries)",
                      errno);
  return q;
}

VerbsCompletionQueue::~VerbsCompletionQueue() {
  const Api& api = device_->api();
  if (cq_) api.destroy_cq(cq_);
  if (channel_) api.destroy_comp_channel(channel_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void VerbsCompletionQueue::attach_track(std::shared_ptr<detail::RcState> track) {
  std::lock_guard lock(mutex_);
  tracks_.push_back(std::move(track));
}

void VerbsCompletionQueue::detach_track(const detail::RcState* track) {
  std::lock_guard lock(mutex_);
  if (last_ == track) last_ = nullptr;
  std::erase_if(tracks_, [&](const std::shared_ptr<detail::RcState>& t) { return t.get() == track; });
}

detail::RcState* VerbsCompletionQueue::find(std::uint32_t number) {
  if (last_ && last_->number() == number) return last_;
  for (auto& t : tracks_)
    if (t->number() == number) return last_ = t.get();
  return nullptr;
}

std::size_t VerbsCompletionQueue::poll_locked(std::span<Completion> out) {
  std::array<ibv_wc, 32> wcs;
  const int want = static_cast<int>(std::min(out.size(), wcs.size()));
  const int got = ibv_poll_cq(cq_, want, wcs.data());
  for (int i = 0; i < got; ++i) {
    const ibv_wc& wc = wcs[i];
    const bool recv = Connection::is_recv_id(wc.wr_id);
    const std::uint64_t sequence = wc.wr_id & (Connection::kRecvBit - 1);
    detail::RcState* track = find(Connection::connection_of(wc.wr_id));
    out[i] = to_completion(wc, track && !recv ? track->posted_opcode(sequence) : Opcode::Write);
    if (has_staged_.load(std::memory_order_relaxed)) [[unlikely]]
      settle_staged_locked(out[i]);
    if (!track) continue;
    track->completed(out[i]);
    // The first failed operation fails its connection (the QP is in the error state now), with its status.
    if (!out[i].ok() && out[i].status != Status::Flushed) track->fail(detail::completion_error(out[i]));
  }
  return got > 0 ? static_cast<std::size_t>(got) : 0;
}

std::size_t VerbsCompletionQueue::take_flushed_locked(std::span<Completion> out) {
  std::size_t n = 0;
  // Two threads posting receives to one connection may have queued them out of order: look again after
  // each one taken, since it may be the turn of one queued before it.
  for (bool took = true; took && n < out.size();) {
    took = false;
    for (auto it = flushed_.begin(); it != flushed_.end(); ++it) {
      const auto sequence = detail::RcState::sequence_of(it->completion.id);
      if (it->track->recv_done.load(std::memory_order_relaxed) < sequence) continue;  // earlier ones pending
      if (has_staged_.load(std::memory_order_relaxed)) settle_staged_locked(it->completion);
      it->track->completed(it->completion);
      out[n++] = it->completion;
      flushed_.erase(it);
      took = true;
      break;
    }
  }
  return n;
}

std::size_t VerbsCompletionQueue::poll_transport(std::span<Completion> out) {
  std::lock_guard lock(mutex_);
  return poll_transport_locked(out);
}

std::size_t VerbsCompletionQueue::poll_taken(std::span<Completion> out) {
  std::size_t n = 0;
  bool missed = false;
  {
    std::lock_guard lock(mutex_);
    n = poll_transport_locked(out);
    // The tracks are the connections' RcStates that the core's note_taken would look up (attach and
    // attach_track get the same one), alive while the lock holds them.
    for (std::size_t i = 0; i < n; ++i) {
      if (detail::RcState* track = find(out[i].connection))
        track->taken(out[i].id);
      else
        missed = true;
    }
  }
  // A closed connection detached its track after draining its completions into the backlog, but the core
  // still knows it until the Connection goes: a wait() on what was polled here must fail at once.
  if (missed) note_taken(out.first(n));
  return n;
}

std::size_t VerbsCompletionQueue::poll_transport_locked(std::span<Completion> out) {
  std::size_t n = 0;
  if (has_backlog_.load(std::memory_order_relaxed)) {
    for (; n < out.size() && !backlog_.empty(); ++n) {
      out[n] = backlog_.front();
      backlog_.pop_front();
    }
    has_backlog_.store(!backlog_.empty(), std::memory_order_relaxed);
  }
  // The software completions only after the backlog (the receives before them may wait there), and again
  // after the device's: its completions may be the earlier receives they wait for.
  if (n < out.size() && !flushed_.empty()) n += take_flushed_locked(out.subspan(n));
  if (n < out.size()) n += poll_locked(out.subspan(n));
  if (n < out.size() && !flushed_.empty()) n += take_flushed_locked(out.subspan(n));
  return n;
}

void VerbsCompletionQueue::drain(const detail::RcState& track,
                                 std::chrono::steady_clock::time_point deadline) {
  std::array<Completion, 32> batch;
  while (track.outstanding() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::lock_guard lock(mutex_);
    std::size_t n = poll_locked(batch);
    n += take_flushed_locked(std::span(batch).subspan(n));
    backlog_.insert(backlog_.end(), batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(n));
    has_backlog_.store(!backlog_.empty(), std::memory_order_relaxed);
  }
}

void VerbsCompletionQueue::flush_recv(std::shared_ptr<detail::RcState> track, std::uint64_t id) {
  {
    std::lock_guard lock(mutex_);
    const Completion completion{
        .id = id, .status = Status::Flushed, .opcode = Opcode::Recv, .connection = track->number()};
    flushed_.push_back(FlushedRecv{std::move(track), completion});
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] auto written = ::write(wake_fd_, &one, sizeof(one));  // full counter: awake anyway
}

void VerbsCompletionQueue::add_staged(std::uint64_t id, StagedOp op) {
  std::lock_guard lock(mutex_);
  staged_.insert_or_assign(id, std::move(op));
  has_staged_.store(true, std::memory_order_relaxed);
}

void VerbsCompletionQueue::cancel_staged(std::uint64_t from, std::uint64_t to) {
  std::lock_guard lock(mutex_);
  staged_.erase(staged_.lower_bound(from), staged_.lower_bound(to));
  has_staged_.store(!staged_.empty(), std::memory_order_relaxed);
}

void VerbsCompletionQueue::settle_staged_locked(Completion& completion) {
  // Ids of one connection and one side order as their sequences. RC completes a queue's requests in order
  // and reports every failure, signaled or not: a completion means the unsignaled requests before it on its
  // queue succeeded, so their bytes are copied back now, before the user can learn of them.
  const std::uint64_t queue = completion.id & ~(Connection::kRecvBit - 1);
  for (auto it = staged_.lower_bound(queue); it != staged_.end() && it->first <= completion.id;) {
    StagedOp& op = it->second;
    const bool own = it->first == completion.id;
    // A WRITE_WITH_IMM consumes a receive without filling it: nothing to copy.
    const bool filled = !own || (completion.ok() && completion.opcode != Opcode::RecvWriteImm);
    if (!op.sink.empty() && filled) {
      const std::size_t bytes = own && completion.opcode == Opcode::Recv ? completion.bytes : op.length;
      if (!op.staging->scatter(op.buffer->data(), bytes, op.sink)) completion.status = Status::GeneralError;
    }
    it = staged_.erase(it);
  }
  has_staged_.store(!staged_.empty(), std::memory_order_relaxed);
}

Result<void> VerbsCompletionQueue::health() const {
  if (!overflowed_.load(std::memory_order_acquire)) return {};
  return fail(Errc::ResourceExhausted,
              "completion queue overflowed (IBV_EVENT_CQ_ERR): more than its depth of " +
                  std::to_string(depth_) +
                  " completions were waiting to be polled; later ones were lost (size the queue for every "
                  "operation that can complete before it is polled: create_cq(depth), cq_depth, or "
                  "send/recv_queue_depth for a connection's own queues)");
}

bool AsyncEvents::available() const noexcept {
  const Api& api = device_->api();
  return api.get_async_event && api.ack_async_event;
}

void AsyncEvents::on_cm_readable() {
  const Api& api = device_->api();
  ibv_async_event event{};
  // The fd is non-blocking: take every event that is there. Each is acked at once (ibv_destroy_cq waits
  // for the acks of its events, so the queue is alive while we look at it).
  while (api.get_async_event(device_->context(), &event) == 0) {
    if (event.event_type == IBV_EVENT_CQ_ERR && event.element.cq && event.element.cq->cq_context)
      static_cast<VerbsCompletionQueue*>(event.element.cq->cq_context)->overflowed();
    api.ack_async_event(&event);
  }
}

Result<void> VerbsCompletionQueue::sleep_until(std::chrono::steady_clock::time_point deadline) {
  if (ibv_req_notify_cq(cq_, 0) != 0) return fail_errno("ibv_req_notify_cq", errno);
  {
    // Re-poll after arming: what arrived before the arming raised no event and would be slept past.
    std::lock_guard lock(mutex_);
    std::array<Completion, 16> batch;
    std::size_t n = poll_locked(batch);
    n += take_flushed_locked(std::span(batch).subspan(n));
    if (n > 0) {
      backlog_.insert(backlog_.end(), batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(n));
      has_backlog_.store(true, std::memory_order_relaxed);
      return {};
    }
  }
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return {};
  std::array<pollfd, 2> fds{pollfd{channel_->fd, POLLIN, 0}, pollfd{wake_fd_, POLLIN, 0}};
  int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<std::int64_t>(left.count(), 1000000)));
  if (ready < 0 && errno != EINTR) return fail_errno("poll(completion channel)", errno);
  if (ready > 0 && (fds[1].revents & POLLIN)) {
    std::uint64_t count = 0;
    [[maybe_unused]] auto read = ::read(wake_fd_, &count, sizeof(count));  // another sleeper may have won
  }
  if (ready > 0 && (fds[0].revents & POLLIN)) {
    ibv_cq* event_cq = nullptr;
    void* cq_context = nullptr;
    if (device_->api().get_cq_event(channel_, &event_cq, &cq_context) == 0)
      device_->api().ack_cq_events(event_cq, 1);
  }
  return {};
}

}  // namespace rdmakit::verbs_impl
