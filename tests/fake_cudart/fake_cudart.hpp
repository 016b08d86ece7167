// The test controls of the fake CUDA runtime (fake_cudart.cpp): the unit tests reach them with dlsym on
// the same library the engine loaded, so both see one state.
#pragma once

#include <cstddef>

extern "C" {

struct FakeCudartStats {
  int devices;                 // what cudaGetDeviceCount reports (0: cudaErrorNoDevice)
  int streams_alive;           // created and not yet destroyed
  int streams_blocking;        // created without cudaStreamNonBlocking
  int registered_ranges;       // cudaHostRegister'ed and not yet unregistered
  long copies;                 // cudaMemcpyAsync calls that were queued
  long copies_default_stream;  // ... on the legacy default stream (nullptr)
  long copies_unpinned;        // ... whose host side is not inside a cudaHostRegister'ed range
  long copies_dropped;         // queued but never run: their stream was destroyed unsynchronized
  long device_allocations;     // cudaMalloc'ed and not yet freed
};

// Resets every counter and injected failure (not the device memory); `devices` fake GPUs (0: none).
void fake_cudart_reset(int devices);
void fake_cudart_stats(FakeCudartStats* out);
// The `skip`-th and later calls (0: the next) of `function` ("cudaMemcpyAsync", "cudaStreamSynchronize",
// "cudaHostRegister", ...) return `error` once, then the function works again.
void fake_cudart_fail(const char* function, int skip, int error);
}
