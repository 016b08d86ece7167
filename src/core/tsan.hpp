// ThreadSanitizer and sockets. Bytes that one thread sends on a socket and another receives order the two
// threads (the kernel carries them), but TSan cannot see that, so in a process that holds both ends (every
// conformance test) it reports the target's kernel-side payload copy as racing with the application's later
// use of its memory. We tell it what the kernel guarantees: a send releases, a receive acquires. One token
// for all sockets is coarser than the truth (it orders more than one stream does), never finer.
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
inline char socket_token;
inline void before_socket_send() { __tsan_release(&socket_token); }
inline void after_socket_receive() { __tsan_acquire(&socket_token); }
#else
inline void before_socket_send() {}
inline void after_socket_receive() {}
#endif

}  // namespace rdmakit::tsan
