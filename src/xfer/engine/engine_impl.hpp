// The engine's internal pieces: rails (one context each), peers (connections to one owner), segment
// entries (a resolved name), batches and the work requests in flight. engine.cpp holds the control path
// (rails, segments, resolving, connecting), datapath.cpp the posting and completion path.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bootstrap/peer_proof.hpp"
#include "core/message_channel.hpp"
#include "rdmakit/context.hpp"
#include "rdmakit/xfer/engine.hpp"
#include "xfer/engine/files.hpp"
#include "xfer/engine/files_local.hpp"
#include "xfer/engine/plan.hpp"
#include "xfer/engine/record.hpp"

namespace rdmakit::xfer::detail {

// A counting semaphore with a deadline: the in-flight bounds. Taking and returning credits is one atomic
// operation; the mutex and condition variable are used only when a taker has to wait.
class Credits {
 public:
  explicit Credits(std::uint32_t total) : free_(total), total_(total) {}
  // Takes between 1 and `wanted` credits, waiting until at least one is free; 0 when `deadline` passed.
  std::uint32_t acquire(std::uint32_t wanted, std::chrono::steady_clock::time_point deadline);
  void release(std::uint32_t n);
  std::uint32_t in_use() const { return total_ - free_.load(); }
  std::uint32_t peak() const { return peak_.load(std::memory_order_relaxed); }
  // Between 1 and `wanted` credits if any is free, without waiting; else 0.
  std::uint32_t try_take(std::uint32_t wanted);
  // Exactly n credits or none, without waiting.
  bool try_take_exact(std::uint32_t n);
  std::uint32_t total() const { return total_; }

 private:
  std::atomic<std::uint32_t> free_;
  std::uint32_t total_;
  std::atomic<std::uint32_t> waiters_{0};
  std::atomic<std::uint32_t> peak_{0};
  std::mutex mutex_;
  std::condition_variable freed_;
};

// notify.cpp: what a notification connection's initiator appends to its engine name in the peer proof (the
// MAC binds it). The owner opens its channel on those connections only: a channel's receive progresses its
// connection's input on the thread that polls it, and data connections must stay with the transport's own
// progress (the notify thread polling them moved their WRITEs' placement onto it, a 1 ms poll off the
// data path).
inline constexpr std::string_view kNotifyIdentitySuffix = "\x1fnotify";
// The engine names the proof can carry with the suffix.
inline constexpr std::size_t kMaxEngineName = bootstrap::kMaxPeerIdentity - kNotifyIdentitySuffix.size();
static_assert(kFileIdentitySuffix.size() <= kNotifyIdentitySuffix.size(),
              "every engine name fits both proofs");
Result<std::unique_ptr<rdmakit::detail::MessageChannel>> open_owner_channel(
    Context& context, std::shared_ptr<Connection> connection);

class BatchImpl;
struct Peer;
struct SegmentEntry;
struct LocalRegion;

// One work request of a batch: a record in the batch's pool (BatchImpl::ops), made with the batch and
// posted, completed and retried in place, so the data path allocates nothing per work request. Its plan
// lives in the batch's PreparedImpl, its segment's resolution in the batch (or, after a retry's re-resolve,
// in `renewed`).
struct InflightOp {
  const PlannedOp* op = nullptr;
  const SegmentEntry* entry = nullptr;  // the resolution it was posted against
  std::shared_ptr<const SegmentEntry> renewed;
  std::uint32_t handle = 0;
  std::uint32_t attempts = 0;
  // The failure that started the retries and what each retry met: the final error names the cause, not
  // only the last retry's symptom (a dead owner's "connection refused"). Made at the first failure.
  struct Retries {
    Error first;
    std::string later;
  };
  std::unique_ptr<Retries> retries;
};

// The work requests posted in one call on one link, ids first .. first + count - 1: the batch's ops
// [begin, begin + count). Only the last is signaled: RC completes a connection's sends in order and reports
// every failure, signaled or not, so the completions the rail's single reaper takes in queue order account
// for every one of them.
struct InflightChain {
  std::uint64_t first = 0;
  std::uint32_t done = 0;  // ops [begin, begin + done) have finished
  std::uint32_t begin = 0;
  std::uint32_t count = 0;
  std::shared_ptr<BatchImpl> batch;
};

// What one completion finished: the chain's work requests before it (they succeeded without a completion
// of their own) and the one it names, which failed unless `failed` is false (then it is the last of `ok`).
struct Finished {
  std::shared_ptr<BatchImpl> batch;
  std::uint32_t begin = 0;  // ops [begin, begin + ok) succeeded
  std::uint32_t ok = 0;
  bool failed = false;  // op begin + ok failed
  std::size_t count() const noexcept { return ok + (failed ? 1 : 0); }
};

// A work request waiting on the retry thread.
struct RetryItem {
  std::shared_ptr<BatchImpl> batch;
  std::uint32_t index = 0;
};

struct Rail {
  std::size_t index = 0;
  std::string transport;
  std::string device;                           // as named in verbs_devices (empty: the transport's default)
  std::atomic<std::uint64_t> work_requests{0};  // posted on this rail (EngineStats::rails)
  std::shared_ptr<Context> context;
  std::shared_ptr<Listener> listener;
  std::shared_ptr<CompletionQueue> cq;
  Capabilities caps;
  std::unique_ptr<Credits> credits;  // max_inflight_per_rail: the CQ can never overflow
  // Chains in flight by the id of their last work request (a connection's ids are consecutive, its number
  // in their high bits, so lower_bound(id) finds the chain of any id); completions that arrive before
  // post() returned wait in `early`.
  std::mutex ops_mutex;
  std::map<std::uint64_t, InflightChain> chains;
  std::map<std::uint64_t, Completion> early;
  // One reaper at a time, dequeuing with poll() and applying before it lets go: a connection's completions
  // are applied in the queue's order, which a chain's accounting relies on. Waiters reap for themselves;
  // the progress thread reaps while work is in flight and sleeps on `work_posted` when there is none.
  std::mutex reap_mutex;
  std::mutex idle_mutex;
  std::condition_variable work_posted;
  std::atomic<bool> progress_sleeping{false};
  // Connections peers made to us (we are a segment owner): kept open until they fail or we close. Only
  // those whose peer proved the secret get here; `proving` holds the others while their proof runs (each
  // on its own thread, so a silent stranger delays nobody), at most kMaxProving at a time.
  // Each with the engine name it proved and, for a notification connection, the channel its notifications
  // arrive on (receives posted before the peer learns it was accepted, so its first notification finds one);
  // data connections have none.
  struct Accepted {
    std::shared_ptr<Connection> connection;
    std::string identity;
    std::unique_ptr<rdmakit::detail::MessageChannel> channel;
  };
  std::mutex accepted_mutex;
  std::vector<Accepted> accepted;
  struct Proving {
    std::shared_ptr<Connection> connection;
    std::shared_ptr<std::atomic<bool>> done;
    std::thread thread;
  };
  std::vector<Proving> proving;  // the acceptor thread's own
  std::thread progress;
  std::thread acceptor;
};

struct Link {
  Rail* rail = nullptr;
  std::size_t remote_rail = 0;  // index among the owner's rails of the chosen transport
  std::shared_ptr<Connection> connection;
};

// The connections to one life of one owner over one transport.
struct Peer {
  explicit Peer(std::uint32_t bound) : credits(bound) {}
  std::string key;  // owner / transport / epoch
  std::string owner;
  std::vector<std::unique_ptr<Link>> links;
  Credits credits;  // max_inflight_per_peer
  std::atomic<std::uint32_t> next_link{0};
  // Notifications go on a connection of their own (own queues, not a rail's), made on the first one.
  std::mutex notify_mutex;
  std::unique_ptr<rdmakit::detail::MessageChannel> notify;
  // Requests to the owner's file segments: a connection and a thread of their own (files_client.cpp), made
  // with the first one. Stopped by close_file_link() (the engine's end) or the destructor, which fail what
  // is still queued or unanswered.
  std::mutex file_mutex;
  std::unique_ptr<FileLink> file;
  ~Peer();
  bool healthy() const;
  void close();
};

// A resolved name; immutable once made (a re-resolve makes a new one), so the data path reads it unlocked.
struct SegmentEntry {
  std::string name;
  std::uint64_t generation = 0;
  bool gone = false;
  SegmentRecord record;
  std::string transport;
  std::shared_ptr<Peer> peer;
  std::vector<RemoteRegion> remote;  // by Link::remote_rail
  // A file segment on this host whose file we opened ourselves: its READs into host memory read it here.
  std::shared_ptr<const LocalFile> local_file;
};

// Memory of ours that requests use: registered in every rail whose transport takes it (device memory may
// be refused by some); by_rail holds null for the others. A transport is taken or left out whole.
struct LocalRegion {
  std::uint32_t id = 0;
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  MemoryKind kind = MemoryKind::Host;
  std::vector<std::shared_ptr<MemoryRegion>> by_rail;
  // allocate_segment()'s registration, which owns the memory: kept even when another rail of its transport
  // refused the memory and the transport was left out.
  std::shared_ptr<MemoryRegion> allocation;
  std::vector<std::string> transports;  // those that registered it
  std::string refusals;                 // "shm: <why>; ..." of those that did not
  bool reaches(std::string_view transport) const {
    return std::ranges::find(transports, transport) != transports.end();
  }
};

// Stops the peer's file link (the engine's end): what it still holds fails, later ops fail at once.
void close_file_link(Peer& peer);

// The file requests of one submit to one owner.
struct FileGroup {
  Peer* peer = nullptr;
  std::shared_ptr<const SegmentEntry> entry;  // one of its segments: where the owner listens
  std::vector<FileOp> ops;
};

class PreparedImpl;
struct ProgressHandle;

class BatchImpl final : public Batch {
 public:
  // `pieces`: how many work requests (or file messages) carry each request.
  BatchImpl(std::span<const std::uint32_t> pieces, BatchCallback callback);
  std::size_t size() const noexcept override { return slots_.size(); }
  bool done() const noexcept override { return remaining_.load(std::memory_order_acquire) == 0; }
  Result<void> wait(std::chrono::nanoseconds timeout) override;
  std::optional<Result<void>> status(std::size_t i) const override;
  std::size_t failed() const noexcept override { return failed_.load(std::memory_order_acquire); }
  std::optional<Result<void>> notification() const override;
  BatchPaths paths() const override;

  // Batch::paths() in short, set at submit before any request can finish: transport i of `names` (the
  // engine's, plus "file" for reads this process made itself) and MemoryPath m, a bit each.
  struct PathBits {
    std::uint32_t transports = 0;
    std::uint32_t memory = 0;
    std::uint32_t file_by_owner = 0;
    std::uint32_t file_local = 0;
    std::shared_ptr<const std::vector<std::string>> names;
  };
  void set_paths(PathBits paths) { paths_ = std::move(paths); }

  // The batch carries a notification: done() waits for notified() too, and `send` runs (once) when every
  // request has finished.
  void expect_notification(std::function<void()> send);
  void notified(Result<void> outcome);

  // One work request (or file message) of request i finished (with `error` when it failed).
  void piece_done(std::size_t i, const Error* error);
  // The work requests ops()[begin, begin + n) succeeded: their requests' pieces are done, and the requests
  // they finished are retired with one update of the batch's count (a chain's completion, not one per
  // request).
  void ops_done(std::uint32_t begin, std::uint32_t n);
  void set_self(std::weak_ptr<BatchImpl> self) { self_ = std::move(self); }
  // Through it wait() reaps the engine's completions itself, so a waiting thread completes its own batch
  // without a hand-off from the progress thread.
  void set_progress(std::shared_ptr<ProgressHandle> progress) { progress_ = std::move(progress); }

  // The work requests' records (one per planned op, grouped by peer), and what they point into: the plan
  // and each segment's resolution at submit. Released when the batch is done (nothing is in flight then).
  void attach(std::shared_ptr<const PreparedImpl> prepared,
              std::vector<std::shared_ptr<const SegmentEntry>> entries, std::vector<InflightOp> ops);
  InflightOp& op(std::uint32_t k) { return ops_[k]; }
  const PreparedImpl* prepared() const { return prepared_.get(); }
  std::uint32_t ops_size() const { return static_cast<std::uint32_t>(ops_.size()); }

 private:
  // 8 bytes a request: the batch's bookkeeping stays out of the way of the bytes it moves (errors, rare,
  // live apart in `errors_`).
  struct Slot {
    std::atomic<std::uint32_t> pending{0};
    std::atomic<std::uint8_t> state{0};  // 0 in flight, 1 ok, 2 failed
    std::atomic<bool> has_error{false};  // set after errors_[i]
    bool single = false;                 // carried by one piece: its only piece finishes it, no count
  };
  // Request i's last piece finished: its state is set (failed when any of its pieces failed).
  void settle(std::size_t i);
  // n more requests finished.
  void retire(std::size_t n);
  void all_done();

  std::vector<Slot> slots_;
  std::map<std::size_t, Error> errors_;  // by request, under mutex_, each set before its state becomes 2
  std::function<void()> send_notification_;
  std::optional<Result<void>> notification_;  // under mutex_
  std::atomic<bool> has_notification_{false};
  std::atomic<std::size_t> remaining_;
  std::atomic<std::size_t> failed_{0};
  mutable std::mutex mutex_;
  std::condition_variable finished_;
  BatchCallback callback_;
  std::weak_ptr<BatchImpl> self_;
  std::shared_ptr<ProgressHandle> progress_;
  std::shared_ptr<const PreparedImpl> prepared_;
  std::vector<std::shared_ptr<const SegmentEntry>> entries_;  // by PreparedImpl::handles
  std::vector<InflightOp> ops_;
  PathBits paths_;
};

// Lets a batch that outlives the engine wait without touching it: the engine clears `engine` on its way out.
struct ProgressHandle {
  std::shared_mutex mutex;
  class EngineImpl* engine = nullptr;
};

// A request list checked and planned once.
class PreparedImpl final : public PreparedBatch, public std::enable_shared_from_this<PreparedImpl> {
 public:
  std::size_t size() const noexcept override { return requests; }
  std::size_t requests = 0;
  std::vector<std::uint32_t> pieces;         // work requests per request
  Plan planned;                              // each op with its handle (PlannedOp::segment)
  std::vector<std::uint32_t> op_handles;     // by planned op: its index in `handles`
  std::vector<std::uint32_t> piece_regions;  // by Plan::pieces: the index of its registration in `regions`
  // Each (index in `handles`, index in `regions`) that some op pairs: the transport check at submit.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> handle_regions;
  // Requests to file segments: not planned (the owner reads and delivers them), sent as messages.
  std::vector<PlanItem> file_items;
  std::vector<std::shared_ptr<LocalRegion>> file_regions;  // by file item
  std::vector<bool> handle_is_file;                        // by handles: a file segment when prepared
  std::vector<std::uint32_t> handles;                      // distinct, with the extent the list needs in each
  std::vector<std::uint64_t> extents;
  std::vector<std::shared_ptr<LocalRegion>> regions;
  std::uint32_t first_handle = 0;  // request 0's: names the notification
  std::uint64_t coalesced = 0;
  const void* engine = nullptr;
};

class EngineImpl final : public Engine {
 public:
  EngineImpl(MetadataStore& metadata, EngineOptions options);
  ~EngineImpl() override;
  Result<void> start();

  Result<std::span<std::byte>> allocate_segment(std::string_view name, std::size_t size) override;
  Result<std::span<std::byte>> allocate_segment(std::string_view name, std::size_t size,
                                                MemoryKind kind) override;
  Result<void> publish(std::string_view name, void* data, std::size_t size) override;
  Result<void> publish(std::string_view name, void* data, std::size_t size, MemoryKind kind) override;
  Result<void> unpublish(std::string_view name) override;
  Result<void> register_local(void* data, std::size_t size) override;
  Result<void> register_local(void* data, std::size_t size, MemoryKind kind) override;
  Result<void> unregister_local(void* data) override;
  Result<SegmentHandle> open_segment(std::string_view name) override;
  Result<SegmentInfo> segment_info(SegmentHandle segment) const override;
  Result<std::shared_ptr<Batch>> submit(std::span<const Request> requests, BatchCallback done) override;
  Result<std::span<std::byte>> allocate_unpublished(std::string_view name, std::size_t size,
                                                    MemoryKind kind) override;
  Result<void> publish_ready(std::string_view name) override;
  Result<std::shared_ptr<Batch>> submit(std::span<const Request> requests, std::span<const std::byte> message,
                                        BatchCallback done) override;
  std::optional<Notification> poll_notification() override;
  Result<Notification> wait_notification(std::chrono::nanoseconds timeout) override;
  Result<std::shared_ptr<const PreparedBatch>> prepare(std::span<const Request> requests) override;
  Result<std::shared_ptr<Batch>> submit(const PreparedBatch& prepared, BatchCallback done) override;
  Result<std::shared_ptr<Batch>> try_submit(std::span<const Request> requests, BatchCallback done) override;
  Result<std::shared_ptr<Batch>> try_submit(const PreparedBatch& prepared, BatchCallback done) override;
  Result<void> publish_file(std::string_view name, const std::string& path,
                            const FileSegmentOptions& options) override;
  Result<std::vector<std::string>> publish_directory(std::string_view prefix, const std::string& dir,
                                                     const FileSegmentOptions& options) override;
  EngineStats stats() const override;
  // Dequeues and applies what every rail's queue holds (Batch::wait); true when it found something.
  bool poll_rails();
  // A thread that reaps completions itself (inside submit, or spinning in Batch::wait) says so: while any
  // does, the progress threads stand aside (they sleep instead of taking completions from under it, which
  // cost a cache-line transfer per record and, on one core, the CPU itself). The last to leave wakes the
  // progress threads of rails with work still in flight.
  void enter_reaping() { self_reapers_.fetch_add(1); }
  void leave_reaping();
  // Tests: the context of rail i (e.g. to reach a fault context's injector).
  Context& rail_context(std::size_t i) const { return *rails_.at(i)->context; }
  const EngineOptions& options() const noexcept override { return options_; }
  MetadataStore& metadata() const noexcept override { return metadata_; }

 private:
  // files_server.cpp: publish_file() of `entry` opened relative to `dir` (AT_FDCWD: a path), a symbolic
  // link at the last step refused where `no_follow` (publish_directory); `path` is what messages show.
  Result<void> publish_file_at(int dir, const std::string& entry, bool no_follow, std::string_view name,
                               const std::string& path, const FileSegmentOptions& options);
  // engine.cpp: control path.
  Result<void> open_rail(const std::string& transport, const std::string& device);
  void accept_loop(Rail& rail);
  void start_proof(Rail& rail, std::shared_ptr<Connection> connection);
  // Proves the secret to the owner on a fresh connection and checks that it is `owner`.
  Result<void> prove_owner(Rail& rail, Connection& connection, const std::string& owner,
                           const std::string& address);
  // segments.cpp: local memory and published segments. `first` (optional) is the registration that
  // allocated the memory, on rail `first_rail`.
  Result<std::shared_ptr<LocalRegion>> register_everywhere(void* data, std::size_t size, MemoryKind kind,
                                                           std::shared_ptr<MemoryRegion> first,
                                                           std::size_t first_rail = 0);
  Result<std::shared_ptr<MemoryRegion>> allocate_device(std::size_t size, std::size_t& rail);
  // New memory of `kind` registered on every rail that takes it: allocate_segment and allocate_unpublished.
  Result<std::shared_ptr<LocalRegion>> allocate_registered(std::size_t size, MemoryKind kind);
  Result<void> publish_region(std::string_view name, std::shared_ptr<LocalRegion> region);
  Result<std::shared_ptr<const SegmentEntry>> resolve(std::string_view name, std::uint64_t generation,
                                                      const SegmentEntry* previous);
  Result<std::shared_ptr<Peer>> peer_for(const SegmentRecord& record, const std::string& transport);
  Result<std::shared_ptr<Peer>> connect_peer(const SegmentRecord& record, const std::string& transport);
  std::shared_ptr<const SegmentEntry> entry(std::uint32_t handle) const;
  void install(std::uint32_t handle, std::shared_ptr<const SegmentEntry> entry);
  std::shared_ptr<LocalRegion> find_local(std::uint64_t addr, std::uint64_t length) const;

  // notify.cpp: notifications, both sides.
  void notify_loop();
  bool take_notifications(Rail& rail);
  void accept_notification(const std::string& sender, std::span<const std::byte> payload);
  Result<void> send_notification(const SegmentEntry& entry, std::span<const std::byte> message);
  Result<void> open_notify_channel(Peer& peer, const SegmentEntry& entry);
  // A connection of its own to the owner at `address` for notifications or file requests: we prove the
  // secret as our name + `marker` (so the owner knows what it is for), the peer must prove it is `owner`.
  // Closed on any failure.
  Result<std::shared_ptr<Connection>> connect_to_owner(Rail& rail, const std::string& address,
                                                       const std::string& owner, std::string_view marker);
  void run_task(std::function<void()> task);

  // files_server.cpp: the owner's side of file segments. A proven connection whose initiator asked for
  // file requests goes to the file server (null when this engine publishes no file: then refused).
  std::shared_ptr<FileServer> file_server() const;
  void adopt_file_connection(Rail& rail, std::shared_ptr<Connection> connection, std::string identity,
                             std::unique_ptr<rdmakit::detail::MessageChannel> channel);
  // files_client.cpp: the requester's side. `ops` go to `peer`'s file link (made on the first ones); their
  // credits were taken.
  void queue_file_ops(Peer& peer, const SegmentEntry& entry, std::vector<FileOp> ops);
  // files_local.cpp's reader, started on the first call; null when io_uring refused it.
  LocalFileReader* local_reader() const;
  // The file a request reads itself (files_local.hpp), or null: a READ into host memory of a segment whose
  // file we opened, while the reader runs. WRITEs and device memory go to the owner.
  std::shared_ptr<const LocalFile> local_file_for(const SegmentEntry& entry, bool write,
                                                  const LocalRegion& region) const;
  void file_link_loop(Peer& peer, FileLink& link, Rail& rail, std::string address, std::string owner);
  // The connection to the owner failed under `op` (or could not be made): it is retried against the
  // segment's current resolution (its credit on `peer` goes back now), at most max_retries times, or fails.
  void file_op_failed(Peer& peer, FileOp& op, const Error& error);
  void retry_file_op(FileOp op);
  Result<std::unique_ptr<rdmakit::detail::MessageChannel>> open_file_channel(Rail& rail,
                                                                             const std::string& address,
                                                                             const std::string& owner);
  // submit_prepared's part for file items: the messages, by peer (entry_of: a handle's current entry).
  std::vector<FileGroup> file_groups(
      const PreparedImpl& prepared, const std::shared_ptr<BatchImpl>& batch,
      const std::function<const std::shared_ptr<const SegmentEntry>&(std::uint32_t)>& entry_of) const;
  // try_submit: every group's credits now, or none and the reason.
  Result<void> reserve_file_groups(const std::vector<FileGroup>& groups);
  // Queues the messages on their links; unless `reserved`, each takes a peer credit first, waiting until
  // `deadline` (then it fails with ResourceExhausted, as a work request does).
  void queue_file_groups(std::vector<FileGroup> groups, bool reserved,
                         std::chrono::steady_clock::time_point deadline);

  // datapath.cpp: posting, completions, retries.
  // How the batch's requests will travel (BatchImpl::PathBits).
  BatchImpl::PathBits paths_of(const PreparedImpl& prepared,
                               std::span<const std::shared_ptr<const SegmentEntry>> current,
                               const std::vector<FileGroup>& files) const;
  Result<std::shared_ptr<PreparedImpl>> prepare_impl(std::span<const Request> requests) const;
  Result<std::shared_ptr<Batch>> submit_prepared(const PreparedImpl& prepared, BatchCallback done,
                                                 bool blocking, std::span<const std::byte> message);
  // try_submit: takes every credit the ops need now (per rail into `rails`), or none and the reason.
  Result<void> reserve_all(BatchImpl& batch, std::vector<std::uint32_t>& rails);
  // `file`: whether each request goes to a file segment; `regions`: the local registrations the batch uses
  // (each once).
  Result<std::vector<PlanItem>> check(std::span<const Request> requests, std::vector<std::uint8_t>& file,
                                      std::vector<std::shared_ptr<LocalRegion>>& regions) const;
  // Posts the batch's ops [begin, end) (grouped by peer). `reserved`: the credits were taken already
  // (try_submit): post without waiting, then give back the rail credits left over.
  void post_all(const std::shared_ptr<BatchImpl>& batch, std::uint32_t begin, std::uint32_t end,
                std::chrono::steady_clock::time_point deadline,
                std::vector<std::uint32_t>* reserved = nullptr);
  void post_round(Peer& peer, const std::shared_ptr<BatchImpl>& batch, std::uint32_t& next, std::uint32_t end,
                  std::chrono::steady_clock::time_point deadline, bool reserved,
                  std::vector<std::uint32_t>& rail_used);
  void post_chain(Link& link, const std::shared_ptr<BatchImpl>& batch, std::uint32_t begin,
                  std::uint32_t count);
  void progress_loop(Rail& rail);
  // Dequeues and applies what the rail's queue holds, unless another thread is doing so (false then, and
  // when nothing was there).
  bool reap(Rail& rail);
  // `wanted` credits or fewer (at least 1) of `credits`, reaping completions itself while none are free,
  // then blocking (and standing aside as a reaper meanwhile) until `deadline`; 0 when it passed.
  std::uint32_t take_credits(Credits& credits, std::uint32_t wanted,
                             std::chrono::steady_clock::time_point deadline);
  void on_completion(Rail& rail, const Completion& completion);
  // Under ops_mutex: the chain at `it` takes `completion`; true when that finished the chain (erased).
  bool advance_locked(Rail& rail, std::map<std::uint64_t, InflightChain>::iterator it,
                      const Completion& completion, Finished& finished);
  void finish(Rail& rail, Finished finished, const Completion& completion);
  // The batch's op `k` failed: retried, or its requests fail.
  void op_failed(const std::shared_ptr<BatchImpl>& batch, std::uint32_t k, const Error& error,
                 bool retryable);
  void retry_loop();
  void retry_one(RetryItem item);
  // Fails the op's requests; after retries the error leads with the first failure and lists the retries'.
  void fail_op(BatchImpl& batch, std::uint32_t k, const Error& error);

  MetadataStore& metadata_;
  EngineOptions options_;
  std::string host_;
  std::string secret_;  // engine_secret(): seals our records, opens theirs, proves our connections
  std::vector<std::unique_ptr<Rail>> rails_;
  std::vector<OfferedTransport> transports_;  // offered, one per kind
  // Their names, then "file" (a local file read): what BatchImpl::PathBits' transport bits index.
  std::shared_ptr<const std::vector<std::string>> path_names_;

  std::mutex control_;  // serializes resolving, connecting and publishing (control path only)
  std::map<std::string, std::shared_ptr<Peer>> peers_;
  std::map<std::string, std::uint32_t, std::less<>> handles_;
  std::map<std::string, std::shared_ptr<LocalRegion>, std::less<>> published_;
  std::map<std::string, std::shared_ptr<LocalRegion>, std::less<>> unready_;  // allocate_unpublished()
  std::set<std::string, std::less<>> published_files_;                        // publish_file()
  mutable std::mutex files_mutex_;           // file_server_ (the acceptor's proofs read it)
  std::shared_ptr<FileServer> file_server_;  // made by the first publish_file
  mutable std::mutex local_reader_mutex_;
  mutable std::unique_ptr<LocalFileReader> local_reader_;  // made by the first local file READ; kept
  mutable bool local_reader_failed_ = false;               // io_uring refused: READs go to the owners

  std::mutex notifications_mutex_;
  std::condition_variable notification_arrived_;
  std::deque<Notification> notifications_;
  std::set<std::string, std::less<>> ready_names_;  // published_'s names, for the notify thread
  std::thread notify_thread_;
  std::deque<std::function<void()>> tasks_;  // notification sends, run by the retry thread
  bool retry_exited_ = false;                // under retry_mutex_

  mutable std::shared_mutex table_;                           // entries_ and locals_, read by every submit
  std::vector<std::shared_ptr<const SegmentEntry>> entries_;  // handle - 1
  std::map<std::uint64_t, std::shared_ptr<LocalRegion>> locals_;  // by address
  std::unordered_map<std::uint32_t, std::shared_ptr<LocalRegion>> locals_by_id_;
  std::uint32_t next_local_id_ = 1;
  std::uint64_t next_generation_ = 1;

  std::mutex retry_mutex_;
  std::condition_variable retry_ready_;
  std::deque<RetryItem> retry_queue_;
  std::thread retry_thread_;

  std::shared_ptr<ProgressHandle> progress_handle_ = std::make_shared<ProgressHandle>();
  std::atomic<bool> stop_{false};
  std::atomic<std::uint32_t> self_reapers_{0};
  std::atomic<std::uint64_t> requests_{0}, work_requests_{0}, coalesced_{0}, retries_{0}, resolves_{0};
  std::atomic<std::uint64_t> notifications_received_{0}, notifications_dropped_{0}, notifications_refused_{0};
};

}  // namespace rdmakit::xfer::detail
