#include "core/soft_region.hpp"

#include "transport/provider.hpp"

namespace rdmakit {
namespace {

class SoftRegion final : public detail::MemoryRegionProvider {
 public:
  SoftRegion(std::shared_ptr<RegistrationTable> table, std::shared_ptr<const Context> owner, void* data,
             std::size_t size, Access access, RegistrationTable::Keys keys)
      : MemoryRegionProvider(data, size, access, keys.lkey, keys.rkey, owner->identity().id,
                             owner->identity().epoch),
        table_(std::move(table)),
        owner_(std::move(owner)) {}
  ~SoftRegion() override { table_->remove(lkey()); }
  void place(MemoryKind kind, int device, MemoryPath path) noexcept { set_placement(kind, device, path); }

 private:
  std::shared_ptr<RegistrationTable> table_;
  std::shared_ptr<const Context> owner_;
};

}  // namespace

Result<void> check_registration(const void* data, std::size_t size, Access access) {
  if (data == nullptr) return fail(Errc::InvalidArgument, "register_memory: buffer is null");
  if (size == 0) return fail(Errc::InvalidArgument, "register_memory: size is 0");
  if (static_cast<std::uint32_t>(access) & ~static_cast<std::uint32_t>(Access::All))
    return fail(Errc::InvalidArgument, "register_memory: unknown access bits");
  // The verbs rule (ibv_reg_mr returns EINVAL otherwise): remote write and atomic need local write.
  if ((has(access, Access::RemoteWrite) || has(access, Access::RemoteAtomic)) &&
      !has(access, Access::LocalWrite))
    return fail(Errc::InvalidArgument,
                "register_memory: RemoteWrite and RemoteAtomic need LocalWrite too (as in verbs), got " +
                    to_string(access));
  auto start = reinterpret_cast<std::uintptr_t>(data);
  if (start + size < start) return fail(Errc::InvalidArgument, "register_memory: range wraps around");
  return {};
}

Result<std::shared_ptr<MemoryRegion>> register_soft(std::shared_ptr<RegistrationTable> table,
                                                    std::shared_ptr<const Context> owner, void* data,
                                                    std::size_t size, Access access,
                                                    const detail::cuda::PointerInfo* device) {
  if (auto ok = check_registration(data, size, access); !ok) return std::unexpected(ok.error());
  auto keys = table->add(reinterpret_cast<std::uint64_t>(data), size, access, device != nullptr);
  if (!keys) return std::unexpected(keys.error());
  auto region = std::make_shared<SoftRegion>(std::move(table), std::move(owner), data, size, access, *keys);
  if (device) region->place(MemoryKind::Cuda, device->device, MemoryPath::Staged);
  return region;
}

}  // namespace rdmakit
