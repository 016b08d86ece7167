// The engine's side of the peer-memory replica (src/ckpt/replica.hpp).
#include <charconv>
#include <cstring>

#include "bootstrap/auth.hpp"
#include "bootstrap/peer_proof.hpp"
#include "ckpt/checksum.hpp"
#include "ckpt/io.hpp"
#include "ckpt/manifest.hpp"
#include "ckpt/replica.hpp"
#include "ckpt/replica_channel.hpp"

namespace rdmakit::ckpt::detail {
namespace {

constexpr auto kReplyTimeout = std::chrono::milliseconds(120'000);  // a --persist server writes to disk first
constexpr std::uint64_t kProgressEvery = 32ull << 20;  // a Progress per this many bytes placed, at most

// A step of the connection that ran out of time says which server did not answer.
Error timed_out(const Error& error, const std::string& address, std::chrono::milliseconds timeout) {
  if (error.code() != Errc::Timeout) return error;
  return Error(Errc::Timeout, "ckpt replica: the server at " + address + " did not answer within " +
                                  std::to_string(timeout.count()) + " ms (" + error.message() + ")");
}

Result<Message> checked_reply(Result<Message> reply, MessageType type, const std::string& what) {
  if (!reply) return fail(reply.error().code(), "ckpt replica: " + what + ": " + reply.error().message());
  if (reply->type != type) return fail(Errc::ProtocolError, "ckpt replica: " + what + ": unexpected reply");
  if (reply->status != 0)
    return fail(Errc::Unavailable, "ckpt replica: " + what + " refused by the server: " + reply->text);
  return reply;
}

}  // namespace

struct ReplicaClient::State {
  std::shared_ptr<Context> context;
  std::shared_ptr<MemoryRegion> staging;  // the engine's staging, registered
  std::optional<Channel> channel;
  RemoteRegion remote;
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;
  std::uint64_t bytes = 0;
  std::string secret;                   // MACs of manifests (replica.hpp)
  std::optional<std::uint32_t> newest;  // the server's slot holding the newest verified replica
  std::uint64_t piece = 4u << 20;       // WRITE/READ size

  std::uint64_t slot_offset(std::uint32_t slot) const { return slot * replica_slot_bytes(bytes); }
  std::uint64_t manifest_offset(std::uint32_t slot) const {
    return slot_offset(slot) + round_up(bytes, kIoAlignment);
  }
  Message request(MessageType type) const { return Message{.type = type, .rank = rank}; }
};

Result<ReplicaClient> ReplicaClient::connect(const std::string& address, std::uint32_t rank,
                                             std::uint32_t world_size, unsigned char* staging,
                                             std::size_t staging_size, std::uint64_t bytes) {
  return connect(address, rank, world_size, staging, staging_size, bytes, Settings{});
}

Result<ReplicaClient> ReplicaClient::connect(const std::string& address, std::uint32_t rank,
                                             std::uint32_t world_size, unsigned char* staging,
                                             std::size_t staging_size, std::uint64_t bytes,
                                             const Settings& settings) {
  auto s = std::make_unique<State>();
  s->rank = rank;
  s->world_size = world_size;
  s->bytes = bytes;
  auto context = Context::open();
  if (!context) return std::unexpected(context.error());
  s->context = std::move(*context);
  auto caps = s->context->capabilities();
  if (caps.max_message_size) s->piece = std::min<std::uint64_t>(s->piece, caps.max_message_size);
  // The key: the job secret, else on a loopback server (or a same-host transport) the per-user secret.
  std::string host = caps.same_host_only ? "127.0.0.1" : host_of(address);
  auto secret = settings.secret.empty() ? bootstrap::auth::service_secret(host, kServiceName)
                                        : Result<std::string>(settings.secret);
  if (!secret) return std::unexpected(secret.error());
  s->secret = std::move(*secret);
  auto region = s->context->register_memory(staging, staging_size, Access::LocalWrite);
  if (!region) return std::unexpected(region.error());
  s->staging = std::move(*region);
  auto connection = s->context->connect(address);
  if (!connection) return std::unexpected(timed_out(connection.error(), address, settings.timeout));
  auto channel = Channel::create(*s->context, *connection, kReplicaManifestArea);
  if (!channel) return std::unexpected(channel.error());
  s->channel.emplace(std::move(*channel));
  // Nothing about this rank goes out, and nothing the server says is taken, before both proved the secret.
  bootstrap::PeerProofConfig proof{
      .secret = s->secret, .label = std::string(kProofLabel), .timeout = settings.timeout};
  auto proven = bootstrap::prove_initiate(*s->context, **connection, proof, rank_identity(rank));
  if (!proven) return std::unexpected(timed_out(proven.error(), address, settings.timeout));

  auto hello = s->request(MessageType::Hello);
  hello.world_size = world_size;
  hello.bytes = bytes;
  auto reply = checked_reply(s->channel->call(hello, settings.timeout), MessageType::HelloReply, "hello");
  if (!reply) return std::unexpected(timed_out(reply.error(), address, settings.timeout));
  auto remote = RemoteRegion::from_hex(reply->text);
  if (!remote) return std::unexpected(remote.error());
  if (remote->length < 2 * replica_slot_bytes(bytes))
    return fail(Errc::ProtocolError, "ckpt replica: the server's region is smaller than two slots");
  s->remote = *remote;
  if (reply->slot < 2) s->newest = reply->slot;
  return ReplicaClient(std::move(s));
}

ReplicaClient::ReplicaClient(std::unique_ptr<State> state) : state_(std::move(state)) {}
ReplicaClient::ReplicaClient(ReplicaClient&&) noexcept = default;
ReplicaClient& ReplicaClient::operator=(ReplicaClient&&) noexcept = default;
ReplicaClient::~ReplicaClient() = default;

Result<void> ReplicaClient::push(const Manifest& manifest) {
  if (auto ok = push_data(manifest.chunk_bytes); !ok) return ok;
  return push_manifest(manifest);
}

Result<void> ReplicaClient::push_data(std::uint64_t chunk_bytes) {
  auto& s = *state_;
  std::uint32_t slot = s.newest && *s.newest == 0 ? 1 : 0;  // never the newest complete one
  // A Progress before the first piece and then every 32 MiB tells the server a push is under way (it
  // defers its checksum passes meanwhile). One at a time, never waited for while pieces are in flight
  // (the server's thread may be asleep for a while): its reply is picked up at a later piece, or after
  // the last.
  std::uint64_t told = 0;
  bool awaiting = false;
  auto take_reply = [&](Result<Message> reply) -> Result<void> {
    awaiting = false;
    auto checked = checked_reply(std::move(reply), MessageType::ProgressReply, "progress");
    if (!checked) return std::unexpected(checked.error());
    return {};
  };
  auto tell = [&](std::uint64_t bytes) -> Result<void> {
    told = bytes;
    auto progress = s.request(MessageType::Progress);
    progress.slot = slot;
    progress.bytes = bytes;
    progress.manifest_bytes = chunk_bytes;
    if (auto ok = s.channel->expect(); !ok) return ok;
    if (auto ok = s.channel->send(progress); !ok) return ok;
    awaiting = true;
    return {};
  };
  auto placed = [&](std::uint64_t bytes) -> Result<void> {
    if (awaiting) {
      auto reply = s.channel->try_receive();
      if (!reply) return {};
      if (auto ok = take_reply(std::move(*reply)); !ok) return ok;
    }
    if (bytes < told + kProgressEvery && bytes != s.bytes) return {};
    return tell(bytes);
  };
  if (auto ok = tell(0); !ok) return ok;
  if (auto ok = transfer(s.channel->connection(), true, *s.staging, 0, s.remote.at(s.slot_offset(slot)),
                         s.bytes, s.piece, placed);
      !ok)
    return ok;
  if (awaiting) return take_reply(s.channel->receive(kReplyTimeout));
  return {};
}

Result<void> ReplicaClient::push_manifest(const Manifest& manifest) {
  auto& s = *state_;
  std::uint32_t slot = s.newest && *s.newest == 0 ? 1 : 0;  // the slot push_data() wrote
  auto text = encode_manifest(manifest);
  if (text.size() > kReplicaManifestArea)
    return fail(Errc::InvalidArgument, "ckpt replica: manifest too large");
  auto& channel = *s.channel;
  std::memcpy(static_cast<char*>(channel.region().data()) + channel.extra_offset(), text.data(), text.size());
  if (auto ok = transfer(channel.connection(), true, channel.region(), channel.extra_offset(),
                         s.remote.at(s.manifest_offset(slot)), text.size(), s.piece);
      !ok)
    return ok;
  auto commit = s.request(MessageType::Commit);
  commit.step = manifest.step;
  commit.slot = slot;
  commit.manifest_bytes = text.size();
  commit.text = manifest_mac(s.secret, s.rank, s.world_size, manifest.step, text);
  auto reply = checked_reply(channel.call(commit, kReplyTimeout), MessageType::CommitReply,
                             "step " + std::to_string(manifest.step));
  if (!reply) return std::unexpected(reply.error());
  s.newest = slot;
  return {};
}

Result<std::vector<std::uint64_t>> ReplicaClient::held_steps() {
  auto reply = checked_reply(state_->channel->call(state_->request(MessageType::Steps), kReplyTimeout),
                             MessageType::StepsReply, "steps");
  if (!reply) return std::unexpected(reply.error());
  std::vector<std::uint64_t> steps;
  std::string_view text = reply->text;
  while (!text.empty()) {
    auto end = text.find(' ');
    auto word = text.substr(0, end);
    std::uint64_t step = 0;
    auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), step);
    if (ec != std::errc{} || ptr != word.data() + word.size() || steps.size() == 2)
      return fail(Errc::ProtocolError, "ckpt replica: the server's list of steps is malformed");
    steps.push_back(step);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
  }
  return steps;
}

Result<std::uint64_t> ReplicaClient::newest_step() {
  auto reply = state_->channel->call(state_->request(MessageType::Fetch), kReplyTimeout);
  if (reply && reply->type == MessageType::FetchReply && reply->status != 0)
    return fail(Errc::NotFound, "ckpt replica: the server holds no replica of this rank");
  auto checked = checked_reply(std::move(reply), MessageType::FetchReply, "fetch");
  if (!checked) return std::unexpected(checked.error());
  return checked->step;
}

Result<Manifest> ReplicaClient::fetch() { return fetch_replica(std::nullopt); }
Result<Manifest> ReplicaClient::fetch(std::uint64_t step) { return fetch_replica(step); }

Result<Manifest> ReplicaClient::fetch_replica(std::optional<std::uint64_t> step) {
  auto& s = *state_;
  auto& channel = *s.channel;
  auto request = s.request(step ? MessageType::FetchStep : MessageType::Fetch);
  request.step = step.value_or(0);
  auto reply = channel.call(request, kReplyTimeout);
  if (reply && reply->type == MessageType::FetchReply && reply->status != 0)
    return fail(Errc::NotFound,
                "ckpt replica: the server holds no such replica of this rank (" + reply->text + ")");
  auto checked = checked_reply(std::move(reply), MessageType::FetchReply, "fetch");
  if (!checked) return std::unexpected(checked.error());
  if (checked->slot > 1 || checked->bytes != s.bytes || checked->manifest_bytes == 0 ||
      checked->manifest_bytes > kReplicaManifestArea)
    return fail(Errc::ProtocolError, "ckpt replica: the server's fetch reply does not fit this engine");
  if (auto ok = transfer(channel.connection(), false, channel.region(), channel.extra_offset(),
                         s.remote.at(s.manifest_offset(checked->slot)), checked->manifest_bytes, s.piece);
      !ok)
    return std::unexpected(ok.error());
  std::string_view text(static_cast<const char*>(channel.region().data()) + channel.extra_offset(),
                        checked->manifest_bytes);
  // The MAC first: a manifest no holder of the secret wrote for this rank, world size and step (a stranger's
  // scribble, a hostile server's invention) is not even decoded.
  if (checked->text != manifest_mac(s.secret, s.rank, s.world_size, checked->step, text))
    return fail(Errc::ProtocolError,
                "ckpt replica: the replica's manifest is not authenticated (its MAC "
                "does not verify under this job's secret)");
  auto manifest = decode_manifest(text);
  if (!manifest) return fail(Errc::ProtocolError, "ckpt replica: " + manifest.error().message());
  if (manifest->files.size() != 1 || manifest->files[0].size != s.bytes || manifest->step != checked->step ||
      (step && manifest->step != *step) || manifest->rank != s.rank || manifest->world_size != s.world_size)
    return fail(Errc::ProtocolError, "ckpt replica: the replica's manifest does not fit this engine");
  if (auto ok = transfer(channel.connection(), false, *s.staging, 0,
                         s.remote.at(s.slot_offset(checked->slot)), s.bytes, s.piece);
      !ok)
    return std::unexpected(ok.error());
  const auto* data = static_cast<const unsigned char*>(s.staging->data());
  for (std::size_t i = 0; i < manifest->chunks.size(); ++i) {
    const auto& c = manifest->chunks[i];
    if (c.source_step || checksum64(data + c.offset, c.size) != c.checksum)
      return fail(Errc::ProtocolError, "ckpt replica: step " + std::to_string(manifest->step) +
                                           ": checksum mismatch in chunk " + std::to_string(i));
  }
  return manifest;
}

}  // namespace rdmakit::ckpt::detail
