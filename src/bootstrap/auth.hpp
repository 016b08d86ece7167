// The job secret and the proofs of it (HMAC-SHA256 from OpenSSL's libcrypto; nothing hand-rolled).
// A job's processes share a secret (RDMAKIT_JOB_SECRET, option job_secret); store clients and collective
// connections prove they know it by a MAC over fresh nonces from both sides, so the secret itself never
// travels and a recorded proof is worth nothing later. Without a secret the same code runs with a public
// key: it then proves nothing, which is why the store binds loopback only in that case.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "rdmakit/error.hpp"

namespace rdmakit::bootstrap::auth {

constexpr std::size_t kNonceSize = 32;
constexpr std::size_t kMacSize = 32;
using Nonce = std::array<std::uint8_t, kNonceSize>;
using Mac = std::array<std::uint8_t, kMacSize>;

// A fresh random nonce (RAND_bytes).
Result<Nonce> fresh_nonce();

// HMAC-SHA256 keyed by `secret` over the parts, each prefixed with its length (so no two different lists
// of parts give the same message). An empty secret uses a fixed public key.
Mac mac(std::string_view secret, std::initializer_list<std::string_view> parts);

// Constant-time comparison of a received MAC (CRYPTO_memcmp).
bool verify(const Mac& expected, std::span<const std::uint8_t> received) noexcept;

inline std::string_view bytes(const Nonce& n) { return {reinterpret_cast<const char*>(n.data()), n.size()}; }

// The job secret from the option table (RDMAKIT_JOB_SECRET) unless `given` is non-empty; an error
// naming the option when it is too short.
Result<std::string> job_secret(std::string_view given = {});

}  // namespace rdmakit::bootstrap::auth
