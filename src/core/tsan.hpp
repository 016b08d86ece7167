// ThreadSanitizer and channels it cannot see. Two threads of one process (every conformance test holds
// both ends of a connection) are ordered by things TSan does not model:
//   * bytes one thread sends on a socket and another receives (the kernel carries them: tcp);
//   * a release store and an acquire load on the same shared-memory word mapped at two addresses (the
//     owner's mapping and the peer's: shm's rings and request slots). TSan tracks addresses, not pages.
// Without help it reports the target's side of a one-sided operation as racing with the application's
// later use of its memory. We tell it what the hardware and the kernel guarantee: publishing to the peer
// releases, consuming from it acquires. One token for every channel is coarser than the truth (it orders
// more than one channel does), never finer, so it can hide a race between two channels but invents none.
// The sender's own read of the payload inside sendmsg comes after its release, so the TSan stage runs with
// intercept_send=0 (scripts/test.sh): the application must not touch a buffer while its operation is
// outstanding, which is RDMA's rule and not something TSan can check here.
#pragma once

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace rdmakit::tsan {

#if defined(__SANITIZE_THREAD__)
inline char channel_token;
inline void release_to_peer() { __tsan_release(&channel_token); }
inline void acquire_from_peer() { __tsan_acquire(&channel_token); }
// Mappings TSan does not see come and go: liburing maps and unmaps its rings with raw system calls, so a
// ring set up at the address of one that another thread tore down looks as if it raced with that thread's
// last use of it. The kernel orders the unmapping before the new mapping: unmapping releases, mapping
// acquires.
inline char mapping_token;
inline void release_mapping() { __tsan_release(&mapping_token); }
inline void acquire_mapping() { __tsan_acquire(&mapping_token); }
#else
inline void release_to_peer() {}
inline void acquire_from_peer() {}
inline void release_mapping() {}
inline void acquire_mapping() {}
#endif

}  // namespace rdmakit::tsan
