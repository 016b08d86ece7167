// Setting up a run: the control channel, `connections` data connections sharing one send and one receive
// completion queue, one registered buffer per side (one slot per connection) and the peer's descriptor.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "bootstrap/peer_proof.hpp"
#include "perf/control.hpp"
#include "perf/params.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit::perf {

struct Session {
  std::shared_ptr<Context> context;
  std::optional<ControlChannel> control;
  std::shared_ptr<Connection> control_connection;
  std::shared_ptr<CompletionQueue> send_cq;
  std::shared_ptr<CompletionQueue> recv_cq;
  std::vector<std::shared_ptr<Connection>> data;
  // data.size() slots of slot_bytes. A slot's first part receives the peer's WRITEs and SENDs (and is
  // what the peer READs); tests where a side both sends and receives (latency, -b) take their source
  // from the second half, at send_offset, so the two never share bytes.
  std::shared_ptr<MemoryRegion> local;
  RemoteRegion remote;  // the peer's buffer, same layout
  std::uint64_t slot_bytes = 0;
  std::uint64_t send_offset = 0;
  ControlMessage hello;  // what the client asked for (both sides keep it)
  // write_bw / read_bw: the bytes of each lane's areas that the initiator's operations walk (the Hello's
  // `ops`); 0: one message-sized slot.
  std::uint64_t working_set = 0;
  // --use-cuda: the CPU never touches device memory, so it fills and checks this host copy of `local`,
  // moved to and from the device with the CUDA runtime before and after each size (untimed). Empty for
  // host memory, where the areas are `local` itself.
  mutable std::vector<std::uint8_t> mirror;

  std::uint8_t* recv_area(std::size_t lane) const {
    auto* base = mirror.empty() ? static_cast<std::uint8_t*>(local->data()) : mirror.data();
    return base + lane * slot_bytes;
  }
  std::uint8_t* send_area(std::size_t lane) const { return recv_area(lane) + send_offset; }
  Segment recv_segment(std::size_t lane, std::uint64_t size) const {
    return local->slice(lane * slot_bytes, static_cast<std::uint32_t>(size));
  }
  Segment send_segment(std::size_t lane, std::uint64_t size) const {
    return local->slice(lane * slot_bytes + send_offset, static_cast<std::uint32_t>(size));
  }
  // Bytes of a receive area: receives are posted this long, so one left over from a smaller size
  // still takes a larger SEND.
  std::uint64_t recv_capacity() const { return send_offset ? send_offset : slot_bytes; }
  RemoteAddress remote_address(std::size_t lane) const { return remote.at(lane * slot_bytes); }
};

Result<std::shared_ptr<Context>> open_context(const Params& params);
// --use-cuda: copies the mirror into the device buffer (after the CPU prepared it) or back (before it
// checks it). No-ops for host memory.
Result<void> push_mirror(const Session& session);
Result<void> pull_mirror(const Session& session);
// Every connection, control and data, starts with a proof of the secret (bootstrap/peer_proof.hpp) before
// the server reads a control message or accepts a data lane: this is the key and label both sides use,
// from auth::service_secret for the server's `address`: the job secret; without one, the per-user secret
// where `address` is loopback or a local endpoint (shm), so a process of another uid gets nothing but a
// nonce; beyond loopback, an error naming job_secret and insecure unless insecure is set.
Result<bootstrap::PeerProofConfig> proof_config(const std::string& address, const Capabilities& caps);
// Client: connects to params.server, proves the secret and sends the shape of the run.
Result<Session> connect_session(const Params& params, std::shared_ptr<Context> context);
// Server: waits for one client on `listener` that proves the secret (strangers are closed and the wait
// goes on) and takes the shape of the run from it.
Result<Session> accept_session(const Params& params, std::shared_ptr<Context> context, Listener& listener);
// The address to listen on / connect to. "host" -> "host:<port>"; "host:port" unchanged. The shm
// transport names endpoints, not hosts (both sides are on one machine): "shm:..." is used as given,
// anything else becomes "shm:rdmakit-perf-<port>", so the same command lines work for every transport.
std::string endpoint(const std::string& address, std::uint16_t port, const Capabilities& caps);

}  // namespace rdmakit::perf
