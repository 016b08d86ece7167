// The per-user secret (auth.hpp): the stand-in for a job secret on one host, so that a process of another
// uid can reach none of our loopback listeners even when the job set no secret.
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bootstrap/auth.hpp"
#include "bootstrap/options.hpp"
#include "core/fd.hpp"
#include "core/log.hpp"
#include "core/private_dir.hpp"

namespace rdmakit::bootstrap::auth {
namespace {

constexpr std::size_t kUserSecretBytes = 32;

Error file_error(const std::string& path, const std::string& what) {
  return Error(Errc::SystemError, "user secret " + path + ": " + what +
                                      " (set RDMAKIT_JOB_SECRET, or remove the file so a fresh one is made)");
}

// Reads the secret file, refusing one that another uid owns or could read or write.
Result<std::string> read_secret(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd)
    return fail(errno == ENOENT ? Errc::NotFound : Errc::SystemError,
                "user secret: open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return fail(Errc::SystemError, "user secret: stat " + path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid())
    return std::unexpected(file_error(path, "not a regular file of ours"));
  if ((st.st_mode & 077) != 0) return std::unexpected(file_error(path, "readable or writable by others"));
  std::array<char, kUserSecretBytes> bytes{};
  std::size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got != bytes.size()) return std::unexpected(file_error(path, "shorter than 32 bytes"));
  return std::string(bytes.data(), bytes.size());
}

// Writes a fresh secret under a temporary name, then links it into place: of two processes racing, the
// second's link fails with EEXIST and it reads the first's file, so every process ends with the same one.
Result<std::string> create_secret(const std::string& path) {
  auto nonce = fresh_nonce();
  if (!nonce) return std::unexpected(nonce.error());
  // A name no other process or thread uses (mkostemp: O_EXCL, mode 0600). It was path.tmp.<pid>, which
  // threads of one process (ranks as threads, first use on a fresh machine) shared: one unlinked the
  // other's file before its link, and that thread failed.
  std::string temporary = path + ".tmp.XXXXXX";
  {
    Fd fd(::mkostemp(temporary.data(), O_CLOEXEC));
    if (!fd) return fail(Errc::SystemError, "user secret: create " + temporary + ": " + std::strerror(errno));
    if (::write(fd.get(), nonce->data(), nonce->size()) != static_cast<ssize_t>(nonce->size()) ||
        ::fsync(fd.get()) != 0) {
      int saved = errno;
      ::unlink(temporary.c_str());
      return fail(Errc::SystemError, "user secret: write " + temporary + ": " + std::strerror(saved));
    }
  }
  int linked = ::link(temporary.c_str(), path.c_str());
  int saved = errno;
  ::unlink(temporary.c_str());
  if (linked != 0 && saved != EEXIST)
    return fail(Errc::SystemError, "user secret: link " + path + ": " + std::strerror(saved));
  return read_secret(path);
}

std::string home_directory() {
  // The password database, not $HOME: every process of the uid (launched by ssh, srun, a cron job) agrees.
  // getpwuid_r: ranks run as threads look this up at once, and getpwuid's static buffer is shared.
  std::vector<char> buffer(16384);
  passwd entry{};
  passwd* pw = nullptr;
  if (::getpwuid_r(::geteuid(), &entry, buffer.data(), buffer.size(), &pw) == 0 && pw && pw->pw_dir &&
      pw->pw_dir[0] == '/')
    return pw->pw_dir;
  return {};
}

}  // namespace

Result<std::string> user_secret_in(const std::string& directory) {
  if (auto ok = private_dir::ensure(directory); !ok)
    return std::unexpected(Error(ok.error().code(), "user secret: " + ok.error().message()));
  std::string path = directory + "/user-secret";
  auto existing = read_secret(path);
  if (existing || existing.error().code() != Errc::NotFound) return existing;
  return create_secret(path);
}

Result<std::string> user_secret() {
  std::string home = home_directory();
  if (!home.empty() && ::access(home.c_str(), W_OK) == 0) return user_secret_in(home + "/.rdmakit");
  // The same directory the shm listeners use, with its fallback when another uid took /tmp/rdmakit-<uid>.
  auto tmp = private_dir::in_tmp();
  if (!tmp) return std::unexpected(Error(tmp.error().code(), "user secret: " + tmp.error().message()));
  return user_secret_in(*tmp);
}

bool is_loopback_host(std::string_view host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

Result<std::string> service_secret(std::string_view host, std::string_view what, std::string_view given) {
  auto secret = job_secret(given);
  if (!secret || !secret->empty()) return secret;
  if (is_loopback_host(host)) return user_secret();
  auto config = resolve_bootstrap_options();
  if (!config) return std::unexpected(config.error());
  if (!config->insecure)
    return fail(Errc::InvalidArgument,
                std::string(what) + " at " + std::string(host) +
                    " would be reachable beyond this host without a job secret: set option job_secret "
                    "(RDMAKIT_JOB_SECRET, the same on every process), bind loopback, or set option insecure "
                    "(RDMAKIT_INSECURE=1) to accept that anyone who reaches it can join");
  log::warn("bootstrap", std::string(what) + " at " + std::string(host) +
                             " is UNAUTHENTICATED (insecure is set and there is no job secret): anyone who "
                             "can reach that address can use it");
  return std::string();
}

}  // namespace rdmakit::bootstrap::auth
