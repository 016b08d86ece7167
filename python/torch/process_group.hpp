// The rdmakit backend of torch.distributed: a c10d::ProcessGroup under torch 1.13, a c10d::Backend under
// torch 2.x (torch_compat.hpp picks the base class; the operations are the same).
//
// Collectives run on the rdmakit communicator, one at a time and in issue order, on a worker thread the
// group owns: c10d requires every call to return a Work at once, and every rank issues collectives in the
// same order, which is exactly the communicator's rule. Point-to-point messages run on a separate
// two-rank communicator per (sender, receiver) direction, each with its own worker, so a send never waits
// behind a collective or behind traffic in the other direction. Ranks meet through the c10d::Store that
// torch hands to the backend's creator (StoreAdapter below).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "rdmakit/bootstrap.hpp"
#include "rdmakit/coll/communicator.hpp"
#include "torch_compat.hpp"

namespace rdmakit::torch_backend {

// rdmakit's store interface over torch's: the communicator's rendezvous goes through whatever store
// torch.distributed set up (TCPStore, FileStore, a PrefixStore per group).
class StoreAdapter final : public bootstrap::Store {
 public:
  explicit StoreAdapter(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  Result<void> set(std::string_view key, std::string_view value) override;
  // Polls with check() instead of blocking in torch's get(): a blocking get would hold the one
  // connection torch's TCPStore client has while another thread of this process needs it to publish.
  Result<std::string> get(std::string_view key, std::chrono::milliseconds timeout) override;

 private:
  std::mutex mutex_;  // c10d stores are not documented as thread-safe
  c10::intrusive_ptr<c10d::Store> store_;
};

// Runs tasks one at a time, in submission order, on its own thread. The destructor runs what is queued.
class SerialExecutor {
 public:
  SerialExecutor();
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;
  void submit(std::function<void()> task);
  // Runs what is queued, then stops the thread. Idempotent; nothing may be submitted afterwards.
  void join();

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the queue exists, joins before it goes
};

// A c10d Work completed by an executor. wait() and the future come from c10d's base class state, so
// DDP's comm hooks (which chain on getFuture()) and work.wait() see the same completion.
class RdmakitWork final : public c10d::Work {
 public:
  RdmakitWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs);
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  // Called once, by the executor: error is null on success.
  void complete(std::exception_ptr error);

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// One direction of point-to-point traffic with one peer: a two-rank communicator (the sender is its
// rank 0) made on first use, on the channel's own thread, since making it waits for the peer.
class PairChannel {
 public:
  PairChannel(std::shared_ptr<bootstrap::Store> store, coll::CommOptions options, int sender, int receiver,
              bool is_sender);
  // The communicator, made on first call; the first failure is returned again on every later call.
  Result<coll::Communicator*> communicator();
  // Aborts the communicator (coll::Communicator::abort), or fails its creation if it is not made yet.
  void abort(const std::string& reason);
  SerialExecutor& executor() { return executor_; }

 private:
  std::shared_ptr<bootstrap::Store> store_;
  coll::CommOptions options_;
  bool is_sender_;
  std::mutex mutex_;  // communicator_ and failure_: abort() comes from another thread
  std::unique_ptr<coll::Communicator> communicator_;
  std::optional<Error> failure_;
  SerialExecutor executor_;  // last: drained before the communicator it uses goes away
};

class ProcessGroupRdmakit final : public BackendBase {
 public:
  // Meets the other ranks through `store` (blocking until all arrived or the bootstrap timeout).
  // `timeout` bounds each collective unless RDMAKIT_COLL_TIMEOUT_MS is set.
  static c10::intrusive_ptr<ProcessGroupRdmakit> create(const c10::intrusive_ptr<c10d::Store>& store,
                                                        int rank, int size,
                                                        std::chrono::milliseconds timeout);
  ProcessGroupRdmakit(int rank, int size, std::shared_ptr<bootstrap::Store> store, coll::CommOptions options,
                      std::unique_ptr<coll::Communicator> communicator);
  ~ProcessGroupRdmakit() override;

  const std::string getBackendName() const override { return "rdmakit"; }
  std::string transports() const { return communicator_ ? communicator_->transports() : "closed"; }
  // For a process that exits on an error (rdmakit.distributed's excepthook): every communicator of the
  // group aborts, so the peers' collectives fail within milliseconds naming this rank, and closing the
  // group waits for nobody.
  void abort(const std::string& reason);

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;

 private:
  // Queues `body` on the collective worker; the Work completes when it returns or throws.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                         std::function<void(coll::Communicator&)> body);
  c10::intrusive_ptr<c10d::Work> enqueue_p2p(c10d::OpType type, int peer, bool is_sender, at::Tensor tensor,
                                             std::function<void(coll::Communicator&)> body);
  PairChannel& channel(int peer, bool is_sender);
  void close();  // the destructor's work, without the GIL

  std::shared_ptr<bootstrap::Store> store_;
  coll::CommOptions options_;
  std::unique_ptr<coll::Communicator> communicator_;
  std::mutex channels_mutex_;
  std::map<std::pair<int, bool>, std::unique_ptr<PairChannel>> channels_;  // (peer, this rank sends)
  SerialExecutor executor_;  // last: drained first, while the communicator still exists
};

}  // namespace rdmakit::torch_backend
