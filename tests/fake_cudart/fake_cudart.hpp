// The test controls of the fake CUDA runtime and driver (tests/fake_cudart/): tests reach them with dlsym
// on the same library the code under test loaded, so both see one state.
#pragma once

#include <cstddef>
#include <cstdlib>

extern "C" {

struct FakeCudartStats {
  int devices;                 // what cudaGetDeviceCount reports (0: cudaErrorNoDevice)
  int streams_alive;           // created and not yet destroyed
  int streams_blocking;        // created without cudaStreamNonBlocking
  int registered_ranges;       // cudaHostRegister'ed or cudaMallocHost'ed, not yet released
  long copies;                 // cudaMemcpyAsync calls accepted (queued or, on stream 0, run)
  long copies_default_stream;  // ... on the legacy default stream (nullptr)
  long copies_unpinned;        // ... whose host side is not inside a registered (pinned) range
  long copies_dropped;         // queued but never run: their stream was destroyed unsynchronized
  long device_allocations;     // cudaMalloc'ed or cudaMallocManaged'ed and not yet freed
  // Appended (issue 26):
  long d2d_copies;      // device-to-device copies, cudaMemcpy or cudaMemcpyAsync
  long sync_copies;     // cudaMemcpy calls accepted
  int ipc_open_alive;   // cudaIpcOpenMemHandle'd allocations not yet closed (a re-open counts once)
  int events_alive;     // created and not yet destroyed
  long dmabuf_exports;  // fds cuMemGetHandleForAddressRange returned
};

// Resets the counters of calls and copies, every injected failure and the dmabuf answer (to 1);
// `devices` fake GPUs (0: none). What is alive (allocations, streams, events, registrations, IPC
// mappings) stays, and so do the counters of it: their owners release them.
void fake_cudart_reset(int devices);
void fake_cudart_stats(FakeCudartStats* out);
// The `skip`-th and later calls (0: the next) of the exported function named `function` ("cudaMemcpyAsync",
// "cuMemGetHandleForAddressRange", ...) return `error` and do nothing, once; then the function works again.
// cudaStreamSynchronize's failure drops the queued copies (an asynchronous error: they did not happen).
void fake_cudart_fail(const char* function, int skip, int error);
// The fake's own read-write view of the device byte at `device_pointer` (cudaMalloc'ed, IPC-opened or
// managed memory), or null if it is not device memory: tests fill and check device memory through it,
// since the device address itself faults on the CPU.
void* fake_cudart_host_view(const void* device_pointer);
// What cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED) answers, and whether
// cuMemGetHandleForAddressRange works (0: CUDA_ERROR_NOT_SUPPORTED).
void fake_cudart_set_dmabuf_supported(int supported);
}

#ifdef RDMAKIT_FAKE_CUDART
// The fake's file for a test: $RDMAKIT_TEST_FAKE_CUDART where the test programs were copied out of the build
// tree (scripts/gpu-bundle.sh's folder), else the path CMake compiled in.
inline const char* fake_cudart_file() {
  const char* moved = std::getenv("RDMAKIT_TEST_FAKE_CUDART");
  return moved && *moved ? moved : RDMAKIT_FAKE_CUDART;
}
#endif
