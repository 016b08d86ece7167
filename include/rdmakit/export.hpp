// What the shared library exports. The library is built with -fvisibility=hidden (and a version script):
// only declarations marked RDMAKIT_API are part of its ABI (docs/abi.md). Users never need this macro.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define RDMAKIT_API __attribute__((visibility("default")))
#else
#define RDMAKIT_API
#endif
