// What every rdmakit test program shares: a watchdog (a hang is a failure with a message, not a CI
// time-out) and a log sink that fails the running test on a warning it did not declare.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace rdmakit::testing {

// Declares that the running test expects log warnings whose text contains `fragment`.
void expect_warning(std::string fragment);
// Number of warnings logged so far in the running test.
std::size_t warnings_seen();

// Fills `size` bytes with a pattern that depends on `seed` and the position, and checks it.
void fill_pattern(void* data, std::size_t size, std::uint32_t seed);
// Index of the first byte that differs from the pattern, or `size` when all match.
std::size_t find_pattern_mismatch(const void* data, std::size_t size, std::uint32_t seed);

// The number of rounds of a repeated (randomized or exhaustive) test: `count` scaled by
// $RDMAKIT_TEST_REPEAT_SCALE (0 < scale <= 1, default 1), never below `minimum`. The sanitizer stages of
// scripts/test.sh set 0.25: they look for memory errors and races in the code the rounds run, which a
// quarter of the rounds reaches as well as all of them; the normal build runs every round.
int scaled_repeats(int count, int minimum = 1);
// The scale itself (1 when unset or invalid).
double repeat_scale();

}  // namespace rdmakit::testing
