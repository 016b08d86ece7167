// An alpha-beta-gamma cost model of the allreduce algorithms, used to choose one at run time. A message of
// b bytes between two ranks costs alpha + b * beta on their link; reducing b bytes costs b * gamma. Each
// algorithm's time is the sum over its steps of the slowest pair's cost (docs/allreduce-model.md derives
// the formulas, and bench/coll/model.py fits the constants to measurements and checks them). Pure
// functions over plain data, tested without a transport.
#pragma once

#include <cstddef>

#include "rdmakit/coll/types.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit::coll::detail {

struct LinkCost {
  double alpha_us = 0;  // per message: posting, signalling, the peer's wake-up
  double beta_us = 0;   // per byte moved (1 / bandwidth in bytes per µs)
  double gamma_us = 0;  // per byte reduced
};

// A link's cost as its transport declares it (Capabilities::message_cost_us, bandwidth_bytes_per_us);
// a transport that declares none gets tcp's.
LinkCost link_cost(const Capabilities& declared) noexcept;

// Predicted µs of one allreduce of `bytes` over n ranks whose every step crosses `link`.
double ring_cost(const LinkCost& link, int n, double bytes) noexcept;
double doubling_cost(const LinkCost& link, int n, double bytes) noexcept;
double halving_cost(const LinkCost& link, int n, double bytes) noexcept;
double flat_cost(Algorithm algorithm, const LinkCost& link, int n, double bytes) noexcept;
// Binomial-tree reduce to (or broadcast from) one of `l` ranks, pipelined by chunks: the root handles
// ceil(log2 l) whole messages in turn.
double tree_reduce_cost(const LinkCost& link, int l, double bytes) noexcept;
double tree_broadcast_cost(const LinkCost& link, int l, double bytes) noexcept;
// A flat algorithm over a whole multi-host job: the ring runs at its slowest (network) link, and one
// host's network link carries every one of its ranks' bytes when a step sends them all off the host
// (rd/hd steps at distances >= per_host; every ring step when placement interleaves the hosts).
double flat_job_cost(Algorithm algorithm, const struct Topology& topology, double bytes) noexcept;
// Reduce on `local` links inside hosts of `per_host` ranks, `among` between `hosts` leaders over `network`,
// broadcast inside hosts.
double hierarchical_cost(const LinkCost& local, const LinkCost& network, int per_host, int hosts,
                         Algorithm among, double bytes) noexcept;

// The shape of a job as the model sees it.
struct Topology {
  int ranks = 1;
  int hosts = 1;
  int per_host = 1;        // ranks on the most populated host
  bool contiguous = true;  // each host's ranks are consecutive (the ring crosses a host boundary once)
  LinkCost local;          // between ranks of one host
  LinkCost network;        // between hosts
};

struct AllreduceChoice {
  bool hierarchical = false;
  Algorithm algorithm = Algorithm::Ring;  // flat, or among the leaders
  double predicted_us = 0;
};

// The cheapest plan for `bytes` on `topology`. `forced` (not Auto) fixes the algorithm (flat or among
// the leaders); `hierarchy` On/Off fixes whether it is hierarchical, Auto lets the model decide (only
// where several hosts hold several ranks; otherwise the hierarchy has nothing to save).
AllreduceChoice choose_allreduce(const Topology& topology, double bytes, Algorithm forced,
                                 Hierarchy hierarchy) noexcept;

}  // namespace rdmakit::coll::detail
