#include "core/staged_copy.hpp"

#include <atomic>
#include <mutex>
#include <string>

#include "cuda/runtime.hpp"

namespace rdmakit::detail {

namespace {

// The runtime was loaded when the first device region was registered and is never unloaded, so it is
// looked up once (Runtime::get() takes a mutex and asks for the device count), not once per copy.
Result<const cuda::Runtime*> runtime() {
  static std::atomic<const cuda::Runtime*> loaded{nullptr};
  if (const cuda::Runtime* known = loaded.load(std::memory_order_acquire)) return known;
  auto rt = cuda::Runtime::get();
  if (rt) loaded.store(*rt, std::memory_order_release);
  return rt;
}

}  // namespace

Result<void> staged_copy(void* destination, const void* source, std::size_t size, const char* what) {
  if (size == 0) return {};
  auto rt = runtime();
  if (!rt) return fail(rt.error().code(), std::string(what) + ": " + rt.error().message());
  if (auto e = (*rt)->memcpy(destination, source, size, cuda::kDefault); e != cuda::kSuccess)
    return fail(Errc::TransportFailure, std::string(what) + ": " + (*rt)->describe("cudaMemcpy", e));
  return {};
}

Result<std::uint64_t> device_word_atomic(void* word, bool compare_swap, std::uint64_t operand,
                                         std::uint64_t swap, const char* what) {
  static std::mutex device_words;
  std::lock_guard lock(device_words);
  std::uint64_t old = 0;
  if (auto read = staged_copy(&old, word, 8, what); !read) return std::unexpected(read.error());
  std::uint64_t next = compare_swap ? (old == operand ? swap : old) : old + operand;
  if (next != old)
    if (auto written = staged_copy(word, &next, 8, what); !written) return std::unexpected(written.error());
  return old;
}

}  // namespace rdmakit::detail
