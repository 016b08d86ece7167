// File segments read without their owner (files_local.hpp says when and why).
#include "xfer/engine/files_local.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "core/log.hpp"
#include "xfer/engine/engine_impl.hpp"

#if RDMAKIT_XFER_FILES
#include "ckpt/io.hpp"
#endif

namespace rdmakit::xfer::detail {

namespace {

std::shared_ptr<const LocalFile> refuse(const SegmentRecord& record, const std::string& why) {
  log::debug("xfer", "file '" + log::printable(record.path, 256) + "' of '" + log::printable(record.owner) +
                         "': not read locally: " + why);
  return nullptr;
}

// The size of what `fd` is: a regular file's length, a block device's capacity.
std::optional<std::uint64_t> size_of(int fd, const struct stat& st) {
  if (S_ISREG(st.st_mode)) return static_cast<std::uint64_t>(st.st_size);
  std::uint64_t bytes = 0;
  if (S_ISBLK(st.st_mode) && ::ioctl(fd, BLKGETSIZE64, &bytes) == 0) return bytes;
  return std::nullopt;
}

}  // namespace

std::shared_ptr<const LocalFile> open_local_file(const SegmentRecord& record, std::string_view local_boot) {
  if (!record.file || record.path.empty()) return nullptr;
  if (boot_of(record.host) != local_boot) return nullptr;  // another host: the path means nothing here
  // Looked at before it is opened: opening a device or a FIFO the record named could have effects of its
  // own (the record's author holds the secret, but should not be able to make us open anything).
  struct stat st {};
  if (::stat(record.path.c_str(), &st) != 0) return refuse(record, std::string("stat: ") + strerror(errno));
  auto is_published = [&](const struct stat& s) {
    return (S_ISREG(s.st_mode) || S_ISBLK(s.st_mode)) &&
           static_cast<std::uint64_t>(s.st_dev) == record.device &&
           static_cast<std::uint64_t>(s.st_ino) == record.inode;
  };
  if (!is_published(st)) return refuse(record, "the path leads to another file than the owner's");
  auto file = std::make_shared<LocalFile>();
  file->path = record.path;
  file->size = record.length;
  file->buffered.reset(::open(record.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!file->buffered) return refuse(record, std::string("open: ") + strerror(errno));
  // Checked again on what was opened: the path may have been swapped between the stat and the open.
  if (::fstat(file->buffered.get(), &st) != 0 || !is_published(st))
    return refuse(record, "the path leads to another file than the owner's");
  auto size = size_of(file->buffered.get(), st);
  if (!size || *size < record.length) return refuse(record, "shorter than the segment");
  (void)::fcntl(file->buffered.get(), F_SETFL, ::fcntl(file->buffered.get(), F_GETFL) & ~O_NONBLOCK);
  // Through the page cache, as any program reading the file would: a data set read again comes from
  // memory. Random access: a miss reads the asked range, not a readahead window around it.
  (void)::posix_fadvise(file->buffered.get(), 0, 0, POSIX_FADV_RANDOM);
  return file;
}

#if RDMAKIT_XFER_FILES

struct LocalFileReader::Read {
  std::shared_ptr<Peer> peer;
  std::shared_ptr<const LocalFile> file;
  FileOp op;
  std::uint64_t moved = 0;
};

class LocalFileReader::Loop {
 public:
  Loop(ckpt::detail::Ring ring, unsigned depth) : ring_(std::move(ring)), slots_(depth) {}
  ~Loop() { stop(); }
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void start() {
    thread_ = std::thread([this] { run(); });
  }

  void queue(const std::shared_ptr<Peer>& peer, std::vector<FileOp> ops) {
    std::unique_lock lock(mutex_);
    if (stop_) {
      lock.unlock();
      Error closed(Errc::ConnectionBroken, "the engine is closing");
      for (auto& op : ops) finish_file_op(*peer, op, &closed);
      return;
    }
    for (auto& op : ops) queued_.push_back(Read{peer, op.read_locally, std::move(op), 0});
    lock.unlock();
    wake_.notify_one();
  }

 private:
  void run() {
    while (true) {
      std::vector<Read> taken;
      {
        std::unique_lock lock(mutex_);
        if (in_flight_ == 0) wake_.wait(lock, [&] { return stop_ || !queued_.empty(); });
        if (stop_ && in_flight_ == 0) break;
        while (!stop_ && !queued_.empty() && in_flight_ + taken.size() < slots_.size()) {
          taken.push_back(std::move(queued_.front()));
          queued_.pop_front();
        }
      }
      for (auto& read : taken) begin(std::move(read));
      if (in_flight_ == 0) continue;
      auto done = ring_.wait();
      if (!done) {
        // The ring itself failed (it does not, short of a kernel bug): what it held is lost to us.
        for (std::size_t s = 0; s < slots_.size(); ++s)
          if (slots_[s]) finish(s, &done.error());
        continue;
      }
      completed(static_cast<std::size_t>(done->tag), done->result);
    }
    std::deque<Read> rest;
    {
      std::lock_guard lock(mutex_);
      rest.swap(queued_);
    }
    Error closed(Errc::ConnectionBroken, "the engine closed with the request queued");
    for (auto& read : rest) finish_file_op(*read.peer, read.op, &closed);
  }

  void begin(Read read) {
    std::size_t s = 0;
    while (slots_[s]) ++s;  // a free one exists: in_flight_ < slots_.size()
    slots_[s] = std::move(read);
    ++in_flight_;
    submit(s);
  }

  void submit(std::size_t s) {
    auto& read = *slots_[s];
    auto queued =
        ring_.queue(false, read.file->buffered.get(), reinterpret_cast<void*>(read.op.local + read.moved),
                    static_cast<std::uint32_t>(read.op.length - read.moved), read.op.offset + read.moved, s);
    if (!queued) finish(s, &queued.error());
  }

  void completed(std::size_t s, std::int32_t result) {
    auto& read = *slots_[s];
    if (result < 0) {
      auto error = fail_errno("reading " + where(read), -result).error();
      return finish(s, &error);
    }
    read.moved += static_cast<std::uint64_t>(result);
    if (read.moved == read.op.length) return finish(s, nullptr);
    if (result == 0) {
      Error shrank(Errc::Unavailable, where(read) + ": the file ends at " +
                                          std::to_string(read.op.offset + read.moved) +
                                          ", short of the range (it was published with " +
                                          std::to_string(read.file->size) + " bytes: it shrank)");
      return finish(s, &shrank);
    }
    submit(s);  // a short read: continue where it stopped
  }

  static std::string where(const Read& read) {
    return "file '" + read.file->path + "' read locally, range [" + std::to_string(read.op.offset) + ", " +
           std::to_string(read.op.offset + read.op.length) + ")";
  }

  void finish(std::size_t s, const Error* error) {
    auto read = std::move(*slots_[s]);
    slots_[s].reset();
    --in_flight_;
    finish_file_op(*read.peer, read.op, error);
  }

  ckpt::detail::Ring ring_;
  std::vector<std::optional<Read>> slots_;  // in flight, by io_uring tag
  std::size_t in_flight_ = 0;               // the loop's thread only
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Read> queued_;
  bool stop_ = false;
  std::thread thread_;
};

Result<std::unique_ptr<LocalFileReader>> LocalFileReader::start(unsigned depth) {
  auto ring = ckpt::detail::Ring::create(depth);
  if (!ring) return std::unexpected(ring.error());
  auto loop = std::make_unique<Loop>(std::move(*ring), depth);
  loop->start();
  return std::unique_ptr<LocalFileReader>(new LocalFileReader(std::move(loop)));
}

void LocalFileReader::queue(std::shared_ptr<Peer> peer, std::vector<FileOp> ops) {
  loop_->queue(peer, std::move(ops));
}

#else

class LocalFileReader::Loop {
 public:
  void stop() {}
};

Result<std::unique_ptr<LocalFileReader>> LocalFileReader::start(unsigned) {
  return fail(Errc::NotSupported, "file segments: a build without io_uring reads them through the owner");
}

void LocalFileReader::queue(std::shared_ptr<Peer> peer, std::vector<FileOp> ops) {
  Error unsupported(Errc::NotSupported, "local file reads: a build without io_uring");
  for (auto& op : ops) finish_file_op(*peer, op, &unsupported);
}

#endif

void LocalFileReader::stop() {
  if (loop_) loop_->stop();
}

LocalFileReader::LocalFileReader(std::unique_ptr<Loop> loop) : loop_(std::move(loop)) {}
LocalFileReader::~LocalFileReader() = default;

}  // namespace rdmakit::xfer::detail
