// A FIFO in one growing ring buffer. std::deque allocates a node per 512 bytes, which for a queue of
// work requests with inline scatter-gather lists (a few hundred bytes each) is one malloc and one free
// per operation (callgrind: 16 % of an 8-byte shm WRITE). This grows by doubling and then never allocates.
// Growing moves the elements (by move assignment): an element must not keep a pointer into itself (tcp's
// OutFrame finds its header's part from the header, OutFrame::part, and never reads iov[0].iov_base).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace rdmakit {

template <typename T>
class RingQueue {
 public:
  bool empty() const noexcept { return count_ == 0; }
  std::size_t size() const noexcept { return count_; }
  // Where size() lives, for a reader that must not call (the RC prologue: detail::SoftwareQueue).
  const std::size_t* size_address() const noexcept { return &count_; }
  T& front() noexcept { return slots_[head_]; }

  // A fresh element at the back (assigned over whatever the slot held before).
  T& emplace_back() {
    if (count_ == slots_.size()) grow();
    T& slot = slots_[(head_ + count_) % slots_.size()];
    slot = T{};
    ++count_;
    return slot;
  }
  // A slot at the back that still holds whatever it held before: for an element of a few hundred bytes
  // whose every field the caller assigns, this skips zeroing it first (a tenth of an 8-byte shm WRITE).
  T& push_back_slot() {
    if (count_ == slots_.size()) grow();
    T& slot = slots_[(head_ + count_) % slots_.size()];
    ++count_;
    return slot;
  }
  void push_back(T value) { push_back_slot() = std::move(value); }
  // The slot keeps what it held until it is reused: an element that owns a resource (a pin, a buffer)
  // must let go of it before it is popped.
  void pop_front() noexcept {
    head_ = (head_ + 1) % slots_.size();
    --count_;
  }
  // The i-th element from the front.
  T& operator[](std::size_t i) noexcept { return slots_[(head_ + i) % slots_.size()]; }
  // Drops every element and whatever the free slots still hold.
  void clear() {
    for (T& slot : slots_) slot = T{};
    head_ = 0;
    count_ = 0;
  }

 private:
  void grow() {
    std::vector<T> bigger(slots_.empty() ? 16 : slots_.size() * 2);
    for (std::size_t i = 0; i < count_; ++i) bigger[i] = std::move(slots_[(head_ + i) % slots_.size()]);
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  std::size_t head_ = 0;
  std::size_t count_ = 0;
};

}  // namespace rdmakit
