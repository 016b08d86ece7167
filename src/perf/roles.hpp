// What each side puts in its buffers before a size and checks after it. The data a side sends is the
// size-seeded pattern; what it receives starts zeroed, so a transfer that moved nothing fails the check.
#pragma once

#include <cstdint>
#include <string>

#include "perf/params.hpp"
#include "perf/session.hpp"

namespace rdmakit::perf {

enum class Role : std::uint8_t { Client, Server };

void prepare_size(const Session& session, Test test, bool bidirectional, Role role, std::uint64_t size);
// "" when this side's bytes are right after `count` operations (rounds), else what is wrong. `per_lane`:
// the operations every connection made at least in one walk (the warm-up and the timed run each start at
// the first position): a working set's positions up to there are checked.
std::string verify_size(const Session& session, Test test, bool bidirectional, Role role, std::uint64_t size,
                        std::uint64_t count, std::uint64_t per_lane);

}  // namespace rdmakit::perf
