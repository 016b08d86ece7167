#include "core/key_source.hpp"

#include <sys/random.h>

#include <cerrno>

namespace rdmakit {

std::size_t IssuedKeys::slot_of(std::uint32_t key) const noexcept {
  // Keys are uniformly random already; the multiply only spreads hand-made test keys (1, 2, 3, ...).
  return static_cast<std::size_t>((std::uint64_t{key} * 0x9e3779b97f4a7c15ull) >> 32) & (slots_.size() - 1);
}

bool IssuedKeys::contains(std::uint32_t key) const noexcept {
  if (slots_.empty()) return false;
  for (std::size_t i = slot_of(key);; i = (i + 1) & (slots_.size() - 1)) {
    if (slots_[i] == key) return true;
    if (slots_[i] == 0) return false;
  }
}

void IssuedKeys::insert(std::uint32_t key) {
  if (2 * (size_ + 1) > slots_.size()) grow();  // load stays at most 1/2: probes stay short
  std::size_t i = slot_of(key);
  while (slots_[i] != 0) i = (i + 1) & (slots_.size() - 1);
  slots_[i] = key;
  ++size_;
}

void IssuedKeys::grow() {
  std::vector<std::uint32_t> old = std::move(slots_);
  slots_.assign(old.empty() ? 64 : 2 * old.size(), 0);
  for (std::uint32_t key : old) {
    if (key == 0) continue;
    std::size_t i = slot_of(key);
    while (slots_[i] != 0) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = key;
  }
}

Result<std::uint32_t> KeySource::draw() {
  if (pool_left_ == 0) {
    std::size_t got = 0;
    auto* out = reinterpret_cast<unsigned char*>(pool_);
    while (got < sizeof(pool_)) {
      ssize_t n = getrandom(out + got, sizeof(pool_) - got, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail_errno("memory key: getrandom", errno);
      got += static_cast<std::size_t>(n);
    }
    pool_left_ = sizeof(pool_) / sizeof(pool_[0]);
  }
  std::uint32_t key = pool_[--pool_left_];
  pool_[pool_left_] = 0;  // a key handed out does not linger in the pool
  return key;
}

Result<std::uint32_t> KeySource::next() { return next(0, 0); }

Result<std::uint32_t> KeySource::next(std::uint32_t mask, std::uint32_t bits) {
  if (issued_.size() >= kMaxIssued)
    return fail(Errc::ResourceExhausted,
                "memory key: this context issued " + std::to_string(kMaxIssued) +
                    " keys, the most one context issues in its life; open a new context");
  // With every bit free a fresh key comes at the first draw all but once in 256 (kMaxIssued); with bits
  // fixed, the free ones (18 on shm) still leave far more fresh keys than one pattern is ever asked for.
  constexpr int kMaxDraws = 1024;
  for (int attempt = 0; attempt < kMaxDraws; ++attempt) {
    auto drawn = draw();
    if (!drawn) return drawn;
    std::uint32_t key = (*drawn & ~mask) | (bits & mask);
    if (key == 0 || issued_.contains(key)) continue;  // 0 is no key; an issued key is never reused
    issued_.insert(key);
    return key;
  }
  return fail(Errc::ResourceExhausted, "memory key: no fresh key left for this registration slot");
}

}  // namespace rdmakit
