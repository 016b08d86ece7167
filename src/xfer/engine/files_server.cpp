// File segments, the owner's side (files.hpp says how the bytes travel and why by push). One thread serves
// every file connection: it takes a request when its queue of chunk reads is empty (so what it holds is
// bounded by the window of each connection, whatever its peers ask), reads the covering 4 KiB-aligned range
// chunk by chunk into the ring with io_uring, WRITEs each chunk's asked bytes into the requester's memory,
// and answers once every WRITE of the request completed. It serves only the files publish_file() opened:
// a request names a segment, never a path, and a range beyond the published size is refused.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>

#include "core/log.hpp"
#include "xfer/engine/engine_impl.hpp"

#if RDMAKIT_XFER_FILES
#include "ckpt/io.hpp"
#endif

namespace rdmakit::xfer::detail {

using rdmakit::detail::MessageChannel;

// Its send_timeout is 0: a post finds the previous send still in flight with Timeout at once, and the
// server keeps the answer for later (FileServer::flush) instead of waiting.
Result<std::unique_ptr<MessageChannel>> open_file_server_channel(Context& context,
                                                                 std::shared_ptr<Connection> connection) {
  auto channel = MessageChannel::open(
      context, std::move(connection), kFileSpec,
      {.receives = kFileWindow, .keep_posted = true, .send_timeout = std::chrono::milliseconds::zero()});
  if (!channel) return std::unexpected(channel.error());
  if (auto posted = channel->expect(kFileWindow); !posted) return std::unexpected(posted.error());
  return std::make_unique<MessageChannel>(std::move(*channel));
}

std::shared_ptr<FileServer> EngineImpl::file_server() const {
  std::lock_guard lock(files_mutex_);
  return file_server_;
}

#if RDMAKIT_XFER_FILES

namespace {

constexpr std::uint64_t kAlign = 4096;  // O_DIRECT: offsets, lengths and buffers aligned to this
using Clock = std::chrono::steady_clock;

std::string range_text(std::uint64_t offset, std::uint64_t length) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset + length) + ")";
}

}  // namespace

// A file publish_file() opened: the only files the server reads.
struct PublishedFile {
  std::string name;
  std::string path;
  Fd fd;
  bool direct = false;  // opened with O_DIRECT (the file system took it)
  std::uint64_t size = 0;
  bool writable = false;
};

class FileServer {
 public:
  FileServer(std::vector<Rail*> rails, std::uint64_t chunk_bytes, std::uint32_t chunks,
             std::chrono::milliseconds peer_timeout)
      : rails_(std::move(rails)), chunk_bytes_(chunk_bytes), peer_timeout_(peer_timeout), slots_(chunks) {}
  ~FileServer() {
    stop_.store(true, std::memory_order_release);
    if (thread_.joinable()) thread_.join();
  }

  // The ring (registered on every rail, and as io_uring's fixed buffer where the kernel lets us) and the
  // serving thread.
  Result<void> start() {
    auto ring = ckpt::detail::AlignedBuffer::allocate(chunk_bytes_ * slots_.size(), true);
    if (!ring) return std::unexpected(ring.error());
    memory_ = std::move(*ring);
    for (auto* rail : rails_) {
      auto registered = rail->context->register_memory(memory_.data(), memory_.size(), Access::LocalWrite);
      if (!registered) return std::unexpected(registered.error());
      registrations_.push_back(*registered);
    }
    auto uring = ckpt::detail::Ring::create(static_cast<unsigned>(slots_.size()));
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
  // One request: answered once each of its chunks was delivered (or one failed).
  struct Job {
    std::shared_ptr<Served> served;
    std::uint64_t id = 0;
    std::shared_ptr<PublishedFile> file;
    std::uint64_t offset = 0, length = 0;
    RemoteAddress dest{};
    std::uint32_t left = 0;
    std::optional<Error> error;
  };
  // One chunk of a job: the aligned range read, and the asked bytes within it.
  struct Task {
    std::shared_ptr<Job> job;
    std::uint64_t read_offset = 0;  // aligned
    std::uint64_t read_length = 0;  // aligned, at most a chunk
    std::uint64_t skip = 0;         // asked bytes start this far into the chunk
    std::uint64_t deliver = 0;      // asked bytes in the chunk
    std::uint64_t dest_offset = 0;  // from the job's destination
  };
  enum class State : std::uint8_t { Free, Reading, Writing };
  struct Slot {
    State state = State::Free;
    Task task;
    std::uint64_t moved = 0;  // read so far
    std::uint64_t wr = 0;     // the WRITE's id while Writing
  };

  std::byte* chunk(std::size_t slot) const {
    return reinterpret_cast<std::byte*>(memory_.data()) + slot * chunk_bytes_;
  }

  void loop() {
    std::uint32_t idle = 0;
    while (!stop_.load(std::memory_order_acquire)) {
      bool busy = false;
      {
        std::lock_guard lock(mutex_);
        for (auto& served : adopted_) served_.push_back(std::move(served));
        adopted_.clear();
      }
      if (tasks_.empty()) busy |= take_requests();
      busy |= start_reads();
      busy |= reap_reads();
      busy |= reap_writes();
      for (auto& served : served_) {
        if (!served->outbox.empty()) busy |= flush(*served);
      }
      std::erase_if(served_, [](const auto& s) { return s->broken; });
      // Nothing happened: yield while chunks are in flight, then nap (longer with no connection at all).
      if (busy) {
        idle = 0;
      } else if (in_flight() && ++idle < 64) {
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
      if (slot.state == State::Writing)
        (void)slot.task.job->served->connection->wait(slot.wr, std::chrono::seconds(1));
    }
    auto reading = std::ranges::count(slots_, State::Reading, &Slot::state);
    while (reading-- > 0) {
      if (!uring_->wait()) break;
    }
  }

  // One request from each connection that has one.
  bool take_requests() {
    bool found = false;
    for (auto& served : served_) {
      if (served->broken) continue;
      auto frame = served->channel->try_receive();
      if (!frame) {
        if (frame.error().code() != Errc::ConnectionBroken)
          log::warn("xfer", "closed the file connection from '" + served->identity +
                                "': " + frame.error().describe());
        close(*served);
        continue;
      }
      if (!*frame) continue;
      found = true;
      auto request = decode_request(**frame);
      if (!request) {
        log::warn("xfer", "closed the file connection from '" + served->identity +
                              "': " + request.error().describe());
        close(*served);
        continue;
      }
      accept(served, *request);
    }
    return found;
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
    if (request.type == kFileWrite)
      return refuse(Errc::NotSupported, "WRITE to " + what + ": writable file segments are not built yet");
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
    }
  }

  bool start_reads() {
    bool started = false;
    for (std::size_t s = 0; s < slots_.size() && !tasks_.empty(); ++s) {
      if (slots_[s].state != State::Free) continue;
      slots_[s] = Slot{State::Reading, std::move(tasks_.front()), 0, 0};
      tasks_.pop_front();
      if (slots_[s].task.job->error) {
        chunk_done(s);  // another chunk of its request failed: no need to read this one
        continue;
      }
      queue_read(s);
      started = true;
    }
    return started;
  }

  void queue_read(std::size_t s) {
    auto& slot = slots_[s];
    const auto& task = slot.task;
    auto* buffer = chunk(s) + slot.moved;
    auto length = static_cast<std::uint32_t>(task.read_length - slot.moved);
    auto queued = fixed_ ? uring_->queue_read_fixed(task.job->file->fd.get(), buffer, length,
                                                    task.read_offset + slot.moved, s)
                         : uring_->queue(false, task.job->file->fd.get(), buffer, length,
                                         task.read_offset + slot.moved, s);
    if (!queued) fail_chunk(s, queued.error());
  }

  bool reap_reads() {
    bool found = false;
    while (true) {
      auto done = uring_->poll();
      if (!done) {
        log::error("xfer", "file segments: the io_uring failed: " + done.error().describe());
        return found;
      }
      if (!*done) return found;
      found = true;
      read_done(static_cast<std::size_t>((*done)->tag), (*done)->result);
    }
  }

  void read_done(std::size_t s, std::int32_t result) {
    auto& slot = slots_[s];
    const auto& task = slot.task;
    const auto& file = *task.job->file;
    const std::string where = "file '" + file.path + "' (segment '" + file.name + "') range " +
                              range_text(task.job->offset, task.job->length);
    if (result < 0) return fail_chunk(s, fail_errno("reading " + where, -result).error());
    slot.moved += static_cast<std::uint64_t>(result);
    const std::uint64_t needed = task.skip + task.deliver;
    if (slot.moved < needed) {
      // End of file before the asked bytes (a short read at EOF; with O_DIRECT it also leaves the next read
      // unaligned): the file shrank since it was published.
      if (result == 0 || (file.direct && slot.moved % kAlign != 0))
        return fail_chunk(s, Error(Errc::Unavailable, where + ": the file ends at " +
                                                          std::to_string(task.read_offset + slot.moved) +
                                                          ", short of the range (it was published with " +
                                                          std::to_string(file.size) + " bytes: it shrank)"));
      return queue_read(s);  // a short read: continue where it stopped
    }
    if (task.job->error) return chunk_done(s);
    auto& served = *task.job->served;
    if (served.broken)
      return fail_chunk(s, Error(Errc::ConnectionBroken, "the requester's connection closed"));
    Segment local{reinterpret_cast<std::uint64_t>(chunk(s) + task.skip),
                  static_cast<std::uint32_t>(task.deliver), registrations_[served.rail->index]->lkey()};
    RemoteAddress remote = task.job->dest;
    remote.addr += task.dest_offset;
    auto wr = served.connection->write(local, remote);
    if (!wr)
      return fail_chunk(s, Error(wr.error().code(), "delivering " + where + " to '" + served.identity +
                                                        "': " + wr.error().message()));
    slot.state = State::Writing;
    slot.wr = *wr;
  }

  bool reap_writes() {
    bool found = false;
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      auto& slot = slots_[s];
      if (slot.state != State::Writing) continue;
      auto& served = *slot.task.job->served;
      auto done = served.connection->wait(slot.wr, std::chrono::nanoseconds::zero());
      if (!done && done.error().code() == Errc::Timeout) continue;
      found = true;
      if (!done || !done->ok()) {
        std::string why = done ? std::string(to_string(done->status)) : done.error().message();
        fail_chunk(
            s, Error(Errc::TransportFailure, "delivering the bytes to '" + served.identity + "': " + why));
        continue;
      }
      chunk_done(s);
    }
    return found;
  }

  void fail_chunk(std::size_t s, Error error) {
    auto& job = *slots_[s].task.job;
    if (!job.error) job.error = std::move(error);
    chunk_done(s);
  }

  // The chunk is finished (delivered, failed or skipped): its slot is free, and its request is answered
  // with its last chunk.
  void chunk_done(std::size_t s) {
    auto job = std::move(slots_[s].task.job);
    slots_[s] = Slot{};
    if (--job->left != 0) return;
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

  // Sends what the outbox holds while the previous send has completed (the channel's send_timeout is 0).
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
  std::chrono::milliseconds peer_timeout_;
  ckpt::detail::AlignedBuffer memory_;
  std::vector<std::shared_ptr<MemoryRegion>> registrations_;  // by rail index
  std::optional<ckpt::detail::Ring> uring_;
  bool fixed_ = false;
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

void EngineImpl::adopt_file_connection(Rail& rail, std::shared_ptr<Connection> connection,
                                       std::string identity, std::unique_ptr<MessageChannel> channel) {
  auto server = file_server();
  if (!server) return connection->close();
  server->adopt(rail, std::move(connection), std::move(identity), std::move(channel));
}

Result<void> EngineImpl::publish_file(std::string_view name, const std::string& path,
                                      const FileSegmentOptions& options) {
  return publish_file_at(AT_FDCWD, path, false, name, path, options);
}

// O_NONBLOCK: opening a FIFO for reading would wait for a writer (publish_file hung on one); it is refused
// below as not a regular file. On the file kept it goes again, or io_uring would fail reads with EAGAIN.
static Fd open_served(int dir, const std::string& entry, bool no_follow, bool& direct) {
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | (no_follow ? O_NOFOLLOW : 0);
  Fd fd(::openat(dir, entry.c_str(), flags | O_DIRECT));
  direct = static_cast<bool>(fd);
  if (!fd && errno == EINVAL) fd.reset(::openat(dir, entry.c_str(), flags));
  if (fd && ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK) != 0) {
    int error = errno;
    fd.reset();
    errno = error;
  }
  return fd;
}

Result<void> EngineImpl::publish_file_at(int dir, const std::string& entry, bool no_follow,
                                         std::string_view name, const std::string& path,
                                         const FileSegmentOptions& options) {
  if (name.empty()) return fail(Errc::InvalidArgument, "publish_file: empty segment name");
  if (name.size() > kMaxFileSegmentName)
    return fail(Errc::InvalidArgument,
                "publish_file: a segment name longer than " + std::to_string(kMaxFileSegmentName) + " bytes");
  if (options.writable)
    return fail(Errc::NotSupported, "publish_file '" + std::string(name) +
                                        "': writable file segments are not built yet (read-only only)");
  if (options_.file_chunk_bytes == 0 || options_.file_chunk_bytes % kAlign != 0 ||
      options_.file_chunk_bytes > (1u << 30) || options_.file_ring_chunks == 0 ||
      options_.file_ring_chunks > 256)
    return fail(Errc::InvalidArgument,
                "publish_file: file_chunk_bytes must be a multiple of 4096 up to 1 GiB and "
                "file_ring_chunks 1..256");
  auto file = std::make_shared<PublishedFile>();
  file->name = std::string(name);
  file->path = path;
  // O_DIRECT where the file system takes it (tmpfs does not: EINVAL, then the page cache).
  file->fd = open_served(dir, entry, no_follow, file->direct);
  if (!file->fd) return fail_errno("publish_file '" + file->name + "': opening " + path, errno);
  struct stat st {};
  if (::fstat(file->fd.get(), &st) != 0) return fail_errno("publish_file: stat of " + path, errno);
  if (!S_ISREG(st.st_mode))
    return fail(Errc::InvalidArgument,
                "publish_file '" + file->name + "': " + path + " is not a regular file");
  if (st.st_size == 0)
    return fail(Errc::InvalidArgument, "publish_file '" + file->name + "': " + path + " is empty");
  file->size = static_cast<std::uint64_t>(st.st_size);

  std::lock_guard lock(control_);
  if (published_.contains(name) || published_files_.contains(name) || unready_.contains(name))
    return fail(Errc::InvalidArgument, "publish_file: segment '" + file->name + "' is already published");
  std::shared_ptr<FileServer> server = file_server();
  if (!server) {
    std::vector<Rail*> rails;
    for (auto& rail : rails_) rails.push_back(rail.get());
    auto made = std::make_shared<FileServer>(std::move(rails), options_.file_chunk_bytes,
                                             options_.file_ring_chunks, options_.peer_timeout);
    if (auto started = made->start(); !started)
      return std::unexpected(Error(started.error().code(),
                                   "publish_file: the file server: " + started.error().message(),
                                   started.error().sys_errno()));
    std::lock_guard files(files_mutex_);
    file_server_ = server = std::move(made);
  }
  // Its rails name no memory: only the owner's epoch in that rail's context (which keys the peer), so a
  // reader can reach nothing of ours through them.
  SegmentRecord record{options_.name, host_, file->size, {}, true, false};
  for (auto& rail : rails_) {
    RemoteRegion region{};
    region.owner_epoch = rail->context->identity().epoch;
    record.rails.push_back({rail->transport, rail->listener->address(), region});
  }
  auto sealed = seal(record, name, secret_);
  if (!sealed) return std::unexpected(sealed.error());
  server->add(file);  // before the name is visible: a peer that finds it is served
  if (auto put = metadata_.publish(segment_key(name), *sealed); !put) {
    server->remove(name);
    return put;
  }
  published_files_.emplace(name);
  std::lock_guard names(notifications_mutex_);
  ready_names_.emplace(name);
  return {};
}

#else  // built without io_uring (RDMAKIT_WITH_CKPT off)

class FileServer {};
void unpublish_file(FileServer&, std::string_view) {}

void EngineImpl::adopt_file_connection(Rail&, std::shared_ptr<Connection> connection, std::string,
                                       std::unique_ptr<MessageChannel>) {
  connection->close();
}

Result<void> EngineImpl::publish_file(std::string_view name, const std::string&, const FileSegmentOptions&) {
  return fail(Errc::NotSupported, "publish_file '" + std::string(name) +
                                      "': this rdmakit was built without io_uring (RDMAKIT_WITH_CKPT off)");
}

Result<void> EngineImpl::publish_file_at(int, const std::string& path, bool, std::string_view name,
                                         const std::string&, const FileSegmentOptions& options) {
  return publish_file(name, path, options);
}

#endif

}  // namespace rdmakit::xfer::detail
