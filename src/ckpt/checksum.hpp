// The per-chunk checksum: a 64-bit multiply-rotate hash over 8-byte words in four independent lanes.
//
// Not cryptographic: it detects torn writes, truncation and flipped bits, not an adversary. Four lanes
// keep four multiplies in flight, so it runs at several GB/s per core (unit_ckpt_checksum prints the rate),
// well above what the disk writes. Every step applied to a lane (add, rotate, multiply by an odd constant)
// is a bijection of the lane, so one changed word always changes that lane's state.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rdmakit::ckpt {

std::uint64_t checksum64(const void* data, std::size_t size, std::uint64_t seed = 0) noexcept;

}  // namespace rdmakit::ckpt
