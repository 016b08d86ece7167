#include "core/device_inbound.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "cuda/runtime.hpp"

namespace rdmakit::detail {
namespace {

constexpr std::size_t kSmallestChunk = std::size_t{64} << 10;

}  // namespace

void DeviceInbound::begin(std::span<const iovec> sink, const char* what) {
  what_ = what;
  error_ = {};
  targets_.clear();
  target_ = target_offset_ = 0;
  unassigned_ = 0;
  const cuda::Runtime* rt = staging_runtime();
  for (const iovec& part : sink) {
    if (part.iov_len == 0) continue;
    targets_.push_back(Target{part, rt ? staged_device_of(*rt, part.iov_base) : -1});
    unassigned_ += part.iov_len;
  }
  if (!rt && unassigned_ > 0)
    record(fail(Errc::Unavailable, std::string(what_) + ": the CUDA runtime is not loaded"));
  const std::size_t largest = pool_->options().chunk;
  chunk_ = std::clamp<std::size_t>(unassigned_ / 4, std::min(kSmallestChunk, largest), largest);
}

void DeviceInbound::record(Result<void> step) {
  if (!step && error_) error_ = std::move(step);
}

Result<void> DeviceInbound::wait_for(PinnedSlotPool::Slot& slot) {
  if (!slot.copy_pending) return {};
  slot.copy_pending = false;
  const cuda::Runtime* rt = staging_runtime();
  if (!rt) return fail(Errc::Unavailable, std::string(what_) + ": the CUDA runtime went away");
  if (auto e = rt->event_synchronize(slot.event); e != cuda::kSuccess)
    return fail(Errc::TransportFailure, std::string(what_) + ": " + rt->describe("cudaEventSynchronize", e));
  return {};
}

iovec DeviceInbound::next_chunk() {
  filling_ = static_cast<std::size_t>(std::min<std::uint64_t>(chunk_, unassigned_));
  unassigned_ -= filling_;
  if (error_) {
    if (slots_.size() < pool_->options().depth) {
      auto slot = pool_->acquire();
      if (slot)
        slots_.push_back(std::move(*slot));
      else
        record(std::unexpected(slot.error()));
    }
    if (error_ && !slots_.empty()) {
      auto& slot = slots_[next_slot_ % slots_.size()];
      record(wait_for(*slot));
      if (error_) return iovec{slot->data, filling_};
    }
  }
  if (scratch_.size() < filling_) scratch_.resize(filling_);
  return iovec{scratch_.data(), filling_};
}

void DeviceInbound::chunk_filled() {
  if (!error_) return;  // landed in scratch
  auto& slot = slots_[next_slot_ % slots_.size()];
  ++next_slot_;
  record(queue_copy(*slot, filling_));
}

// The chunk's bytes -> the sink, from where the last chunk stopped; then the slot's event behind them.
Result<void> DeviceInbound::queue_copy(PinnedSlotPool::Slot& slot, std::size_t bytes) {
  const cuda::Runtime* rt = staging_runtime();
  if (!rt) return fail(Errc::Unavailable, std::string(what_) + ": the CUDA runtime went away");
  auto fail_call = [&](const char* call, cuda::Error e) {
    return fail(Errc::TransportFailure, std::string(what_) + ": " + rt->describe(call, e));
  };
  std::size_t done = 0;
  int last_device = -1;
  cuda::Stream last_stream = nullptr;
  bool several_streams = false;
  // Waits for what the payload's streams hold: after a failure no event tracks this chunk's copies, and the
  // slot goes back to the pool when the payload ends, so no copy may still read it then. The first error.
  auto settle = [&]() -> Result<void> {
    Result<void> settled;
    for (const Target& target : targets_)
      if (target.device >= 0)
        if (auto stream = pool_->stream(target.device))
          if (auto e = rt->stream_synchronize(*stream); e != cuda::kSuccess && settled)
            settled = fail_call("cudaStreamSynchronize", e);
    return settled;
  };
  while (done < bytes && target_ < targets_.size()) {
    const Target& target = targets_[target_];
    const std::size_t n = std::min(bytes - done, target.sink.iov_len - target_offset_);
    auto* to = static_cast<std::byte*>(target.sink.iov_base) + target_offset_;
    if (target.device < 0) {  // host memory beside device memory in one receive list: the CPU copies it
      std::memcpy(to, slot.data + done, n);
      advance(n);
      done += n;
      continue;
    }
    auto stream = pool_->stream(target.device);
    if (!stream) {
      (void)settle();
      return std::unexpected(stream.error());
    }
    several_streams = several_streams || (last_stream && last_stream != *stream);
    last_stream = *stream;
    last_device = target.device;
    auto queued = cuda::on_device(*rt, last_device, [&]() -> Result<void> {
      if (auto e = rt->memcpy_async(to, slot.data + done, n, cuda::kDefault, *stream); e != cuda::kSuccess)
        return fail_call("cudaMemcpyAsync", e);
      return {};
    });
    if (!queued) {
      (void)settle();
      return queued;
    }
    advance(n);
    done += n;
  }
  if (!last_stream) return {};  // host memory only
  // A chunk across devices (a receive list over two GPUs): its streams are synchronized here rather than
  // tracked by one event each.
  if (several_streams) return settle();
  return cuda::on_device(*rt, last_device, [&]() -> Result<void> {
    if (slot.event && slot.event_device != last_device) {
      rt->event_destroy(slot.event);
      slot.event = nullptr;
    }
    if (!slot.event) {
      if (auto e = rt->event_create_with_flags(&slot.event, cuda::kEventDisableTiming); e != cuda::kSuccess)
        return fail_call("cudaEventCreateWithFlags", e);
      slot.event_device = last_device;
    }
    if (auto e = rt->event_record(slot.event, last_stream); e != cuda::kSuccess) {
      // The copies are queued but untracked: wait for them now, so the slot is never refilled under them.
      rt->stream_synchronize(last_stream);
      return fail_call("cudaEventRecord", e);
    }
    slot.copy_pending = true;
    return {};
  });
}

void DeviceInbound::advance(std::size_t bytes) {
  target_offset_ += bytes;
  if (target_offset_ == targets_[target_].sink.iov_len) {
    ++target_;
    target_offset_ = 0;
  }
}

Result<void> DeviceInbound::wait_all() {
  Result<void> all;
  for (auto& slot : slots_)
    if (auto waited = wait_for(*slot); !waited && all) all = std::move(waited);
  return all;
}

Result<void> DeviceInbound::finish() {
  record(wait_all());
  for (auto& slot : slots_) pool_->release(std::move(slot));
  slots_.clear();
  next_slot_ = 0;
  targets_.clear();
  unassigned_ = 0;
  // A large scratch buffer is not kept between payloads.
  if (scratch_.capacity() > kSmallestChunk) scratch_ = {};
  return std::exchange(error_, Result<void>{});
}

void DeviceInbound::abandon() { (void)finish(); }

}  // namespace rdmakit::detail
