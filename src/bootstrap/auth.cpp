#include "bootstrap/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "bootstrap/options.hpp"

namespace rdmakit::bootstrap::auth {
namespace {
// Used when a job has no secret: the MAC then binds the nonces and ranks but authenticates nothing.
constexpr std::string_view kPublicKey = "rdmakit: no job secret";
constexpr std::size_t kMinSecret = 16;
}  // namespace

Result<Nonce> fresh_nonce() {
  Nonce nonce;
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1)
    return fail(Errc::SystemError, "auth: RAND_bytes failed (no entropy for a nonce)");
  return nonce;
}

Mac mac(std::string_view secret, std::initializer_list<std::string_view> parts) {
  std::string message;
  for (std::string_view part : parts) {
    auto length = static_cast<std::uint32_t>(part.size());
    message.append(reinterpret_cast<const char*>(&length), sizeof(length));
    message.append(part);
  }
  std::string_view key = secret.empty() ? kPublicKey : secret;
  Mac out{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(), &length);
  return out;
}

bool verify(const Mac& expected, std::span<const std::uint8_t> received) noexcept {
  return received.size() == expected.size() &&
         CRYPTO_memcmp(expected.data(), received.data(), expected.size()) == 0;
}

Result<std::string> job_secret(std::string_view given) {
  if (!given.empty()) {
    if (given.size() < kMinSecret)
      return fail(Errc::InvalidArgument,
                  "option job_secret (RDMAKIT_JOB_SECRET): must be at least 16 characters");
    return std::string(given);
  }
  auto config = resolve_bootstrap_options();
  if (!config) return std::unexpected(config.error());
  return config->job_secret;
}

}  // namespace rdmakit::bootstrap::auth
