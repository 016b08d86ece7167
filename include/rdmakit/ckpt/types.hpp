// The checkpoint engine's vocabulary: what a buffer of application state is, and what the engine reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rdmakit/export.hpp"
#include "rdmakit/memory.hpp"

namespace rdmakit::ckpt {

// Element types, for metadata and for `rdmakit-ckpt export` (numpy's descr). The engine copies bytes.
enum class DType : std::uint8_t { U8, I8, U16, I16, U32, I32, U64, I64, F16, BF16, F32, F64 };

RDMAKIT_API std::string_view to_string(DType dtype) noexcept;  // "f32", "bf16", ...
RDMAKIT_API std::optional<DType> parse_dtype(std::string_view text) noexcept;
RDMAKIT_API std::size_t dtype_size(DType dtype) noexcept;

// Where a buffer lives: the library's one MemoryKind (rdmakit/memory.hpp). Cuda: device memory, copied with
// cudaMemcpyAsync on the engine's own stream into pinned staging, the CUDA runtime loaded at run time
// (EngineOptions::cuda_runtime). Auto: Cuda when CUDA says device memory, else Host. The CUDA path ran on an
// H100 (docs/ckpt.md) and is unit-tested against a fake runtime (tests/fake_cudart).
using ::rdmakit::MemoryKind;

// One named piece of application state. The engine reads `data` during snapshot() and writes it during
// restore; it must stay valid for the engine's life. `shape` is metadata: its product times the dtype's
// size must equal `size` (an empty shape means a flat array of size / dtype_size elements).
struct Buffer {
  std::string name{};
  void* data = nullptr;
  std::size_t size = 0;
  DType dtype = DType::U8;
  std::vector<std::uint64_t> shape{};
  MemoryKind kind = MemoryKind::Host;
};

// What one persisted checkpoint cost, reported by wait_persisted().
struct PersistReport {
  std::uint64_t step = 0;
  std::string path{};            // the committed directory
  std::size_t bytes = 0;         // payload bytes (written + reused)
  std::size_t reused_bytes = 0;  // incremental: unchanged chunks referenced from an earlier checkpoint
  bool direct_io = false;    // false: O_DIRECT was refused and the page cache was used (a warning was logged)
  bool replicated = false;   // also in the peer's memory (EngineOptions::replica)
  double write_seconds = 0;  // data written and checksummed, before fsync
  double total_seconds = 0;  // snapshot handed over -> committed (fsyncs and rename included)
  std::vector<std::string> deleted{};  // older checkpoints removed after this one was committed (keep-last-K)
  double replica_seconds = 0;          // pushing it into the peer's memory (EngineOptions::replica), if any
};

}  // namespace rdmakit::ckpt
