// Move-only owners of the kernel resources the shm transport holds: file descriptors (core/fd.hpp) and
// mappings.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <utility>

#include "core/fd.hpp"

namespace rdmakit::shm {

// The core owner of a file descriptor, under the name this transport grew up with.
using UniqueFd = Fd;

class Mapping {
 public:
  Mapping() = default;
  Mapping(void* base, std::size_t size) noexcept : base_(base), size_(size) {}
  Mapping(Mapping&& other) noexcept
      : base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  Mapping& operator=(Mapping&& other) noexcept {
    if (this != &other) {
      reset();
      base_ = std::exchange(other.base_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~Mapping() { reset(); }

  std::byte* data() const noexcept { return static_cast<std::byte*>(base_); }
  std::size_t size() const noexcept { return size_; }
  template <typename T>
  T* as() const noexcept {
    return static_cast<T*>(base_);
  }

 private:
  void reset() noexcept {
    if (base_) ::munmap(base_, size_);
    base_ = nullptr;
    size_ = 0;
  }
  void* base_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace rdmakit::shm
