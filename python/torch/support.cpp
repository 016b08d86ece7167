// The machinery under the backend's operations: the store adapter, the workers, Work objects, creation of
// the group, and point-to-point messages.
// Python.h first, as it asks: the group's destructor lets go of the GIL (see ~ProcessGroupRdmakit).
#include <ATen/core/ivalue.h>
#include <Python.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <thread>

#include "process_group.hpp"
#include "tensor_util.hpp"

namespace rdmakit::torch_backend {

// ---- StoreAdapter ------------------------------------------------------------------------------------

Result<void> StoreAdapter::set(std::string_view key, std::string_view value) {
  std::string name(key);
  try {
    std::lock_guard lock(mutex_);
    // rdmakit's stores are write-once, so nobody can replace what a rank published; c10d's overwrite.
    if (store_->check({name})) return fail(Errc::InvalidArgument, "store key '" + name + "' is already set");
    store_->set(name, std::vector<uint8_t>(value.begin(), value.end()));
    return {};
  } catch (const std::exception& e) {
    return fail(Errc::ConnectionBroken, "torch store: setting key '" + name + "' failed: " + e.what());
  }
}

Result<std::string> StoreAdapter::get(std::string_view key, std::chrono::milliseconds timeout) {
  std::string name(key);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  try {
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (store_->check({name})) {
          auto value = store_->get(name);
          return std::string(value.begin(), value.end());
        }
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return fail(Errc::Timeout, "torch store: key '" + name + "' was not set within " +
                                       std::to_string(timeout.count()) + " ms (a rank did not arrive)");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(20000));
    }
  } catch (const std::exception& e) {
    return fail(Errc::ConnectionBroken, "torch store: reading key '" + name + "' failed: " + e.what());
  }
}

// ---- SerialExecutor ----------------------------------------------------------------------------------

SerialExecutor::SerialExecutor() : thread_([this] { run(); }) {}

SerialExecutor::~SerialExecutor() { join(); }

void SerialExecutor::join() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void SerialExecutor::submit(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  ready_.notify_one();
}

void SerialExecutor::run() {
  // Staging copies into tensors that require grad must not be recorded by autograd (as in c10d's own
  // backends, the collective is not part of the graph).
  c10::AutoGradMode no_grad(false);
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

// ---- RdmakitWork -------------------------------------------------------------------------------------

RdmakitWork::RdmakitWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

void RdmakitWork::complete(std::exception_ptr error) {
  // The future first: DDP's hooks chain on it, and work.wait() returning must mean its callbacks ran.
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
  finish(error);
}

namespace {

// Runs `body` and completes `work` with its outcome; nothing escapes to the executor.
void run_and_complete(RdmakitWork& work, const std::function<void()>& body) {
  std::exception_ptr error;
  try {
    body();
  } catch (...) {
    error = std::current_exception();
  }
  try {
    work.complete(error);
  } catch (...) {
    // A future callback threw: c10d has already recorded it on the future; the worker must survive.
  }
}

}  // namespace

// ---- The group ---------------------------------------------------------------------------------------

c10::intrusive_ptr<ProcessGroupRdmakit> ProcessGroupRdmakit::create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
  TORCH_CHECK(store, "rdmakit: torch passed no store");
  coll::CommOptions options;
  options.key_prefix = "rdmakit/coll/";
  if (std::getenv("RDMAKIT_COLL_TIMEOUT_MS") == nullptr && timeout.count() > 0) options.timeout = timeout;
  auto adapter = std::make_shared<StoreAdapter>(store);
  auto communicator = coll::Communicator::create(adapter, rank, size, options);
  TORCH_CHECK(communicator.has_value(), "rdmakit: creating the communicator of rank ", rank, " of ", size,
              " failed: ", communicator.error().describe());
  return c10::make_intrusive<ProcessGroupRdmakit>(rank, size, std::move(adapter), std::move(options),
                                                  std::move(*communicator));
}

ProcessGroupRdmakit::ProcessGroupRdmakit(int rank, int size, std::shared_ptr<bootstrap::Store> store,
                                         coll::CommOptions options,
                                         std::unique_ptr<coll::Communicator> communicator)
    : BackendBase(rank, size),
      store_(std::move(store)),
      options_(std::move(options)),
      communicator_(std::move(communicator)) {
  init();
}

ProcessGroupRdmakit::~ProcessGroupRdmakit() {
  // Python drops the group holding the GIL, while a worker may be finishing a task whose tensors need the
  // GIL to be freed (tensors with a Python object): waiting for the worker with the GIL held deadlocks.
  PyThreadState* saved = Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr;
  close();
  if (saved != nullptr) PyEval_RestoreThread(saved);
}

void ProcessGroupRdmakit::close() {
  // Closing a communicator is collective (a barrier with its peers), so every rank closes its pair
  // channels in one global order, by (sender, receiver): the smallest pair still open then always has
  // both its ranks at it, and no two ranks wait for each other in opposite orders. The world's
  // communicator closes after them.
  std::vector<std::pair<std::pair<int, int>, std::unique_ptr<PairChannel>>> ordered;
  {
    std::lock_guard lock(channels_mutex_);
    for (auto& [key, channel] : channels_) {
      const auto [peer, is_sender] = key;
      ordered.emplace_back(is_sender ? std::pair{rank_, peer} : std::pair{peer, rank_}, std::move(channel));
    }
    channels_.clear();
  }
  std::sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& entry : ordered) entry.second.reset();
  executor_.join();
  communicator_.reset();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::enqueue(c10d::OpType type,
                                                            std::vector<at::Tensor> outputs,
                                                            std::function<void(coll::Communicator&)> body) {
  auto work = c10::make_intrusive<RdmakitWork>(rank_, type, std::move(outputs));
  coll::Communicator* communicator = communicator_.get();
  executor_.submit([work, communicator, body = std::move(body)] {
    run_and_complete(*work, [&] { body(*communicator); });
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::barrier(const c10d::BarrierOptions&) {
  return enqueue(c10d::OpType::BARRIER, {},
                 [](coll::Communicator& comm) { throw_if_failed(comm.barrier(), "barrier"); });
}

// ---- Point to point ----------------------------------------------------------------------------------
// Each direction between two ranks is a two-rank communicator where the sender is rank 0: a message is a
// broadcast of a small header (tag and size, so that a mismatched send/recv pair is an error naming both,
// not corrupt data or a hang) and then of the payload. Messages of one direction match in issue order.

PairChannel::PairChannel(std::shared_ptr<bootstrap::Store> store, coll::CommOptions options, int sender,
                         int receiver, bool is_sender)
    : store_(std::move(store)), options_(std::move(options)), is_sender_(is_sender) {
  options_.key_prefix = "rdmakit/p2p/" + std::to_string(sender) + "to" + std::to_string(receiver) + "/";
}

Result<coll::Communicator*> PairChannel::communicator() {
  {
    std::lock_guard lock(mutex_);
    if (communicator_) return communicator_.get();
    if (failure_) return std::unexpected(*failure_);
  }
  // Outside the lock: creating waits for the peer, and abort() must not wait behind it.
  auto made = coll::Communicator::create(store_, is_sender_ ? 0 : 1, 2, options_);
  std::lock_guard lock(mutex_);
  if (!made) failure_ = made.error();
  if (failure_) {
    if (made) (*made)->abort("aborted while connecting");
    return std::unexpected(*failure_);
  }
  communicator_ = std::move(*made);
  return communicator_.get();
}

void PairChannel::abort(const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (communicator_) communicator_->abort(reason);
  if (!failure_) failure_ = Error(Errc::ConnectionBroken, "aborted: " + reason);
}

void ProcessGroupRdmakit::abort(const std::string& reason) {
  if (communicator_) communicator_->abort(reason);
  std::lock_guard lock(channels_mutex_);
  for (auto& [key, channel] : channels_) channel->abort(reason);
}

PairChannel& ProcessGroupRdmakit::channel(int peer, bool is_sender) {
  std::lock_guard lock(channels_mutex_);
  auto& slot = channels_[{peer, is_sender}];
  if (!slot) {
    int sender = is_sender ? rank_ : peer;
    int receiver = is_sender ? peer : rank_;
    slot = std::make_unique<PairChannel>(store_, options_, sender, receiver, is_sender);
  }
  return *slot;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::enqueue_p2p(
    c10d::OpType type, int peer, bool is_sender, at::Tensor tensor,
    std::function<void(coll::Communicator&)> body) {
  TORCH_CHECK(peer >= 0 && peer < size_ && peer != rank_, "rdmakit ", is_sender ? "send" : "recv", ": rank ",
              peer, " is not another rank of this group of ", size_);
  auto work = c10::make_intrusive<RdmakitWork>(rank_, type, std::vector<at::Tensor>{tensor});
  PairChannel& pair = channel(peer, is_sender);
  std::string what = std::string(is_sender ? "send to" : "recv from") + " rank " + std::to_string(peer);
  pair.executor().submit([work, &pair, what, body = std::move(body)] {
    run_and_complete(*work, [&] {
      auto communicator = pair.communicator();
      if (!communicator) throw_if_failed(std::unexpected(communicator.error()), what + " (connecting)");
      body(**communicator);
    });
  });
  return work;
}

namespace {

constexpr std::int64_t kMessageMagic = 0x72646d616b697470;  // "rdmakitp"
using Header = std::array<std::int64_t, 3>;                 // magic, tag, payload bytes

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_single(tensors, "send");
  at::Tensor payload = staged(tensors[0]);
  return enqueue_p2p(c10d::OpType::SEND, dst, true, tensors[0], [payload, tag](coll::Communicator& comm) {
    Header header{kMessageMagic, tag, static_cast<std::int64_t>(payload.nbytes())};
    throw_if_failed(comm.broadcast(header.data(), header.data(), header.size(), coll::DataType::I64, 0),
                    "send");
    if (payload.nbytes() == 0) return;
    throw_if_failed(
        comm.broadcast(bytes_of(payload), bytes_of(payload), payload.nbytes(), coll::DataType::U8, 0),
        "send");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmakit::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_single(tensors, "recv");
  at::Tensor target = tensors[0];
  return enqueue_p2p(
      c10d::OpType::RECV, src, false, target, [target, src, tag](coll::Communicator& comm) mutable {
        Header header{};
        throw_if_failed(comm.broadcast(header.data(), header.data(), header.size(), coll::DataType::I64, 0),
                        "recv");
        TORCH_CHECK(header[0] == kMessageMagic, "rdmakit recv from rank ", src,
                    ": the message header is corrupt");
        const auto expected = static_cast<std::int64_t>(target.nbytes());
        if (header[1] != tag || header[2] != expected) {
          // Take the payload anyway, so the next message of this direction still lines up.
          std::vector<std::byte> discard(static_cast<std::size_t>(std::max<std::int64_t>(header[2], 0)));
          if (!discard.empty()) {
            throw_if_failed(
                comm.broadcast(discard.data(), discard.data(), discard.size(), coll::DataType::U8, 0),
                "recv");
          }
          TORCH_CHECK(false, "rdmakit recv from rank ", src, ": expected tag ", tag, " and ", expected,
                      " bytes, but the next message from that rank has tag ", header[1], " and ", header[2],
                      " bytes (messages between two ranks match in issue order)");
        }
        if (expected == 0) return;
        at::Tensor landing = staged(target);
        throw_if_failed(
            comm.broadcast(bytes_of(landing), bytes_of(landing), landing.nbytes(), coll::DataType::U8, 0),
            "recv");
        write_back(target, landing);
      });
}

}  // namespace rdmakit::torch_backend
