// Memory keys for the software transports: each one drawn from the kernel's random source, never 0,
// never one this source has issued before. A peer that holds one key learns nothing about any other
// (sequential keys let it read a neighbour's region with key+1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "rdmakit/error.hpp"

namespace rdmakit {

// The keys issued so far, as an open-addressing hash set of 32-bit values (0 marks a free slot, and 0
// is never a key): 8 to 16 bytes per key, so a million registrations (two keys each) cost ~16-32 MiB.
class IssuedKeys {
 public:
  bool contains(std::uint32_t key) const noexcept;
  // Inserts a nonzero key that is not in the set yet.
  void insert(std::uint32_t key);
  std::size_t size() const noexcept { return size_; }

 private:
  std::size_t slot_of(std::uint32_t key) const noexcept;
  void grow();

  std::vector<std::uint32_t> slots_;
  std::size_t size_ = 0;
};

class KeySource {
 public:
  // The most keys one source issues in its life: the issued set stays below ~128 MiB, and a random
  // draw still finds a fresh key at the first try in all but 1 case of 256.
  static constexpr std::size_t kMaxIssued = std::size_t{1} << 24;

  // A fresh key; ResourceExhausted once kMaxIssued keys were issued, SystemError if getrandom fails.
  Result<std::uint32_t> next();
  // A fresh key whose bits under `mask` equal `bits` (shm: the low bits name the registration slot, so a
  // peer finds it without a search); the other bits are random. ResourceExhausted also when no fresh key
  // turned up in a bounded number of draws (every key of that pattern nearly used up).
  Result<std::uint32_t> next(std::uint32_t mask, std::uint32_t bits);
  std::size_t issued() const noexcept { return issued_.size(); }

 private:
  Result<std::uint32_t> draw();

  IssuedKeys issued_;
  // getrandom is called for 64 keys at a time: registration stays cheap without weakening the keys.
  std::uint32_t pool_[64] = {};
  std::size_t pool_left_ = 0;
};

}  // namespace rdmakit
