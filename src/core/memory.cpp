#include "rdmakit/memory.hpp"

#include <cstring>

namespace rdmakit {
namespace {

// Descriptor wire format, little-endian: magic "RDKR", version, access, rkey, reserved, addr, length,
// owner_id, owner_epoch (48 bytes).
constexpr std::uint32_t kMagic = 0x524b4452;  // "RDKR" read as little-endian
constexpr std::uint16_t kVersion = 1;

template <typename T>
void put(std::byte*& out, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i) *out++ = static_cast<std::byte>((value >> (8 * i)) & 0xff);
}
template <typename T>
T get(const std::byte*& in) {
  T value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(std::to_integer<T>(*in++)) << (8 * i);
  return value;
}

}  // namespace

// Out of line: the destructor is the key function, so the vtable is emitted (and exported) from this one
// file in every build type, not wherever an optimizer happens to keep it (abi/librdmakit.symbols).
MemoryRegion::~MemoryRegion() = default;

std::string to_string(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::Host:
      return "host";
    case MemoryKind::Cuda:
      return "cuda";
    case MemoryKind::Auto:
      return "auto";
  }
  return "unknown";
}

std::string to_string(MemoryPath path) {
  switch (path) {
    case MemoryPath::Host:
      return "host";
    case MemoryPath::GpuDirectDmabuf:
      return "gpudirect-dmabuf";
    case MemoryPath::GpuDirectPeermem:
      return "gpudirect-peermem";
    case MemoryPath::CudaIpc:
      return "cuda-ipc";
    case MemoryPath::Staged:
      return "staged";
  }
  return "unknown";
}

std::string to_string(Access access) {
  if (access == Access::None) return "none";
  std::string text;
  auto add = [&](Access bit, const char* name) {
    if (!has(access, bit)) return;
    if (!text.empty()) text += '|';
    text += name;
  };
  add(Access::LocalWrite, "local_write");
  add(Access::RemoteWrite, "remote_write");
  add(Access::RemoteRead, "remote_read");
  add(Access::RemoteAtomic, "remote_atomic");
  return text;
}

RemoteRegion::Bytes RemoteRegion::serialize() const noexcept {
  Bytes bytes{};
  std::byte* out = bytes.data();
  put<std::uint32_t>(out, kMagic);
  put<std::uint16_t>(out, kVersion);
  put<std::uint16_t>(out, static_cast<std::uint16_t>(access));
  put<std::uint32_t>(out, rkey);
  put<std::uint32_t>(out, 0);
  put<std::uint64_t>(out, addr);
  put<std::uint64_t>(out, length);
  put<std::uint64_t>(out, owner_id);
  put<std::uint64_t>(out, owner_epoch);
  return bytes;
}

Result<RemoteRegion> RemoteRegion::deserialize(std::span<const std::byte> bytes) {
  if (bytes.size() != kSerializedSize)
    return fail(Errc::InvalidArgument, "remote descriptor must be " + std::to_string(kSerializedSize) +
                                           " bytes, got " + std::to_string(bytes.size()));
  const std::byte* in = bytes.data();
  if (get<std::uint32_t>(in) != kMagic)
    return fail(Errc::InvalidArgument, "not a remote descriptor (bad magic)");
  if (auto version = get<std::uint16_t>(in); version != kVersion)
    return fail(Errc::InvalidArgument,
                "remote descriptor version " + std::to_string(version) + " not supported");
  RemoteRegion region;
  auto access_bits = get<std::uint16_t>(in);
  if (access_bits & ~static_cast<std::uint16_t>(Access::All))
    return fail(Errc::InvalidArgument, "remote descriptor has unknown access bits");
  region.access = static_cast<Access>(access_bits);
  region.rkey = get<std::uint32_t>(in);
  // Reserved for a later version: a nonzero value is a field this version would silently drop.
  if (get<std::uint32_t>(in) != 0)
    return fail(Errc::InvalidArgument, "remote descriptor has nonzero reserved bits");
  region.addr = get<std::uint64_t>(in);
  region.length = get<std::uint64_t>(in);
  region.owner_id = get<std::uint64_t>(in);
  region.owner_epoch = get<std::uint64_t>(in);
  return region;
}

std::string RemoteRegion::to_hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  for (std::byte b : serialize()) {
    text += kDigits[std::to_integer<int>(b) >> 4];
    text += kDigits[std::to_integer<int>(b) & 15];
  }
  return text;
}

Result<RemoteRegion> RemoteRegion::from_hex(std::string_view hex) {
  if (hex.size() != 2 * kSerializedSize)
    return fail(Errc::InvalidArgument, "remote descriptor hex must be " +
                                           std::to_string(2 * kSerializedSize) + " characters, got " +
                                           std::to_string(hex.size()));
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  Bytes bytes{};
  for (std::size_t i = 0; i < kSerializedSize; ++i) {
    int high = nibble(hex[2 * i]), low = nibble(hex[2 * i + 1]);
    if (high < 0 || low < 0)
      return fail(Errc::InvalidArgument, "remote descriptor hex has a non-hex character");
    bytes[i] = static_cast<std::byte>(high * 16 + low);
  }
  return deserialize(bytes);
}

// Bounds checks written so that offset + length cannot wrap.
Result<RemoteAddress> RemoteRegion::at(std::uint64_t offset, std::uint64_t size) const {
  if (offset > length || size > length - offset)
    return fail(Errc::InvalidArgument, "RemoteRegion::at: bytes [" + std::to_string(offset) + ", " +
                                           std::to_string(offset) + " + " + std::to_string(size) +
                                           ") are outside the region of " + std::to_string(length) +
                                           " bytes");
  return at(offset);
}

Result<Segment> MemoryRegion::segment(std::uint64_t offset, std::uint64_t length) const {
  if (offset > size_ || length > size_ - offset)
    return fail(Errc::InvalidArgument, "MemoryRegion: bytes [" + std::to_string(offset) + ", " +
                                           std::to_string(offset) + " + " + std::to_string(length) +
                                           ") are outside the region of " + std::to_string(size_) + " bytes");
  if (length > kMaxSegmentLength)
    return fail(Errc::InvalidArgument, "MemoryRegion: " + std::to_string(length) +
                                           " bytes do not fit one Segment (at most " +
                                           std::to_string(kMaxSegmentLength) +
                                           ", ibv_sge's 32-bit length): post the range as several slices");
  return slice(offset, static_cast<std::uint32_t>(length));
}

}  // namespace rdmakit
