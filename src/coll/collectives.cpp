// The collectives other than allreduce: binomial trees for reduce and broadcast (pipelined by chunks),
// rings for allgather and reduce-scatter, pairwise exchange for all-to-all, dissemination for barrier.
#include <vector>

#include "coll/algorithms.hpp"
#include "coll/reduce.hpp"

namespace rdmakit::coll::detail {

Result<void> reduce_tree(Exchange& ex, const Buffers& b, int root) {
  TreeNode node = binomial_tree(ex.rank(), ex.size(), root);
  std::size_t e = size_of(b.type), bytes = b.count * e;
  std::vector<std::byte> acc(std::min(bytes, ex.chunk()) + e);
  for (const Block& c : chunks(bytes, ex.chunk(), e)) {
    std::memcpy(acc.data(), b.send + c.offset, c.count);
    for (int child : node.children) {
      auto data = ex.recv(child);
      if (!data) return std::unexpected(data.error());
      if (data->size() != c.count)
        return std::unexpected(
            ex.fail_all(Error(Errc::ProtocolError, "reduce: rank " + std::to_string(ex.world_rank(child)) +
                                                       " sent a chunk of another size")));
      reduce(acc.data(), acc.data(), data->data(), c.count / e, b.type, b.op);
      if (auto ok = ex.release(child); !ok) return ok;
    }
    if (node.parent >= 0) {
      if (auto ok = ex.send(node.parent, acc.data(), c.count); !ok) return ok;
    } else {
      if (b.op == ReduceOp::Avg) finish_average(acc.data(), c.count / e, b.type, ex.size());
      std::memcpy(b.recv + c.offset, acc.data(), c.count);
    }
  }
  return {};
}

Result<void> broadcast_tree(Exchange& ex, const Buffers& b, int root) {
  TreeNode node = binomial_tree(ex.rank(), ex.size(), root);
  std::size_t e = size_of(b.type), bytes = b.count * e;
  if (ex.rank() == root && b.send != b.recv && bytes > 0) std::memmove(b.recv, b.send, bytes);
  for (const Block& c : chunks(bytes, ex.chunk(), e)) {
    if (node.parent >= 0) {
      auto data = ex.recv(node.parent);
      if (!data) return std::unexpected(data.error());
      if (data->size() != c.count)
        return std::unexpected(ex.fail_all(
            Error(Errc::ProtocolError, "broadcast: rank " + std::to_string(ex.world_rank(node.parent)) +
                                           " sent a chunk of another size")));
      if (c.count > 0) std::memcpy(b.recv + c.offset, data->data(), c.count);
      if (auto ok = ex.release(node.parent); !ok) return ok;
    }
    for (int child : node.children)
      if (auto ok = ex.send(child, b.recv + c.offset, c.count); !ok) return ok;
  }
  return {};
}

Result<void> allgather_ring(Exchange& ex, const Buffers& b) {
  int n = ex.size(), r = ex.rank();
  std::size_t block = b.count * size_of(b.type);
  std::byte* mine = b.recv + static_cast<std::size_t>(r) * block;
  if (b.send != mine && block > 0) std::memmove(mine, b.send, block);
  for (int s = 0; s < n - 1; ++s) {
    RingStep st = ring_allgather_step(r, n, s);
    if (auto ok = stream(ex, (r + 1) % n, b.recv + static_cast<std::size_t>(st.send_block) * block, block,
                         (r - 1 + n) % n, block, size_of(b.type),
                         copy_into(b.recv + static_cast<std::size_t>(st.recv_block) * block));
        !ok)
      return ok;
  }
  return {};
}

// After step s the reduced block of that step sits in `acc`; it is what step s+1 sends. The last step
// reduces straight into recv (which may be this rank's own block of send: in-place).
Result<void> reduce_scatter_ring(Exchange& ex, const Buffers& b) {
  int n = ex.size(), r = ex.rank();
  std::size_t e = size_of(b.type), block = b.count * e;
  if (n == 1) {
    if (b.send != b.recv && block > 0) std::memmove(b.recv, b.send, block);
  }
  std::vector<std::byte> acc(n > 1 ? block : 0);
  for (int s = 0; s < n - 1; ++s) {
    RingStep st = ring_reduce_scatter_step(r, n, s);
    const std::byte* source = s == 0 ? b.send + static_cast<std::size_t>(st.send_block) * block : acc.data();
    const std::byte* input = b.send + static_cast<std::size_t>(st.recv_block) * block;
    std::byte* target = s == n - 2 ? b.recv : acc.data();
    if (auto ok = stream(ex, (r + 1) % n, source, block, (r - 1 + n) % n, block, e,
                         [&](std::size_t offset, std::span<const std::byte> data) {
                           reduce(target + offset, input + offset, data.data(), data.size() / e, b.type,
                                  b.op);
                         });
        !ok)
      return ok;
  }
  if (b.op == ReduceOp::Avg) finish_average(b.recv, b.count, b.type, n);
  return {};
}

Result<void> all_to_all_pairwise(Exchange& ex, const Buffers& b) {
  int n = ex.size(), r = ex.rank();
  std::size_t block = b.count * size_of(b.type);
  std::vector<std::byte> copy;
  const std::byte* send = b.send;
  if (send == b.recv && n > 1) {  // in-place: blocks would be overwritten before they are sent
    copy.assign(send, send + block * static_cast<std::size_t>(n));
    send = copy.data();
  }
  if (send != b.recv && block > 0)
    std::memmove(b.recv + static_cast<std::size_t>(r) * block, send + static_cast<std::size_t>(r) * block,
                 block);
  for (int k = 1; k < n; ++k) {
    int to = (r + k) % n, from = (r - k + n) % n;
    if (auto ok = stream(ex, to, send + static_cast<std::size_t>(to) * block, block, from, block,
                         size_of(b.type), copy_into(b.recv + static_cast<std::size_t>(from) * block));
        !ok)
      return ok;
  }
  return {};
}

Result<void> barrier_dissemination(Exchange& ex) {
  int n = ex.size(), r = ex.rank();
  for (int k = 1; k < n; k <<= 1)
    if (auto ok = stream(ex, (r + k) % n, nullptr, 0, (r - k + n) % n, 0, 1, copy_into(nullptr)); !ok)
      return ok;
  return {};
}

}  // namespace rdmakit::coll::detail
