#include "coll/hierarchy.hpp"

#include <algorithm>
#include <map>

namespace rdmakit::coll::detail {

std::vector<int> number_hosts(std::span<const std::string> hosts) {
  std::map<std::string, int, std::less<>> numbers;
  std::vector<int> out;
  out.reserve(hosts.size());
  for (const std::string& host : hosts)
    out.push_back(numbers.try_emplace(host, static_cast<int>(numbers.size())).first->second);
  return out;
}

HostGroups host_groups(std::span<const int> host_of, int rank) {
  HostGroups groups;
  std::map<int, int> population;  // host -> ranks
  for (int r = 0; r < static_cast<int>(host_of.size()); ++r) {
    int host = host_of[static_cast<std::size_t>(r)];
    if (population[host]++ == 0) groups.leaders.push_back(r);  // ranks ascend: the first seen is the lowest
    if (host == host_of[static_cast<std::size_t>(rank)]) groups.local.push_back(r);
  }
  for (auto [host, count] : population) groups.largest_host = std::max(groups.largest_host, count);
  return groups;
}

bool hierarchy_applies(const HostGroups& groups) noexcept {
  return groups.leaders.size() > 1 && groups.largest_host > 1;
}

}  // namespace rdmakit::coll::detail
