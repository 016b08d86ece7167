// The data check of every run: the bytes a side sends are a pattern that depends on the message size,
// so a size that moved nothing (or stale bytes of the previous size) does not pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace rdmakit::perf {

void fill_pattern(void* data, std::size_t size, std::uint64_t seed);
// The first mismatching offset in [0, size), if any.
std::optional<std::size_t> find_mismatch(const void* data, std::size_t size, std::uint64_t seed);
// "" when the bytes match, else a sentence naming the first bad offset.
std::string check_pattern(const void* data, std::size_t size, std::uint64_t seed, const std::string& what);

}  // namespace rdmakit::perf
