// The communicator: setup, argument checks, and the queue that runs collectives in issue order. A
// blocking call made while nothing is queued runs on the caller's thread (no hand-off latency);
// otherwise collectives run on a worker thread started at the first _async call.
#include "rdmakit/coll/communicator.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <set>
#include <thread>

#include "bootstrap/auth.hpp"
#include "coll/algorithms.hpp"
#include "coll/comm_options.hpp"
#include "coll/cost_model.hpp"
#include "coll/mesh.hpp"
#include "coll/shared.hpp"

namespace rdmakit::coll {

// Hidden although nested in an exported class (which would make it default): the implementation is no part of
// the ABI (docs/abi.md), nor are its members or the lambdas they hold.
struct __attribute__((visibility("hidden"))) Work::State {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  Result<void> result;

  void finish(Result<void> r) {
    {
      std::lock_guard lock(mutex);
      result = std::move(r);
      done = true;
    }
    done_cv.notify_all();
  }
};

Result<void> Work::wait() {
  if (!state_) return fail(Errc::InvalidArgument, "Work::wait: an empty handle");
  std::unique_lock lock(state_->mutex);
  state_->done_cv.wait(lock, [&] { return state_->done; });
  return state_->result;
}

bool Work::done() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mutex);
  return state_->done;
}

using Op = std::function<Result<void>()>;

// Hidden although nested in an exported class (which would make it default): the implementation is no part of
// the ABI (docs/abi.md), nor are its members or the lambdas they hold.
struct __attribute__((visibility("hidden"))) Communicator::Impl {
  detail::CommConfig options;
  std::shared_ptr<bootstrap::Store> store;
  detail::Exchange exchange;
  detail::MeshInfo mesh;
  detail::HostGroups groups;  // this rank's host and the hosts' leaders
  detail::Topology topology;  // what the cost model knows of the job
  // Memory shared by the ranks of this host where they reach each other over shm (null elsewhere or
  // alone): the whole job's allreduce, reduce and broadcast on one host, the local stages of the
  // hierarchical allreduce on several. After `exchange`: destroyed first, once the destructor's barrier
  // says no peer reads this rank's area.
  std::unique_ptr<detail::SharedArea> shared;

  std::mutex mutex;
  std::condition_variable changed;
  struct Queued {
    detail::Call call;
    Op op;
    std::shared_ptr<Work::State> state;
  };
  std::deque<Queued> queue;
  bool busy = false;
  bool stopping = false;
  std::thread worker;  // last: started lazily, joined by the destructor

  Impl(detail::CommConfig o, std::shared_ptr<bootstrap::Store> s, int rank, int size)
      : options(std::move(o)),
        store(std::move(s)),
        exchange(rank, size, options.chunk_bytes, options.slots, options.timeout, options.spin) {}

  ~Impl() {
    {
      std::unique_lock lock(mutex);
      stopping = true;
      changed.notify_all();
    }
    if (worker.joinable()) worker.join();
    // Closing is collective, like MPI_Comm_free: a barrier first, so no rank closes a connection a peer
    // still reads the last chunks from. Skipped after a failure or an abort: then closing fast is the
    // point. Its chunks carry the Close signature, so a peer still inside a collective fails at once,
    // told that this rank closes, instead of waiting for data this rank will never send.
    if (!exchange.check_abort()) return;
    exchange.begin(detail::Call{.kind = detail::CallKind::Close});
    (void)detail::barrier_dissemination(exchange);
  }

  void abort(std::string reason) {
    exchange.request_abort(std::move(reason));
    std::unique_lock lock(mutex);
    // Queued collectives never start; a running one fails at its next wait (the executing thread acts
    // on the request), within one sleep slice.
    auto error = Error(Errc::ConnectionBroken, "rank " + std::to_string(exchange.rank()) + ": aborted");
    for (auto& entry : queue) entry.state->finish(std::unexpected(error));
    queue.clear();
    changed.wait(lock, [&] { return !busy; });
    busy = true;  // nothing runs now: this thread acts on the request itself
    lock.unlock();
    (void)exchange.check_abort();
    lock.lock();
    busy = false;
    changed.notify_all();
  }

  // The two forms of every collective, given its arguments' checks, the call (stamped on its chunks,
  // signature.hpp) and its op.
  Result<void> blocking(Result<void> checked, const detail::Call& call, Op op);
  Work nonblocking(Result<void> checked, const detail::Call& call, Op op);

  Result<void> execute(const detail::Call& call, const Op& op) {
    if (auto ok = exchange.check_abort(); !ok) return ok;
    exchange.begin(call);
    return op();
  }

  Result<void> run(const detail::Call& call, Op op) {
    std::unique_lock lock(mutex);
    if (queue.empty() && !busy) {
      busy = true;
      lock.unlock();
      auto result = execute(call, op);
      lock.lock();
      busy = false;
      changed.notify_all();
      return result;
    }
    lock.unlock();
    return submit(call, std::move(op)).wait();
  }

  Work submit(const detail::Call& call, Op op) {
    auto state = std::make_shared<Work::State>();
    std::lock_guard lock(mutex);
    queue.push_back(Queued{call, std::move(op), state});
    if (!worker.joinable()) worker = std::thread([this] { work(); });
    changed.notify_all();
    return Work(state);
  }

  void work() {
    std::unique_lock lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return (!queue.empty() && !busy) || (stopping && queue.empty() && !busy); });
      if (queue.empty()) return;
      Queued next = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lock.unlock();
      next.state->finish(execute(next.call, next.op));
      lock.lock();
      busy = false;
      changed.notify_all();
    }
  }
};

namespace {

Work failed_work(Error error) {
  auto state = std::make_shared<Work::State>();
  state->finish(std::unexpected(std::move(error)));
  return Work(state);
}

Result<void> check(const void* send, const void* recv, std::size_t count, DataType type, std::size_t factor,
                   const char* what) {
  if (static_cast<unsigned>(type) > static_cast<unsigned>(DataType::I8))
    return fail(Errc::InvalidArgument, std::string(what) + ": unknown data type");
  if (count > (std::size_t{1} << 40) / size_of(type) / factor)
    return fail(Errc::InvalidArgument,
                std::string(what) + ": count " + std::to_string(count) + " is too large");
  if (count > 0 && (send == nullptr || recv == nullptr))
    return fail(Errc::InvalidArgument,
                std::string(what) + ": a null buffer with count " + std::to_string(count));
  return {};
}

Result<void> check_op(ReduceOp op, DataType type, const char* what) {
  if (static_cast<unsigned>(op) > static_cast<unsigned>(ReduceOp::BXor))
    return fail(Errc::InvalidArgument, std::string(what) + ": unknown reduction operator");
  if (is_bitwise(op) && !is_integer(type))
    return fail(Errc::InvalidArgument, std::string(what) + ": " + std::string(to_string(op)) +
                                           " takes an integer type (i8, u8, i32, i64), not " +
                                           std::string(to_string(type)));
  return {};
}

Result<void> check_root(int root, int size, const char* what) {
  if (root < 0 || root >= size)
    return fail(Errc::InvalidArgument, std::string(what) + ": root " + std::to_string(root) +
                                           " is not a rank of a world of " + std::to_string(size));
  return {};
}

// The cost of a link of `transport`, as the transport declares it: from this rank's context of it, or from
// one opened to ask when no peer of this rank uses it (alone on its host, say), so that every rank models
// the same topology and picks the same plan.
detail::LinkCost declared_cost(detail::Exchange& exchange, const std::string& transport) {
  for (const auto& fabric : exchange.fabrics())
    if (fabric->name == transport) return detail::link_cost(fabric->context->capabilities());
  auto probe = Context::open(Options{.transport = transport});
  return detail::link_cost(probe ? (*probe)->capabilities() : Capabilities{});
}

}  // namespace

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

Result<std::unique_ptr<Communicator>> Communicator::create(std::shared_ptr<bootstrap::Store> store, int rank,
                                                           int world_size, const CommOptions& given) {
  if (!store) return fail(Errc::InvalidArgument, "Communicator::create: no store");
  if (world_size < 1 || rank < 0 || rank >= world_size)
    return fail(Errc::InvalidArgument, "Communicator::create: rank " + std::to_string(rank) +
                                           " is not in a world of " + std::to_string(world_size));
  auto options = detail::resolve_options(given);
  if (!options) return std::unexpected(options.error());
  auto impl = std::make_unique<Impl>(*options, std::move(store), rank, world_size);
  detail::MeshConfig mesh{.network_transport = options->network_transport,
                          .local_transport = options->local_transport,
                          .listen_address = options->listen_address,
                          .host_id = options->host_id,
                          .key_prefix = options->key_prefix,
                          .bootstrap_timeout = options->bootstrap_timeout,
                          .secret = options->job_secret};
  auto info = detail::build_mesh(*impl->store, mesh, impl->exchange);
  if (!info) {
    impl->exchange.fail_all(info.error());
    return std::unexpected(info.error());
  }
  impl->mesh = *info;
  impl->groups = detail::host_groups(impl->mesh.host_of, rank);
  impl->topology =
      detail::Topology{.ranks = world_size,
                       .hosts = static_cast<int>(impl->groups.leaders.size()),
                       .per_host = impl->groups.largest_host,
                       .contiguous = std::is_sorted(impl->mesh.host_of.begin(), impl->mesh.host_of.end())};
  // A kind of link that no rank uses (one host; one rank per host) plays no part in the model.
  impl->topology.local = impl->topology.per_host > 1 ? declared_cost(impl->exchange, options->local_transport)
                                                     : detail::link_cost(Capabilities{});
  impl->topology.network = impl->topology.hosts > 1
                               ? declared_cost(impl->exchange, options->network_transport)
                               : detail::link_cost(Capabilities{});
  // Everyone connected and armed before the first collective: setup errors surface here, on every rank.
  if (auto ok = detail::barrier_dissemination(impl->exchange); !ok) return std::unexpected(ok.error());
  if (impl->groups.local.size() > 1) {  // collective among this host's ranks only
    detail::Exchange::Subgroup host(impl->exchange, impl->groups.local);
    auto shared = detail::SharedArea::create(impl->exchange, detail::kSharedRoundBytes);
    if (!shared) return std::unexpected(shared.error());
    impl->shared = std::move(*shared);
  }
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

namespace {

// The store from_environment() opened for this process's launch, shared by every communicator it creates
// while one of them lives (as torch's new_group() runs over the default group's store): opening a second
// one made rank 0 bind the launch's port again ("Address already in use") and left the other ranks
// waiting for a store that never came. Keys are write-once, so each communicator over it needs its own
// key_prefix: the prefixes used are kept, and a repeated one is refused at once, on every rank alike.
// Never destroyed: a static destructor could run while another thread still creates a communicator.
struct EnvironmentStore {
  std::mutex mutex;
  std::string launch;  // host:port rank/world of the launch the store belongs to
  std::weak_ptr<bootstrap::Store> store;
  std::set<std::string> prefixes;
};

EnvironmentStore& environment_store() {
  static auto* shared = new EnvironmentStore;
  return *shared;
}

Result<std::shared_ptr<bootstrap::Store>> store_for(const bootstrap::LaunchInfo& launch,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& key_prefix) {
  auto& shared = environment_store();
  std::lock_guard lock(shared.mutex);
  std::string key = launch.store_host + ":" + std::to_string(launch.store_port) + " " +
                    std::to_string(launch.rank) + "/" + std::to_string(launch.world_size);
  std::shared_ptr<bootstrap::Store> store = shared.launch == key ? shared.store.lock() : nullptr;
  if (store && shared.prefixes.contains(key_prefix))
    return fail(Errc::InvalidArgument,
                "Communicator::from_environment: another communicator of this process already uses "
                "key_prefix '" +
                    key_prefix +
                    "' on the launch's store (its keys are write-once): give each communicator its own "
                    "CommOptions::key_prefix");
  if (!store) {
    auto opened = bootstrap::open_store(launch, timeout);
    if (!opened) return std::unexpected(opened.error());
    store = std::move(*opened);
    shared.launch = key;
    shared.store = store;
    shared.prefixes.clear();
  }
  shared.prefixes.insert(key_prefix);
  return store;
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::from_environment(const CommOptions& given) {
  auto launch = bootstrap::detect_launch();
  if (!launch) return std::unexpected(launch.error());
  CommOptions options = given;
  auto timeout = options.bootstrap_timeout ? Result<std::chrono::milliseconds>(*options.bootstrap_timeout)
                                           : bootstrap::bootstrap_timeout();
  if (!timeout) return std::unexpected(timeout.error());
  options.bootstrap_timeout = *timeout;
  bool loopback = bootstrap::auth::is_loopback_host(launch->store_host);
  auto named = detail::named_listen_address(options);
  if (!named) return std::unexpected(named.error());
  if (!*named && !loopback) {
    std::string local = detail::route_address(launch->store_host, launch->store_port);
    if (!local.empty()) options.listen_address = local + ":0";
  }
  auto store = store_for(*launch, *timeout, options.key_prefix);
  if (!store) return std::unexpected(store.error());
  return create(std::move(*store), launch->rank, launch->world_size, options);
}

void Communicator::abort(std::string_view reason) { impl_->abort(std::string(reason)); }

int Communicator::rank() const noexcept { return impl_->exchange.rank(); }
int Communicator::size() const noexcept { return impl_->exchange.size(); }
int Communicator::local_rank() const noexcept { return impl_->mesh.local_rank; }
int Communicator::local_size() const noexcept { return impl_->mesh.local_size; }
int Communicator::host_rank() const noexcept {
  return impl_->mesh.host_of[static_cast<std::size_t>(impl_->exchange.rank())];
}
int Communicator::host_count() const noexcept { return static_cast<int>(impl_->groups.leaders.size()); }
std::string Communicator::transports() const { return impl_->mesh.transports; }

namespace {
detail::Buffers buffers(const void* send, void* recv, std::size_t count, DataType type,
                        ReduceOp op = ReduceOp::Sum) {
  return detail::Buffers{static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), count, type, op};
}
}  // namespace

// Each collective checks its arguments on the calling thread (a bad argument fails at once, on this
// rank only, and leaves the communicator usable), then runs as an Op in issue order.
Result<void> Communicator::Impl::blocking(Result<void> checked, const detail::Call& call, Op op) {
  if (!checked) return checked;
  return run(call, std::move(op));
}

Work Communicator::Impl::nonblocking(Result<void> checked, const detail::Call& call, Op op) {
  if (!checked) return failed_work(checked.error());
  return submit(call, std::move(op));
}

namespace {

// The first failed check, in the order given (each check is cheap and has no effect).
Result<void> first_failure(std::initializer_list<Result<void>> checks) {
  for (const Result<void>& checked : checks)
    if (!checked) return checked;
  return {};
}

Result<void> check_allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  return first_failure({check(send, recv, count, type, 1, "allreduce"), check_op(op, type, "allreduce")});
}

Result<void> check_reduce(const Communicator& comm, const void* send, void* recv, std::size_t count,
                          DataType type, ReduceOp op, int root) {
  return first_failure({check(send, comm.rank() == root ? recv : send, count, type, 1, "reduce"),
                        check_op(op, type, "reduce"), check_root(root, comm.size(), "reduce")});
}

Result<void> check_broadcast(const Communicator& comm, const void* send, void* recv, std::size_t count,
                             DataType type, int root) {
  return first_failure({check(comm.rank() == root ? send : recv, recv, count, type, 1, "broadcast"),
                        check_root(root, comm.size(), "broadcast")});
}

Result<void> check_per_rank(const Communicator& comm, const void* send, void* recv, std::size_t count,
                            DataType type, const char* what) {
  return check(send, recv, count, type, static_cast<std::size_t>(comm.size()), what);
}

Result<void> check_reduce_scatter(const Communicator& comm, const void* send, void* recv, std::size_t count,
                                  DataType type, ReduceOp op) {
  return first_failure({check_per_rank(comm, send, recv, count, type, "reduce_scatter"),
                        check_op(op, type, "reduce_scatter")});
}

// Every rank of the job maps every other's area: reduce and broadcast go through it too.
bool one_host_shared(const Communicator::Impl* impl) { return impl->shared && impl->topology.hosts == 1; }

// The shared-memory allreduce wherever it can run and the options leave the choice to us (or ask for
// it): on one host it beat every staged algorithm at every size from 4 bytes to 64 MiB on 2, 4 and 8
// ranks (bench/RESULTS.md).
bool runs_shared(const Communicator::Impl* impl) {
  if (!one_host_shared(impl) || impl->options.hierarchical == Hierarchy::On) return false;
  return impl->options.algorithm == Algorithm::Shared || impl->options.algorithm == Algorithm::Auto;
}

// The cost model's cheapest plan within what the options force.
detail::AllreduceChoice plan_allreduce(const Communicator::Impl* impl, std::size_t bytes) {
  if (runs_shared(impl)) return detail::AllreduceChoice{.algorithm = Algorithm::Shared};
  Algorithm forced = impl->options.algorithm == Algorithm::Shared ? Algorithm::Auto : impl->options.algorithm;
  return detail::choose_allreduce(impl->topology, static_cast<double>(bytes), forced,
                                  impl->options.hierarchical);
}

Result<void> allreduce_with(Communicator::Impl* impl, const detail::Buffers& b) {
  detail::AllreduceChoice plan = plan_allreduce(impl, b.count * size_of(b.type));
  if (plan.algorithm == Algorithm::Shared) return impl->shared->allreduce(impl->exchange, b);
  if (plan.hierarchical)
    return detail::allreduce_hierarchical(impl->exchange, b, impl->groups, plan.algorithm,
                                          impl->shared.get());
  return detail::allreduce_flat(impl->exchange, b, plan.algorithm);
}

// The ops the queue runs: the algorithm for the arguments, on the executing thread. Avg over 16-bit
// floats runs over f32 copies and rounds once (average16()).
Op allreduce_op(Communicator::Impl* impl, const void* send, void* recv, std::size_t count, DataType type,
                ReduceOp op) {
  return [=]() -> Result<void> {
    auto b = buffers(send, recv, count, type, op);
    if (!detail::averages_in_f32(type, op)) return allreduce_with(impl, b);
    return detail::average16(b, count, count, impl->exchange.size(),
                             [&](const detail::Buffers& wide) { return allreduce_with(impl, wide); });
  };
}

Op reduce_op(Communicator::Impl* impl, const void* send, void* recv, std::size_t count, DataType type,
             ReduceOp op, int root) {
  return [=]() -> Result<void> {
    auto b = buffers(send, recv, count, type, op);
    auto run = [&](const detail::Buffers& in) {
      return one_host_shared(impl) ? impl->shared->reduce(impl->exchange, in, root)
                                   : detail::reduce_tree(impl->exchange, in, root);
    };
    if (!detail::averages_in_f32(type, op)) return run(b);
    std::size_t out = impl->exchange.rank() == root ? count : 0;
    return detail::average16(b, count, out, impl->exchange.size(), run);
  };
}

Op broadcast_op(Communicator::Impl* impl, const void* send, void* recv, std::size_t count, DataType type,
                int root) {
  return [=] {
    auto b = buffers(send, recv, count, type);
    return one_host_shared(impl) ? impl->shared->broadcast(impl->exchange, b, root)
                                 : detail::broadcast_tree(impl->exchange, b, root);
  };
}

Op allgather_op(Communicator::Impl* impl, const void* send, void* recv, std::size_t count, DataType type) {
  return [=] { return detail::allgather_ring(impl->exchange, buffers(send, recv, count, type)); };
}

Op reduce_scatter_op(Communicator::Impl* impl, const void* send, void* recv, std::size_t count, DataType type,
                     ReduceOp op) {
  return [=]() -> Result<void> {
    auto b = buffers(send, recv, count, type, op);
    if (!detail::averages_in_f32(type, op)) return detail::reduce_scatter_ring(impl->exchange, b);
    auto n = static_cast<std::size_t>(impl->exchange.size());
    return detail::average16(b, count * n, count, impl->exchange.size(), [&](const detail::Buffers& wide) {
      return detail::reduce_scatter_ring(impl->exchange, wide);
    });
  };
}

Op all_to_all_op(Communicator::Impl* impl, const void* send, void* recv, std::size_t count, DataType type) {
  return [=] { return detail::all_to_all_pairwise(impl->exchange, buffers(send, recv, count, type)); };
}

}  // namespace

std::string Communicator::allreduce_algorithm(std::size_t bytes) const {
  detail::AllreduceChoice plan = plan_allreduce(impl_.get(), bytes);
  return (plan.hierarchical ? "hier:" : "") + std::string(to_string(plan.algorithm));
}

Result<void> Communicator::allreduce(const void* send, void* recv, std::size_t count, DataType type,
                                     ReduceOp op) {
  return impl_->blocking(check_allreduce(send, recv, count, type, op),
                         detail::Call{detail::CallKind::Allreduce, type, op, count, -1},
                         allreduce_op(impl_.get(), send, recv, count, type, op));
}

Work Communicator::allreduce_async(const void* send, void* recv, std::size_t count, DataType type,
                                   ReduceOp op) {
  return impl_->nonblocking(check_allreduce(send, recv, count, type, op),
                            detail::Call{detail::CallKind::Allreduce, type, op, count, -1},
                            allreduce_op(impl_.get(), send, recv, count, type, op));
}

Result<void> Communicator::reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                                  int root) {
  return impl_->blocking(check_reduce(*this, send, recv, count, type, op, root),
                         detail::Call{detail::CallKind::Reduce, type, op, count, root},
                         reduce_op(impl_.get(), send, recv, count, type, op, root));
}

Work Communicator::reduce_async(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                                int root) {
  return impl_->nonblocking(check_reduce(*this, send, recv, count, type, op, root),
                            detail::Call{detail::CallKind::Reduce, type, op, count, root},
                            reduce_op(impl_.get(), send, recv, count, type, op, root));
}

Result<void> Communicator::broadcast(const void* send, void* recv, std::size_t count, DataType type,
                                     int root) {
  return impl_->blocking(check_broadcast(*this, send, recv, count, type, root),
                         detail::Call{detail::CallKind::Broadcast, type, ReduceOp::Sum, count, root},
                         broadcast_op(impl_.get(), send, recv, count, type, root));
}

Work Communicator::broadcast_async(const void* send, void* recv, std::size_t count, DataType type, int root) {
  return impl_->nonblocking(check_broadcast(*this, send, recv, count, type, root),
                            detail::Call{detail::CallKind::Broadcast, type, ReduceOp::Sum, count, root},
                            broadcast_op(impl_.get(), send, recv, count, type, root));
}

Result<void> Communicator::allgather(const void* send, void* recv, std::size_t count, DataType type) {
  return impl_->blocking(check_per_rank(*this, send, recv, count, type, "allgather"),
                         detail::Call{detail::CallKind::Allgather, type, ReduceOp::Sum, count, -1},
                         allgather_op(impl_.get(), send, recv, count, type));
}

Work Communicator::allgather_async(const void* send, void* recv, std::size_t count, DataType type) {
  return impl_->nonblocking(check_per_rank(*this, send, recv, count, type, "allgather"),
                            detail::Call{detail::CallKind::Allgather, type, ReduceOp::Sum, count, -1},
                            allgather_op(impl_.get(), send, recv, count, type));
}

Result<void> Communicator::reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                                          ReduceOp op) {
  return impl_->blocking(check_reduce_scatter(*this, send, recv, count, type, op),
                         detail::Call{detail::CallKind::ReduceScatter, type, op, count, -1},
                         reduce_scatter_op(impl_.get(), send, recv, count, type, op));
}

Work Communicator::reduce_scatter_async(const void* send, void* recv, std::size_t count, DataType type,
                                        ReduceOp op) {
  return impl_->nonblocking(check_reduce_scatter(*this, send, recv, count, type, op),
                            detail::Call{detail::CallKind::ReduceScatter, type, op, count, -1},
                            reduce_scatter_op(impl_.get(), send, recv, count, type, op));
}

Result<void> Communicator::all_to_all(const void* send, void* recv, std::size_t count, DataType type) {
  return impl_->blocking(check_per_rank(*this, send, recv, count, type, "all_to_all"),
                         detail::Call{detail::CallKind::AllToAll, type, ReduceOp::Sum, count, -1},
                         all_to_all_op(impl_.get(), send, recv, count, type));
}

Work Communicator::all_to_all_async(const void* send, void* recv, std::size_t count, DataType type) {
  return impl_->nonblocking(check_per_rank(*this, send, recv, count, type, "all_to_all"),
                            detail::Call{detail::CallKind::AllToAll, type, ReduceOp::Sum, count, -1},
                            all_to_all_op(impl_.get(), send, recv, count, type));
}

Result<void> Communicator::barrier() {
  return impl_->blocking({}, detail::Call{.kind = detail::CallKind::Barrier},
                         [impl = impl_.get()] { return detail::barrier_dissemination(impl->exchange); });
}

Work Communicator::barrier_async() {
  return impl_->nonblocking({}, detail::Call{.kind = detail::CallKind::Barrier},
                            [impl = impl_.get()] { return detail::barrier_dissemination(impl->exchange); });
}

std::string_view to_string(DataType type) noexcept {
  static constexpr std::string_view names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8", "i8"};
  auto i = static_cast<std::size_t>(type);
  return i < std::size(names) ? names[i] : "unknown";
}

std::string_view to_string(ReduceOp op) noexcept {
  static constexpr std::string_view names[] = {"sum", "prod", "min", "max", "avg", "band", "bor", "bxor"};
  auto i = static_cast<std::size_t>(op);
  return i < std::size(names) ? names[i] : "unknown";
}

std::string_view to_string(Algorithm algorithm) noexcept {
  static constexpr std::string_view names[] = {"auto", "ring", "rd", "hd", "shared"};
  auto i = static_cast<std::size_t>(algorithm);
  return i < std::size(names) ? names[i] : "unknown";
}

}  // namespace rdmakit::coll
