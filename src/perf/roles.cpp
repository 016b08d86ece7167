#include "perf/roles.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "perf/latency.hpp"
#include "perf/pattern.hpp"

namespace rdmakit::perf {
namespace {

// write_bw and read_bw: who initiates in this role (the client always, the server when bidirectional),
// and who is the target (the server always, the client when bidirectional).
bool initiates(Role role, bool bidirectional) { return role == Role::Client || bidirectional; }
bool targeted(Role role, bool bidirectional) { return role == Role::Server || bidirectional; }

std::string lane_name(std::size_t lane) { return "lane " + std::to_string(lane); }

// write_bw / read_bw walk positions_per_lane() message-sized positions of each area (--working-set): the
// initiator's source holds the pattern in each, the target's destination starts zeroed in each, and the
// check covers every position the run reached, so a run that kept reusing one slot fails it.
void fill_positions(std::uint8_t* area, std::uint64_t positions, std::uint64_t size) {
  for (std::uint64_t p = 0; p < positions; ++p) fill_pattern(area + p * size, size, size);
}

std::string check_positions(const std::uint8_t* area, std::uint64_t positions, std::uint64_t size,
                            const std::string& what) {
  for (std::uint64_t p = 0; p < positions; ++p) {
    auto problem = check_pattern(area + p * size, size, size, what);
    if (!problem.empty()) return positions > 1 ? problem + " (position " + std::to_string(p) + ")" : problem;
  }
  return {};
}

}  // namespace

void prepare_size(const Session& session, Test test, bool bidirectional, Role role, std::uint64_t size) {
  const std::uint64_t positions = positions_per_lane(session.working_set, size);
  for (std::size_t lane = 0; lane < session.data.size(); ++lane) {
    std::uint8_t* recv = session.recv_area(lane);
    std::uint8_t* send = session.send_area(lane);
    switch (test) {
      case Test::WriteBw:
      case Test::SendBw:
        if (targeted(role, bidirectional && test == Test::WriteBw)) std::memset(recv, 0, positions * size);
        if (initiates(role, bidirectional && test == Test::WriteBw)) fill_positions(send, positions, size);
        break;
      case Test::ReadBw:
        if (targeted(role, bidirectional)) fill_positions(recv, positions, size);
        if (initiates(role, bidirectional)) std::memset(send, 0, positions * size);
        break;
      case Test::WriteLat:
      case Test::SendLat:
        fill_pattern(send, size, size);
        std::memset(recv, 0, size);
        break;
      case Test::ReadLat:
        if (role == Role::Server)
          fill_pattern(recv, size, size);
        else
          std::memset(send, 0, size);
        break;
      case Test::AtomicLat:
        if (role == Role::Server)
          std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(recv)).store(0);
        break;
    }
  }
}

std::string verify_size(const Session& session, Test test, bool bidirectional, Role role, std::uint64_t size,
                        std::uint64_t count, std::uint64_t per_lane) {
  const std::uint64_t reached = std::min(positions_per_lane(session.working_set, size), per_lane);
  for (std::size_t lane = 0; lane < session.data.size(); ++lane) {
    const std::uint8_t* recv = session.recv_area(lane);
    const std::uint8_t* send = session.send_area(lane);
    std::string problem;
    switch (test) {
      case Test::WriteBw:
      case Test::SendBw:
        if (targeted(role, bidirectional && test == Test::WriteBw))
          problem = test == Test::SendBw
                        ? check_pattern(recv, size, size, lane_name(lane) + " received data")
                        : check_positions(recv, reached, size, lane_name(lane) + " received data");
        break;
      case Test::ReadBw:
        if (initiates(role, bidirectional))
          problem = check_positions(send, reached, size, lane_name(lane) + " READ data");
        break;
      case Test::WriteLat:
        problem = check_pattern(recv, size - 1, size, "write_lat received data");
        if (problem.empty() && recv[size - 1] != round_mark(count))
          problem = "write_lat: the last byte is " + std::to_string(recv[size - 1]) + ", not round " +
                    std::to_string(count) + "'s mark";
        break;
      case Test::SendLat:
        problem = check_pattern(recv, size, size, "send_lat received data");
        break;
      case Test::ReadLat:
        if (role == Role::Client) problem = check_pattern(send, size, size, "read_lat READ data");
        break;
      case Test::AtomicLat:
        if (role == Role::Server) {
          auto word = std::atomic_ref<std::uint64_t>(
                          *reinterpret_cast<std::uint64_t*>(const_cast<std::uint8_t*>(recv)))
                          .load();
          if (word != count)
            problem = "atomic_lat: the counter is " + std::to_string(word) + " after " +
                      std::to_string(count) + " fetch_adds";
        }
        break;
    }
    if (!problem.empty()) return problem;
  }
  return {};
}

}  // namespace rdmakit::perf
