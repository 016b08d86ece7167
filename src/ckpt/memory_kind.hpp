// Moving the application's buffers to and from staging, by where they live (Buffer::kind).
//
// One Mover per memory kind the state uses. A copy is start() on every mover, then finish() on every
// mover: the CUDA mover queues asynchronous copies in start() and waits for them in finish(), so the
// device's DMA engines run while the host threads copy the host buffers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ckpt/copy_pool.hpp"
#include "rdmakit/ckpt/types.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::ckpt::detail {

// The application's buffers of one kind, placed in staging (Span::offset).
struct KindSpans {
  std::vector<Span> spans;
  std::vector<std::string> names;    // the buffers' names, for errors
  std::vector<std::size_t> indices;  // each span's buffer, by its index in the engine's buffers
};

// Which buffers a copy back into the application's buffers writes (a subset restore), by buffer index:
// empty = every one. Copies into staging (snapshots) always take every buffer.
using Selection = std::vector<bool>;
inline bool selected(const Selection& only, std::size_t index) { return only.empty() || only[index]; }
// The spans of `kind` that `only` selects (all of them when it is empty).
std::vector<Span> selected_spans(const KindSpans& kind, const Selection& only);

class Mover {
 public:
  virtual ~Mover() = default;
  // Starts copying every span into staging (to_staging) or back into the application's buffers: then only
  // those `only` selects, the others' bytes are not written at all.
  virtual Result<void> start(unsigned char* staging, std::uint64_t total, bool to_staging,
                             const Selection& only) = 0;
  // Returns when the started copy is complete, or why it failed.
  virtual Result<void> finish() = 0;
};

// Host memory: the copy split across the pool's threads and the caller (done in start()).
std::unique_ptr<Mover> make_host_mover(KindSpans spans, CopyPool& pool);

// CUDA device memory: cudaMemcpyAsync on a non-blocking stream per device, between the buffers and
// staging, which is pinned (cudaHostRegister) for the mover's life so the copies are true DMA.
// `runtime_library`: EngineOptions::cuda_runtime. Fails with a message naming the buffer and the CUDA
// call when the runtime is missing or unusable, or a buffer is not device memory.
Result<std::unique_ptr<Mover>> make_cuda_mover(KindSpans spans, const std::string& runtime_library,
                                               unsigned char* staging, std::size_t staging_size);

}  // namespace rdmakit::ckpt::detail
