// The communicator: setup, argument checks, and the queue that runs collectives in issue order. A
// blocking call made while nothing is queued runs on the caller's thread (no hand-off latency);
// otherwise collectives run on a worker thread started at the first _async call.
#include "rdmakit/coll/communicator.hpp"

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "coll/algorithms.hpp"
#include "coll/comm_options.hpp"
#include "coll/mesh.hpp"

namespace rdmakit::coll {

struct Work::State {
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

struct Communicator::Impl {
  detail::CommConfig options;
  std::shared_ptr<bootstrap::Store> store;
  detail::Exchange exchange;
  detail::MeshInfo mesh;

  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::pair<Op, std::shared_ptr<Work::State>>> queue;
  bool busy = false;
  bool stopping = false;
  std::thread worker;  // last: started lazily, joined by the destructor

  Impl(detail::CommConfig o, std::shared_ptr<bootstrap::Store> s, int rank, int size)
      : options(std::move(o)), store(std::move(s)),
        exchange(rank, size, options.chunk_bytes, options.slots, options.timeout, options.spin) {}

  ~Impl() {
    {
      std::unique_lock lock(mutex);
      stopping = true;
      changed.notify_all();
    }
    if (worker.joinable()) worker.join();
    // Closing is collective, like MPI_Comm_free: a barrier first, so no rank closes a connection a peer
    // still reads the last chunks from. Skipped after a failure: then closing fast is the point.
    if (!exchange.failure()) (void)detail::barrier_dissemination(exchange);
  }

  Result<void> execute(const Op& op) {
    if (exchange.failure()) return std::unexpected(*exchange.failure());
    return op();
  }

  Result<void> run(Op op) {
    std::unique_lock lock(mutex);
    if (queue.empty() && !busy) {
      busy = true;
      lock.unlock();
      auto result = execute(op);
      lock.lock();
      busy = false;
      changed.notify_all();
      return result;
    }
    lock.unlock();
    return submit(std::move(op)).wait();
  }

  Work submit(Op op) {
    auto state = std::make_shared<Work::State>();
    std::lock_guard lock(mutex);
    queue.emplace_back(std::move(op), state);
    if (!worker.joinable()) worker = std::thread([this] { work(); });
    changed.notify_all();
    return Work(state);
  }

  void work() {
    std::unique_lock lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return (!queue.empty() && !busy) || (stopping && queue.empty() && !busy); });
      if (queue.empty()) return;
      auto [op, state] = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lock.unlock();
      state->finish(execute(op));
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
  if (static_cast<unsigned>(type) > static_cast<unsigned>(DataType::U8))
    return fail(Errc::InvalidArgument, std::string(what) + ": unknown data type");
  if (count > (std::size_t{1} << 40) / size_of(type) / factor)
    return fail(Errc::InvalidArgument, std::string(what) + ": count " + std::to_string(count) + " is too large");
  if (count > 0 && (send == nullptr || recv == nullptr))
    return fail(Errc::InvalidArgument, std::string(what) + ": a null buffer with count " + std::to_string(count));
  return {};
}

Result<void> check_op(ReduceOp op, const char* what) {
  if (static_cast<unsigned>(op) > static_cast<unsigned>(ReduceOp::Avg))
    return fail(Errc::InvalidArgument, std::string(what) + ": unknown reduction operator");
  return {};
}

Result<void> check_root(int root, int size, const char* what) {
  if (root < 0 || root >= size)
    return fail(Errc::InvalidArgument, std::string(what) + ": root " + std::to_string(root) +
                                           " is not a rank of a world of " + std::to_string(size));
  return {};
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
  // Everyone connected and armed before the first collective: setup errors surface here, on every rank.
  if (auto ok = detail::barrier_dissemination(impl->exchange); !ok) return std::unexpected(ok.error());
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

Result<std::unique_ptr<Communicator>> Communicator::from_environment(const CommOptions& given) {
  auto launch = bootstrap::detect_launch();
  if (!launch) return std::unexpected(launch.error());
  CommOptions options = given;
  auto timeout = options.bootstrap_timeout ? Result<std::chrono::milliseconds>(*options.bootstrap_timeout)
                                           : bootstrap::bootstrap_timeout();
  if (!timeout) return std::unexpected(timeout.error());
  options.bootstrap_timeout = *timeout;
  bool loopback = launch->store_host.starts_with("127.") || launch->store_host == "localhost";
  bool address_set = options.listen_address || options::read_option_env(options::env_name("listen_address"));
  if (!address_set && !loopback) {
    std::string local = detail::route_address(launch->store_host, launch->store_port);
    if (!local.empty()) options.listen_address = local + ":0";
  }
  auto store = bootstrap::open_store(*launch, *timeout);
  if (!store) return std::unexpected(store.error());
  return create(std::move(*store), launch->rank, launch->world_size, options);
}

int Communicator::rank() const noexcept { return impl_->exchange.rank(); }
int Communicator::size() const noexcept { return impl_->exchange.size(); }
int Communicator::local_rank() const noexcept { return impl_->mesh.local_rank; }
int Communicator::local_size() const noexcept { return impl_->mesh.local_size; }
std::string Communicator::transports() const { return impl_->mesh.transports; }

namespace {
detail::Buffers buffers(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op = ReduceOp::Sum) {
  return detail::Buffers{static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), count, type, op};
}
}  // namespace

// Each collective: check the arguments, then an Op that the queue runs in order.
#define RDMAKIT_COLL_ENTRY(name, params, args, checks, body)                    \
  Work Communicator::name##_async params {                                     \
    if (auto ok = [&]() -> Result<void> { checks; return {}; }(); !ok)         \
      return failed_work(ok.error());                                          \
    return impl_->submit([=, this]() -> Result<void> { body; });               \
  }                                                                            \
  Result<void> Communicator::name params {                                     \
    if (auto ok = [&]() -> Result<void> { checks; return {}; }(); !ok) return ok; \
    return impl_->run([=, this]() -> Result<void> { body; });                  \
  }

#define RDMAKIT_TRY(expr) \
  if (auto ok = (expr); !ok) return ok

RDMAKIT_COLL_ENTRY(allreduce, (const void* send, void* recv, std::size_t count, DataType type, ReduceOp op), _,
                   RDMAKIT_TRY(check(send, recv, count, type, 1, "allreduce")); RDMAKIT_TRY(check_op(op, "allreduce")),
                   {
                     auto b = buffers(send, recv, count, type, op);
                     Algorithm a = impl_->options.algorithm;
                     if (a == Algorithm::Auto)
                       a = detail::choose_allreduce(count * size_of(type), size(), impl_->options.small_bytes);
                     if (a == Algorithm::RecursiveDoubling) return detail::allreduce_doubling(impl_->exchange, b);
                     if (a == Algorithm::HalvingDoubling) return detail::allreduce_halving(impl_->exchange, b);
                     return detail::allreduce_ring(impl_->exchange, b);
                   })

RDMAKIT_COLL_ENTRY(reduce, (const void* send, void* recv, std::size_t count, DataType type, ReduceOp op, int root), _,
                   RDMAKIT_TRY(check(send, rank() == root ? recv : send, count, type, 1, "reduce"));
                   RDMAKIT_TRY(check_op(op, "reduce")); RDMAKIT_TRY(check_root(root, size(), "reduce")),
                   return detail::reduce_tree(impl_->exchange, buffers(send, recv, count, type, op), root))

RDMAKIT_COLL_ENTRY(broadcast, (const void* send, void* recv, std::size_t count, DataType type, int root), _,
                   RDMAKIT_TRY(check(rank() == root ? send : recv, recv, count, type, 1, "broadcast"));
                   RDMAKIT_TRY(check_root(root, size(), "broadcast")),
                   return detail::broadcast_tree(impl_->exchange, buffers(send, recv, count, type), root))

RDMAKIT_COLL_ENTRY(allgather, (const void* send, void* recv, std::size_t count, DataType type), _,
                   RDMAKIT_TRY(check(send, recv, count, type, static_cast<std::size_t>(size()), "allgather")),
                   return detail::allgather_ring(impl_->exchange, buffers(send, recv, count, type)))

RDMAKIT_COLL_ENTRY(reduce_scatter, (const void* send, void* recv, std::size_t count, DataType type, ReduceOp op), _,
                   RDMAKIT_TRY(check(send, recv, count, type, static_cast<std::size_t>(size()), "reduce_scatter"));
                   RDMAKIT_TRY(check_op(op, "reduce_scatter")),
                   return detail::reduce_scatter_ring(impl_->exchange, buffers(send, recv, count, type, op)))

RDMAKIT_COLL_ENTRY(all_to_all, (const void* send, void* recv, std::size_t count, DataType type), _,
                   RDMAKIT_TRY(check(send, recv, count, type, static_cast<std::size_t>(size()), "all_to_all")),
                   return detail::all_to_all_pairwise(impl_->exchange, buffers(send, recv, count, type)))

RDMAKIT_COLL_ENTRY(barrier, (), _, (void)0, return detail::barrier_dissemination(impl_->exchange))

std::string_view to_string(DataType type) noexcept {
  static constexpr std::string_view names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8"};
  auto i = static_cast<std::size_t>(type);
  return i < std::size(names) ? names[i] : "unknown";
}

std::string_view to_string(ReduceOp op) noexcept {
  static constexpr std::string_view names[] = {"sum", "prod", "min", "max", "avg"};
  auto i = static_cast<std::size_t>(op);
  return i < std::size(names) ? names[i] : "unknown";
}

std::string_view to_string(Algorithm algorithm) noexcept {
  static constexpr std::string_view names[] = {"auto", "ring", "rd", "hd"};
  auto i = static_cast<std::size_t>(algorithm);
  return i < std::size(names) ? names[i] : "unknown";
}

}  // namespace rdmakit::coll
