#include "xfer/engine/record.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>

namespace rdmakit::xfer::detail {
namespace {

constexpr std::uint32_t kMagic = 0x31535852;  // "RXS1"
constexpr std::size_t kMaxString = 4096;
constexpr std::size_t kMaxRails = 64;

class Writer {
 public:
  void u32(std::uint32_t v) { raw(&v, sizeof v); }
  void u64(std::uint64_t v) { raw(&v, sizeof v); }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void raw(const void* data, std::size_t size) {
    const auto* p = static_cast<const std::byte*>(data);
    out.insert(out.end(), p, p + size);
  }
  std::vector<std::byte> out;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  bool raw(void* data, std::size_t size) {
    if (in_.size() - pos_ < size) return false;
    std::memcpy(data, in_.data() + pos_, size);
    pos_ += size;
    return true;
  }
  bool u32(std::uint32_t& v) { return raw(&v, sizeof v); }
  bool u64(std::uint64_t& v) { return raw(&v, sizeof v); }
  bool str(std::string& s) {
    std::uint32_t size = 0;
    if (!u32(size) || size > kMaxString || in_.size() - pos_ < size) return false;
    s.assign(reinterpret_cast<const char*>(in_.data() + pos_), size);
    pos_ += size;
    return true;
  }
  std::span<const std::byte> take(std::size_t size) {
    if (in_.size() - pos_ < size) return {};
    auto out = in_.subspan(pos_, size);
    pos_ += size;
    return out;
  }
  bool at_end() const { return pos_ == in_.size(); }

 private:
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

Result<RailEntry> decode_rail(Reader& reader) {
  RailEntry rail;
  if (!reader.str(rail.transport) || !reader.str(rail.address)) {
    return fail(Errc::ProtocolError, "segment record: truncated rail");
  }
  auto bytes = reader.take(RemoteRegion::kSerializedSize);
  if (bytes.empty()) return fail(Errc::ProtocolError, "segment record: truncated descriptor");
  auto region = RemoteRegion::deserialize(bytes);
  if (!region) return fail(Errc::ProtocolError, "segment record: " + region.error().message());
  rail.region = *region;
  return rail;
}

}  // namespace

std::string segment_key(std::string_view name) { return "xfer/segment/" + std::string(name); }

std::vector<std::byte> encode(const SegmentRecord& record) {
  Writer w;
  w.u32(kMagic);
  w.str(record.owner);
  w.str(record.host);
  w.u64(record.length);
  w.u32(static_cast<std::uint32_t>(record.rails.size()));
  for (const auto& rail : record.rails) {
    w.str(rail.transport);
    w.str(rail.address);
    auto bytes = rail.region.serialize();
    w.raw(bytes.data(), bytes.size());
  }
  return std::move(w.out);
}

Result<SegmentRecord> decode(std::span<const std::byte> bytes) {
  Reader r(bytes);
  std::uint32_t magic = 0, rails = 0;
  SegmentRecord record;
  if (!r.u32(magic) || magic != kMagic) return fail(Errc::ProtocolError, "segment record: bad magic");
  if (!r.str(record.owner) || !r.str(record.host) || !r.u64(record.length) || !r.u32(rails)) {
    return fail(Errc::ProtocolError, "segment record: truncated header");
  }
  if (rails == 0 || rails > kMaxRails) {
    return fail(Errc::ProtocolError, "segment record: " + std::to_string(rails) + " rails");
  }
  for (std::uint32_t i = 0; i < rails; ++i) {
    auto rail = decode_rail(r);
    if (!rail) return std::unexpected(rail.error());
    if (rail->region.length < record.length) {
      return fail(Errc::ProtocolError, "segment record: a descriptor shorter than the segment");
    }
    record.rails.push_back(std::move(*rail));
  }
  if (!r.at_end()) return fail(Errc::ProtocolError, "segment record: trailing bytes");
  return record;
}

std::string host_id() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat ns {};
  std::uint64_t netns = ::stat("/proc/self/ns/net", &ns) == 0 ? ns.st_ino : 0;
  return boot + "/net:" + std::to_string(netns);
}

std::vector<const RailEntry*> rails_of(const SegmentRecord& record, std::string_view transport) {
  std::vector<const RailEntry*> out;
  for (const auto& rail : record.rails) {
    if (rail.transport == transport) out.push_back(&rail);
  }
  return out;
}

Result<std::string> choose_transport(std::span<const OfferedTransport> local, std::string_view local_host,
                                     const SegmentRecord& record, std::string_view forced) {
  auto offered_by_owner = [&](const OfferedTransport& t) { return !rails_of(record, t.name).empty(); };
  if (!forced.empty()) {
    auto it = std::ranges::find(local, forced, &OfferedTransport::name);
    if (it != local.end() && offered_by_owner(*it)) return std::string(forced);
    return fail(Errc::NotSupported, "transport '" + std::string(forced) +
                                        "' is not offered by both this engine "
                                        "and '" +
                                        record.owner + "'");
  }
  const bool same_host = local_host == record.host;
  // Lower is better; -1: cannot reach the owner.
  auto preference = [&](const OfferedTransport& t) {
    if (!offered_by_owner(t) || (t.same_host_only && !same_host)) return -1;
    return t.same_host_only ? 0 : t.kernel_bypass ? 1 : 2;
  };
  const OfferedTransport* best = nullptr;
  for (const OfferedTransport& t : local) {
    int rank = preference(t);
    if (rank >= 0 && (!best || rank < preference(*best))) best = &t;
  }
  if (best) return best->name;
  return fail(
      Errc::NotSupported,
      "no transport in common with '" + record.owner + "'" +
          (same_host ? "" : " (another host: a same-host-only transport such as shm cannot reach it)"));
}

}  // namespace rdmakit::xfer::detail
