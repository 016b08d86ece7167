// Hierarchical allreduce, for jobs whose hosts hold several ranks. With n ranks on h hosts, a flat ring
// takes 2(n-1) latency steps and crosses the network at least 2(n-1)/n of the message per host (ranks
// numbered host by host; l times that when placement interleaves hosts); the leaders' allreduce takes the
// steps of h ranks and sends 2(h-1)/h of it per host, and the local stages (one reduce, one broadcast)
// run over shm, which moves a byte at a fraction of a tcp byte's CPU cost.
#include "coll/algorithms.hpp"
#include "coll/reduce.hpp"
#include "coll/shared.hpp"

namespace rdmakit::coll::detail {

Result<void> allreduce_flat(Exchange& ex, const Buffers& b, Algorithm algorithm) {
  if (algorithm == Algorithm::RecursiveDoubling) return allreduce_doubling(ex, b);
  if (algorithm == Algorithm::HalvingDoubling) return allreduce_halving(ex, b);
  return allreduce_ring(ex, b);
}

Result<void> allreduce_hierarchical(Exchange& ex, const Buffers& b, const HostGroups& groups,
                                    Algorithm among_leaders, SharedArea* local) {
  int world = ex.size();
  bool leader = groups.local.front() == ex.rank();
  // Avg is a sum until the very end, divided once by the world's size (not by each stage's group).
  ReduceOp op = b.op == ReduceOp::Avg ? ReduceOp::Sum : b.op;
  Buffers whole{b.recv, b.recv, b.count, b.type, op};
  {
    Exchange::Subgroup host(ex, groups.local);
    Buffers mine{b.send, b.recv, b.count, b.type, op};
    if (auto ok = local ? local->reduce(ex, mine, 0) : reduce_tree(ex, mine, 0); !ok) return ok;
  }
  if (leader) {
    Exchange::Subgroup leaders(ex, groups.leaders);
    if (auto ok = allreduce_flat(ex, whole, among_leaders); !ok) return ok;
    if (b.op == ReduceOp::Avg) finish_average(b.recv, b.count, b.type, world);
  }
  Exchange::Subgroup host(ex, groups.local);
  return local ? local->broadcast(ex, whole, 0) : broadcast_tree(ex, whole, 0);
}

}  // namespace rdmakit::coll::detail
