#include "rdmakit/completion.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <string>

#include "core/rc_state.hpp"
#include "transport/provider.hpp"

namespace rdmakit {

std::string_view to_string(Opcode opcode) noexcept {
  switch (opcode) {
    case Opcode::Write:
      return "write";
    case Opcode::WriteImm:
      return "write_imm";
    case Opcode::Read:
      return "read";
    case Opcode::CompareSwap:
      return "compare_swap";
    case Opcode::FetchAdd:
      return "fetch_add";
    case Opcode::Send:
      return "send";
    case Opcode::Recv:
      return "recv";
    case Opcode::RecvWriteImm:
      return "recv_write_imm";
  }
  return "unknown";
}

namespace detail {

std::size_t CompletionQueueProvider::take_stashed(std::span<Completion> out) {
  if (!has_stash_.load(std::memory_order_acquire)) return 0;
  std::lock_guard lock(stash_mutex_);
  std::size_t n = std::min(out.size(), stash_.size());
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = stash_.front();
    stash_.pop_front();
  }
  has_stash_.store(!stash_.empty(), std::memory_order_release);
  return n;
}

std::size_t CompletionQueueProvider::poll_taken(std::span<Completion> out) {
  const std::size_t n = poll_transport(out);
  if (n > 0) note_taken(out.first(n));
  return n;
}

std::size_t CompletionQueueProvider::poll(std::span<Completion> out) {
  std::size_t n = take_stashed(out);
  if (n > 0) note_taken(out.first(n));
  if (n < out.size()) n += poll_taken(out.subspan(n));
  return n;
}

void CompletionQueueProvider::attach_state(std::shared_ptr<RcState> state) {
  std::lock_guard lock(states_mutex_);
  states_.push_back(std::move(state));
}

void CompletionQueueProvider::detach_state(const RcState* state) {
  std::lock_guard lock(states_mutex_);
  std::erase_if(states_, [&](const auto& s) { return s.get() == state; });
}

// One uncontended lock per batch; most queues serve one connection.
void CompletionQueueProvider::note_taken(std::span<const Completion> taken) {
  std::lock_guard lock(states_mutex_);
  RcState* last = nullptr;
  for (const Completion& c : taken) {
    if (!last || last->number() != c.connection) {
      auto it = std::find_if(states_.begin(), states_.end(),
                             [&](const auto& s) { return s->number() == c.connection; });
      last = it == states_.end() ? nullptr : it->get();
    }
    if (last) last->taken(c.id);
  }
}

Result<std::size_t> CompletionQueueProvider::wait(std::span<Completion> out, std::chrono::nanoseconds timeout,
                                                  WaitMode mode) {
  if (out.empty()) return fail(Errc::InvalidArgument, "wait() needs room for at least one completion");
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  const auto spin_until = mode == WaitMode::Spin    ? deadline
                          : mode == WaitMode::Block ? start
                                                    : std::min(deadline, start + spin_);
  for (;;) {
    if (std::size_t n = poll(out)) return n;
    if (auto ok = health(); !ok) return std::unexpected(ok.error());
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::size_t{0};
    if (now < spin_until) continue;
    if (auto slept = sleep_until(deadline); !slept) return std::unexpected(slept.error());
  }
}

// Looks in the stash, then takes what the transport has ready, stashing all but `id`. The transport is
// polled under the stash lock: two threads in wait_for() must stash what they pass over in the order the
// transport gave it, or poll() would later return a connection's completions out of order.
std::optional<Completion> CompletionQueueProvider::take_from_stash(std::uint64_t id) {
  std::lock_guard lock(stash_mutex_);
  auto it = std::find_if(stash_.begin(), stash_.end(), [&](const Completion& c) { return c.id == id; });
  std::optional<Completion> found;
  if (it != stash_.end()) {
    found = *it;
    stash_.erase(it);
  }
  std::array<Completion, 16> batch;
  while (!found) {
    std::size_t n = poll_transport(batch);
    for (std::size_t i = 0; i < n; ++i) {
      if (!found && batch[i].id == id)
        found = batch[i];
      else
        stash_.push_back(batch[i]);
    }
    if (n < batch.size()) break;
  }
  has_stash_.store(!stash_.empty(), std::memory_order_release);
  return found;
}

Result<Completion> CompletionQueueProvider::wait_for(std::uint64_t id, std::chrono::nanoseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  const auto spin_until = mode_ == WaitMode::Spin    ? deadline
                          : mode_ == WaitMode::Block ? start
                                                     : std::min(deadline, start + spin_);
  // Another thread waiting on this queue may pass over our completion and stash it, so never sleep
  // long in one go.
  constexpr auto kSlice = std::chrono::milliseconds(2);
  for (;;) {
    if (auto found = take_from_stash(id)) {
      note_taken(std::span(&*found, 1));
      return *found;
    }
    if (auto ok = health(); !ok) return std::unexpected(ok.error());
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline)
      return fail(Errc::Timeout, "operation " + std::to_string(id) + " did not complete in time");
    if (now < spin_until) continue;
    if (auto slept = sleep_until(std::min(deadline, now + kSlice)); !slept)
      return std::unexpected(slept.error());
  }
}

}  // namespace detail

// Out of line: the destructor is the key function, so the vtable is emitted (and exported) from this one
// file in every build type, not wherever an optimizer happens to keep it (abi/librdmakit.symbols).
CompletionQueue::~CompletionQueue() = default;

// The facade.
std::size_t CompletionQueue::poll(std::span<Completion> out) { return detail::provider(*this).poll(out); }
Result<void> CompletionQueue::health() const { return detail::provider(*this).health(); }
Result<std::size_t> CompletionQueue::wait(std::span<Completion> out, std::chrono::nanoseconds timeout) {
  auto& self = detail::provider(*this);
  return self.wait(out, timeout, self.default_wait_mode());
}
Result<std::size_t> CompletionQueue::wait(std::span<Completion> out, std::chrono::nanoseconds timeout,
                                          WaitMode mode) {
  return detail::provider(*this).wait(out, timeout, mode);
}
Result<Completion> CompletionQueue::wait_for(std::uint64_t id, std::chrono::nanoseconds timeout) {
  return detail::provider(*this).wait_for(id, timeout);
}
WaitMode CompletionQueue::default_wait_mode() const noexcept {
  return detail::provider(*this).default_wait_mode();
}

}  // namespace rdmakit
