// The state of one RC connection, whatever moves its bytes: the ids it issued, the counters behind
// ConnectionStats, the opcode of each posted send, the last completion, the first failure, and which
// completions the application already took. Every transport holds one (through Connection) instead of
// its own fields, so the rules below hold on all of them alike:
//  * the first failure wins and keeps its Errc and Status: health() returns exactly that error;
//  * an operation posted behind a failure is accepted and completes Flushed (a QP in the error state);
//  * a connection closed by this side refuses posts (its queue pair is gone);
//  * wait() on an id that this connection never issued, or whose completion was already taken, fails at
//    once with InvalidArgument, however long ago it was taken (check_waitable).
// Counters are written on the data path without locks; the failure has a small lock of its own.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "rdmakit/connection.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit::detail {

class RcState {
 public:
  // `send_depth`/`recv_depth`: the queue depths; they size the rings of opcodes and taken completions.
  RcState(std::uint32_t number, std::uint32_t send_depth, std::uint32_t recv_depth);

  std::uint32_t number() const noexcept { return number_; }
  std::uint64_t send_id(std::uint64_t sequence) const noexcept { return id_of(sequence, false); }
  std::uint64_t recv_id(std::uint64_t sequence) const noexcept { return id_of(sequence, true); }
  static std::uint64_t sequence_of(std::uint64_t id) noexcept { return id & (Connection::kRecvBit - 1); }

  // Sequences of the sends / receives issued so far; the next post takes the next ones (take_*), a post
  // that the transport then refuses gives them back (give_back_*; only for the last ones taken).
  std::uint64_t take_sends(std::uint64_t count) noexcept {
    return send_posted.fetch_add(count, std::memory_order_relaxed);
  }
  void give_back_sends(std::uint64_t count) noexcept {
    send_posted.fetch_sub(count, std::memory_order_relaxed);
  }
  std::uint64_t take_recv() noexcept { return recv_posted.fetch_add(1, std::memory_order_relaxed); }
  void give_back_recv() noexcept { recv_posted.fetch_sub(1, std::memory_order_relaxed); }

  // A wrapper whose ids come from another connection (fault): `id` was issued.
  void issued(std::uint64_t id) noexcept {
    auto& posted = Connection::is_recv_id(id) ? recv_posted : send_posted;
    std::uint64_t next = sequence_of(id) + 1, now = posted.load(std::memory_order_relaxed);
    while (now < next && !posted.compare_exchange_weak(now, next, std::memory_order_relaxed)) {
    }
  }

  std::atomic<std::uint64_t> send_posted{0};
  std::atomic<std::uint64_t> recv_posted{0};
  std::atomic<std::uint64_t> send_done{0};  // sends are done in order: every sequence below this one
  std::atomic<std::uint64_t> recv_done{0};

  // The opcode of each posted send (a failed verbs completion's opcode is undefined).
  void remember(std::uint64_t sequence, Opcode opcode) noexcept { opcodes_[sequence & send_mask_] = opcode; }
  Opcode posted_opcode(std::uint64_t sequence) const noexcept { return opcodes_[sequence & send_mask_]; }

  // Bookkeeping of a finished operation (signaled or not, any status): counts it and stamps the time.
  // Sends complete in order, so a send's completion means every send before it is done too.
  void completed(std::uint64_t id) noexcept;
  void completed(const Completion& completion) noexcept { completed(completion.id); }

  // ---- the error state
  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  // Records the connection's failure; true for the first one (the caller then flushes what is pending),
  // false when it had failed already (the first failure stays, with its Errc and Status).
  bool fail(Error why);
  std::optional<Error> failure() const;
  Result<void> health() const;
  // A chain posted behind a failure (software transports; verbs' QP does it itself): accepted, and every
  // request completes Flushed, failures always complete, signaled or not. `push` delivers each completion;
  // call it under the lock that orders the connection's completions. Returns the first id.
  template <typename Push>
  std::uint64_t post_flushed(std::span<const WorkRequest> chain, Push&& push) {
    const std::uint64_t first = take_sends(chain.size());
    for (std::size_t i = 0; i < chain.size(); ++i)
      flush(send_id(first + i), chain[i].opcode, Status::Flushed, push);
    return send_id(first);
  }
  // One request taken already (its id issued) that the error state overtook before it was queued.
  template <typename Push>
  void flush_posted(std::uint64_t id, Opcode opcode, Push&& push) {
    flush(id, opcode, Status::Flushed, push);
  }
  template <typename Push>
  std::uint64_t post_recv_flushed(Push&& push) {
    const std::uint64_t id = recv_id(take_recv());
    flush(id, Opcode::Recv, Status::Flushed, push);
    return id;
  }
  // The error state of a QP, entered once (software transports; verbs' QP does it itself). Records `why` as
  // the failure (the first one stays) and makes new posts flush (in_error). One rule for the failure: when
  // the oldest pending send fails with `head_status` (not Flushed), the connection's failure is that
  // operation's (completion_error), unless `why` is an operation's already (TransportFailure), as verbs
  // reports it. Then flushes `sends` (a queue of elements with an `id`, oldest first; `opcode_of(element)`)
  // in order: the head completes with `head_status`, the rest Flushed, each through `push`. Returns false,
  // and touches nothing, when the error state was entered already. Call it under the lock that orders the
  // connection's completions; the receives then go through flush_recvs.
  template <typename Sends, typename OpcodeOf, typename Push>
  bool enter_error(Error why, Status head_status, Sends& sends, OpcodeOf&& opcode_of, Push&& push) {
    std::optional<Completion> head;
    if (!sends.empty())
      head = Completion{.id = sends.front().id, .status = head_status, .opcode = opcode_of(sends.front())};
    if (!enter_error(std::move(why), head)) return false;
    for (Status status = head_status; !sends.empty(); status = Status::Flushed) {
      flush(sends.front().id, opcode_of(sends.front()), status, push);
      sends.pop_front();
    }
    return true;
  }
  // The transition alone, with the rule above (`head`: the oldest pending send, with its status); true the
  // first time.
  bool enter_error(Error why, const std::optional<Completion>& head);
  // Whether the error state was entered: pending work was flushed, and new posts flush.
  bool in_error() const noexcept { return in_error_.load(std::memory_order_acquire); }
  // Flushes the receives of `recvs` (elements with an `id`), oldest first, each Flushed through `push`.
  template <typename Recvs, typename Push>
  void flush_recvs(Recvs& recvs, Push&& push) {
    for (; !recvs.empty(); recvs.pop_front()) flush(recvs.front().id, Opcode::Recv, Status::Flushed, push);
  }
  // A request failed at post (a local protection error found by the transport, an injected failure) and
  // waits its turn: it fails the connection when the requests before it are done, and the requests behind
  // it are not carried out (they complete Flushed after it, as behind a QP's failed WQE).
  void queue_failure() noexcept { failure_queued_.store(true, std::memory_order_release); }
  bool failure_queued() const noexcept { return failure_queued_.load(std::memory_order_acquire) || failed(); }

  // ---- the post prologue, one order and one wording for every transport, run once by Connection::post()
  // and post_recv() (ConnectionProvider::run_post, src/transport/provider.hpp): (1) the request
  // (check_chain / check_recv), (2) a connection closed by this side (refused), then, for a queue in
  // software, under the lock that orders the connection's completions, (3) the error state (accepted and
  // flushed) and (4) room in the queue. check_post and check_post_recv are (1) and (2).
  Result<void> check_post(std::span<const WorkRequest> chain, const Capabilities& caps,
                          std::uint64_t peer_epoch) const;
  Result<void> check_post_recv(std::span<const Segment> sgl, const Capabilities& caps) const;
  // (3) and (4): nullopt when the transport carries the chain out; otherwise what post() returns. `queued`:
  // sends outstanding in a queue of `depth`.
  template <typename Push>
  std::optional<Result<std::uint64_t>> admit_post(std::span<const WorkRequest> chain, std::uint64_t queued,
                                                  std::uint64_t depth, Push&& push) {
    if (in_error()) return post_flushed(chain, push);
    if (queued + chain.size() > depth) return queue_full("post", queued, depth);
    return std::nullopt;
  }
  template <typename Push>
  std::optional<Result<std::uint64_t>> admit_recv(std::uint64_t queued, std::uint64_t depth, Push&& push) {
    if (in_error()) return post_recv_flushed(push);
    if (queued + 1 > depth) return queue_full("post_recv", queued, depth);
    return std::nullopt;
  }
  // (4)'s error, ResourceExhausted, also where the device finds the queue full (verbs: ENOMEM).
  static std::unexpected<Error> queue_full(std::string_view what, std::uint64_t queued, std::uint64_t depth);

  // close() by this side: true the first time. Posts are refused afterwards.
  bool close() noexcept { return !closed_.exchange(true, std::memory_order_acq_rel); }
  bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }
  // post()/post_recv() on a connection closed by this side.
  std::unexpected<Error> refuse_closed(std::string_view what) const;

  // ---- diagnostics
  std::uint64_t outstanding() const noexcept;
  // One format for every transport; the peer shows as "<name> (<address>)".
  ConnectionStats stats(const PeerInfo& peer) const;

  // ---- waits
  enum class Waitable {
    Yes,       // not taken yet: wait for it
    IfQueued,  // done: waitable only if its completion is still queued, else it was taken (or has none)
  };
  // Whether wait() may wait for `id`; InvalidArgument naming the problem for an id of another connection,
  // one never issued, or one whose completion was taken. Exact at any age: the ring of taken completions
  // answers for the recent ids; an older id, with more than the ring's span of operations posted after it,
  // is done (each queue holds at most its depth, less than the span), and once this connection counted it
  // done its completion, if it has one, was queued (the software transports queue it under the lock that
  // frees its slot; verbs counts it when it polls it): either it is still queued, or it was taken, or it has
  // none (an unsignaled success). Call it before looking in the queue.
  Result<Waitable> check_waitable(std::uint64_t id) const;
  // The application took the completion of `id` (poll or wait): a later wait on it fails at once.
  void taken(std::uint64_t id) noexcept;
  // wait()'s error for an id whose completion was taken.
  static std::unexpected<Error> taken_error(std::uint64_t id);

 private:
  std::uint64_t id_of(std::uint64_t sequence, bool recv) const noexcept {
    return (std::uint64_t{number_} << 40) | (recv ? Connection::kRecvBit : 0) |
           (sequence & (Connection::kRecvBit - 1));
  }

  template <typename Push>
  void flush(std::uint64_t id, Opcode opcode, Status status, Push& push) {
    const Completion completion{.id = id, .status = status, .opcode = opcode, .connection = number_};
    completed(completion);
    push(completion);
  }

  std::uint32_t number_;
  std::uint64_t send_mask_;
  std::unique_ptr<Opcode[]> opcodes_;
  // Taken completions: slot sequence & mask holds sequence + 1 once taken.
  std::uint64_t taken_mask_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> taken_send_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> taken_recv_;
  std::atomic<std::int64_t> last_completion_ns_{0};  // system_clock, 0 = never
  std::atomic<bool> failed_{false};
  std::atomic<bool> closed_{false};
  std::atomic<bool> in_error_{false};
  std::atomic<bool> failure_queued_{false};
  mutable std::mutex failure_mutex_;
  std::optional<Error> failure_;
};

// The error a failed completion leaves on its connection: TransportFailure carrying the status, so
// health() reports what the operation reported. `detail` says more (e.g. "at peer x").
Error completion_error(const Completion& completion, std::string_view detail = {});

}  // namespace rdmakit::detail
