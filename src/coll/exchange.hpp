// The point-to-point layer the collective algorithms are written in: send a chunk to a rank, receive the
// next chunk from a rank, release it. Underneath, per pair of ranks:
//  * the receiver registered, at creation, `slots` staging slots of `chunk` bytes for each peer;
//  * send() copies the chunk into a local registered outbound slot and WRITEs it with immediate into
//    the next slot at the receiver: the write-with-immediate is the "data arrived" signal;
//  * release() hands slots back with a zero-byte SEND whose immediate is the number of credits, once
//    half the slots (at least one) were consumed: half the messages of one credit each, and safe because
//    a receiver consumes in order, so a sender waiting for a credit waits for at most slots/2 chunks the
//    receiver already holds (with slots >= 2 the sender may always have one chunk in flight);
//  * a sender holds at most `slots` unreleased chunks per peer (credits), so no slot is overwritten
//    before it was consumed and no receive queue can run dry;
//  * inside an InPlace scope, a chunk that lies in the scope's (caller) memory is written straight from
//    there, registered once per collective, instead of being copied into the outbound slot first: one
//    pass over memory per sent byte less, on top of the kernel's two (bench/RESULTS.md, "netns ring").
//  * every data write's immediate is the signature of the call that sent it (signature.hpp); recv()
//    fails the collective on every rank, naming both calls, when it is not this rank's call's;
// A failure names the rank to blame, agreed between the survivors (diagnosis.hpp): a timeout asks the
// peers what they wait for, and a failing rank tells its peers whom it blames before it closes.
// One thread drives an Exchange at a time (the communicator's executing thread): no locks inside.
// A Subgroup renumbers it for a part of the world (the ranks of one host, the hosts' leaders), so the
// same algorithms run inside a host and between hosts; failures and diagnosis keep naming world ranks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "coll/diagnosis.hpp"
#include "coll/signature.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit::coll::detail {

// One transport context and what lives in it: a completion queue shared by all its connections (send
// and receive), the listener, the staging regions.
struct Fabric {
  std::string name;  // "tcp", "shm", ...
  std::shared_ptr<Context> context;
  std::shared_ptr<CompletionQueue> cq;
  std::shared_ptr<Listener> listener;
  std::shared_ptr<MemoryRegion> inbound;   // peers write here: slots per peer
  std::shared_ptr<MemoryRegion> outbound;  // local source of writes: slots per peer
  std::size_t chunk = 0;                   // slot size and pipeline unit here (Exchange::chunk_for)
  std::vector<int> peers;                  // ranks reached through this fabric, ascending
  std::unordered_map<std::uint32_t, int> rank_of_connection;
};

struct Peer {
  int rank = -1;
  Fabric* fabric = nullptr;
  std::shared_ptr<Connection> connection;
  RemoteAddress remote;          // this rank's first slot at the peer
  std::byte* inbound = nullptr;  // the peer's first slot here
  std::byte* outbound = nullptr;
  std::uint32_t outbound_lkey = 0;
  std::uint32_t credits = 0;     // free slots at the peer
  std::uint32_t unreturned = 0;  // slots of the peer's consumed here whose credit is not sent yet
  std::uint64_t sent = 0, send_done = 0;
  std::uint64_t arrived = 0, consumed = 0;
  std::vector<std::uint32_t> arrived_bytes;  // by slot
  std::vector<std::uint32_t> arrived_call;   // by slot: the sender's call signature (signature.hpp)
};

class Exchange {
 public:
  // `chunk`: every fabric's chunk; unset: chosen per fabric by chunk_for().
  Exchange(int rank, int size, std::optional<std::size_t> chunk, std::uint32_t slots,
           std::chrono::milliseconds timeout, std::chrono::microseconds spin);

  // This rank and the world's size, or its position in and the size of the Subgroup in scope.
  int rank() const noexcept { return members_.empty() ? rank_ : group_rank_; }
  int size() const noexcept { return members_.empty() ? size_ : static_cast<int>(members_.size()); }
  // The world rank of `rank` as rank() counts (for messages: a subgroup position means nothing to users).
  int world_rank(int rank) const noexcept {
    return members_.empty() ? rank : members_[static_cast<std::size_t>(rank)];
  }

  // While it lives, rank(), size() and the ranks given to send/recv/release count within `members`
  // (world ranks, ascending, this rank among them). Nests: the previous numbering comes back at the end.
  class Subgroup {
   public:
    Subgroup(Exchange& ex, std::vector<int> members);
    ~Subgroup();
    Subgroup(const Subgroup&) = delete;
    Subgroup& operator=(const Subgroup&) = delete;

   private:
    Exchange& ex_;
    std::vector<int> saved_members_;
    int saved_rank_;
  };
  // While it lives, send() writes a chunk that lies in [base, base + bytes) from there, without the copy
  // into a staging slot (the region is registered in a fabric when a send first goes through it). The
  // caller must leave that memory unchanged until settle() returned: a write may read it until it
  // completes. The end of the scope waits (bounded, after a failure) for every write to complete, so the
  // registrations go only when no transport reads the memory any more. Not nested.
  class InPlace {
   public:
    InPlace(Exchange& ex, std::byte* base, std::size_t bytes);
    ~InPlace();
    InPlace(const InPlace&) = delete;
    InPlace& operator=(const InPlace&) = delete;
    // Waits until every write sent so far completed: the memory may change again.
    Result<void> settle() { return ex_.flush(); }

   private:
    friend class Exchange;
    // The key of the region in `fabric`, registered on first use; none if it cannot be (send() copies).
    std::optional<std::uint32_t> lkey(Fabric& fabric);
    bool covers(const void* data, std::size_t bytes) const noexcept;

    Exchange& ex_;
    std::byte* base_;
    std::size_t bytes_;
    std::vector<std::pair<Fabric*, std::shared_ptr<MemoryRegion>>> regions_;
  };
  // The chunk of a fabric whose transport has `capabilities`: the configured one, else 512 KiB for a
  // same-host transport and 128 KiB for a network one. Across network namespaces (tcp over veth) 128 KiB
  // took a fifth less CPU than 512 KiB and ran the 4-64 MiB allreduce 1.2-1.9x faster; over shm the staged
  // allgather lost up to 23 % with it (bench/RESULTS.md, "netns ring").
  std::size_t chunk_for(const Capabilities& capabilities) const noexcept;
  // The pipeline unit of the link to `member` (a rank as rank() counts): both ends use the same.
  std::size_t chunk(int member) const noexcept {
    return peers_[static_cast<std::size_t>(world_rank(member))].fabric->chunk;
  }
  // The smallest fabric chunk (set by arm()): fits every slot; the same on every rank of a job, since
  // every rank has the network fabric when any has, and ranks alone on their host have nothing else.
  std::size_t chunk() const noexcept { return chunk_; }
  std::uint32_t slots() const noexcept { return slots_; }

  // Setup: the fabrics and one peer per other rank (filled in by mesh.cpp), then arm() posts receives.
  std::vector<std::unique_ptr<Fabric>>& fabrics() noexcept { return fabrics_; }
  Peer& peer(int rank) noexcept { return peers_[static_cast<std::size_t>(rank)]; }  // world rank
  Result<void> arm();

  // `bytes` <= chunk(). Returns once the data is copied out of `data`, or, inside an InPlace scope that
  // covers it, once the write from `data` is posted.
  Result<void> send(int to, const void* data, std::size_t bytes);
  // The next chunk from `from`, valid until release(from).
  Result<std::span<const std::byte>> recv(int from);
  Result<void> release(int from);
  // Waits until every chunk sent so far left this rank's outbound slots.
  Result<void> flush();

  // For waits outside send/recv (the shared-memory barrier, shared.hpp): one round of progress (answers
  // peers' probes with `waiting_for`, a world rank; learns of failures), then the sticky failure, if any.
  Result<void> poll(int waiting_for);
  // A wait for world rank `rank` ran out: asks the peers (probe), fails everything, names the culprit.
  Error stalled(int rank, const std::string& what) { return timed_out(rank, what); }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  std::chrono::microseconds spin() const noexcept { return spin_; }

  // The call every chunk sent from now on is stamped with, and every chunk received is checked against
  // (signature.hpp): set by the communicator before each collective runs.
  void begin(const Call& call) noexcept {
    call_ = call;
    signature_ = signature(call);
  }
  const Call& call() const noexcept { return call_; }
  std::uint32_t call_signature() const noexcept { return signature_; }
  // The signature of the next chunk from world rank `rank` that arrived and is not consumed yet, if any
  // (the shared-memory path, which receives no chunks, looks for a peer that runs another collective).
  std::optional<std::uint32_t> pending_call(int rank) const noexcept {
    const Peer& p = peers_[static_cast<std::size_t>(rank)];
    if (p.arrived == p.consumed) return std::nullopt;
    return p.arrived_call[p.consumed % slots_];
  }
  // A peer's chunk or shared-memory record carried `theirs`, not this call's: fails everything, naming
  // both calls; the peers are told who disagreed.
  Error mismatched(int peer, std::uint32_t theirs);

  // From any thread: the executing thread fails everything (the peers are told this rank aborts) at its
  // next wait, or the caller does it through check_abort() when nothing runs. Only the first reason counts.
  void request_abort(std::string reason);
  // On the executing thread: acts on a requested abort; the sticky failure, if any.
  Result<void> check_abort();

  // The sticky failure, if any.
  const std::optional<Error>& failure() const noexcept { return failure_; }
  // Records the first failure, tells the peers whom it blames (`culprit`, -1: none; `blame` the notice
  // kind) and closes every connection so they learn of it at once.
  Error fail_all(Error error, int culprit = -1, Control blame = Control::NoticeOther);

 private:
  template <typename Ready>
  Result<void> wait_until(Ready ready, int rank, const char* what);
  std::size_t progress();
  Result<void> block_briefly();
  void handle(Fabric& fabric, const Completion& completion);
  void on_broken(Peer& p, const Completion& completion);
  void on_control(Peer& p, ControlMessage message);
  bool send_control(Peer& p, Control kind, int rank, std::uint64_t* id = nullptr);
  void notify_peers(int culprit, Control blame);
  Verdict probe(int waiting_for);
  Error timed_out(int rank, const std::string& what);
  Error refused(Peer& p, const char* what, const Error& error);
  Segment source_of(Peer& p, std::size_t slot, const void* data, std::size_t bytes);
  void quiesce();

  int rank_, size_;
  std::vector<int> members_;  // the Subgroup in scope (world ranks); empty: the world
  int group_rank_ = 0;        // this rank's position in members_
  std::optional<std::size_t> configured_chunk_;
  std::size_t chunk_ = 0;
  std::uint32_t slots_;
  std::chrono::milliseconds timeout_;
  std::chrono::microseconds spin_;
  std::vector<std::unique_ptr<Fabric>> fabrics_;
  std::vector<Peer> peers_;
  std::optional<Error> failure_;
  bool armed_ = false;    // receives posted everywhere: control messages may be sent
  int waiting_for_ = -1;  // what a probe is answered with
  bool probing_ = false;
  std::vector<Answer> answers_;  // while probing, by rank
  InPlace* in_place_ = nullptr;  // the scope in force, if any
  Call call_{};
  std::uint32_t signature_ = signature(Call{});
  std::atomic<bool> abort_requested_{false};
  std::mutex abort_mutex_;  // guards abort_reason_, written by any thread once
  std::string abort_reason_;
};

}  // namespace rdmakit::coll::detail
