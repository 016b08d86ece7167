// The transfer engine: named memory segments and batches of one-sided transfers between processes.
//
// A process publishes named segments (a KV-cache pool, a weights buffer); its peers open a segment by name
// (one metadata lookup, then cached) and submit batches of READs and WRITEs between their own registered
// memory and any range of the segment. Each request of a batch gets its own status. Large requests are split
// into stripes spread over several connections (and over several devices where there are several: a "rail"
// is one context, i.e. one transport on one device); small requests that are adjacent in the segment are
// coalesced into one scatter-gather WRITE/READ. The transport is chosen per peer: shm when the owner is on
// this host (same boot and network namespace), verbs when both have it, tcp otherwise; `transport` forces
// one.
//
// Back-pressure: at most `max_inflight_per_peer` work requests are in flight to one peer (and at most
// `max_inflight_per_rail` over all peers of a rail, which sizes its completion queue). submit() BLOCKS while
// the bound is reached, until completions free room or `submit_timeout` passes (then Errc::ResourceExhausted
// for the requests it could not post; those already posted complete normally). Nothing is queued unbounded.
//
// A request succeeds only when every work request carrying its bytes completed successfully (RC semantics:
// a WRITE's completion at the initiator means the bytes are in the target's memory, on every transport of
// rdmakit; a READ's means they are in ours). A request that fails with a transient error (connection broken,
// peer unreachable, stale descriptor after the owner restarted) is retried at most `max_retries` times after
// re-resolving its segment; a segment whose name vanished fails its requests with Errc::NotFound.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rdmakit/error.hpp"
#include "rdmakit/export.hpp"
#include "rdmakit/memory.hpp"
#include "rdmakit/xfer/metadata.hpp"

namespace rdmakit::xfer {

struct EngineOptions {
  std::string name{};  // unique among the peers; empty: "xfer-<pid>-<random>"
  // The transports this engine offers and can use, one rail each (verbs: one rail per device below).
  std::vector<std::string> transports = {"shm", "tcp"};
  // Rails of a transport that picks one of several devices (TransportInfo::picks_device: verbs), one per
  // device named here; empty: the first active device.
  std::vector<std::string> verbs_devices{};
  std::string listen_address = "127.0.0.1:0";    // tcp/verbs listeners
  std::string transport{};                       // force this transport for every peer; empty: choose
  std::uint32_t connections_per_rail = 2;        // connections to one peer per rail
  std::uint64_t stripe_bytes = 1 << 20;          // requests longer than this are split into stripes
  std::uint64_t coalesce_bytes = 64 << 10;       // adjacent requests are merged up to this many bytes
  std::uint32_t max_inflight_per_peer = 128;     // work requests in flight to one peer
  std::uint32_t max_inflight_per_rail = 1024;    // over every peer of one rail (its CQ depth)
  std::uint32_t max_retries = 2;                 // re-resolve + reconnect attempts per work request
  std::chrono::milliseconds peer_timeout{2000};  // a silent peer fails its requests after this
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds submit_timeout{30000};  // longest submit() blocks on back-pressure
  // Notifications (submit() with a message) queued for poll_notification() at most: beyond that they are
  // dropped and counted (EngineStats::notifications_dropped), so a flooding peer costs a bounded queue.
  std::uint32_t max_notifications = 1024;
  // File segments (publish_file): the owner reads with io_uring into a ring of `file_ring_chunks` chunks of
  // `file_chunk_bytes` (a multiple of 4096), allocated and registered once, at the first publish_file. The
  // ring bounds the owner's memory for serving files, whatever its peers ask. A read of less than a chunk
  // takes only the ring's bytes it needs (in 64 KiB units), so up to 32 small reads are in flight at once.
  std::uint64_t file_chunk_bytes = 4 << 20;
  std::uint32_t file_ring_chunks = 4;
  // READs of a file segment whose owner is on this host (the same boot) into host memory: when this
  // process can open the published file itself and finds the very file the owner published there, it
  // reads it with its own io_uring straight into the destination, without the owner (docs/xfer.md, "File
  // segments on the same host"). false: every request goes to the owner, as from another host.
  bool file_local_reads = true;
};

// How publish_file() publishes a file. Read-only by default: the owner refuses every WRITE.
struct FileSegmentOptions {
  // Peers may WRITE byte ranges within the published size (never beyond: a file segment does not grow).
  // A WRITE completes once its bytes are in the file (the page cache, or the device with O_DIRECT).
  bool writable = false;
  // Writable only: the owner opens the file O_DSYNC, so each WRITE completes only once its bytes (and the
  // metadata needed to read them back) are on stable storage; slower, survives a crash of the owner's host.
  bool sync_writes = false;
  // The uid rule, as shm's for its peers: a file another uid may change (owned by a uid other than ours or
  // root, or writable by its group or by everyone) is refused, since every reader would get what that uid
  // wrote there as our bytes. Set this to publish such a file anyway (a data set another account owns).
  bool allow_other_writers = false;
  // Publish the file's path and inode in the segment's record, so that a requester on this host that may
  // open the file reads it itself (EngineOptions::file_local_reads). false: every request comes to us.
  bool offer_local_reads = true;
};

// How the bytes of a batch travelled (Batch::paths()), fixed when it was submitted: what a user checks to
// see that a GPU batch went straight into device memory, or that a file segment on this host was read
// without its owner.
struct BatchPaths {
  // The transports its requests went over ("shm", "tcp", "verbs"), each once, and "file" when a file
  // segment was read from the file by this process itself.
  std::vector<std::string> transports;
  // How its local memory was reached, each once: MemoryPath::Host for host memory; for device memory
  // GpuDirectDmabuf/GpuDirectPeermem (the NIC, or the file owner's WRITE, lands in it), CudaIpc (shm), or
  // Staged (copied through pinned host memory by the transport).
  std::vector<MemoryPath> memory;
  std::uint32_t file_requests_by_owner = 0;  // requests to file segments that their owner served
  std::uint32_t file_requests_local = 0;     // ... that this process read from the file itself
};
RDMAKIT_API std::string to_string(const BatchPaths& paths);  // "tcp: host, staged; file segments: 2 by owner"

enum class Op : std::uint8_t { Read, Write };

// An opened segment, from Engine::open_segment. Valid for the engine's life (0 is never a handle).
struct SegmentHandle {
  std::uint32_t value = 0;
  explicit operator bool() const noexcept { return value != 0; }
};

struct Request {
  Op op = Op::Write;
  void* local = nullptr;  // inside memory from register_local() or allocate_segment()/publish()
  SegmentHandle segment{};
  std::uint64_t offset = 0;  // into the segment
  std::uint64_t length = 0;
};

// The requests of one submit(). Thread-safe.
class RDMAKIT_API Batch {
 public:
  virtual ~Batch();
  virtual std::size_t size() const noexcept = 0;
  // Polling: whether every request has finished (succeeded or failed).
  virtual bool done() const noexcept = 0;
  // Waits until done(); Errc::Timeout if not done in time (the requests go on). It reaps completions itself
  // when no other thread is (no hand-off from the progress thread), spinning briefly, then sleeping in
  // slices.
  virtual Result<void> wait(std::chrono::nanoseconds timeout) = 0;
  // Request i's outcome: nullopt while it is in flight.
  virtual std::optional<Result<void>> status(std::size_t i) const = 0;
  // Requests finished with an error so far.
  virtual std::size_t failed() const noexcept = 0;
  // The notification attached at submit(): nullopt while it is not sent yet (and for a batch without one:
  // then always nullopt); ok once the owner's engine received it; the error when it was not sent (a request
  // failed: it is never sent then) or not received. done() waits for it too.
  virtual std::optional<Result<void>> notification() const = 0;
  // How its bytes travelled.
  virtual BatchPaths paths() const = 0;
};
// Called once when every request of the batch has finished, on the thread that reaped the last completion
// (the engine's progress thread, or one inside Batch::wait): keep it short, and do not wait in it.
using BatchCallback = std::function<void(Batch&)>;

struct EngineStats {
  std::uint64_t requests = 0;                // submitted
  std::uint64_t work_requests = 0;           // posted (stripes, coalesced runs, retries)
  std::uint64_t coalesced = 0;               // requests that shared a work request with another
  std::uint64_t retries = 0;                 // work requests posted again after a failure
  std::uint64_t resolves = 0;                // metadata lookups made (open_segment and re-resolves)
  std::uint32_t peak_inflight_per_peer = 0;  // the most work requests ever in flight to one peer
  // Work requests posted on each rail (in the order the rails were opened): shows that striping over two
  // devices really used both.
  struct Rail {
    std::string transport;
    std::string device;  // the device named in verbs_devices; empty for the first active one and for others
    std::uint64_t work_requests = 0;
  };
  std::vector<Rail> rails;
  // Notifications this engine received as a segment owner: queued, dropped because the queue held
  // max_notifications, refused (naming a segment this engine does not publish, or malformed).
  std::uint64_t notifications_received = 0;
  std::uint64_t notifications_dropped = 0;
  std::uint64_t notifications_refused = 0;
};

// The longest message a notification carries (submit() with a message refuses a longer one).
inline constexpr std::size_t kMaxNotificationBytes = 2048;

// What a segment owner receives from poll_notification(): delivered only after every request of the
// sender's batch completed successfully, so every byte its WRITEs carried is in the segment already.
struct Notification {
  std::string sender{};   // the sender engine's name, as it proved it with the secret (never a claim)
  std::string segment{};  // the segment of the batch's first request, published by this engine
  std::vector<std::byte> message{};
};

// A request list checked and planned once by Engine::prepare(), submitted any number of times
// (Engine::submit(const PreparedBatch&)); each submit is a new Batch. Immutable, so several threads may
// submit it at once. It keeps the local memory's registrations it uses alive, but unregistering that memory
// makes the next submit fail (InvalidArgument): the list is re-validated per segment and per local region,
// not per request.
class RDMAKIT_API PreparedBatch {
 public:
  virtual ~PreparedBatch();
  virtual std::size_t size() const noexcept = 0;
};

struct SegmentInfo {
  std::string name{};
  std::string owner{};  // the owner engine's name
  std::uint64_t length = 0;
  std::string transport{};    // chosen for this peer
  bool file = false;          // a file segment (publish_file): its owner moves it through file I/O
  bool writable = true;       // false: the owner refuses WRITEs (a read-only file segment)
  bool read_locally = false;  // a file segment on this host that this engine reads itself
};

class RDMAKIT_API Engine {
 public:
  // Opens a rail per transport (and device), listens on each, and keeps `metadata` for publishing and
  // resolving names. The store must outlive the engine.
  static Result<std::unique_ptr<Engine>> create(MetadataStore& metadata, const EngineOptions& options = {});
  virtual ~Engine();

  // Segments this process owns. allocate_segment() takes memory that every rail can reach fast (shm's
  // shared arena); publish() registers caller memory, which must stay allocated until unpublish() or the
  // engine's end. Both publish the name; a name this engine already published is refused.
  virtual Result<std::span<std::byte>> allocate_segment(std::string_view name, std::size_t size) = 0;
  virtual Result<void> publish(std::string_view name, void* data, std::size_t size) = 0;
  virtual Result<void> unpublish(std::string_view name) = 0;

  // Local memory that requests may READ into or WRITE from. Must stay allocated until unregister_local().
  virtual Result<void> register_local(void* data, std::size_t size) = 0;
  virtual Result<void> unregister_local(void* data) = 0;

  // Resolves `name` (one metadata lookup; later calls with the same name are answered from the cache).
  virtual Result<SegmentHandle> open_segment(std::string_view name) = 0;
  virtual Result<SegmentInfo> segment_info(SegmentHandle segment) const = 0;

  // Checks every request (handle, local memory, offset + length inside the segment, nonzero length) and
  // refuses the whole batch with Errc::InvalidArgument naming the first bad request; then posts it.
  virtual Result<std::shared_ptr<Batch>> submit(std::span<const Request> requests,
                                                BatchCallback done = {}) = 0;

  virtual EngineStats stats() const = 0;
  virtual const EngineOptions& options() const noexcept = 0;
  virtual MetadataStore& metadata() const noexcept = 0;

  // Segments and local memory of a given kind (the calls above: allocate_segment Host, publish and
  // register_local Auto, which detects CUDA device memory). Appended, so the slots above keep their places.
  // Device memory is registered on every rail whose transport takes it (tcp: staged; shm and verbs where
  // they have a path) and left out of the others: a published device segment offers only the rails that
  // registered it, so peers pick among those. When no rail takes it, the call fails with Errc::NotSupported
  // naming each transport's refusal. allocate_segment(..., MemoryKind::Cuda) allocates device memory of the
  // calling thread's current device (cudaMalloc through the first rail that takes it; not zeroed).
  virtual Result<std::span<std::byte>> allocate_segment(std::string_view name, std::size_t size,
                                                        MemoryKind kind) = 0;
  virtual Result<void> publish(std::string_view name, void* data, std::size_t size, MemoryKind kind) = 0;
  virtual Result<void> register_local(void* data, std::size_t size, MemoryKind kind) = 0;

  // Publish-when-ready. allocate_unpublished() allocates and registers a segment as allocate_segment() does
  // but publishes nothing: until publish_ready(name) no peer can find the name (open_segment fails with
  // NotFound), so no reader ever sees the memory before the owner filled it. unpublish() of a name not yet
  // ready drops it (the memory stays registered as local memory, as after unpublish of a published one).
  virtual Result<std::span<std::byte>> allocate_unpublished(std::string_view name, std::size_t size,
                                                            MemoryKind kind = MemoryKind::Host) = 0;
  virtual Result<void> publish_ready(std::string_view name) = 0;

  // submit() with a notification for the segments' owner: every request must go to segments of one owner;
  // once every request completed successfully (so every WRITE's bytes are in the owner's memory) the
  // engine sends `message` (at most kMaxNotificationBytes) to the owner, over a connection on which the
  // owner checked our secret, naming the first request's segment; the owner's poll_notification() returns
  // it. When a request fails, nothing is sent (Batch::notification() tells why).
  virtual Result<std::shared_ptr<Batch>> submit(std::span<const Request> requests,
                                                std::span<const std::byte> message,
                                                BatchCallback done = {}) = 0;
  // Owner side: the oldest notification received, or nullopt when none is queued.
  virtual std::optional<Notification> poll_notification() = 0;
  // Waits for one; Errc::Timeout when none came in time.
  virtual Result<Notification> wait_notification(std::chrono::nanoseconds timeout) = 0;

  // Checks and plans `requests` once (as submit() does: the same errors) for submitting again and again.
  virtual Result<std::shared_ptr<const PreparedBatch>> prepare(std::span<const Request> requests) = 0;
  virtual Result<std::shared_ptr<Batch>> submit(const PreparedBatch& prepared, BatchCallback done = {}) = 0;

  // Non-blocking submit: posts the whole batch, or nothing and Errc::ResourceExhausted with "would block"
  // in the message when the in-flight bounds (max_inflight_per_peer, max_inflight_per_rail) have no room
  // for all of its work requests now; InvalidArgument when the batch needs more than a bound ever allows.
  virtual Result<std::shared_ptr<Batch>> try_submit(std::span<const Request> requests,
                                                    BatchCallback done = {}) = 0;
  virtual Result<std::shared_ptr<Batch>> try_submit(const PreparedBatch& prepared,
                                                    BatchCallback done = {}) = 0;

  // File segments (docs/xfer.md, "File segments"). Publishes the regular file (or block device) at `path`
  // as the segment `name`, `length` its size now (a block device's capacity). Peers open_segment() it as
  // any segment and submit READs of byte ranges into their registered memory: the owner reads them with
  // io_uring (O_DIRECT where the file system takes it) into its chunk ring and WRITEs the asked bytes into
  // the requester's memory (a requester on this host that can open the file reads it itself:
  // EngineOptions::file_local_reads). With `options.writable` peers also submit WRITEs: the owner READs
  // their bytes into its ring and writes the file (unaligned ranges read-modify-write their edge blocks;
  // overlapping WRITEs are serialized). Requests travel on a connection of their own on which the peer
  // proved the secret. The owner serves only the files it published, only within the published size, and
  // refuses WRITEs to a read-only segment (per request). A file that shrank or a read or write error fails
  // the request, naming the file and the range. Errors here: InvalidArgument (empty name, already
  // published, neither a regular file nor a block device, empty, sync_writes without writable, a file
  // another uid may write: FileSegmentOptions::allow_other_writers), the open's error (a writable segment
  // opens the file read-write), NotSupported (a build without io_uring).
  virtual Result<void> publish_file(std::string_view name, const std::string& path,
                                    const FileSegmentOptions& options = {}) = 0;

  // A directory of shard files: publishes every regular, non-empty file directly in `dir` (not recursive)
  // as the file segment `prefix + "/" + <file name>`, as publish_file() does, in name order, and returns the
  // segment names. Skipped: subdirectories, symbolic links (never followed: one could lead outside `dir`),
  // devices, FIFOs, sockets, empty files and names starting with '.' (a writer's temporary files). Refused
  // (InvalidArgument, nothing published): an empty prefix or one with a control character, a file name with
  // a control character, a segment name longer than the bound (1024 bytes), a directory without a file to
  // publish. All or nothing: when a file fails, the segments this call published are unpublished again and
  // the error names the file.
  virtual Result<std::vector<std::string>> publish_directory(std::string_view prefix, const std::string& dir,
                                                             const FileSegmentOptions& options = {}) = 0;
};

}  // namespace rdmakit::xfer
