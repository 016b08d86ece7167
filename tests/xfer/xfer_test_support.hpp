// Shared by the engine's tests: a metadata directory per test and page-aligned buffers.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

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

inline std::unique_ptr<Engine> make_engine(MetadataStore& metadata, EngineOptions options) {
  auto engine = Engine::create(metadata, options);
  if (!engine) ADD_FAILURE() << engine.error().describe();
  return engine ? std::move(*engine) : nullptr;
}

}  // namespace rdmakit::xfer::testing
