// The copies the GPU rows of bench/RESULTS.md are compared with, measured in one process with the CUDA
// runtime the library loads (src/cuda: $RDMAKIT_CUDA_RUNTIME, else libcudart.so.13/.12):
//   d2d  cudaMemcpy from one cudaMalloc'ed buffer to another (the bound for shm's CUDA IPC path)
//   d2h  device -> page-locked host memory (cudaHostRegister'ed; the bound for staged paths and checkpoints)
//   h2d  page-locked host -> device
//   cuda_copy_bw [--sizes 1M,4M,64M] [--iters N] [--probe]
// Prints one line per (kind, size): "kind bytes GB/s". --probe prints the device count and exits 0 when a
// runtime loads and sees a device (scripts/gpu-bundle.sh's run.sh uses it to pick a runtime).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/runtime.hpp"

namespace cuda = rdmakit::detail::cuda;

namespace {

std::size_t parse_size(std::string_view text) {
  std::size_t scale = 1;
  if (!text.empty() && (text.back() == 'K' || text.back() == 'k')) scale = std::size_t{1} << 10;
  if (!text.empty() && (text.back() == 'M' || text.back() == 'm')) scale = std::size_t{1} << 20;
  if (!text.empty() && (text.back() == 'G' || text.back() == 'g')) scale = std::size_t{1} << 30;
  return std::strtoull(std::string(text).c_str(), nullptr, 10) * scale;
}

int die(const cuda::Runtime& rt, const char* call, cuda::Error e) {
  std::fprintf(stderr, "cuda_copy_bw: %s\n", rt.describe(call, e).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes{std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{256} << 20};
  int iters = 20;
  bool probe = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--probe") {
      probe = true;
    } else if (arg == "--iters" && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (arg == "--sizes" && i + 1 < argc) {
      sizes.clear();
      std::string_view list = argv[++i];
      for (std::size_t at = 0; at <= list.size();) {
        std::size_t comma = list.find(',', at);
        if (comma == std::string_view::npos) comma = list.size();
        sizes.push_back(parse_size(list.substr(at, comma - at)));
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr, "usage: cuda_copy_bw [--sizes 1M,16M] [--iters N] [--probe]\n");
      return 2;
    }
  }
  auto loaded = cuda::Runtime::get();
  if (!loaded) {
    std::fprintf(stderr, "cuda_copy_bw: %s\n", loaded.error().message().c_str());
    return 1;
  }
  const cuda::Runtime& rt = **loaded;
  int devices = 0;
  if (auto e = rt.get_device_count(&devices); e != cuda::kSuccess || devices == 0)
    return e != cuda::kSuccess ? die(rt, "cudaGetDeviceCount", e) : (std::fprintf(stderr, "no device\n"), 1);
  if (probe) {
    std::printf("%d\n", devices);
    return 0;
  }
  std::size_t largest = 0;
  for (std::size_t s : sizes) largest = std::max(largest, s);
  void* a = nullptr;
  void* b = nullptr;
  if (auto e = rt.malloc(&a, largest); e != cuda::kSuccess) return die(rt, "cudaMalloc", e);
  if (auto e = rt.malloc(&b, largest); e != cuda::kSuccess) return die(rt, "cudaMalloc", e);
  std::vector<char> host(largest, 1);
  if (auto e = rt.host_register(host.data(), largest, 0); e != cuda::kSuccess)
    return die(rt, "cudaHostRegister", e);
  struct Kind {
    const char* name;
    void* to;
    const void* from;
  };
  const Kind kinds[] = {{"d2d", b, a}, {"d2h", host.data(), a}, {"h2d", a, host.data()}};
  for (const Kind& kind : kinds) {
    for (std::size_t size : sizes) {
      // One untimed copy, then `iters` timed ones ended by a synchronization of the legacy stream (a
      // device-to-device cudaMemcpy may return before the copy is done).
      if (auto e = rt.memcpy(kind.to, kind.from, size, cuda::kDefault); e != cuda::kSuccess)
        return die(rt, "cudaMemcpy", e);
      (void)rt.stream_synchronize(nullptr);
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i)
        if (auto e = rt.memcpy(kind.to, kind.from, size, cuda::kDefault); e != cuda::kSuccess)
          return die(rt, "cudaMemcpy", e);
      if (auto e = rt.stream_synchronize(nullptr); e != cuda::kSuccess)
        return die(rt, "cudaStreamSynchronize", e);
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("%s %zu %.2f\n", kind.name, size, static_cast<double>(size) * iters / seconds / 1e9);
    }
  }
  (void)rt.host_unregister(host.data());
  (void)rt.free(a);
  (void)rt.free(b);
  return 0;
}
