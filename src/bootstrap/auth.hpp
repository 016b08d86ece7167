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

// The per-user secret: 32 random bytes in a file only this uid can read, created on first use
// (<home>/.rdmakit/user-secret, or <private_dir::in_tmp()>/user-secret when the home directory is not ours
// to write: /tmp/rdmakit-<uid>, or a private fallback when another uid took that name). Every process of this
// uid reads the same one; a process of another uid cannot, so a proof of it shows "same user" across loopback
// TCP, where the kernel cannot tell the peer's uid. The file and its directory must be ours and closed to
// group and others, else this is an error naming the path.
Result<std::string> user_secret();
// The same in `directory` (which user_secret() picks; tests point it elsewhere).
Result<std::string> user_secret_in(const std::string& directory);

// Whether `host` (a name or numeric address, no port) is loopback: 127.0.0.0/8, ::1, "localhost".
bool is_loopback_host(std::string_view host);

// The key a service (`what`: "the replica server", ...) proves its peers with, given the host it binds or
// reaches: the job secret when one is set (`given` first, then RDMAKIT_JOB_SECRET); without one, the user
// secret when `host` is loopback; a non-loopback host without a job secret is an InvalidArgument error
// naming the options job_secret and insecure, unless insecure is set (then the public key, with a warning:
// anyone who reaches the address can join).
Result<std::string> service_secret(std::string_view host, std::string_view what, std::string_view given = {});

}  // namespace rdmakit::bootstrap::auth
