// Who does what in a hierarchical collective: the ranks that share this rank's host, and one leader per
// host. Plain data from the hosts the ranks reported at setup, tested without a transport.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace rdmakit::coll::detail {

struct HostGroups {
  std::vector<int> local;    // world ranks on this rank's host, ascending; local[0] leads the host
  std::vector<int> leaders;  // every host's leader (its lowest rank), ascending
  int largest_host = 0;      // ranks on the most populated host
};

// The hosts numbered densely in order of first appearance: host_of[r] is rank r's host.
std::vector<int> number_hosts(std::span<const std::string> hosts);

// The groups of `rank` given every rank's host number.
HostGroups host_groups(std::span<const int> host_of, int rank);

// A hierarchy changes anything only with several hosts of which one at least holds several ranks.
bool hierarchy_applies(const HostGroups& groups) noexcept;

}  // namespace rdmakit::coll::detail
