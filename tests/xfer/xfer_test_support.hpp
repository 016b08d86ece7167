// Shared by the engine's tests: a metadata directory per test and page-aligned buffers.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rdmakit/xfer/engine.hpp"
#include "xfer/file_metadata.hpp"
#include "xfer/verbs_devices.hpp"

namespace rdmakit::xfer::testing {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/rdmakit-xfer-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte, FreeDeleter>;
inline Buffer make_buffer(std::size_t size) {
  return Buffer(static_cast<std::byte*>(std::aligned_alloc(4096, (size + 4095) / 4096 * 4096)));
}

// A file's whole contents, written or read (the file segments' tests).
inline void write_file(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
// `size` bytes filled with `fill` and registered with `engine` (a destination whose untouched bytes show).
inline Buffer registered_filled(Engine& engine, std::size_t size, std::byte fill) {
  auto buffer = make_buffer(size);
  std::memset(buffer.get(), static_cast<int>(fill), size);
  EXPECT_TRUE(engine.register_local(buffer.get(), size).has_value());
  return buffer;
}

inline std::vector<std::byte> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto* begin = reinterpret_cast<const std::byte*>(bytes.data());
  return {begin, begin + bytes.size()};
}

inline std::unique_ptr<Engine> make_engine(MetadataStore& metadata, EngineOptions options) {
  auto engine = Engine::create(metadata, options);
  if (!engine) ADD_FAILURE() << engine.error().describe();
  return engine ? std::move(*engine) : nullptr;
}

}  // namespace rdmakit::xfer::testing
