#include "core/staged_copy.hpp"

#include <atomic>
#include <mutex>
#include <string>

#include "cuda/runtime.hpp"

namespace rdmakit::detail {

namespace {

// staging_runtime(), or the error saying why none loads.
Result<const cuda::Runtime*> runtime() {
  if (const cuda::Runtime* known = staging_runtime()) return known;
  return cuda::Runtime::get();
}

}  // namespace

const cuda::Runtime* staging_runtime() {
  static std::atomic<const cuda::Runtime*> loaded{nullptr};
  if (const cuda::Runtime* known = loaded.load(std::memory_order_acquire)) return known;
  auto rt = cuda::Runtime::get();
  if (!rt) return nullptr;
  loaded.store(*rt, std::memory_order_release);
  return *rt;
}

int staged_device_of(const cuda::Runtime& rt, const void* pointer) {
  cuda::PointerAttributes attributes{};
  if (rt.pointer_get_attributes(&attributes, pointer) != cuda::kSuccess) return -1;
  return attributes.type == cuda::kDevice || attributes.type == cuda::kManaged ? attributes.device : -1;
}

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
