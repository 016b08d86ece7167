#include "ckpt/io.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <optional>
#include <utility>

#include "core/tsan.hpp"

namespace rdmakit::ckpt::detail {

std::uint64_t round_up(std::uint64_t value, std::uint64_t alignment) noexcept {
  return (value + alignment - 1) / alignment * alignment;
}

bool populate_for_writing(void* data, std::size_t size) noexcept {
#ifndef MADV_POPULATE_WRITE  // Linux 5.14; older headers
#define MADV_POPULATE_WRITE 23
#endif
  auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  auto begin = reinterpret_cast<std::uintptr_t>(data) / page * page;
  auto end = reinterpret_cast<std::uintptr_t>(data) + size;
  return size == 0 || ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0;
}

// ---- AlignedBuffer ------------------------------------------------------------------------------------
Result<AlignedBuffer> AlignedBuffer::allocate(std::size_t size, bool populate) {
  AlignedBuffer buffer;
  if (size == 0) return buffer;
  // MAP_POPULATE on a private writable mapping allocates the pages (not the shared zero page); it is
  // best effort: what the kernel could not populate is faulted in on first use as before.
  void* data = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
  if (data == MAP_FAILED)
    return fail_errno("ckpt: allocating " + std::to_string(size) + " bytes of staging", errno);
  buffer.data_ = static_cast<unsigned char*>(data);
  buffer.size_ = size;
  return buffer;
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    this->~AlignedBuffer();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() {
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
}

// ---- Ring ---------------------------------------------------------------------------------------------
Result<Ring> Ring::create(unsigned depth) {
  auto ring = std::make_unique<io_uring>();
  int rc = io_uring_queue_init(depth, ring.get(), 0);
  if (rc < 0) return fail_errno("ckpt: io_uring_queue_init (io_uring disabled or too old a kernel?)", -rc);
  tsan::acquire_mapping();  // the rings may sit where another thread's were (core/tsan.hpp)
  return Ring(std::move(ring), depth);
}

Ring::~Ring() {
  if (!ring_) return;
  tsan::release_mapping();
  io_uring_queue_exit(ring_.get());
}

Result<void> Ring::queue(bool write, int fd, void* buffer, std::uint32_t length, std::uint64_t offset,
                         std::uint64_t tag) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
  if (!sqe) return fail(Errc::ResourceExhausted, "ckpt: io_uring submission queue full");
  if (write)
    io_uring_prep_write(sqe, fd, buffer, length, offset);
  else
    io_uring_prep_read(sqe, fd, buffer, length, offset);
  io_uring_sqe_set_data64(sqe, tag);
  return {};
}

Result<Ring::Done> Ring::wait() {
  int rc = io_uring_submit(ring_.get());
  if (rc < 0) return fail_errno("ckpt: io_uring_submit", -rc);
  io_uring_cqe* cqe = nullptr;
  do rc = io_uring_wait_cqe(ring_.get(), &cqe);
  while (rc == -EINTR);
  if (rc < 0) return fail_errno("ckpt: io_uring_wait_cqe", -rc);
  Done done{io_uring_cqe_get_data64(cqe), cqe->res};
  io_uring_cqe_seen(ring_.get(), cqe);
  return done;
}

Result<std::optional<Ring::Done>> Ring::poll() {
  int rc = io_uring_submit(ring_.get());
  if (rc < 0) return fail_errno("ckpt: io_uring_submit", -rc);
  io_uring_cqe* cqe = nullptr;
  rc = io_uring_peek_cqe(ring_.get(), &cqe);
  if (rc == -EAGAIN || cqe == nullptr) return std::optional<Done>{};
  if (rc < 0) return fail_errno("ckpt: io_uring_peek_cqe", -rc);
  Done done{io_uring_cqe_get_data64(cqe), cqe->res};
  io_uring_cqe_seen(ring_.get(), cqe);
  return std::optional<Done>(done);
}

Result<void> Ring::register_buffer(void* data, std::size_t size) {
  iovec vector{data, size};
  int rc = io_uring_register_buffers(ring_.get(), &vector, 1);
  if (rc < 0) return fail_errno("ckpt: io_uring_register_buffers", -rc);
  return {};
}

Result<void> Ring::queue_read_fixed(int fd, void* buffer, std::uint32_t length, std::uint64_t offset,
                                    std::uint64_t tag) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
  if (!sqe) return fail(Errc::ResourceExhausted, "ckpt: io_uring submission queue full");
  io_uring_prep_read_fixed(sqe, fd, buffer, length, offset, 0);
  io_uring_sqe_set_data64(sqe, tag);
  return {};
}

Result<void> Ring::queue_write_fixed(int fd, const void* buffer, std::uint32_t length, std::uint64_t offset,
                                     std::uint64_t tag) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
  if (!sqe) return fail(Errc::ResourceExhausted, "ckpt: io_uring submission queue full");
  io_uring_prep_write_fixed(sqe, fd, buffer, length, offset, 0);
  io_uring_sqe_set_data64(sqe, tag);
  return {};
}

// ---- The pipeline -------------------------------------------------------------------------------------
namespace {

// One chunk in flight: where it is and how far it has got (a short transfer is continued).
struct InFlight {
  std::size_t index = 0;
  unsigned char* buffer = nullptr;
  std::uint64_t moved = 0;
};

class PipelineRun {
 public:
  PipelineRun(Ring& ring, bool write, int fd, const std::vector<IoChunk>& chunks, const Pipeline& steps,
              const std::string& file)
      : ring_(ring),
        write_(write),
        fd_(fd),
        chunks_(chunks),
        steps_(steps),
        file_(file),
        slots_(ring.depth()) {
    for (unsigned s = 0; s < ring.depth(); ++s) free_.push_back(s);
  }

  Result<void> run() {
    while ((next_ < chunks_.size() && !error_) || in_flight_ > 0) {
      while (!error_ && next_ < chunks_.size() && !free_.empty()) start(next_++);
      if (in_flight_ == 0) break;
      auto done = ring_.wait();
      if (!done) {  // the ring itself failed: nothing more can be reaped
        return std::unexpected(done.error());
      }
      complete(static_cast<unsigned>(done->tag), done->result);
    }
    if (error_) return std::unexpected(*error_);
    return {};
  }

 private:
  void record(Error error) {
    if (!error_) error_ = std::move(error);
  }

  void start(std::size_t index) {
    if (steps_.before)
      if (auto ok = steps_.before(index); !ok) return record(ok.error());
    unsigned slot = free_.back();
    free_.pop_back();
    slots_[slot] = InFlight{index, steps_.buffer(index, slot), 0};
    queue(slot);
  }

  void queue(unsigned slot) {
    const auto& flight = slots_[slot];
    const auto& chunk = chunks_[flight.index];
    auto ok = ring_.queue(write_, fd_, flight.buffer + flight.moved,
                          static_cast<std::uint32_t>(chunk.length - flight.moved),
                          chunk.offset + flight.moved, slot);
    if (!ok) return record(ok.error());
    ++in_flight_;
  }

  void complete(unsigned slot, std::int32_t result) {
    --in_flight_;
    auto& flight = slots_[slot];
    const auto& chunk = chunks_[flight.index];
    std::string where =
        file_ + " chunk " + std::to_string(flight.index) + " (offset " + std::to_string(chunk.offset) + ")";
    if (result < 0) {
      record(fail_errno(std::string("ckpt: ") + (write_ ? "writing " : "reading ") + where, -result).error());
    } else {
      flight.moved += static_cast<std::uint64_t>(result);
      std::uint64_t target = write_ ? chunk.length : chunk.needed;
      if (flight.moved < target) {
        if (result == 0)
          record(Error(
              Errc::ProtocolError,
              "ckpt: " + where + (write_ ? ": write made no progress" : ": file ends early (truncated)")));
        else if (!error_)
          return queue(slot);  // a short transfer: continue where it stopped
      } else if (!error_ && steps_.after) {
        if (auto ok = steps_.after(flight.index); !ok) record(ok.error());
      }
    }
    free_.push_back(slot);
  }

  Ring& ring_;
  bool write_;
  int fd_;
  const std::vector<IoChunk>& chunks_;
  const Pipeline& steps_;
  const std::string& file_;
  std::vector<InFlight> slots_;
  std::vector<unsigned> free_;
  std::size_t next_ = 0;
  unsigned in_flight_ = 0;
  std::optional<Error> error_;
};

}  // namespace

Result<void> run_pipeline(Ring& ring, bool write, int fd, const std::vector<IoChunk>& chunks,
                          const Pipeline& steps, const std::string& file_name) {
  return PipelineRun(ring, write, fd, chunks, steps, file_name).run();
}

// ---- Files and directories ----------------------------------------------------------------------------
FileModes file_modes(bool shared_group) noexcept {
  return shared_group ? FileModes{.file = 0640, .directory = 0750} : FileModes{};
}

Result<Fd> open_file(const std::string& path, int flags, bool direct, bool& got_direct, unsigned mode) {
  got_direct = false;
  if (direct) {
    int fd = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, mode);
    if (fd >= 0) {
      got_direct = true;
      return Fd(fd);
    }
    if (errno != EINVAL) return fail_errno("ckpt: opening " + path, errno);
  }
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) return fail_errno("ckpt: opening " + path, errno);
  return Fd(fd);
}

Result<void> fsync_fd(int fd, const std::string& what) {
  if (::fsync(fd) != 0) return fail_errno("ckpt: fsync of " + what, errno);
  return {};
}

Result<void> fsync_directory(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return fail_errno("ckpt: opening directory " + path, errno);
  return fsync_fd(fd.get(), "directory " + path);
}

Result<void> write_whole_file(const std::string& path, const std::string& contents, unsigned mode) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (!fd) return fail_errno("ckpt: creating " + path, errno);
  std::size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::write(fd.get(), contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno("ckpt: writing " + path, errno);
    done += static_cast<std::size_t>(n);
  }
  return fsync_fd(fd.get(), path);
}

Result<std::string> read_whole_file(const std::string& path, std::uint64_t limit) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail_errno("ckpt: opening " + path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail_errno("ckpt: stat of " + path, errno);
  if (static_cast<std::uint64_t>(st.st_size) > limit)
    return fail(Errc::ProtocolError, "ckpt: " + path + " is larger than " + std::to_string(limit) + " bytes");
  std::string contents(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::read(fd.get(), contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno("ckpt: reading " + path, errno);
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  contents.resize(done);
  return contents;
}

Result<void> make_directory(const std::string& path, unsigned mode) {
  if (path.empty()) return fail(Errc::InvalidArgument, "ckpt: an empty directory name");
  // Component by component (not create_directories, whose mode is 0777 less the umask).
  std::string prefix;
  std::string_view rest = path;
  while (!rest.empty()) {
    auto slash = rest.find('/', 1);
    prefix += rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash);
    if (prefix == "/" || prefix.empty()) continue;
    if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST)
      return fail_errno("ckpt: creating directory " + prefix, errno);
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return fail(Errc::InvalidArgument, "ckpt: " + path + " is not a directory");
  return {};
}

void remove_tree(const std::string& path) noexcept {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

}  // namespace rdmakit::ckpt::detail
