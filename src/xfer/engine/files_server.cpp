// File segments, the owner's side (files.hpp says how the bytes travel and why by push). One thread serves
// every file connection: it takes a request when its queue of chunk tasks is empty (so what it holds is
// bounded by the window of each connection, whatever its peers ask), reads the covering 4 KiB-aligned range
// chunk by chunk into the ring with io_uring, WRITEs each chunk's asked bytes into the requester's memory,
// and answers once every WRITE of the request completed. It serves only the files publish_file() opened:
// a request names a segment, never a path, and a range beyond the published size is refused.
//
// A WRITE request (writable segments only) runs the other way, chunk by chunk: the chunk's partial edge
// blocks are read first (read-modify-write: O_DIRECT writes whole 4 KiB blocks, and the bytes around the
// asked range must stay), then the owner READs the asked bytes from the requester's memory (the request
// carries its descriptor, as a READ's does for the push) over them, then writes the chunk's blocks to the
// file with io_uring, clamped to the published size (never growing the file; a last block that ends before
// 4096 is written through a second, buffered descriptor of the same open file, since O_DIRECT cannot write
// it). Two WRITE chunks whose blocks overlap never run at once: a chunk starts only when no WRITE chunk in
// a slot, nor an earlier one still queued, shares a block with it, so one's read-modify-write never reads
// a block the other has not written yet (which would put the old bytes back over the other's).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "core/log.hpp"
#include "xfer/engine/engine_impl.hpp"
#include "xfer/engine/files_open.hpp"

#if RDMAKIT_XFER_FILES
#include "ckpt/io.hpp"
#endif

namespace rdmakit::xfer::detail {

using rdmakit::detail::MessageChannel;

// Its send_timeout is 0: a post that finds all of its kFileWindow sends still in flight fails with Timeout
// at once, and the server keeps the answer for later (FileServer::flush) instead of waiting. One send in
// flight spaced the answers by the requester's acknowledgements: 64 KiB READs at queue depth 16 went no
// faster than ~7k/s whatever the disk did.
Result<std::unique_ptr<MessageChannel>> open_file_server_channel(Context& context,
                                                                 std::shared_ptr<Connection> connection) {
  auto channel = MessageChannel::open(context, std::move(connection), kFileSpec,
                                      {.receives = kFileWindow,
                                       .keep_posted = true,
                                       .send_timeout = std::chrono::milliseconds::zero(),
                                       .sends = kFileWindow});
  if (!channel) return std::unexpected(channel.error());
  if (auto posted = channel->expect(kFileWindow); !posted) return std::unexpected(posted.error());
  return std::make_unique<MessageChannel>(std::move(*channel));
}

#if RDMAKIT_XFER_FILES

namespace {

constexpr std::uint64_t kAlign = 4096;  // O_DIRECT: offsets, lengths and buffers aligned to this
// A chunk takes the ring's bytes it needs, in units of this (smaller ones for small chunks: unit_for), so
// small requests do not each hold a whole chunk: the ring's 16 MiB by default keep up to kMaxSlots
// reads of 64 KiB in flight, where chunk-sized slots allowed 4 (queue depth 4 capped 64 KiB random READs
// at 0.2x of fio's at depth 16).
constexpr std::uint64_t kUnit = 64 << 10;
constexpr std::size_t kMaxSlots = 32;
constexpr std::chrono::milliseconds kKeepPolling{2};
// Smaller chunks are cut in 4 units at least (a ring of 64 KiB chunks in 16 KiB units), else in 4096.
std::uint64_t unit_for(std::uint64_t chunk_bytes) {
  for (std::uint64_t unit = kUnit; unit > kAlign; unit /= 2)
    if (chunk_bytes % unit == 0 && chunk_bytes / unit >= 4) return unit;
  return kAlign;
}
using Clock = std::chrono::steady_clock;

std::string range_text(std::uint64_t offset, std::uint64_t length) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset + length) + ")";
}

}  // namespace

class FileServer {
 public:
  FileServer(std::vector<Rail*> rails, std::uint64_t chunk_bytes, std::uint32_t chunks,
             std::chrono::milliseconds peer_timeout)
      : rails_(std::move(rails)),
        chunk_bytes_(chunk_bytes),
        ring_bytes_(chunk_bytes * chunks),
        unit_(unit_for(chunk_bytes)),
        peer_timeout_(peer_timeout),
        used_(ring_bytes_ / unit_, false),
        slots_(
            std::clamp<std::size_t>(ring_bytes_ / unit_, chunks, std::max<std::size_t>(chunks, kMaxSlots))) {}
  ~FileServer() {
    stop_.store(true, std::memory_order_release);
    if (thread_.joinable()) thread_.join();
  }

  // The ring (registered on every rail, and as io_uring's fixed buffer where the kernel lets us) and the
  // serving thread.
  Result<void> start() {
    auto ring = ckpt::detail::AlignedBuffer::allocate(ring_bytes_, true);
    if (!ring) return std::unexpected(ring.error());
    memory_ = std::move(*ring);
    for (auto* rail : rails_) {
      auto registered = rail->context->register_memory(memory_.data(), memory_.size(), Access::LocalWrite);
      if (!registered) return std::unexpected(registered.error());
      registrations_.push_back(*registered);
    }
    // Two submissions per slot at most: a WRITE chunk's two edge reads.
    auto uring = ckpt::detail::Ring::create(static_cast<unsigned>(2 * slots_.size()));
    if (!uring) return std::unexpected(uring.error());
    uring_.emplace(std::move(*uring));
    fixed_ = uring_->register_buffer(memory_.data(), memory_.size()).has_value();
    thread_ = std::thread([this] { loop(); });
    return {};
  }

  void add(std::shared_ptr<PublishedFile> file) {
    std::lock_guard lock(mutex_);
    files_[file->name] = std::move(file);
  }
  void remove(std::string_view name) {
    std::lock_guard lock(mutex_);
    if (auto it = files_.find(name); it != files_.end()) files_.erase(it);
  }
  void adopt(Rail& rail, std::shared_ptr<Connection> connection, std::string identity,
             std::unique_ptr<MessageChannel> channel) {
    std::lock_guard lock(mutex_);
    if (stop_.load(std::memory_order_acquire)) return connection->close();
    adopted_.push_back(std::make_shared<Served>(
        Served{&rail, std::move(connection), std::move(identity), std::move(channel), false}));
  }

 private:
  struct Served {
    Rail* rail = nullptr;
    std::shared_ptr<Connection> connection;
    std::string identity;  // the engine name the peer proved
    std::unique_ptr<MessageChannel> channel;
    bool broken = false;
    std::deque<std::vector<std::byte>> outbox;  // answers not sent yet
    std::optional<Clock::time_point> stuck_since;
  };
  // One request: answered once each of its chunks was delivered or stored (or one failed).
  struct Job {
    std::shared_ptr<Served> served;
    std::uint64_t id = 0;
    std::shared_ptr<PublishedFile> file;
    bool write = false;  // a WRITE: `dest` is where the bytes come from
    std::uint64_t offset = 0, length = 0;
    RemoteAddress dest{};
    std::uint32_t left = 0;
    std::uint32_t unposted = 0;  // READ: chunks whose WRITE to the requester is not posted yet
    bool answered = false;
    std::optional<Error> error;
  };
  // One chunk of a job: the aligned range read (or, for a WRITE, the blocks written), and the asked bytes
  // within it.
  struct Task {
    std::shared_ptr<Job> job;
    std::uint64_t read_offset = 0;  // aligned
    std::uint64_t read_length = 0;  // aligned, at most a chunk
    std::uint64_t skip = 0;         // asked bytes start this far into the chunk
    std::uint64_t deliver = 0;      // asked bytes in the chunk
    std::uint64_t dest_offset = 0;  // from the job's destination
  };
  // READ chunks: Reading, then Writing (the push). WRITE chunks: Filling (edge blocks), Pulling (the
  // requester's bytes), Storing (into the file).
  enum class State : std::uint8_t { Free, Reading, Writing, Filling, Pulling, Storing };
  // One io_uring operation of a slot: `length` bytes at `offset` in the file, at `at` in the chunk.
  struct Io {
    std::uint64_t offset = 0, length = 0, at = 0, moved = 0;
    std::uint64_t needed = 0;  // fewer bytes moved than this when the file ends: it shrank
  };
  struct Slot {
    State state = State::Free;
    Task task;
    std::uint64_t ring_at = 0;  // its bytes in the ring: `units` units from here
    std::size_t units = 0;
    std::uint64_t moved = 0;  // read so far (READ chunks)
    std::uint64_t wr = 0;     // the WRITE's (or the pull's) id while Writing (Pulling)
    std::array<Io, 2> edges{};
    std::uint32_t edges_left = 0;  // edge reads in flight
    Io store{};
  };
  // io_uring tags: the slot, and which of its operations completed.
  enum IoKind : std::uint64_t { kChunkRead = 0, kEdge0 = 1, kEdge1 = 2, kStore = 3 };
  static std::uint64_t tag(std::size_t slot, IoKind kind) { return slot * 4 + kind; }

  std::byte* chunk(std::size_t slot) const {
    return reinterpret_cast<std::byte*>(memory_.data()) + slots_[slot].ring_at;
  }

  // The first run of free units that holds `bytes`: its first unit, or nullopt (the ring is full for now).
  std::optional<std::size_t> take_units(std::uint64_t bytes) {
    const std::size_t need = static_cast<std::size_t>((bytes + unit_ - 1) / unit_);
    for (std::size_t first = 0, run = 0; first + run < used_.size();) {
      if (used_[first + run]) {
        first += run + 1;
        run = 0;
      } else if (++run == need) {
        std::fill_n(used_.begin() + static_cast<std::ptrdiff_t>(first), need, true);
        return first;
      }
    }
    return std::nullopt;
  }
  void release_units(const Slot& slot) {
    const auto first = static_cast<std::ptrdiff_t>(slot.ring_at / unit_);
    std::fill_n(used_.begin() + first, slot.units, false);
  }

  void loop() {
    auto last_busy = Clock::now();
    while (!stop_.load(std::memory_order_acquire)) {
      bool busy = false;
      {
        std::lock_guard lock(mutex_);
        for (auto& served : adopted_) served_.push_back(std::move(served));
        adopted_.clear();
      }
      if (tasks_.size() < kMaxSlots) busy |= take_requests();
      busy |= start_tasks();
      busy |= reap_io();
      busy |= reap_transfers();
      for (auto& served : served_) {
        if (!served->outbox.empty()) busy |= flush(*served);
      }
      std::erase_if(served_, [](const auto& s) { return s->broken; });
      // Nothing happened: keep polling (yielding the core) for kKeepPolling after the last thing that did,
      // then nap (longer with no connection at all). A nap costs the next request its length: napping
      // at once after each answer added ~1 ms to every READ at queue depth 1 (860 READs/s of 64 KiB vs
      // fio's 10k/s).
      if (busy) {
        last_busy = Clock::now();
      } else if (Clock::now() - last_busy < kKeepPolling) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(served_.empty() ? std::chrono::milliseconds(10)
                                    : in_flight()   ? std::chrono::microseconds(50)
                                                    : std::chrono::microseconds(500));
      }
    }
    drain();
  }

  bool in_flight() const {
    return std::ranges::any_of(slots_, [](const Slot& s) { return s.state != State::Free; });
  }

  // The engine is closing: the connections close (WRITEs in flight complete Flushed), and reads in flight
  // are waited for, so the kernel is done with the ring before it is unmapped.
  void drain() {
    for (auto& served : served_) served->connection->close();
    {
      std::lock_guard lock(mutex_);
      for (auto& served : adopted_) served->connection->close();
    }
    for (auto& slot : slots_) {
      if (slot.state == State::Writing || slot.state == State::Pulling)
        (void)slot.task.job->served->connection->wait(slot.wr, std::chrono::seconds(1));
    }
    while (io_in_flight_-- > 0) {
      if (!uring_->wait()) break;
    }
  }

  // One request from each connection that has one.
  // Takes requests, one per connection in turn, while fewer than kMaxSlots chunks wait for a slot (what the
  // owner holds stays bounded by that and by each connection's window). Taking one per connection per
  // round of the loop capped 64 KiB READs at queue depth 16 near 7k/s: a round is as long as the other
  // threads' turns on the cores, and the ring sat idle between rounds.
  bool take_requests() {
    bool found = false;
    for (bool more = true; more && tasks_.size() < kMaxSlots;) {
      more = false;
      for (auto& served : served_) {
        if (take_request(served)) more = found = true;
        if (tasks_.size() >= kMaxSlots) break;
      }
    }
    return found;
  }

  // One request of `served`, if it sent one.
  bool take_request(const std::shared_ptr<Served>& served) {
    if (served->broken) return false;
    auto frame = served->channel->try_receive();
    if (!frame) {
      if (frame.error().code() != Errc::ConnectionBroken)
        log::warn("xfer",
                  "closed the file connection from '" + served->identity + "': " + frame.error().describe());
      close(*served);
      return false;
    }
    if (!*frame) return false;
    auto request = decode_request(**frame);
    if (!request) {
      log::warn("xfer",
                "closed the file connection from '" + served->identity + "': " + request.error().describe());
      close(*served);
      return true;
    }
    accept(served, *request);
    return true;
  }

  void close(Served& served) {
    served.broken = true;
    served.connection->close();
  }

  // Checks a request against what was published, then queues its chunks.
  void accept(const std::shared_ptr<Served>& served, const FileRequestMessage& request) {
    std::shared_ptr<PublishedFile> file;
    {
      std::lock_guard lock(mutex_);
      if (auto it = files_.find(request.name); it != files_.end()) file = it->second;
    }
    auto refuse = [&](Errc code, std::string message) {
      answer(*served, request.id, Error(code, std::move(message)));
    };
    if (!file)
      return refuse(Errc::NotFound, "'" + request.name + "' is not a file segment this engine publishes");
    const std::string what = "file segment '" + file->name + "' (" + file->path + ")";
    if (request.type == kFileWrite && !file->writable)
      return refuse(Errc::InvalidArgument, "WRITE refused: " + what + " is read-only");
    if (request.length == 0 || request.length > kFileMessageBytes || request.offset > file->size ||
        request.length > file->size - request.offset)
      return refuse(Errc::InvalidArgument, "range " + range_text(request.offset, request.length) +
                                               " is outside " + what + " (" + std::to_string(file->size) +
                                               " bytes published), or longer than " +
                                               std::to_string(kFileMessageBytes) + " bytes");
    auto job = std::make_shared<Job>();
    job->served = served;
    job->id = request.id;
    job->file = std::move(file);
    job->write = request.type == kFileWrite;
    job->offset = request.offset;
    job->length = request.length;
    job->dest = RemoteAddress{request.dest_addr, request.dest_rkey, request.dest_epoch};
    const std::uint64_t end = request.offset + request.length;
    const std::uint64_t aligned_end = ckpt::detail::round_up(end, kAlign);
    for (std::uint64_t at = request.offset / kAlign * kAlign; at < aligned_end; at += chunk_bytes_) {
      Task task{job, at, std::min(chunk_bytes_, aligned_end - at), 0, 0, 0};
      const std::uint64_t first = std::max(request.offset, at);
      const std::uint64_t last = std::min(end, at + task.read_length);
      task.skip = first - at;
      task.deliver = last - first;
      task.dest_offset = first - request.offset;
      tasks_.push_back(std::move(task));
      ++job->left;
      ++job->unposted;
    }
  }

  // Chunks into free slots, in queue order. A WRITE chunk is passed over while it shares a block with a
  // WRITE chunk in a slot or with an earlier one passed over (the header says why); READ chunks never wait.
  bool start_tasks() {
    bool started = false;
    std::vector<Blocks> passed;
    std::size_t s = 0;
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      while (s < slots_.size() && slots_[s].state != State::Free) ++s;
      if (s == slots_.size()) break;
      if (it->job->write && overlaps_a_write(*it, passed)) {
        passed.push_back(blocks(*it));
        ++it;
        continue;
      }
      // In queue order: a chunk that does not fit yet waits for the ring, and so do the ones behind it
      // (a big one is never passed over for ever by small ones).
      auto first_unit = take_units(it->read_length);
      if (!first_unit) break;
      slots_[s] = Slot{};
      slots_[s].state = State::Reading;
      slots_[s].ring_at = *first_unit * unit_;
      slots_[s].units = static_cast<std::size_t>((it->read_length + unit_ - 1) / unit_);
      slots_[s].task = std::move(*it);
      it = tasks_.erase(it);
      started = true;
      if (slots_[s].task.job->error) {
        chunk_done(s);  // another chunk of its request failed: no need to move this one
        continue;
      }
      if (slots_[s].task.job->write)
        begin_write(s);
      else
        queue_read(s);
    }
    return started;
  }

  struct Blocks {
    const PublishedFile* file = nullptr;
    std::uint64_t begin = 0, end = 0;
  };
  static Blocks blocks(const Task& task) {
    return {task.job->file.get(), task.read_offset, task.read_offset + task.read_length};
  }
  bool overlaps_a_write(const Task& task, const std::vector<Blocks>& passed) const {
    const Blocks mine = blocks(task);
    auto overlap = [&](const Blocks& other) {
      return other.file == mine.file && other.begin < mine.end && mine.begin < other.end;
    };
    if (std::ranges::any_of(passed, overlap)) return true;
    return std::ranges::any_of(slots_, [&](const Slot& slot) {
      return slot.state != State::Free && slot.task.job->write && overlap(blocks(slot.task));
    });
  }

  static std::string where(const Task& task) {
    const auto& job = *task.job;
    return "file '" + job.file->path + "' (segment '" + job.file->name + "') range " +
           range_text(job.offset, job.length);
  }

  // Queues `io` of slot `s` from where it stopped; a store that is not whole 4 KiB blocks (the file's last
  // partial block, or the rest of a short write) goes through the buffered descriptor.
  Result<void> queue_io(std::size_t s, IoKind kind, const Io& io, bool write) {
    const auto& file = *slots_[s].task.job->file;
    auto* buffer = chunk(s) + io.at + io.moved;
    auto length = static_cast<std::uint32_t>(io.length - io.moved);
    const std::uint64_t offset = io.offset + io.moved;
    int fd = file.fd.get();
    if (write && file.direct && (offset % kAlign != 0 || length % kAlign != 0)) fd = file.buffered.get();
    auto queued = !fixed_ ? uring_->queue(write, fd, buffer, length, offset, tag(s, kind))
                  : write ? uring_->queue_write_fixed(fd, buffer, length, offset, tag(s, kind))
                          : uring_->queue_read_fixed(fd, buffer, length, offset, tag(s, kind));
    if (queued) ++io_in_flight_;
    return queued;
  }

  void queue_read(std::size_t s) {
    auto& slot = slots_[s];
    const Io io{slot.task.read_offset, slot.task.read_length, 0, slot.moved, 0};
    if (auto queued = queue_io(s, kChunkRead, io, false); !queued) fail_chunk(s, queued.error());
  }

  bool reap_io() {
    bool found = false;
    while (true) {
      auto done = uring_->poll();
      if (!done) {
        log::error("xfer", "file segments: the io_uring failed: " + done.error().describe());
        return found;
      }
      if (!*done) return found;
      found = true;
      --io_in_flight_;
      const auto s = static_cast<std::size_t>((*done)->tag / 4);
      switch (static_cast<IoKind>((*done)->tag % 4)) {
        case kChunkRead:
          read_done(s, (*done)->result);
          break;
        case kEdge0:
          edge_done(s, 0, (*done)->result);
          break;
        case kEdge1:
          edge_done(s, 1, (*done)->result);
          break;
        case kStore:
          store_done(s, (*done)->result);
          break;
      }
    }
  }

  void read_done(std::size_t s, std::int32_t result) {
    auto& slot = slots_[s];
    const auto& task = slot.task;
    const auto& file = *task.job->file;
    if (result < 0) return fail_chunk(s, fail_errno("reading " + where(task), -result).error());
    slot.moved += static_cast<std::uint64_t>(result);
    const std::uint64_t needed = task.skip + task.deliver;
    if (slot.moved < needed) {
      // End of file before the asked bytes (a short read at EOF; with O_DIRECT it also leaves the next read
      // unaligned): the file shrank since it was published.
      if (result == 0 || (file.direct && slot.moved % kAlign != 0))
        return fail_chunk(s, shrank(task, task.read_offset + slot.moved));
      return queue_read(s);  // a short read: continue where it stopped
    }
    if (task.job->error) return chunk_done(s);
    move_with_requester(s, Op::Write);
  }

  // One-sided, between the chunk and the requester's memory (its descriptor came with the request): WRITE
  // delivers a READ request's bytes, READ pulls a WRITE request's bytes.
  void move_with_requester(std::size_t s, Op op) {
    auto& slot = slots_[s];
    const auto& task = slot.task;
    auto& served = *task.job->served;
    if (served.broken)
      return fail_chunk(s, Error(Errc::ConnectionBroken, "the requester's connection closed"));
    Segment local{reinterpret_cast<std::uint64_t>(chunk(s) + task.skip),
                  static_cast<std::uint32_t>(task.deliver), registrations_[served.rail->index]->lkey()};
    RemoteAddress remote = task.job->dest;
    remote.addr += task.dest_offset;
    auto wr =
        op == Op::Write ? served.connection->write(local, remote) : served.connection->read(local, remote);
    if (!wr) {
      const std::string what = op == Op::Write ? "delivering " + where(task) + " to '"
                                               : "fetching the bytes of " + where(task) + " from '";
      return fail_chunk(s, Error(wr.error().code(), what + served.identity + "': " + wr.error().message()));
    }
    slot.state = op == Op::Write ? State::Writing : State::Pulling;
    slot.wr = *wr;
    // A READ is answered once its last WRITE is posted, not completed: the answer goes on the same
    // connection behind the WRITEs, and a SEND is received only after every WRITE posted before it is in
    // the target's memory (the RC rule every transport keeps: conformance's
    // OperationsCompleteInPostOrderAndWritesPrecedeLaterSends). A WRITE that fails breaks the connection,
    // so the answer is never received. Saves the WRITE's acknowledgement round trip per request; the chunk's
    // slot is still held until the WRITE completed (the transport reads from it until then).
    auto& job = *task.job;
    if (op == Op::Write && --job.unposted == 0 && !job.error) {
      job.answered = true;
      answer(served, job.id, std::nullopt);
    }
  }

  static Error shrank(const Task& task, std::uint64_t ends_at) {
    return Error(Errc::Unavailable, where(task) + ": the file ends at " + std::to_string(ends_at) +
                                        ", short of the range (it was published with " +
                                        std::to_string(task.job->file->size) + " bytes: it shrank)");
  }

  // A WRITE chunk: the blocks it writes end at the published size (a file segment never grows); a partial
  // first or last block inside the file is read first (read-modify-write), then the asked bytes are pulled
  // over them.
  void begin_write(std::size_t s) {
    auto& slot = slots_[s];
    const auto& task = slot.task;
    const std::uint64_t size = task.job->file->size;
    const std::uint64_t end = std::min(task.read_offset + task.read_length, size);
    slot.state = State::Filling;
    slot.store = Io{task.read_offset, end - task.read_offset, 0, 0, 0};
    const std::uint64_t first = task.read_offset + task.skip;
    const std::uint64_t last = first + task.deliver;
    auto edge = [&](std::uint64_t block) {
      return Io{block, kAlign, block - task.read_offset, 0, std::min(kAlign, size - block)};
    };
    std::uint32_t n = 0;
    if (first % kAlign != 0) slot.edges[n++] = edge(first / kAlign * kAlign);
    if (last % kAlign != 0 && last < end && (n == 0 || slot.edges[0].offset != last / kAlign * kAlign))
      slot.edges[n++] = edge(last / kAlign * kAlign);
    slot.edges_left = n;
    if (n == 0) return pull(s);
    for (std::uint32_t e = 0; e < n; ++e) {
      if (auto queued = queue_io(s, e == 0 ? kEdge0 : kEdge1, slot.edges[e], false); !queued) {
        note(*task.job, queued.error());
        slot.edges_left -= n - e;  // not queued: only those queued complete
        if (slot.edges_left == 0) chunk_done(s);
        return;
      }
    }
  }

  void edge_done(std::size_t s, std::uint32_t e, std::int32_t result) {
    auto& slot = slots_[s];
    auto& io = slot.edges[e];
    auto& job = *slot.task.job;
    if (result < 0) {
      note(job, fail_errno("reading " + where(slot.task) + " (a block it writes part of)", -result).error());
    } else {
      io.moved += static_cast<std::uint64_t>(result);
      if (io.moved < io.needed) {
        if (result == 0 || (job.file->direct && io.moved % kAlign != 0)) {
          note(job, shrank(slot.task, io.offset + io.moved));
        } else if (auto queued = queue_io(s, e == 0 ? kEdge0 : kEdge1, io, false); queued) {
          return;  // a short read: continued
        } else {
          note(job, queued.error());
        }
      }
    }
    if (--slot.edges_left != 0) return;
    if (job.error) return chunk_done(s);
    pull(s);
  }

  // The asked bytes from the requester's memory (its descriptor came with the request) into the chunk.
  void pull(std::size_t s) { move_with_requester(s, Op::Read); }

  void store(std::size_t s) {
    auto& slot = slots_[s];
    slot.state = State::Storing;
    if (auto queued = queue_io(s, kStore, slot.store, true); !queued) fail_chunk(s, queued.error());
  }

  void store_done(std::size_t s, std::int32_t result) {
    auto& slot = slots_[s];
    const auto& task = slot.task;
    if (result < 0) return fail_chunk(s, fail_errno("writing " + where(task), -result).error());
    if (result == 0 && slot.store.moved < slot.store.length)
      return fail_chunk(s,
                        Error(Errc::SystemError, "writing " + where(task) + ": the file took no byte at " +
                                                     std::to_string(slot.store.offset + slot.store.moved)));
    slot.store.moved += static_cast<std::uint64_t>(result);
    if (slot.store.moved < slot.store.length) return store(s);  // a short write: continue where it stopped
    chunk_done(s);
  }

  // A pushed chunk (Writing) or a pulled one (Pulling) finished on the connection.
  bool reap_transfers() {
    bool found = false;
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      auto& slot = slots_[s];
      if (slot.state != State::Writing && slot.state != State::Pulling) continue;
      auto& served = *slot.task.job->served;
      auto done = served.connection->wait(slot.wr, std::chrono::nanoseconds::zero());
      if (!done && done.error().code() == Errc::Timeout) continue;
      found = true;
      if (!done || !done->ok()) {
        std::string why = done ? std::string(to_string(done->status)) : done.error().message();
        fail_chunk(s, Error(Errc::TransportFailure,
                            std::string(slot.state == State::Writing ? "delivering the bytes to '"
                                                                     : "fetching the bytes from '") +
                                served.identity + "': " + why));
        continue;
      }
      if (slot.state == State::Pulling)
        store(s);
      else
        chunk_done(s);
    }
    return found;
  }

  static void note(Job& job, Error error) {
    if (!job.error) job.error = std::move(error);
  }

  // Nothing of the slot is in flight any more.
  void fail_chunk(std::size_t s, Error error) {
    note(*slots_[s].task.job, std::move(error));
    chunk_done(s);
  }

  // The chunk is finished (delivered, failed or skipped): its slot is free, and its request is answered
  // with its last chunk.
  void chunk_done(std::size_t s) {
    auto job = std::move(slots_[s].task.job);
    release_units(slots_[s]);
    slots_[s] = Slot{};
    if (--job->left != 0 || job->answered) return;
    if (job->error)
      answer(*job->served, job->id, *job->error);
    else
      answer(*job->served, job->id, std::nullopt);
  }

  // Bytes delivered before the answer: every WRITE of the request completed, so they are in the
  // requester's memory when it reads the answer.
  // The answer waits in the connection's outbox (at most kFileWindow: one per request it may have here)
  // until the previous one's send completed: the thread never waits on one requester's sends, so a
  // requester that stops taking its answers stalls nobody else, and is closed after peer_timeout.
  void answer(Served& served, std::uint64_t id, const std::optional<Error>& error) {
    if (served.broken) return;
    FileReplyMessage reply{id, 0, {}};
    if (error) {
      reply.code = static_cast<std::uint8_t>(error->code());
      reply.message = error->message();
    }
    auto payload = encode_reply(reply);
    if (!payload) return close(served, payload.error());
    served.outbox.push_back(std::move(*payload));
    flush(served);
  }

  // Sends what the outbox holds while the channel has a send free (its send_timeout is 0).
  bool flush(Served& served) {
    bool sent_any = false;
    while (!served.broken && !served.outbox.empty()) {
      auto sent = served.channel->post(kFileDone, served.outbox.front());
      if (!sent && sent.error().code() == Errc::Timeout) {
        if (!served.stuck_since) served.stuck_since = Clock::now();
        if (Clock::now() - *served.stuck_since > peer_timeout_)
          close(served, Error(Errc::Timeout, "it took no answer within peer_timeout"));
        return sent_any;
      }
      if (!sent) {
        close(served, sent.error());
        return sent_any;
      }
      served.stuck_since.reset();
      served.outbox.pop_front();
      sent_any = true;
    }
    return sent_any;
  }

  void close(Served& served, const Error& why) {
    log::info("xfer", "closed the file connection from '" + served.identity + "': " + why.describe());
    close(served);
  }

  std::vector<Rail*> rails_;
  std::uint64_t chunk_bytes_;
  std::uint64_t ring_bytes_;
  std::uint64_t unit_;  // what the ring is handed out in
  std::chrono::milliseconds peer_timeout_;
  ckpt::detail::AlignedBuffer memory_;
  std::vector<std::shared_ptr<MemoryRegion>> registrations_;  // by rail index
  std::optional<ckpt::detail::Ring> uring_;
  std::uint64_t io_in_flight_ = 0;  // io_uring operations queued and not reaped
  bool fixed_ = false;
  std::vector<bool> used_;  // per unit of the ring
  std::vector<Slot> slots_;
  std::deque<Task> tasks_;
  std::vector<std::shared_ptr<Served>> served_;  // the thread's own

  std::mutex mutex_;  // files_, adopted_
  std::map<std::string, std::shared_ptr<PublishedFile>, std::less<>> files_;
  std::vector<std::shared_ptr<Served>> adopted_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

void unpublish_file(FileServer& server, std::string_view name) { server.remove(name); }
void serve_file(FileServer& server, std::shared_ptr<PublishedFile> file) { server.add(std::move(file)); }
void adopt_file_connection(FileServer& server, Rail& rail, std::shared_ptr<Connection> connection,
                           std::string identity, std::unique_ptr<MessageChannel> channel) {
  server.adopt(rail, std::move(connection), std::move(identity), std::move(channel));
}

Result<std::shared_ptr<FileServer>> start_file_server(std::vector<Rail*> rails, std::uint64_t chunk_bytes,
                                                      std::uint32_t chunks,
                                                      std::chrono::milliseconds peer_timeout) {
  auto server = std::make_shared<FileServer>(std::move(rails), chunk_bytes, chunks, peer_timeout);
  if (auto started = server->start(); !started) return std::unexpected(started.error());
  return server;
}

#else  // built without io_uring (RDMAKIT_WITH_CKPT off): publish_file says NotSupported (files_publish.cpp)

class FileServer {};
void unpublish_file(FileServer&, std::string_view) {}
void serve_file(FileServer&, std::shared_ptr<PublishedFile>) {}
void adopt_file_connection(FileServer&, Rail&, std::shared_ptr<Connection> connection, std::string,
                           std::unique_ptr<MessageChannel>) {
  connection->close();
}
Result<std::shared_ptr<FileServer>> start_file_server(std::vector<Rail*>, std::uint64_t, std::uint32_t,
                                                      std::chrono::milliseconds) {
  return fail(Errc::NotSupported, "this rdmakit was built without io_uring (RDMAKIT_WITH_CKPT off)");
}

#endif

}  // namespace rdmakit::xfer::detail
