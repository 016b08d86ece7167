// The engine's memory: local registrations and published segments, host or CUDA device memory. A
// transport that refuses device memory (Errc::NotSupported at registration) is left out for that memory:
// its segments do not offer it, and requests between that memory and a segment reached over it are refused
// at submit() naming the refusal, never posted.
#include <algorithm>

#include "xfer/engine/engine_impl.hpp"

namespace rdmakit::xfer::detail {
namespace {

constexpr Access kSegmentAccess = Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead;

void add_refusal(std::string& refusals, const std::string& transport, const Error& error) {
  if (!refusals.empty()) refusals += "; ";
  refusals += transport + ": " + error.message();
}

}  // namespace

// Registers on every rail, then leaves out each transport one of whose rails refused (every rail of a
// transport a peer may pick must hold the memory). Errors other than a refusal fail the call.
Result<std::shared_ptr<LocalRegion>> EngineImpl::register_everywhere(void* data, std::size_t size,
                                                                     MemoryKind kind,
                                                                     std::shared_ptr<MemoryRegion> first,
                                                                     std::size_t first_rail) {
  auto region = std::make_shared<LocalRegion>();
  region->addr = reinterpret_cast<std::uint64_t>(data);
  region->size = size;
  region->allocation = first;
  std::vector<std::string> refused;
  for (auto& rail : rails_) {
    if (first && rail->index == first_rail) {
      region->by_rail.push_back(first);
      continue;
    }
    auto registered = std::ranges::find(refused, rail->transport) != refused.end()
                          ? Result<std::shared_ptr<MemoryRegion>>{nullptr}
                          : rail->context->register_memory(data, size, kSegmentAccess, kind);
    if (!registered && registered.error().code() != Errc::NotSupported)
      return std::unexpected(registered.error());
    if (!registered) {
      refused.push_back(rail->transport);
      add_refusal(region->refusals, rail->transport, registered.error());
    }
    region->by_rail.push_back(registered ? *registered : nullptr);
  }
  for (auto& rail : rails_) {
    auto& registration = region->by_rail[rail->index];
    if (std::ranges::find(refused, rail->transport) != refused.end()) {
      registration.reset();  // a transport is taken whole or not at all
    } else if (registration) {
      region->kind = registration->kind();
      if (!region->reaches(rail->transport)) region->transports.push_back(rail->transport);
    }
  }
  if (region->transports.empty())
    return fail(Errc::NotSupported,
                "xfer: no rail of this engine takes the memory (" + region->refusals + ")");
  std::unique_lock lock(table_);
  auto overlap = locals_.lower_bound(region->addr + size);
  if (overlap != locals_.begin() &&
      std::prev(overlap)->second->addr + std::prev(overlap)->second->size > region->addr) {
    return fail(Errc::InvalidArgument,
                "xfer: memory at " + std::to_string(region->addr) + " overlaps memory registered before");
  }
  region->id = next_local_id_++;
  locals_[region->addr] = region;
  locals_by_id_[region->id] = region;
  return region;
}

Result<void> EngineImpl::register_local(void* data, std::size_t size) {
  return register_local(data, size, MemoryKind::Auto);
}

Result<void> EngineImpl::register_local(void* data, std::size_t size, MemoryKind kind) {
  if (data == nullptr || size == 0) return fail(Errc::InvalidArgument, "register_local: empty memory");
  auto region = register_everywhere(data, size, kind, nullptr);
  if (!region) return std::unexpected(region.error());
  return {};
}

Result<void> EngineImpl::unregister_local(void* data) {
  std::unique_lock lock(table_);
  auto it = locals_.find(reinterpret_cast<std::uint64_t>(data));
  if (it == locals_.end())
    return fail(Errc::NotFound, "unregister_local: no memory registered at that address");
  // Work requests in flight keep their region (and its registrations) alive until they complete.
  locals_by_id_.erase(it->second->id);
  locals_.erase(it);
  return {};
}

// Device memory from the first rail whose transport takes it; `rail` is set to that rail's index.
Result<std::shared_ptr<MemoryRegion>> EngineImpl::allocate_device(std::size_t size, std::size_t& rail) {
  std::string refusals;
  for (auto& candidate : rails_) {
    auto allocated = candidate->context->allocate(size, kSegmentAccess, MemoryKind::Cuda);
    if (allocated) {
      rail = candidate->index;
      return allocated;
    }
    if (allocated.error().code() != Errc::NotSupported) return allocated;
    add_refusal(refusals, candidate->transport, allocated.error());
  }
  return fail(Errc::NotSupported, "xfer: no rail of this engine takes device memory (" + refusals + ")");
}

Result<std::span<std::byte>> EngineImpl::allocate_segment(std::string_view name, std::size_t size) {
  return allocate_segment(name, size, MemoryKind::Host);
}

Result<std::span<std::byte>> EngineImpl::allocate_segment(std::string_view name, std::size_t size,
                                                          MemoryKind kind) {
  if (size == 0) return fail(Errc::InvalidArgument, "allocate_segment '" + std::string(name) + "': size 0");
  auto region = allocate_registered(size, kind);
  if (!region) return std::unexpected(region.error());
  void* data = reinterpret_cast<void*>((*region)->addr);
  if (auto published = publish_region(name, *region); !published) {
    (void)unregister_local(data);
    return std::unexpected(published.error());
  }
  return std::span<std::byte>(static_cast<std::byte*>(data), size);
}

Result<std::shared_ptr<LocalRegion>> EngineImpl::allocate_registered(std::size_t size, MemoryKind kind) {
  std::size_t rail = 0;
  auto first = kind == MemoryKind::Cuda ? allocate_device(size, rail)
                                        : rails_.front()->context->allocate(size, kSegmentAccess);
  if (!first) return std::unexpected(first.error());
  return register_everywhere((*first)->data(), size, (*first)->kind(), *first, rail);
}

Result<void> EngineImpl::publish(std::string_view name, void* data, std::size_t size) {
  return publish(name, data, size, MemoryKind::Auto);
}

Result<void> EngineImpl::publish(std::string_view name, void* data, std::size_t size, MemoryKind kind) {
  if (data == nullptr || size == 0)
    return fail(Errc::InvalidArgument, "publish '" + std::string(name) + "': empty");
  auto region = find_local(reinterpret_cast<std::uint64_t>(data), size);
  if (!region || region->addr != reinterpret_cast<std::uint64_t>(data) || region->size != size) {
    auto registered = register_everywhere(data, size, kind, nullptr);
    if (!registered) return std::unexpected(registered.error());
    region = *registered;
  }
  return publish_region(name, region);
}

// The record offers the rails that registered the region, and no other: a peer choosing a transport for
// this segment can only choose one that reaches it.
Result<void> EngineImpl::publish_region(std::string_view name, std::shared_ptr<LocalRegion> region) {
  if (name.empty()) return fail(Errc::InvalidArgument, "publish: empty segment name");
  std::lock_guard lock(control_);
  if (published_.contains(name) || published_files_.contains(name)) {
    return fail(Errc::InvalidArgument, "publish: segment '" + std::string(name) + "' is already published");
  }
  SegmentRecord record{options_.name, host_, region->size, {}};
  for (auto& rail : rails_) {
    const auto& registration = region->by_rail[rail->index];
    if (registration)
      record.rails.push_back({rail->transport, rail->listener->address(), registration->descriptor()});
  }
  auto sealed = seal(record, name, secret_);
  if (!sealed) return std::unexpected(sealed.error());
  if (auto put = metadata_.publish(segment_key(name), *sealed); !put) return put;
  published_.emplace(std::string(name), std::move(region));
  unready_.erase(std::string(name));
  std::lock_guard names(notifications_mutex_);
  ready_names_.emplace(name);
  return {};
}

Result<std::span<std::byte>> EngineImpl::allocate_unpublished(std::string_view name, std::size_t size,
                                                              MemoryKind kind) {
  if (name.empty()) return fail(Errc::InvalidArgument, "allocate_unpublished: empty segment name");
  if (size == 0)
    return fail(Errc::InvalidArgument, "allocate_unpublished '" + std::string(name) + "': size 0");
  {
    std::lock_guard lock(control_);
    if (published_.contains(name) || unready_.contains(name))
      return fail(Errc::InvalidArgument,
                  "allocate_unpublished: segment '" + std::string(name) + "' is already ours");
  }
  auto region = allocate_registered(size, kind);
  if (!region) return std::unexpected(region.error());
  void* data = reinterpret_cast<void*>((*region)->addr);
  std::lock_guard lock(control_);
  if (!unready_.emplace(std::string(name), *region).second) {
    (void)unregister_local(data);
    return fail(Errc::InvalidArgument,
                "allocate_unpublished: segment '" + std::string(name) + "' is already ours");
  }
  return std::span<std::byte>(static_cast<std::byte*>(data), size);
}

// Nothing of the segment was in the metadata before: a reader that looked it up got NotFound, never memory
// the owner had not filled yet.
Result<void> EngineImpl::publish_ready(std::string_view name) {
  std::shared_ptr<LocalRegion> region;
  {
    std::lock_guard lock(control_);
    auto it = unready_.find(name);
    if (it == unready_.end()) {
      return fail(
          published_.contains(name) ? Errc::InvalidArgument : Errc::NotFound,
          "publish_ready: '" + std::string(name) +
              (published_.contains(name) ? "' is published already" : "' was not allocated unpublished"));
    }
    region = it->second;
  }
  return publish_region(name, std::move(region));
}

Result<void> EngineImpl::unpublish(std::string_view name) {
  std::lock_guard lock(control_);
  if (unready_.erase(std::string(name)) != 0)
    return {};  // never visible: nothing to remove from the metadata
  if (auto file = published_files_.find(name); file != published_files_.end()) {
    published_files_.erase(file);
    {
      std::lock_guard names(notifications_mutex_);
      ready_names_.erase(std::string(name));
    }
    // Metadata first: a peer that resolves the name now finds nothing; one that still has it cached gets
    // "not published" from the server for its next request.
    auto removed = metadata_.unpublish(segment_key(name));
    if (auto server = file_server()) unpublish_file(*server, name);
    return removed;
  }
  auto it = published_.find(name);
  if (it == published_.end())
    return fail(Errc::NotFound, "unpublish: '" + std::string(name) + "' is not ours");
  {
    std::lock_guard names(notifications_mutex_);
    ready_names_.erase(std::string(name));
  }
  auto removed = metadata_.unpublish(segment_key(name));
  published_.erase(it);
  return removed;
}

}  // namespace rdmakit::xfer::detail
