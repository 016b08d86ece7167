// The three CUDA runtime calls the examples make themselves (cudaMalloc, cudaFree, cudaMemcpy). A real
// program links libcudart; these load it as rdmakit does ($RDMAKIT_CUDA_RUNTIME, else libcudart.so.13/.12),
// so they build without the toolkit and CI runs them against the fake runtime (tests/fake_cudart).
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <cstdlib>
#include <stdexcept>

namespace rdmakit::examples {

class Cuda {
 public:
  Cuda() {
    const char* named = std::getenv("RDMAKIT_CUDA_RUNTIME");
    for (const char* name : {named, "libcudart.so.13", "libcudart.so.12"})
      if (name && *name && (handle_ = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!handle_) throw std::runtime_error("--gpu: no CUDA runtime loads (set RDMAKIT_CUDA_RUNTIME)");
    malloc_ = reinterpret_cast<int (*)(void**, std::size_t)>(::dlsym(handle_, "cudaMalloc"));
    free_ = reinterpret_cast<int (*)(void*)>(::dlsym(handle_, "cudaFree"));
    memcpy_ = reinterpret_cast<int (*)(void*, const void*, std::size_t, int)>(::dlsym(handle_, "cudaMemcpy"));
    if (!malloc_ || !free_ || !memcpy_) throw std::runtime_error("--gpu: the CUDA runtime lacks cudaMemcpy");
  }
  void* allocate(std::size_t size) {
    void* p = nullptr;
    if (malloc_(&p, size) != 0) throw std::runtime_error("--gpu: cudaMalloc failed");
    return p;
  }
  void release(void* p) { free_(p); }
  void copy(void* to, const void* from, std::size_t size) {  // cudaMemcpyDefault: the pointers say where
    if (memcpy_(to, from, size, 4) != 0) throw std::runtime_error("--gpu: cudaMemcpy failed");
  }

 private:
  void* handle_ = nullptr;
  int (*malloc_)(void**, std::size_t) = nullptr;
  int (*free_)(void*) = nullptr;
  int (*memcpy_)(void*, const void*, std::size_t, int) = nullptr;
};

}  // namespace rdmakit::examples
