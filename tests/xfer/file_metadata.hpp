// TEST DOUBLE of rdmakit::xfer::MetadataStore, for the engine's tests and (until the real backends are
// merged into this branch) the example and the bench. Not shipped in the library.
//
// Entries are files in a directory shared by the processes of one host (network namespaces included), so
// a child process can own segments. It honours the contract's semantics: publish replaces this store's own
// key, unpublish removes it, the store's entries vanish when it is destroyed, and an entry whose publisher
// process died reads as absent (what the lease TTL gives the real backends, here at once).
#pragma once

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>

#include "rdmakit/xfer/metadata.hpp"

namespace rdmakit::xfer::testing {

class FileMetadataStore final : public MetadataStore {
 public:
  explicit FileMetadataStore(std::filesystem::path dir, std::string name_space = "rdmakit")
      : dir_(std::move(dir) / name_space) {
    std::filesystem::create_directories(dir_);
  }
  ~FileMetadataStore() override {
    std::lock_guard lock(mutex_);
    for (const auto& key : mine_) std::filesystem::remove(file(key));
  }

  Result<void> publish(std::string_view key, const std::vector<std::byte>& value) override {
    ++round_trips_;
    auto tmp = file(key).string() + ".tmp" + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      std::int64_t pid = ::getpid();
      out.write(reinterpret_cast<const char*>(&pid), sizeof pid);
      out.write(reinterpret_cast<const char*>(value.data()), static_cast<std::streamsize>(value.size()));
      if (!out) return fail(Errc::SystemError, "test metadata: cannot write " + tmp);
    }
    std::filesystem::rename(tmp, file(key));
    std::lock_guard lock(mutex_);
    mine_.insert(std::string(key));
    return {};
  }
  Result<void> unpublish(std::string_view key) override {
    ++round_trips_;
    std::lock_guard lock(mutex_);
    if (mine_.erase(std::string(key)) == 0)
      return fail(Errc::NotFound, "test metadata: not ours: " + std::string(key));
    std::filesystem::remove(file(key));
    return {};
  }
  Result<std::optional<std::vector<std::byte>>> lookup(std::string_view key) override {
    ++round_trips_;
    std::ifstream in(file(key), std::ios::binary);
    if (!in) return std::optional<std::vector<std::byte>>{};
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::int64_t pid = 0;
    if (bytes.size() < sizeof pid) return std::optional<std::vector<std::byte>>{};
    std::memcpy(&pid, bytes.data(), sizeof pid);
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      return std::optional<std::vector<std::byte>>{};
    const auto* value = reinterpret_cast<const std::byte*>(bytes.data() + sizeof pid);
    return std::optional(std::vector<std::byte>(value, value + (bytes.size() - sizeof pid)));
  }
  Result<std::vector<std::string>> list() override {
    ++round_trips_;
    std::vector<std::string> keys;
    for (const auto& f : std::filesystem::directory_iterator(dir_))
      keys.push_back(unescape(f.path().filename()));
    return keys;
  }
  std::uint64_t round_trips() const noexcept override { return round_trips_.load(); }
  std::string_view backend() const noexcept override { return "test-double"; }

  // Tests: puts raw bytes under `key` as if a process `pid` had published them (an entry not yet expired).
  void inject(std::string_view key, const std::vector<std::byte>& value, std::int64_t pid) {
    std::ofstream out(file(key), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&pid), sizeof pid);
    out.write(reinterpret_cast<const char*>(value.data()), static_cast<std::streamsize>(value.size()));
  }

 private:
  static std::string escape(std::string_view key) {
    std::string out;
    for (char c : key) out += c == '/' ? std::string("%2F") : std::string(1, c);
    return out;
  }
  static std::string unescape(std::string s) {
    for (auto at = s.find("%2F"); at != std::string::npos; at = s.find("%2F")) s.replace(at, 3, "/");
    return s;
  }
  std::filesystem::path file(std::string_view key) const { return dir_ / escape(key); }

  std::filesystem::path dir_;
  std::mutex mutex_;
  std::set<std::string> mine_;
  std::atomic<std::uint64_t> round_trips_{0};
};

}  // namespace rdmakit::xfer::testing
