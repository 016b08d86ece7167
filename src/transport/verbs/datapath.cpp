// The posting path: one ibv_post_send per chain, work requests built on the stack, the caller's
// segments passed as the scatter-gather list (Segment has ibv_sge's layout). No allocation, no copy of
// payload, no lock.
#include <arpa/inet.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <vector>

#include "core/rc_check.hpp"
#include "core/rc_state.hpp"
#include "transport/verbs/connection.hpp"
#include "transport/verbs/context.hpp"
#include "transport/verbs/mapping.hpp"

namespace rdmakit::verbs_impl {

static_assert(sizeof(Segment) == sizeof(ibv_sge) && alignof(Segment) == alignof(ibv_sge));
static_assert(offsetof(Segment, addr) == offsetof(ibv_sge, addr) &&
              offsetof(Segment, length) == offsetof(ibv_sge, length) &&
              offsetof(Segment, lkey) == offsetof(ibv_sge, lkey));

namespace {

constexpr std::size_t kStackChain = 32;

ibv_sge* as_sges(std::span<const Segment> segments) noexcept {
  // ibv_post_send takes non-const lists but only reads them.
  return reinterpret_cast<ibv_sge*>(const_cast<Segment*>(segments.data()));
}

// Operations of one queue not yet done (racing posts may briefly see done ahead of posted).
std::uint64_t outstanding(const std::atomic<std::uint64_t>& posted, const std::atomic<std::uint64_t>& done) {
  const std::uint64_t p = posted.load(std::memory_order_relaxed), d = done.load(std::memory_order_relaxed);
  return p > d ? p - d : 0;
}

// Room for a chain longer than kStackChain, grown once per thread. Out of line: the thread_local is a
// __tls_get_addr call in a shared library, which every post paid when it was inline.
[[gnu::noinline]] ibv_send_wr* long_chain(std::size_t size) {
  thread_local std::vector<ibv_send_wr> long_chains;
  if (long_chains.size() < size) long_chains.resize(size);
  return long_chains.data();
}

// A staged sink without LocalWrite: the NIC would fail the request with LocalProtection; the staged copy is
// refused at post instead (it would write where the caller allowed no writes).
std::unexpected<Error> unwritable(const char* call) {
  return fail(Errc::InvalidArgument, std::string(call) +
                                         ": a local segment in device memory registered without LocalWrite "
                                         "cannot take a READ, an atomic's result or a receive");
}

}  // namespace

// After the RC prologue's checks (Connection::post; Admission::Device): behind a failure the QP is in the
// error state and flushes what is posted, and a full queue is ENOMEM from ibv_post_send.
Result<std::uint64_t> VerbsConnection::post_admitted(std::span<const WorkRequest> chain, std::uint64_t first,
                                                     std::unique_lock<std::mutex>&) {
  std::vector<ibv_sge> bounce;  // staged device memory only (empty: none in this chain)
  if (context_->staging().active()) [[unlikely]] {
    if (auto staged = stage_sends(chain, first, bounce); !staged) {
      track_->give_back_sends(chain.size());
      return std::unexpected(staged.error());
    }
  }
  std::array<ibv_send_wr, kStackChain> on_stack;
  ibv_send_wr* wrs = chain.size() > kStackChain ? long_chain(chain.size()) : on_stack.data();

  for (std::size_t i = 0; i < chain.size(); ++i) {
    const WorkRequest& request = chain[i];
    ibv_send_wr& wr = wrs[i];
    wr = ibv_send_wr{};
    wr.wr_id = make_id(first + i, false);
    wr.next = i + 1 < chain.size() ? &wrs[i + 1] : nullptr;
    wr.sg_list = as_sges(request.local);
    wr.num_sge = static_cast<int>(request.local.size());
    wr.opcode = map_opcode(request.opcode, request.with_imm);
    wr.send_flags = request.signaled ? IBV_SEND_SIGNALED : 0;
    if (!bounce.empty() && bounce[i].length > 0) {
      wr.sg_list = &bounce[i];
      wr.num_sge = 1;
    }
    switch (request.opcode) {
      case Opcode::CompareSwap:
      case Opcode::FetchAdd:
        wr.wr.atomic.remote_addr = request.remote.addr;
        wr.wr.atomic.rkey = request.remote.rkey;
        wr.wr.atomic.compare_add = request.compare_add;
        wr.wr.atomic.swap = request.swap;
        break;
      case Opcode::Send:
        if (request.with_imm) wr.imm_data = htonl(request.imm);
        break;
      default:  // WRITE, WRITE_WITH_IMM, READ
        wr.wr.rdma.remote_addr = request.remote.addr;
        wr.wr.rdma.rkey = request.remote.rkey;
        if (request.opcode == Opcode::WriteImm) wr.imm_data = htonl(request.imm);
        break;
    }
    // Small payloads go inline: copied into the WQE at post, no DMA read of the buffer, no lkey check.
    if ((request.opcode == Opcode::Write || request.opcode == Opcode::WriteImm ||
         request.opcode == Opcode::Send) &&
        inline_size_ > 0 && total_length(request.local) <= inline_size_ &&
        (bounce.empty() || bounce[i].length == 0))
      wr.send_flags |= IBV_SEND_INLINE;
    track_->remember(first + i, request.opcode == Opcode::Send ? Opcode::Send : request.opcode);
  }

  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(qp_->get(), wrs, &bad); rc != 0) [[unlikely]] {
    // Those before `bad` were posted and will complete; the rest never will.
    const auto posted = static_cast<std::uint64_t>(bad ? bad - wrs : 0);
    track_->give_back_sends(chain.size() - posted);
    if (!bounce.empty())
      send_cq_->cancel_staged(make_id(first + posted, false), make_id(first + chain.size(), false));
    if (rc == ENOMEM && posted == 0)  // the send queue is full: the same error as on every transport
      return detail::RcState::queue_full("post", outstanding(track_->send_posted, track_->send_done),
                                         context_->config().send_queue_depth);
    return fail_errno("ibv_post_send (" + std::to_string(posted) + " of " + std::to_string(chain.size()) +
                          " posted; send_queue_depth full?)",
                      rc);
  }
  return make_id(first, false);
}

Result<std::uint64_t> VerbsConnection::post_recv_admitted(std::span<const Segment> sgl,
                                                          std::uint64_t sequence,
                                                          std::unique_lock<std::mutex>&) {
  if (track_->failed()) [[unlikely]] {
    // The QP is in the error state (or about to be, where the peer's disconnect failed it): the receive
    // completes Flushed, in software, since a device may leave it pending (rxe does; see flush_recv).
    recv_cq_->flush_recv(track_, make_id(sequence, true));
    return make_id(sequence, true);
  }
  ibv_recv_wr wr{};
  wr.wr_id = make_id(sequence, true);
  wr.sg_list = as_sges(sgl);
  wr.num_sge = static_cast<int>(sgl.size());
  ibv_sge bounce{};
  Staging& staging = context_->staging();
  if (staging.active() && staging.involves(sgl)) [[unlikely]] {
    // A receive into staged device memory lands in a bounce buffer; the poller copies it over.
    const std::uint64_t length = total_length(sgl);
    auto buffer = staging.writable(sgl) ? staging.acquire(length) : unwritable("post_recv");
    if (!buffer) {
      track_->give_back_recv();
      return std::unexpected(buffer.error());
    }
    bounce = ibv_sge{reinterpret_cast<std::uint64_t>((*buffer)->data()), static_cast<std::uint32_t>(length),
                     (*buffer)->lkey()};
    recv_cq_->add_staged(wr.wr_id, {context_->staging_ptr(), std::move(*buffer),
                                    std::vector<Segment>(sgl.begin(), sgl.end()), length});
    wr.sg_list = &bounce;
    wr.num_sge = 1;
  }
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(qp_->get(), &wr, &bad); rc != 0) [[unlikely]] {
    track_->give_back_recv();
    if (wr.sg_list == &bounce) recv_cq_->cancel_staged(wr.wr_id, wr.wr_id + 1);
    if (rc == ENOMEM)
      return detail::RcState::queue_full("post_recv", outstanding(track_->recv_posted, track_->recv_done),
                                         context_->config().recv_queue_depth);
    return fail_errno("ibv_post_recv (recv_queue_depth full?)", rc);
  }
  return wr.wr_id;
}

Result<void> VerbsConnection::stage_sends(std::span<const WorkRequest> chain, std::uint64_t first,
                                          std::vector<ibv_sge>& bounce) {
  Staging& staging = context_->staging();
  for (std::size_t i = 0; i < chain.size(); ++i) {
    const WorkRequest& request = chain[i];
    const std::uint64_t length = total_length(request.local);
    if (length == 0 || !staging.involves(request.local)) continue;
    if (bounce.empty()) bounce.resize(chain.size());
    auto buffer = staging.acquire(length);
    const bool outbound = request.opcode == Opcode::Write || request.opcode == Opcode::WriteImm ||
                          request.opcode == Opcode::Send;
    Result<void> ok = buffer ? Result<void>{} : Result<void>(std::unexpected(buffer.error()));
    if (ok && outbound) ok = staging.gather(request.local, (*buffer)->data());
    if (ok && !outbound && !staging.writable(request.local)) ok = unwritable("post");
    if (!ok) {
      send_cq_->cancel_staged(make_id(first, false), make_id(first + chain.size(), false));
      return ok;
    }
    bounce[i] = ibv_sge{reinterpret_cast<std::uint64_t>((*buffer)->data()),
                        static_cast<std::uint32_t>(length), (*buffer)->lkey()};
    send_cq_->add_staged(
        make_id(first + i, false),
        {context_->staging_ptr(), std::move(*buffer),
         outbound ? std::vector<Segment>{} : std::vector<Segment>(request.local.begin(), request.local.end()),
         length});
  }
  return {};
}

}  // namespace rdmakit::verbs_impl
