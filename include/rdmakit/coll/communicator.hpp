// A communicator: a group of ranks and the collectives they run together.
//
//   auto comm = rdmakit::coll::Communicator::from_environment();   // torchrun, mpirun or srun set the env
//   comm->allreduce(grad.data(), grad.data(), grad.size(), DataType::F32, ReduceOp::Avg);
//
// Every collective has a blocking form and an _async form returning a Work handle. Collectives run in
// the order they were issued on every rank (issue them in the same order everywhere, as with MPI and
// NCCL); several may be in flight, and they complete in that order. Buffers passed to an _async call
// must stay valid and untouched until its Work is waited for. `send == recv` is in-place.
//
// Data moves as one-sided WRITE-with-immediate into staging memory each rank registers once, at
// creation: ranks on one host over shm, others over the network transport (RDMAKIT_TRANSPORT, tcp by
// default). A failure (a peer died, a timeout) fails the collective with an Error naming the rank to blame,
// fails every later collective too, and closes the connections so the other ranks learn of it at once.
// Every survivor names the same rank: the one that died ("rank 2 died or closed its connections") or
// stopped ("rank 2 stopped responding"), not the neighbour it was waiting for. A rank that times out asks
// the others what they wait for and follows that chain to the rank that does not answer (which takes up to
// a quarter of the timeout, within 0.25-2 s, more); a failing rank tells the others whom it blames before
// it closes its connections.
//
// Arguments: every rank must make the same calls in the same order with the same count, type, operator and
// root. Each data chunk carries a 32-bit fingerprint of its call (in the immediate it is written with), so a
// rank that disagrees fails the collective on every rank it exchanges data with, with an InvalidArgument
// naming both calls, and the others are told (the communicator is then failed, as after any error). Where
// data flows one way only (reduce's leaves, broadcast's root outside one host) the senders learn of it at
// their next collective. Destroying a communicator is collective too (a barrier): a peer still in a
// collective fails at once, told that this rank closes.
//
// Trust: each pair of ranks proves the job secret (RDMAKIT_JOB_SECRET) in a handshake over the new
// connection, and only then swaps staging descriptors; a peer's rank is the one it proved. A connection
// that fails the proof is refused and does not fail the job. Keys in the store are write-once, so two
// communicators over one store need different key_prefix values.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "rdmakit/bootstrap.hpp"
#include "rdmakit/coll/types.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"

namespace rdmakit::coll {

// Every field left empty comes from its option (environment variable RDMAKIT_<NAME>), else the default;
// `rdmakit-info --config` lists them all with their effective values.
struct CommOptions {
  std::optional<std::string> network_transport{};  // option transport (RDMAKIT_TRANSPORT), tcp: between hosts
  std::optional<std::string>
      local_transport{};  // coll_local_transport: default shm (tcp when shm is not built)
  std::optional<std::chrono::milliseconds>
      timeout{};  // coll_timeout_ms, default 60000: one collective's limit
  std::optional<std::chrono::milliseconds> bootstrap_timeout{};  // bootstrap_timeout_ms, default 60000
  std::optional<std::chrono::microseconds>
      spin{};  // coll_spin_us, default 5000: a waiting rank polls (yielding
               // the CPU between polls) this long before it sleeps; 0 sleeps at once
  std::optional<std::size_t> chunk_bytes{};  // coll_chunk_bytes: pipeline unit and slot size; default
                                             // 512 KiB over shm, 128 KiB over the network transport
  std::optional<std::uint32_t> slots{};      // coll_slots, default 4: chunks in flight per peer
  std::optional<Algorithm> algorithm{};      // coll_algo: auto, ring, rd, hd, shared (default auto: the cost
                                             // model's cheapest, docs/allreduce-model.md); when
                                             // hierarchical, the algorithm among the hosts' leaders
  std::optional<Hierarchy> hierarchical{};   // coll_hierarchical: auto, on, off (default auto)
  std::optional<std::string> host_id{};      // coll_host_id, default hostname + network namespace
  std::optional<std::string>
      listen_address{};      // option listen_address (RDMAKIT_LISTEN_ADDRESS) of the
                             // network transport; unset: from_environment() picks the
                             // interface that routes to the store when it is not on loopback
  std::string key_prefix{};  // store key prefix, to run several communicators over one store
  // option job_secret (RDMAKIT_JOB_SECRET): every connection between two ranks proves it before staging
  // memory is shared. Without one (unset or ""), the per-user secret when the network listener is on
  // loopback (a process of another uid cannot prove it); a listen address beyond loopback is then an
  // InvalidArgument error naming job_secret and insecure, unless option insecure (RDMAKIT_INSECURE=1) is set.
  std::optional<std::string> job_secret{};
};

class Work;

class RDMAKIT_API Communicator {
 public:
  // Ranks meet through `store`; every rank passes the same world size and a distinct rank.
  static Result<std::unique_ptr<Communicator>> create(std::shared_ptr<bootstrap::Store> store, int rank,
                                                      int world_size, const CommOptions& options = {});
  // detect_launch() + open_store() + create(). Called again while a communicator it made lives, it
  // creates the new one over that communicator's store (one store per launch; rank 0 hosts it once): each
  // needs its own key_prefix (a repeated one is InvalidArgument), e.g. {.key_prefix = "ckpt/"} for the
  // checkpoint engine's own communicator next to the application's.
  static Result<std::unique_ptr<Communicator>> from_environment(const CommOptions& options = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const noexcept;
  int size() const noexcept;
  int local_rank() const noexcept;  // index among the ranks of this host
  int local_size() const noexcept;
  // This rank's host among the job's hosts (numbered from 0 in the order of their lowest rank: the host
  // of rank 0 is 0), and how many hosts there are: what placing data on "another node" needs.
  int host_rank() const noexcept;
  int host_count() const noexcept;
  // "tcp", "shm" or "shm+tcp": what carries this rank's traffic.
  std::string transports() const;
  // What allreduce runs for a message of `bytes` bytes: "ring", "rd", "hd", "shared", or "hier:" followed by
  // the algorithm among the hosts' leaders (options coll_algo, coll_hierarchical).
  std::string allreduce_algorithm(std::size_t bytes) const;

  // recv = op over every rank's send (count elements each).
  Result<void> allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  Work allreduce_async(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  // recv (at root only) = op over every rank's send.
  Result<void> reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op, int root);
  Work reduce_async(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op, int root);
  // recv = root's send, on every rank (send is read at root only).
  Result<void> broadcast(const void* send, void* recv, std::size_t count, DataType type, int root);
  Work broadcast_async(const void* send, void* recv, std::size_t count, DataType type, int root);
  // recv[r*count .. (r+1)*count) = rank r's send (count elements).
  Result<void> allgather(const void* send, void* recv, std::size_t count, DataType type);
  Work allgather_async(const void* send, void* recv, std::size_t count, DataType type);
  // recv (count elements) = op over every rank's send[rank*count .. (rank+1)*count).
  Result<void> reduce_scatter(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  Work reduce_scatter_async(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  // recv[r*count ..) on this rank = send[this*count ..) of rank r.
  Result<void> all_to_all(const void* send, void* recv, std::size_t count, DataType type);
  Work all_to_all_async(const void* send, void* recv, std::size_t count, DataType type);
  Result<void> barrier();
  Work barrier_async();

  // For a process that exits on an error: fails the collective in progress (at its next wait) and every
  // queued or later one with `reason`, tells every peer that this rank aborts (their pending and next
  // collectives fail naming it, within milliseconds) and closes the connections; the destructor then
  // waits for nobody. Callable from any thread; later calls do nothing.
  void abort(std::string_view reason);

  struct Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_{};
};

// A collective in flight. Move-only; waiting twice returns the same result.
class RDMAKIT_API Work {
 public:
  struct State;
  Work() = default;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  // Waits until the collective finished; its result.
  Result<void> wait();
  bool done() const;

 private:
  std::shared_ptr<State> state_{};
};

}  // namespace rdmakit::coll
