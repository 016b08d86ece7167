// Identities and epochs of contexts.
#pragma once

#include <cstdint>
#include <string_view>

namespace rdmakit::identity {

std::uint64_t hash_name(std::string_view name) noexcept;
// A random nonzero number, new for each context: descriptors of an earlier life never match it.
std::uint64_t new_epoch() noexcept;

}  // namespace rdmakit::identity
