#include "coll/exchange.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <thread>

#include "core/log.hpp"

namespace rdmakit::coll::detail {
namespace {

using Clock = std::chrono::steady_clock;
// Beyond the slots' data and credits, a peer sends at most a probe, an answer and a notice.
constexpr std::uint32_t kExtraReceives = 4;
constexpr auto kNoticeLimit = std::chrono::milliseconds(200);

// How long a timed-out rank listens for the peers' answers: long enough for a loaded machine to schedule
// them, short beside the timeout that already passed.
std::chrono::milliseconds probe_limit(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 4, std::chrono::milliseconds(250), std::chrono::milliseconds(2000));
}

Error peer_error(int rank, int peer, const std::string& what) {
  return Error(Errc::ConnectionBroken,
               "rank " + std::to_string(rank) + ": " + what + " (peer rank " + std::to_string(peer) + ")");
}

}  // namespace

Exchange::Exchange(int rank, int size, std::optional<std::size_t> chunk, std::uint32_t slots,
                   std::chrono::milliseconds timeout, std::chrono::microseconds spin)
    : rank_(rank),
      size_(size),
      configured_chunk_(chunk),
      chunk_(chunk_for(Capabilities{})),  // a world of one has no fabric: arm() keeps this
      slots_(slots),
      timeout_(timeout),
      spin_(spin),
      peers_(static_cast<std::size_t>(size)) {}

Exchange::Subgroup::Subgroup(Exchange& ex, std::vector<int> members)
    : ex_(ex), saved_members_(std::move(ex.members_)), saved_rank_(ex.group_rank_) {
  auto mine = std::find(members.begin(), members.end(), ex.rank_);
  ex.group_rank_ = static_cast<int>(mine - members.begin());
  ex.members_ = std::move(members);
}

Exchange::Subgroup::~Subgroup() {
  ex_.members_ = std::move(saved_members_);
  ex_.group_rank_ = saved_rank_;
}

Exchange::InPlace::InPlace(Exchange& ex, std::byte* base, std::size_t bytes)
    : ex_(ex), base_(base), bytes_(bytes) {
  ex_.in_place_ = this;
}

// The registrations must outlive every write that reads through them: after a success the algorithm
// settled already, after a failure the closed connections' writes complete (flushed) within the bound.
Exchange::InPlace::~InPlace() {
  ex_.in_place_ = nullptr;
  if (!ex_.failure_) (void)ex_.flush();
  if (ex_.failure_) ex_.quiesce();
}

bool Exchange::InPlace::covers(const void* data, std::size_t bytes) const noexcept {
  auto* first = static_cast<const std::byte*>(data);
  return bytes > 0 && first >= base_ && bytes <= bytes_ &&
         first - base_ <= static_cast<std::ptrdiff_t>(bytes_ - bytes);
}

std::optional<std::uint32_t> Exchange::InPlace::lkey(Fabric& fabric) {
  for (auto& [f, region] : regions_)
    if (f == &fabric) return region ? std::optional(region->lkey()) : std::nullopt;
  auto region = fabric.context->register_memory(base_, bytes_, Access::LocalWrite);
  // Not an error: the staging copy still works. Said once per collective, where it happens.
  if (!region) log::debug("coll", "sending through staging slots: " + region.error().message());
  regions_.emplace_back(&fabric, region ? *region : nullptr);
  return region ? std::optional((*region)->lkey()) : std::nullopt;
}

std::size_t Exchange::chunk_for(const Capabilities& capabilities) const noexcept {
  constexpr std::size_t kSameHost = 512 << 10, kNetwork = 128 << 10;
  return configured_chunk_.value_or(capabilities.same_host_only ? kSameHost : kNetwork);
}

Result<void> Exchange::arm() {
  if (!fabrics_.empty()) chunk_ = fabrics_.front()->chunk;
  for (const auto& fabric : fabrics_) chunk_ = std::min(chunk_, fabric->chunk);
  // Each connection receives at most `slots` data chunks and `slots` credits before this rank reposts.
  for (Peer& p : peers_) {
    if (!p.connection) continue;
    p.credits = slots_;
    p.arrived_bytes.assign(slots_, 0);
    p.arrived_call.assign(slots_, 0);
    for (std::uint32_t i = 0; i < 2 * slots_ + kExtraReceives; ++i)
      if (auto id = p.connection->post_recv(std::span<const Segment>{}); !id)
        return std::unexpected(fail_all(peer_error(rank_, p.rank, "post_recv: " + id.error().message())));
  }
  armed_ = true;
  return {};
}

Error Exchange::fail_all(Error error, int culprit, Control blame) {
  if (failure_) return *failure_;
  failure_ = error;
  notify_peers(culprit, blame);
  for (Peer& p : peers_)
    if (p.connection) p.connection->close();
  return error;
}

bool Exchange::send_control(Peer& p, Control kind, int rank, std::uint64_t* id) {
  WorkRequest message{.opcode = Opcode::Send,
                      .local = {},
                      .imm = control_imm(kind, rank),
                      .with_imm = true,
                      .signaled = id != nullptr};
  auto posted = p.connection->post(std::span<const WorkRequest>(&message, 1));
  if (posted && id) *id = *posted;
  return posted.has_value();
}

// The notices must leave before close() flushes them, so this waits (briefly: a peer that stopped reading
// must not hold the failure up) for their send completions. Other completions are the failure's echo.
void Exchange::notify_peers(int culprit, Control blame) {
  if (!armed_) return;  // before arm() a peer may have no receive posted for it
  std::vector<std::uint64_t> pending;
  for (Peer& p : peers_) {
    std::uint64_t id = 0;
    // The rank whose arguments differ is told too: it may not have received a chunk of this call.
    bool told = p.rank != culprit || blame == Control::NoticeMismatch;
    if (p.connection && told && p.connection->health() && send_control(p, blame, culprit, &id))
      pending.push_back(id);
  }
  auto deadline = Clock::now() + kNoticeLimit;
  std::array<Completion, 64> batch;
  while (!pending.empty() && Clock::now() < deadline) {
    for (auto& fabric : fabrics_)
      for (std::size_t i = 0, n = fabric->cq->poll(batch); i < n; ++i) {
        handle(*fabric, batch[i]);  // counts the writes that complete: quiesce() waits for them
        std::erase(pending, batch[i].id);
      }
    std::this_thread::yield();
  }
}

void Exchange::on_broken(Peer& p, const Completion& c) {
  // Flushed completions after fail_all() closed the connections are the echo of a known failure.
  if (failure_) return;
  if (probing_) {
    answers_[static_cast<std::size_t>(p.rank)].state = Answer::Broken;
    return;
  }
  // A survivor that fails sends a notice before it closes (ordered before the close on the connection),
  // so a connection that breaks without one is the peer's own end: it died or closed without a word.
  std::string why;
  if (auto health = p.connection->health(); !health) why = ": " + health.error().message();
  fail_all(Error(Errc::ConnectionBroken,
                 "rank " + std::to_string(rank_) + ": rank " + std::to_string(p.rank) +
                     " died or closed its connections (" + std::string(to_string(c.opcode)) +
                     " with it failed: " + std::string(to_string(c.status)) + why + ")",
                 0, c.status),
           p.rank, Control::NoticeDied);
}

void Exchange::on_control(Peer& p, ControlMessage m) {
  if (failure_) return;
  std::string self = "rank " + std::to_string(rank_) + ": ", culprit = "rank " + std::to_string(m.rank);
  std::string by = " (reported by rank " + std::to_string(p.rank) + ")";
  switch (m.kind) {
    case Control::Credit:
      return;
    case Control::Probe:
      send_control(p, Control::Alive, waiting_for_);
      return;
    case Control::Alive:
      if (probing_) answers_[static_cast<std::size_t>(p.rank)] = Answer{Answer::Waiting, m.rank};
      return;
    case Control::NoticeDied:
      fail_all(Error(Errc::ConnectionBroken, self + culprit + " died or closed its connections" + by), m.rank,
               m.kind);
      return;
    case Control::NoticeStalled:
      fail_all(Error(Errc::Timeout, self + culprit + " stopped responding" + by), m.rank, m.kind);
      return;
    case Control::NoticeAborted:
      fail_all(Error(Errc::ConnectionBroken, self + culprit +
                                                 " aborted: its process is exiting on an error (its own "
                                                 "output says which)" +
                                                 by),
               m.rank, m.kind);
      return;
    case Control::NoticeMismatch:
      fail_all(Error(Errc::InvalidArgument,
                     self + (m.rank == rank_ ? std::string("this rank") : culprit) +
                         " called another collective than the other ranks, or the same one with other "
                         "arguments, or closed its communicator" +
                         by + "; the ranks that found it name both calls"),
               m.rank, m.kind);
      return;
    case Control::NoticeOther:
      fail_all(Error(Errc::ConnectionBroken, self + "rank " + std::to_string(p.rank) + " failed" +
                                                 (m.rank < 0 ? "" : " and blames " + culprit) +
                                                 " (its own error says why)"),
               m.rank, m.kind);
      return;
  }
}

void Exchange::handle(Fabric& fabric, const Completion& c) {
  auto found = fabric.rank_of_connection.find(c.connection);
  if (found == fabric.rank_of_connection.end()) return;
  Peer& p = peer(found->second);
  // A failed write is done with its source too (InPlace's registrations wait for that).
  if (!Connection::is_recv_id(c.id) && c.opcode == Opcode::WriteImm) ++p.send_done;
  if (!c.ok()) return on_broken(p, c);
  if (Connection::is_recv_id(c.id)) {
    if (c.opcode == Opcode::RecvWriteImm) {
      p.arrived_call[p.arrived % slots_] = c.imm;
      p.arrived_bytes[p.arrived++ % slots_] = c.bytes;
    } else if (ControlMessage m = parse_control(c.imm); m.kind == Control::Credit)
      p.credits += c.imm;
    else
      on_control(p, m);
    // A refused repost means the connection is in error: the flush of its other receives follows in the
    // queue, behind any notice the peer sent, and on_broken() decides then.
    if (!failure_) (void)p.connection->post_recv(std::span<const Segment>{});
  }
}

// A post refused: the connection is in error. A notice the peer sent before it closed may still wait in
// the queue (it names the culprit), so the queue is drained first; without one, the peer's end failed.
Error Exchange::refused(Peer& p, const char* what, const Error& error) {
  progress();
  if (failure_) return *failure_;
  return fail_all(
      Error(Errc::ConnectionBroken, "rank " + std::to_string(rank_) + ": rank " + std::to_string(p.rank) +
                                        " died or closed its connections (posting a " + what +
                                        " failed: " + error.message() + ")"),
      p.rank, Control::NoticeDied);
}

// Asks every peer what it waits for and listens for a while: live ranks inside a collective answer at
// once (they are all in wait_until), a stopped or dead one does not.
Verdict Exchange::probe(int waiting_for) {
  answers_.assign(static_cast<std::size_t>(size_), Answer{});
  answers_[static_cast<std::size_t>(rank_)] = Answer{Answer::Waiting, waiting_for};
  probing_ = true;
  for (Peer& p : peers_)
    if (p.connection && (!p.connection->health() || !send_control(p, Control::Probe, rank_)))
      answers_[static_cast<std::size_t>(p.rank)].state = Answer::Broken;
  auto answered = [&] {
    return std::none_of(answers_.begin(), answers_.end(),
                        [](const Answer& a) { return a.state == Answer::Silent; });
  };
  auto deadline = Clock::now() + probe_limit(timeout_);
  while (!failure_ && !answered() && Clock::now() < deadline)
    if (progress() == 0) (void)block_briefly();
  probing_ = false;
  return find_culprit(rank_, waiting_for, answers_);
}

Error Exchange::timed_out(int rank, const std::string& what) {
  std::string self = "rank " + std::to_string(rank_) + ": ";
  std::string waited = "timed out after " + std::to_string(timeout_.count()) + " ms waiting for " + what +
                       " rank " + std::to_string(rank);
  Verdict v = probe(rank);
  if (failure_) return *failure_;  // a peer's notice came first
  if (v.rank < 0)
    return fail_all(Error(Errc::Timeout, self + waited + "; every rank answered and they wait in a cycle (" +
                                             v.chain +
                                             "): were the collectives issued in the same order with "
                                             "the same arguments on every rank?"));
  std::string culprit = "rank " + std::to_string(v.rank);
  if (v.died)
    return fail_all(
        Error(Errc::ConnectionBroken, self + culprit + " died or closed its connections (this rank " +
                                          waited + "; wait chain " + v.chain + ")"),
        v.rank, Control::NoticeDied);
  auto limit = std::chrono::duration_cast<std::chrono::milliseconds>(probe_limit(timeout_));
  return fail_all(Error(Errc::Timeout, self + culprit + " stopped responding: it did not answer within " +
                                           std::to_string(limit.count()) + " ms after this rank " + waited +
                                           " (wait chain " + v.chain +
                                           "); it is stopped, hung, or never entered this collective"),
                  v.rank, Control::NoticeStalled);
}

std::size_t Exchange::progress() {
  std::array<Completion, 64> batch;
  std::size_t total = 0;
  for (auto& fabric : fabrics_) {
    std::size_t n;
    while ((n = fabric->cq->poll(batch)) > 0) {
      for (std::size_t i = 0; i < n; ++i) handle(*fabric, batch[i]);
      total += n;
    }
  }
  return total;
}

Result<void> Exchange::poll(int waiting_for) {
  waiting_for_ = waiting_for;
  progress();
  return check_abort();
}

void Exchange::request_abort(std::string reason) {
  {
    std::lock_guard lock(abort_mutex_);
    if (abort_requested_.load(std::memory_order_relaxed)) return;
    abort_reason_ = std::move(reason);
  }
  abort_requested_.store(true, std::memory_order_release);
}

// NoticeAborted names this rank: the peers blame it, not the neighbour they wait for.
Result<void> Exchange::check_abort() {
  if (!failure_ && abort_requested_.load(std::memory_order_acquire)) {
    std::string reason;
    {
      std::lock_guard lock(abort_mutex_);
      reason = abort_reason_;
    }
    fail_all(Error(Errc::ConnectionBroken, "rank " + std::to_string(rank_) + ": aborted: " + reason), rank_,
             Control::NoticeAborted);
  }
  if (failure_) return std::unexpected(*failure_);
  return {};
}

// The rank that closes its communicator is the odd one out; otherwise the peer whose chunk disagreed
// (with two ranks either could be; the message names both calls).
Error Exchange::mismatched(int peer, std::uint32_t theirs) {
  int culprit = call_.kind == CallKind::Close ? rank_ : peer;
  return fail_all(
      Error(Errc::InvalidArgument, "rank " + std::to_string(rank_) + ": " + mismatch(call_, theirs, peer)),
      culprit, Control::NoticeMismatch);
}

// Sleeps in the transport's wait (spin, then block, per Config::wait_mode) on the one completion queue;
// with two fabrics it waits on each in turn for a short while.
Result<void> Exchange::block_briefly() {
  std::array<Completion, 64> batch;
  auto slice = fabrics_.size() == 1 ? std::chrono::microseconds(20000) : std::chrono::microseconds(200);
  for (auto& fabric : fabrics_) {
    auto n = fabric->cq->wait(batch, slice);
    if (!n) return std::unexpected(fail_all(n.error()));
    for (std::size_t i = 0; i < *n; ++i) handle(*fabric, batch[i]);
    if (*n > 0) break;
  }
  return {};
}

// Polls, yielding the CPU between polls, for up to spin_ since the last completion; then sleeps in the
// transport's wait. Yielding matters when ranks outnumber cores (8 ranks on 2 cores): the peer we wait
// for gets the core at once, where a sleep would cost a wake-up chain (doorbell, progress thread,
// condition variable) per message. It is what MPI does when oversubscribed. Polling also keeps the shm
// transport's polling lease, so peers do not ring our doorbell while we poll.
template <typename Ready>
Result<void> Exchange::wait_until(Ready ready, int rank, const char* what) {
  waiting_for_ = rank;
  auto now = Clock::now();
  auto deadline = now + timeout_;
  auto spin_until = now + spin_;
  for (;;) {
    if (auto ok = check_abort(); !ok) return ok;
    if (ready()) return {};
    if (progress() > 0) {
      spin_until = Clock::now() + spin_;
      continue;
    }
    now = Clock::now();
    if (now < spin_until && now < deadline) {
      std::this_thread::yield();
      continue;
    }
    if (now >= deadline) return std::unexpected(timed_out(rank, what));
    if (auto ok = block_briefly(); !ok) return ok;
  }
}

Result<void> Exchange::send(int member, const void* data, std::size_t bytes) {
  int to = world_rank(member);
  Peer& p = peer(to);
  if (auto ok =
          wait_until([&] { return p.credits > 0 && p.sent - p.send_done < slots_; }, to, "a free slot at");
      !ok)
    return ok;
  std::size_t slot = p.sent % slots_;
  Segment segment = source_of(p, slot, data, bytes);
  RemoteAddress remote{p.remote.addr + slot * p.fabric->chunk, p.remote.rkey, p.remote.owner_epoch};
  WorkRequest request{.opcode = Opcode::WriteImm,
                      .local = std::span<const Segment>(&segment, bytes > 0 ? 1 : 0),
                      .remote = remote,
                      .imm = signature_};
  if (auto id = p.connection->post(std::span<const WorkRequest>(&request, 1)); !id)
    return std::unexpected(refused(p, "write", id.error()));
  ++p.sent;
  --p.credits;
  return {};
}

// Where a chunk's write reads from: the caller's memory in an InPlace scope that covers it, else the
// outbound slot it is copied into.
Segment Exchange::source_of(Peer& p, std::size_t slot, const void* data, std::size_t bytes) {
  auto length = static_cast<std::uint32_t>(bytes);
  if (in_place_ && in_place_->covers(data, bytes))
    if (auto lkey = in_place_->lkey(*p.fabric))
      return Segment{reinterpret_cast<std::uint64_t>(data), length, *lkey};
  std::byte* staging = p.outbound + slot * p.fabric->chunk;
  if (bytes > 0) std::memcpy(staging, data, bytes);
  return Segment{reinterpret_cast<std::uint64_t>(staging), length, p.outbound_lkey};
}

// After a failure: the closed connections complete (flush) what they still hold; waits for that, a
// bounded time, so that memory they might read stays registered until they are done.
void Exchange::quiesce() {
  auto idle = [&] {
    return std::all_of(peers_.begin(), peers_.end(), [](const Peer& p) { return p.send_done >= p.sent; });
  };
  auto deadline = Clock::now() + kNoticeLimit;
  while (!idle() && Clock::now() < deadline)
    if (progress() == 0) std::this_thread::yield();
}

Result<std::span<const std::byte>> Exchange::recv(int member) {
  int from = world_rank(member);
  Peer& p = peer(from);
  if (auto ok = wait_until([&] { return p.arrived > p.consumed; }, from, "data from"); !ok)
    return std::unexpected(ok.error());
  std::size_t slot = p.consumed % slots_;
  if (p.arrived_call[slot] != signature_) return std::unexpected(mismatched(from, p.arrived_call[slot]));
  return std::span<const std::byte>(p.inbound + slot * p.fabric->chunk, p.arrived_bytes[slot]);
}

Result<void> Exchange::release(int member) {
  Peer& p = peer(world_rank(member));
  ++p.consumed;
  if (++p.unreturned < std::max<std::uint32_t>(1, slots_ / 2)) return {};
  // The credits are unsignaled: nothing waits for their completion, and a failure still completes.
  WorkRequest credit{
      .opcode = Opcode::Send, .local = {}, .imm = p.unreturned, .with_imm = true, .signaled = false};
  p.unreturned = 0;
  if (auto id = p.connection->post(std::span<const WorkRequest>(&credit, 1)); !id)
    return std::unexpected(refused(p, "credit", id.error()));
  return {};
}

Result<void> Exchange::flush() {
  for (Peer& p : peers_) {
    if (!p.connection) continue;
    if (auto ok = wait_until([&] { return p.send_done == p.sent; }, p.rank, "write completions to"); !ok)
      return ok;
  }
  return {};
}

}  // namespace rdmakit::coll::detail
