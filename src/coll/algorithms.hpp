// The collective algorithms, written over Exchange's chunked send/recv. Each takes the same arguments on
// every rank and leaves the result in recv.
#pragma once

#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "coll/exchange.hpp"
#include "coll/hierarchy.hpp"
#include "coll/reduce.hpp"
#include "coll/schedule.hpp"
#include "rdmakit/coll/types.hpp"

namespace rdmakit::coll::detail {

class SharedArea;  // shared.hpp

struct Buffers {
  const std::byte* send;
  std::byte* recv;
  std::size_t count;  // elements (per rank where the collective says so)
  DataType type;
  ReduceOp op = ReduceOp::Sum;
};

Result<void> allreduce_ring(Exchange& ex, const Buffers& b);
Result<void> allreduce_doubling(Exchange& ex, const Buffers& b);
Result<void> allreduce_halving(Exchange& ex, const Buffers& b);
// One of the three above (Auto is not one).
Result<void> allreduce_flat(Exchange& ex, const Buffers& b, Algorithm algorithm);
// Reduce to each host's leader, `among_leaders` (ring, rd or hd) between the leaders, broadcast from
// each leader inside its host. Every rank passes its own groups of one consistent layout.
// `local`: this host's shared area (shared.hpp), which then carries the local stages; null: trees.
Result<void> allreduce_hierarchical(Exchange& ex, const Buffers& b, const HostGroups& groups,
                                    Algorithm among_leaders, SharedArea* local);
Result<void> reduce_tree(Exchange& ex, const Buffers& b, int root);
Result<void> broadcast_tree(Exchange& ex, const Buffers& b, int root);
Result<void> allgather_ring(Exchange& ex, const Buffers& b);
Result<void> reduce_scatter_ring(Exchange& ex, const Buffers& b);
Result<void> all_to_all_pairwise(Exchange& ex, const Buffers& b);
Result<void> barrier_dissemination(Exchange& ex);

// Streams `send_bytes` from `source` to rank `to` while receiving `recv_bytes` from rank `from`, chunk
// by chunk, interleaved so that both directions pipeline through the slots; sink(offset, data) consumes
// each received chunk before its slot is released. to/from -1: that direction is idle.
template <typename Sink>
Result<void> stream(Exchange& ex, int to, const std::byte* source, std::size_t send_bytes, int from,
                    std::size_t recv_bytes, std::size_t element, Sink&& sink) {
  // One step per direction: `to` and `from` may be reached through fabrics of different chunks.
  auto step_of = [&](int member) {
    return member < 0 ? element : std::max(element, ex.chunk(member) / element * element);
  };
  std::size_t send_step = step_of(to), recv_step = step_of(from);
  std::size_t sends = to < 0 ? 0 : std::max<std::size_t>(1, (send_bytes + send_step - 1) / send_step);
  std::size_t recvs = from < 0 ? 0 : std::max<std::size_t>(1, (recv_bytes + recv_step - 1) / recv_step);
  for (std::size_t i = 0; i < std::max(sends, recvs); ++i) {
    std::size_t offset = i * send_step;
    if (i < sends)
      if (auto ok =
              ex.send(to, source + offset, std::min(send_step, send_bytes - std::min(offset, send_bytes)));
          !ok)
        return ok;
    offset = i * recv_step;
    if (i < recvs) {
      auto data = ex.recv(from);
      if (!data) return std::unexpected(data.error());
      std::size_t expected = std::min(recv_step, recv_bytes - std::min(offset, recv_bytes));
      if (data->size() != expected)
        return std::unexpected(
            ex.fail_all(Error(Errc::ProtocolError,
                              "rank " + std::to_string(ex.world_rank(ex.rank())) + ": rank " +
                                  std::to_string(ex.world_rank(from)) + " sent " +
                                  std::to_string(data->size()) + " bytes where " + std::to_string(expected) +
                                  " were expected (were the collectives issued in the same "
                                  "order with the same counts on every rank?)")));
      sink(offset, *data);
      if (auto ok = ex.release(from); !ok) return ok;
    }
  }
  return {};
}

// Avg over f16/bf16 (averages_in_f32()): `run` is the collective over f32 copies of the inputs with Sum,
// so the partial sums travel and accumulate in f32 (twice the bytes of the 16-bit data), and each element
// of the result is divided and rounded once. The mean is the correctly rounded one whenever the f32 sum
// is exact: when an element's n values span at most 24 - p - ceil(log2 n) binades (p = 8 bits for bf16,
// 11 for f16); otherwise the f32 additions round first. in_count/out_count: elements of send and recv.
template <typename Run>
Result<void> average16(const Buffers& b, std::size_t in_count, std::size_t out_count, int n, Run&& run) {
  std::vector<float> in(in_count), out(out_count);
  widen16(in.data(), b.send, in_count, b.type);
  Buffers wide{reinterpret_cast<const std::byte*>(in.data()), reinterpret_cast<std::byte*>(out.data()),
               b.count, DataType::F32, ReduceOp::Sum};
  if (auto ok = run(wide); !ok) return ok;
  narrow_average16(b.recv, out.data(), out_count, b.type, n);
  return {};
}

inline auto copy_into(std::byte* base) {
  return [base](std::size_t offset, std::span<const std::byte> data) {
    if (!data.empty()) std::memcpy(base + offset, data.data(), data.size());
  };
}

}  // namespace rdmakit::coll::detail
