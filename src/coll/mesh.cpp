#include "coll/mesh.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "coll/handshake.hpp"
#include "coll/hierarchy.hpp"
#include "core/log.hpp"
#include "core/net.hpp"

namespace rdmakit::coll::detail {
namespace {

struct Layout {
  std::vector<std::string> hosts;  // by rank
  bool split = false;              // same-host peers go over the local transport

  bool local(int a, int b) const {
    return split && hosts[static_cast<std::size_t>(a)] == hosts[static_cast<std::size_t>(b)];
  }
  const char* kind(int a, int b) const { return local(a, b) ? "local" : "net"; }
  // The ranks `owner` reaches through fabric `kind`, ascending.
  std::vector<int> members(int owner, std::string_view kind) const {
    std::vector<int> out;
    for (int q = 0; q < static_cast<int>(hosts.size()); ++q)
      if (q != owner && this->kind(owner, q) == kind) out.push_back(q);
    return out;
  }
};

std::string key(const MeshConfig& config, const std::string& what) {
  return config.key_prefix + "coll/" + what;
}

Error missing_rank(const Error& error, int rank, int size, std::chrono::milliseconds timeout) {
  if (error.code() != Errc::Timeout) return error;
  return Error(Errc::Timeout, "bootstrap: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                  " did not show up within " + std::to_string(timeout.count()) +
                                  " ms (RDMAKIT_BOOTSTRAP_TIMEOUT_MS); is it running?");
}

// Phase 1: who lives where.
Result<Layout> meet(bootstrap::Store& store, const MeshConfig& config, int rank, int size) {
  Layout layout;
  layout.split = config.local_transport != config.network_transport;
  std::string mine = (layout.split ? "1" : "0") + config.host_id;
  if (auto ok = store.set(key(config, "host/" + std::to_string(rank)), mine); !ok)
    return std::unexpected(ok.error());
  for (int q = 0; q < size; ++q) {
    auto value = store.get(key(config, "host/" + std::to_string(q)), config.bootstrap_timeout);
    if (!value) return std::unexpected(missing_rank(value.error(), q, size, config.bootstrap_timeout));
    if (value->empty() || (*value)[0] != mine[0])
      return fail(Errc::InvalidArgument,
                  "coll: rank " + std::to_string(q) +
                      " uses a different local transport "
                      "setting (RDMAKIT_COLL_LOCAL_TRANSPORT must agree on every rank)");
    layout.hosts.push_back(value->substr(1));
  }
  return layout;
}

// The key every connection's handshake proves (auth::service_secret): the job secret when one is set;
// without one, the per-user secret when the network listener stays on loopback (a process of another uid
// cannot read it, so it cannot join as a rank; ranks on hosts simulated on this one prove it too). A
// listener beyond loopback needs the job secret, or option insecure to run unauthenticated. (verbs binds
// the device for a loopback listen_address; a rank elsewhere without our home directory then fails the
// handshake, which says to set RDMAKIT_JOB_SECRET.)
Result<std::string> connection_secret(const MeshConfig& config) {
  std::string host = "127.0.0.1";  // the transports' default listen_address
  if (!config.listen_address.empty()) {
    // Not host:port: an endpoint name (shm:...), which only this machine can reach.
    auto named = net::parse_host_port(config.listen_address);
    if (named) host = named->host.empty() ? "0.0.0.0" : named->host;
  }
  return bootstrap::auth::service_secret(host, "the communicator's connections", config.secret);
}

// Phase 2: a context, staging and a listener per fabric, published.
Result<void> open_fabric(bootstrap::Store& store, const MeshConfig& config, Exchange& ex,
                         const Layout& layout, const char* kind) {
  std::vector<int> members = layout.members(ex.rank(), kind);
  if (members.empty()) return {};
  bool local = std::string_view(kind) == "local";
  Options options{.transport = local ? config.local_transport : config.network_transport,
                  .name = "rdmakit-coll:" + std::to_string(getpid()) + ":" + config.key_prefix + ":" +
                          std::to_string(ex.rank())};
  if (!local && !config.listen_address.empty()) options.listen_address = config.listen_address;
  auto context = Context::open(options);
  if (!context) return std::unexpected(context.error());
  auto fabric = std::make_unique<Fabric>();
  fabric->name = std::string((*context)->transport());
  fabric->context = *context;
  fabric->peers = members;
  fabric->chunk = ex.chunk_for(fabric->context->capabilities());
  std::size_t bytes = members.size() * ex.slots() * fabric->chunk;
  // One queue for every peer of this fabric, sends and receives: per peer 2 * slots + a few receives and
  // `slots` signaled WRITEs can complete before the rank polls (and all of them flush at a failure).
  // A queue that small would overflow on verbs, so size it for that, never below the configured depth.
  std::size_t cq_depth = std::max<std::size_t>(fabric->context->config().cq_depth,
                                               members.size() * (4 * std::size_t{ex.slots()} + 16));
  auto cq = fabric->context->create_cq(cq_depth);
  auto inbound = fabric->context->allocate(bytes, Access::LocalWrite | Access::RemoteWrite);
  auto outbound = fabric->context->allocate(bytes, Access::LocalWrite);
  auto listener = fabric->context->listen();
  for (const Error* e : {cq ? nullptr : &cq.error(), inbound ? nullptr : &inbound.error(),
                         outbound ? nullptr : &outbound.error(), listener ? nullptr : &listener.error()})
    if (e) return std::unexpected(Error(e->code(), "coll: setting up " + fabric->name + ": " + e->message()));
  fabric->cq = *cq, fabric->inbound = *inbound, fabric->outbound = *outbound, fabric->listener = *listener;
  // Only the address: the staging descriptor is handed to proven peers in the handshake.
  if (auto ok = store.set(key(config, std::string(kind) + "/" + std::to_string(ex.rank())),
                          fabric->listener->address());
      !ok)
    return std::unexpected(ok.error());
  ex.fabrics().push_back(std::move(fabric));
  return {};
}

Fabric* fabric_for(Exchange& ex, const Layout& layout, int q) {
  for (auto& f : ex.fabrics())
    if (std::binary_search(f->peers.begin(), f->peers.end(), q)) return f.get();
  (void)layout;
  return nullptr;
}

// Phase 3a: point the Peer at its slots here (the remote slots come from the handshake).
void prepare_peer(Exchange& ex, const Layout& layout, int q) {
  Peer& p = ex.peer(q);
  Fabric* fabric = fabric_for(ex, layout, q);
  auto mine = static_cast<std::size_t>(std::find(fabric->peers.begin(), fabric->peers.end(), q) -
                                       fabric->peers.begin());
  std::size_t area = ex.slots() * fabric->chunk;
  p.rank = q;
  p.fabric = fabric;
  p.inbound = static_cast<std::byte*>(fabric->inbound->data()) + mine * area;
  p.outbound = static_cast<std::byte*>(fabric->outbound->data()) + mine * area;
  p.outbound_lkey = fabric->outbound->lkey();
}

// This rank's slots inside peer q's staging region, checked against the region's length.
Result<void> set_remote(Exchange& ex, const Layout& layout, int q, const RemoteRegion& region) {
  std::vector<int> theirs = layout.members(q, layout.kind(ex.rank(), q));
  auto index = static_cast<std::size_t>(std::find(theirs.begin(), theirs.end(), ex.rank()) - theirs.begin());
  std::size_t area = ex.slots() * fabric_for(ex, layout, q)->chunk;
  if (region.length < (index + 1) * area)
    return fail(Errc::ProtocolError, "coll: rank " + std::to_string(q) +
                                         " offered a staging region too small for " + "this rank's slots");
  ex.peer(q).remote = region.at(index * area);
  return {};
}

HandshakeConfig handshake_config(const MeshConfig& config, const Exchange& ex, const Fabric& fabric,
                                 std::chrono::milliseconds timeout) {
  return HandshakeConfig{.secret = config.secret,
                         .job = config.key_prefix + "/" + fabric.name,
                         .world = ex.size(),
                         .timeout = timeout};
}

// The longest a connection may take to prove itself at an acceptor: a stranger who connects and stays
// silent delays the real ranks behind it by at most this much.
constexpr auto kProofLimit = std::chrono::milliseconds(5000);  // under the default connect_timeout_ms

// Phase 3b, accepting side: every higher rank of this fabric connects here and proves who it is. A
// connection that fails to is closed and the next one accepted, so a stranger cannot fail the job.
Result<void> accept_all(const MeshConfig& config, Fabric& fabric, Exchange& ex, const Layout& layout) {
  auto expected = static_cast<std::size_t>(
      std::count_if(fabric.peers.begin(), fabric.peers.end(), [&](int q) { return q > ex.rank(); }));
  auto deadline = std::chrono::steady_clock::now() + config.bootstrap_timeout;
  std::vector<std::shared_ptr<Connection>> refused;  // closed by the handshake; counted for the error message
  auto acceptable = [&](int q) {
    return q > ex.rank() && q < ex.size() &&
           std::binary_search(fabric.peers.begin(), fabric.peers.end(), q) && !ex.peer(q).connection;
  };
  for (std::size_t done = 0; done < expected;) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    auto connection = fabric.listener->accept(std::max(left, std::chrono::milliseconds(1)),
                                              ConnectOptions{fabric.cq, fabric.cq});
    if (!connection)
      return std::unexpected(
          Error(connection.error().code(),
                "coll: rank " + std::to_string(ex.rank()) + ": " + std::to_string(expected - done) +
                    " higher rank(s) did not connect" +
                    (refused.empty() ? ""
                                     : " (" + std::to_string(refused.size()) +
                                           " connection(s) refused for failing the handshake)") +
                    ": " + connection.error().message()));
    auto proven = handshake_accept(
        *fabric.context, **connection,
        handshake_config(config, ex, fabric, std::min(left, std::chrono::milliseconds(kProofLimit))),
        ex.rank(), fabric.inbound->descriptor(), acceptable);
    if (!proven) {
      log::warn("coll", "rank " + std::to_string(ex.rank()) + " refused a connection from " +
                            (*connection)->peer().address + ": " + proven.error().message());
      refused.push_back(std::move(*connection));
      continue;
    }
    if (auto ok = set_remote(ex, layout, proven->rank, proven->region); !ok) return ok;
    ex.peer(proven->rank).connection = *connection;
    ++done;
  }
  return {};
}

Result<void> connect_to(const MeshConfig& config, Exchange& ex, const Layout& layout, int q,
                        const std::string& address) {
  Fabric* f = ex.peer(q).fabric;
  auto connection = f->context->connect(address, ConnectOptions{f->cq, f->cq});
  if (!connection)
    return std::unexpected(Error(connection.error().code(), "coll: connecting to rank " + std::to_string(q) +
                                                                " at " + address + ": " +
                                                                connection.error().message()));
  auto region = handshake_initiate(*f->context, **connection,
                                   handshake_config(config, ex, *f, config.bootstrap_timeout), ex.rank(), q,
                                   f->inbound->descriptor());
  if (!region)
    return std::unexpected(Error(region.error().code(),
                                 "coll: rank " + std::to_string(ex.rank()) + ": handshake with rank " +
                                     std::to_string(q) + " at " + address + ": " + region.error().message()));
  if (auto ok = set_remote(ex, layout, q, *region); !ok) return ok;
  ex.peer(q).connection = *connection;
  return {};
}

Result<void> connect_all(bootstrap::Store& store, const MeshConfig& config, Exchange& ex,
                         const Layout& layout) {
  for (int q = 0; q < ex.size(); ++q)
    if (q != ex.rank()) prepare_peer(ex, layout, q);
  std::vector<std::thread> acceptors;
  std::vector<Result<void>> accepted(ex.fabrics().size());
  for (std::size_t i = 0; i < ex.fabrics().size(); ++i)
    acceptors.emplace_back([&, i] { accepted[i] = accept_all(config, *ex.fabrics()[i], ex, layout); });
  Result<void> connected;
  for (int q = 0; q < ex.rank() && connected; ++q) {
    const char* kind = layout.kind(ex.rank(), q);
    auto address =
        store.get(key(config, std::string(kind) + "/" + std::to_string(q)), config.bootstrap_timeout);
    if (!address)
      connected = std::unexpected(missing_rank(address.error(), q, ex.size(), config.bootstrap_timeout));
    else
      connected = connect_to(config, ex, layout, q, *address);
  }
  for (auto& t : acceptors) t.join();
  if (!connected) return connected;
  for (auto& a : accepted)
    if (!a) return a;
  for (int q = 0; q < ex.size(); ++q)
    if (q != ex.rank()) ex.peer(q).fabric->rank_of_connection[ex.peer(q).connection->number()] = q;
  return {};
}

}  // namespace

std::string default_host_id() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::error_code ignored;
  auto netns = std::filesystem::read_symlink("/proc/self/ns/net", ignored);
  return std::string(host) + "/" + netns.string();
}

Result<MeshInfo> build_mesh(bootstrap::Store& store, const MeshConfig& given, Exchange& ex) {
  MeshConfig config = given;
  auto secret = connection_secret(given);
  if (!secret) return std::unexpected(Error(secret.error().code(), "coll: " + secret.error().message()));
  config.secret = std::move(*secret);
  auto layout = meet(store, config, ex.rank(), ex.size());
  if (!layout) return std::unexpected(layout.error());
  for (const char* kind : {"local", "net"})
    if (auto ok = open_fabric(store, config, ex, *layout, kind); !ok) return std::unexpected(ok.error());
  if (auto ok = connect_all(store, config, ex, *layout); !ok) return std::unexpected(ok.error());
  if (auto ok = ex.arm(); !ok) return std::unexpected(ok.error());
  MeshInfo info;
  const std::string& mine = layout->hosts[static_cast<std::size_t>(ex.rank())];
  info.local_rank =
      static_cast<int>(std::count(layout->hosts.begin(), layout->hosts.begin() + ex.rank(), mine));
  info.local_size = static_cast<int>(std::count(layout->hosts.begin(), layout->hosts.end(), mine));
  info.host_of = number_hosts(layout->hosts);
  for (auto& f : ex.fabrics()) info.transports += (info.transports.empty() ? "" : "+") + f->name;
  if (info.transports.empty()) info.transports = "none";
  return info;
}

}  // namespace rdmakit::coll::detail
