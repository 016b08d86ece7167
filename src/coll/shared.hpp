// Allreduce through memory that every rank of one host maps (shm's Connection::map_remote), as vader's
// and DeepSpeed's shared-memory paths do: no staging slots, no messages, two barriers per round.
//
// Each rank owns an area in its shm context's arena: a control block and two buffers of `round` bytes.
// A message moves in rounds of at most `round` bytes, split into one slice per rank:
//   1. every rank copies its input, except its own slice, into its current buffer;
//   2. barrier;
//   3. rank r reduces slice r straight from the peers' buffers and its own input (loads through the
//      mapping, in blocks that stay in L1), writes it to its result and to slice r of its own buffer;
//   4. barrier;
//   5. every rank copies the other slices of the result out of their owners' buffers.
// The next round uses the other buffer: a rank writes it only after the first barrier of the round in
// between, which every rank passed only after its copy-out from that buffer ended. So two barriers per
// round and none at the end; the buffer parity carries over to the next call. The same holds for reduce
// (the copy-out at the root only) and broadcast (the root's copy-in, one barrier, the others' copy-out):
// every round has a barrier, and every read of a round ends before its reader enters the next round.
// On one host the area serves the whole job's allreduce, reduce and broadcast; on several, the local
// stages of the hierarchical allreduce (its group is then the host's ranks).
//
// Against the ring over staging slots (2(n-1) dependent steps, each a copy into a slot, a copy into the
// peer and a reduce) this touches each byte about 4 times instead of ~6.5 and waits on n-1 fewer
// partners per step: with 8 ranks on 2 cores every dependent step costs the scheduler a round trip.
//
// Barriers: a counter and a generation in the group's first rank's area. Waiters spin (yielding the CPU,
// as wait_until does) for the communicator's spin time, then sleep on the generation with a futex; the
// last arriver wakes them only when someone sleeps. While waiting they keep the Exchange's progress
// going, so a peer's death or failure notice ends the wait, and after the timeout the Exchange's
// diagnosis names the rank that did not arrive.
//
// Arguments: each call, every rank stores its call's signature (signature.hpp) in its own control block,
// in one of two words by the parity of its calls, and after the first barrier compares every peer's with
// its own: a peer with another count, type or operator fails the call on every rank at that barrier. The
// word a call writes was last read two calls ago, before its readers entered the barrier of the call in
// between; every call has at least one barrier (an empty one too), so no read can see the next write.
// A member that runs a staged collective instead (or closes its communicator) never arrives; the chunks
// it sends meanwhile carry its call, and a waiting rank that finds one fails the call (foreign()).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "coll/algorithms.hpp"
#include "coll/exchange.hpp"

namespace rdmakit::coll::detail {

// Bytes per round of the shared allreduce (each rank's area holds two rounds). bench/coll: 256 KiB to
// 4 MiB were within the noise of each other at 1-64 MiB on 2 and 8 ranks; 512 KiB was best by a little.
constexpr std::size_t kSharedRoundBytes = 512 << 10;

class SharedArea {
 public:
  // Collective over the Exchange's current group (every rank calls it, in the same collective): each rank
  // allocates its area and maps every peer's. Null on every rank when any rank cannot (a peer not over
  // shm, an allocation that failed): the ranks agree, so they all take the same path afterwards. An
  // error only when the Exchange failed.
  static Result<std::unique_ptr<SharedArea>> create(Exchange& ex, std::size_t round_bytes);
  ~SharedArea();

  // Same arguments on every rank of the group the area was created for (with that group in scope), as
  // the staged algorithms take them. reduce writes recv at `root` only; broadcast reads send at `root`
  // only. reduce is the allreduce's rounds with the copy-out at the root alone; a broadcast round is the
  // root's copy-in, one barrier and everyone's copy-out.
  Result<void> allreduce(Exchange& ex, const Buffers& b);
  Result<void> reduce(Exchange& ex, const Buffers& b, int root);
  Result<void> broadcast(Exchange& ex, const Buffers& b, int root);
  std::size_t round_bytes() const noexcept { return round_; }

 private:
  struct Control;
  SharedArea(std::shared_ptr<MemoryRegion> mine, std::vector<std::byte*> areas, int rank, std::size_t round);
  Control& control(int member) const noexcept;
  std::byte* buffer(int member, int parity) const noexcept;
  Result<void> barrier(Exchange& ex);
  template <typename Done>
  Result<void> foreign(Exchange& ex, const Done& done) const;
  // Publishes this call's signature; the word agree() compares after the first barrier.
  int announce(const Exchange& ex);
  Result<void> agree(Exchange& ex, int word) const;
  template <typename Round>
  Result<void> in_rounds(const Buffers& b, Round&& round);
  // `check`: the signature word to compare after the round's first barrier (-1: none, a later round).
  Result<void> reduce_round(Exchange& ex, const Buffers& b, std::size_t first, std::size_t count, int root,
                            int check);
  Result<void> broadcast_round(Exchange& ex, const Buffers& b, std::size_t first, std::size_t count, int root,
                               int check);
  void reduce_slice(const Buffers& b, std::size_t first, Block slice, int parity, std::byte* result,
                    bool streaming);

  std::shared_ptr<MemoryRegion> mine_;  // this rank's area (kept alive while peers map it)
  std::vector<std::byte*> areas_;       // by group rank: where this process reaches each rank's area
  int rank_;
  int size_;
  std::size_t round_;
  int parity_ = 0;                  // the buffer the next round writes
  std::uint32_t barriers_ = 0;      // barriers passed (the generation this rank waits for is barriers_ + 1)
  std::uint32_t calls_ = 0;         // calls made (the parity picks the signature word)
  std::vector<std::byte> scratch_;  // one block of partial results
};

}  // namespace rdmakit::coll::detail
