#include "coll/cost_model.hpp"

#include <cmath>

namespace rdmakit::coll::detail {
namespace {

int log2_floor(int n) noexcept {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

int log2_ceil(int n) noexcept {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// Ranks beyond the largest power of two hand their data to a partner first and get the result back.
double fold_cost(const LinkCost& link, int n, double bytes) noexcept {
  if ((n & (n - 1)) == 0) return 0;
  return 2 * link.alpha_us + 2 * bytes * link.beta_us + bytes * link.gamma_us;
}

}  // namespace

// alpha and beta are what the transport declares (Capabilities::message_cost_us, bandwidth_bytes_per_us,
// fitted by bench/coll/model.py: docs/allreduce-model.md); a transport that declares none gets tcp's
// figures. gamma is measured apart (a vectorized f32 add over cache-resident buffers, 15 GB/s): fitted with
// the rest, the noise made it 0.
LinkCost link_cost(const Capabilities& declared) noexcept {
  constexpr double kGamma = 1.0 / 15000;
  constexpr double kUndeclaredAlpha = 26, kUndeclaredBandwidth = 620;  // tcp across veth
  const bool has_cost = declared.message_cost_us > 0 && declared.bandwidth_bytes_per_us > 0;
  return LinkCost{.alpha_us = has_cost ? declared.message_cost_us : kUndeclaredAlpha,
                  .beta_us = 1.0 / (has_cost ? declared.bandwidth_bytes_per_us : kUndeclaredBandwidth),
                  .gamma_us = kGamma};
}

double ring_cost(const LinkCost& link, int n, double bytes) noexcept {
  if (n < 2) return 0;
  double share = static_cast<double>(n - 1) / n;
  return 2 * (n - 1) * link.alpha_us + 2 * share * bytes * link.beta_us + share * bytes * link.gamma_us;
}

double doubling_cost(const LinkCost& link, int n, double bytes) noexcept {
  if (n < 2) return 0;
  int steps = log2_floor(n);
  return fold_cost(link, n, bytes) + steps * (link.alpha_us + bytes * (link.beta_us + link.gamma_us));
}

double halving_cost(const LinkCost& link, int n, double bytes) noexcept {
  if (n < 2) return 0;
  int steps = log2_floor(n), p = 1 << steps;
  double share = static_cast<double>(p - 1) / p;
  return fold_cost(link, n, bytes) + 2 * steps * link.alpha_us + 2 * share * bytes * link.beta_us +
         share * bytes * link.gamma_us;
}

double flat_cost(Algorithm algorithm, const LinkCost& link, int n, double bytes) noexcept {
  if (algorithm == Algorithm::RecursiveDoubling) return doubling_cost(link, n, bytes);
  if (algorithm == Algorithm::HalvingDoubling) return halving_cost(link, n, bytes);
  return ring_cost(link, n, bytes);
}

double tree_reduce_cost(const LinkCost& link, int l, double bytes) noexcept {
  return log2_ceil(l) * (link.alpha_us + bytes * (link.beta_us + link.gamma_us));
}

double tree_broadcast_cost(const LinkCost& link, int l, double bytes) noexcept {
  return log2_ceil(l) * (link.alpha_us + bytes * link.beta_us);
}

double hierarchical_cost(const LinkCost& local, const LinkCost& network, int per_host, int hosts,
                         Algorithm among, double bytes) noexcept {
  return tree_reduce_cost(local, per_host, bytes) + flat_cost(among, network, hosts, bytes) +
         tree_broadcast_cost(local, per_host, bytes);
}

double flat_job_cost(Algorithm algorithm, const Topology& t, double bytes) noexcept {
  if (t.hosts <= 1) return flat_cost(algorithm, t.local, t.ranks, bytes);
  LinkCost shared = t.network;  // the host's link, divided among the ranks that cross it at once
  shared.beta_us *= t.per_host;
  if (algorithm == Algorithm::Ring) return ring_cost(t.contiguous ? t.network : shared, t.ranks, bytes);
  // Doubling steps at distance d < per_host stay inside a host (contiguous placement); the others cross.
  int steps = log2_floor(t.ranks), p = 1 << steps;
  double total = fold_cost(t.per_host > 1 ? t.local : t.network, t.ranks, bytes), block = bytes;
  for (int k = 0; k < steps; ++k) {
    // rd: the whole message at every step, distance 2^k; hd: halves, first at distance p/2.
    int distance = algorithm == Algorithm::RecursiveDoubling ? 1 << k : p >> (k + 1);
    const LinkCost& link = t.contiguous && distance < t.per_host ? t.local : shared;
    if (algorithm == Algorithm::RecursiveDoubling) {
      total += link.alpha_us + bytes * (link.beta_us + link.gamma_us);
    } else {
      block /= 2;  // reduce-scatter sends half of what it holds, the allgather mirrors it
      total += 2 * (link.alpha_us + block * link.beta_us) + block * link.gamma_us;
    }
  }
  return total;
}

AllreduceChoice choose_allreduce(const Topology& t, double bytes, Algorithm forced,
                                 Hierarchy hierarchy) noexcept {
  bool may_flat = hierarchy != Hierarchy::On;
  bool may_hier =
      hierarchy == Hierarchy::On || (hierarchy == Hierarchy::Auto && t.hosts > 1 && t.per_host > 1);
  AllreduceChoice best{.predicted_us = INFINITY};
  for (Algorithm a : {Algorithm::Ring, Algorithm::RecursiveDoubling, Algorithm::HalvingDoubling}) {
    if (forced != Algorithm::Auto && a != forced) continue;
    if (may_flat) {
      double cost = flat_job_cost(a, t, bytes);
      if (cost < best.predicted_us) best = AllreduceChoice{false, a, cost};
    }
    if (may_hier) {
      double cost = hierarchical_cost(t.local, t.network, t.per_host, t.hosts, a, bytes);
      if (cost < best.predicted_us) best = AllreduceChoice{true, a, cost};
    }
  }
  return best;
}

}  // namespace rdmakit::coll::detail
