// File segments read on the owner's host without the owner (files_local.hpp): a requester that can open the
// published file itself, and finds there the very inode the owner published, reads it with its own
// io_uring. Every byte is checked (and the bytes around each destination stay untouched); Batch::paths()
// says which requests were read locally and which the owner served; a file that shrank fails naming the
// file and the range; a path that now leads to another file, and device memory, go to the owner; WRITEs
// always go to the owner; an owner killed mid-run does not stop local reads. A block device (a loop device
// over a file) is published and read both ways.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>

#include "xfer/file_metadata.hpp"
#include "xfer/peer_process.hpp"
#include "xfer/xfer_test_support.hpp"

namespace rdmakit::xfer::testing {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kFileSize = (3 << 20) + 777;  // not a multiple of 4096
constexpr std::byte kUntouched{0xEE};
constexpr const char* kJob = "the job's secret, 16+ characters";

std::vector<std::byte> seeded_bytes(std::size_t size, std::uint32_t seed) {
  std::mt19937 random(seed);
  std::vector<std::byte> bytes(size);
  for (auto& b : bytes) b = static_cast<std::byte>(random());
  return bytes;
}

// Runs `batch` to its end; every request must have succeeded.
void expect_done(const Result<std::shared_ptr<Batch>>& batch) {
  ASSERT_TRUE(batch.has_value()) << batch.error().describe();
  ASSERT_TRUE((*batch)->wait(30s).has_value());
  for (std::size_t i = 0; i < (*batch)->size(); ++i)
    ASSERT_TRUE((*batch)->status(i)->has_value())
        << "request " << i << ": " << (*batch)->status(i)->error().describe();
}

class XferFileLocal : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("RDMAKIT_JOB_SECRET", kJob, 1);
    metadata_ = std::make_unique<FileMetadataStore>(dir_.path());
    owner_ = make_engine(*metadata_, EngineOptions{.name = "owner", .transports = {"tcp"}});
    client_ = make_engine(*metadata_, EngineOptions{.name = "client", .transports = {"tcp"}});
    ::unsetenv("RDMAKIT_JOB_SECRET");
    ASSERT_TRUE(owner_ && client_);
    path_ = dir_.path() / "shard.bin";
    contents_ = seeded_bytes(kFileSize, 3);
    write_file(path_, contents_);
  }
  SegmentHandle publish_and_open(const std::string& name, const std::string& path,
                                 const FileSegmentOptions& options = {}) {
    auto published = owner_->publish_file(name, path, options);
    EXPECT_TRUE(published.has_value()) << published.error().describe();
    auto handle = client_->open_segment(name);
    EXPECT_TRUE(handle.has_value()) << handle.error().describe();
    return handle.value_or(SegmentHandle{});
  }
  Buffer local(std::size_t size) { return registered_filled(*client_, size, kUntouched); }
  // A reader of the job that sends every READ to the owner, as one on another host does.
  std::unique_ptr<Engine> remote_reader() {
    ::setenv("RDMAKIT_JOB_SECRET", kJob, 1);
    auto remote = make_engine(
        *metadata_, EngineOptions{.name = "remote", .transports = {"tcp"}, .file_local_reads = false});
    ::unsetenv("RDMAKIT_JOB_SECRET");
    return remote;
  }

  TempDir dir_;
  std::unique_ptr<MetadataStore> metadata_;
  std::unique_ptr<Engine> owner_, client_;
  std::filesystem::path path_;
  std::vector<std::byte> contents_;
};

// 200 random ranges (aligned and unaligned), the file's last byte and the whole file: every byte the
// file's, the gaps between destinations untouched, every request read locally.
TEST_F(XferFileLocal, RandomRangesAreReadFromTheFileByTheRequester) {
  auto segment = publish_and_open("shard", path_.string());
  auto info = client_->segment_info(segment);
  ASSERT_TRUE(info.has_value());
  EXPECT_TRUE(info->read_locally) << "the client did not open the owner's file";
  std::mt19937_64 random(17);
  struct Range {
    std::uint64_t offset, length;
  };
  std::vector<Range> ranges{{0, kFileSize}, {kFileSize - 1, 1}, {0, 4096}, {4095, 2}};
  while (ranges.size() < 200) {
    bool aligned = random() % 2 == 0;
    std::uint64_t length = aligned ? 4096 * (1 + random() % 32) : 1 + random() % 100000;
    std::uint64_t offset = random() % (kFileSize - length + 1);
    if (aligned) offset = offset / 4096 * 4096;
    ranges.push_back({offset, length});
  }
  // Destinations 4 KiB-aligned (as a loader's pinned buffers are), 64 bytes of gap after each.
  std::vector<std::uint64_t> at;
  std::uint64_t next = 4096;
  for (const auto& r : ranges) {
    at.push_back(next);
    next = (next + r.length + 64 + 4095) / 4096 * 4096;
  }
  auto memory = local(next);
  std::vector<Request> requests;
  for (std::size_t i = 0; i < ranges.size(); ++i)
    requests.push_back({Op::Read, memory.get() + at[i], segment, ranges[i].offset, ranges[i].length});
  // Twice: with the file in the page cache (just written: the reads take it from there), then with it
  // dropped from the cache (the reads go to the disk).
  Result<std::shared_ptr<Batch>> batch = fail(Errc::NotFound, "not submitted");
  for (const char* round : {"cached", "cold"}) {
    if (std::string(round) == "cold") {
      int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(::fdatasync(fd), 0);  // dirty pages are not dropped
      ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
      ::close(fd);
      for (std::size_t i = 0; i < ranges.size(); ++i) std::memset(memory.get() + at[i], 0, ranges[i].length);
    }
    batch = client_->submit(requests);
    expect_done(batch);
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      ASSERT_EQ(std::memcmp(memory.get() + at[i], contents_.data() + ranges[i].offset, ranges[i].length), 0)
          << round << ": request " << i << " [" << ranges[i].offset << ", +" << ranges[i].length
          << ") differs";
      ASSERT_EQ(memory.get()[at[i] - 1], kUntouched)
          << round << ": a byte before request " << i << " was written";
      ASSERT_EQ(memory.get()[at[i] + ranges[i].length], kUntouched)
          << round << ": a byte after request " << i;
    }
  }
  auto paths = (*batch)->paths();
  EXPECT_EQ(paths.file_requests_local, ranges.size()) << to_string(paths);
  EXPECT_EQ(paths.file_requests_by_owner, 0u) << to_string(paths);
  EXPECT_EQ(paths.transports, std::vector<std::string>{"file"}) << to_string(paths);
  EXPECT_EQ(paths.memory, std::vector<MemoryPath>{MemoryPath::Host}) << to_string(paths);
}

// Reads go locally, WRITEs to a writable segment go to the owner (it serializes them and enforces the
// rights), in one batch; the READ after sees the WRITE's bytes. A client with file_local_reads off sends
// every request to the owner.
TEST_F(XferFileLocal, WritesGoToTheOwnerAndLocalReadsCanBeTurnedOff) {
  auto segment = publish_and_open("shard", path_.string(), {.writable = true});
  auto memory = local(3 * 65536);
  auto source = seeded_bytes(20000, 9);
  std::memcpy(memory.get() + 65536, source.data(), source.size());
  std::vector<Request> mixed{{Op::Read, memory.get(), segment, 8192, 16384},
                             {Op::Write, memory.get() + 65536, segment, 100000 + 5, 20000}};
  auto batch = client_->submit(mixed);
  expect_done(batch);
  EXPECT_EQ(std::memcmp(memory.get(), contents_.data() + 8192, 16384), 0);
  auto paths = (*batch)->paths();
  EXPECT_EQ(paths.file_requests_local, 1u) << to_string(paths);
  EXPECT_EQ(paths.file_requests_by_owner, 1u) << to_string(paths);
  EXPECT_EQ(paths.transports, (std::vector<std::string>{"tcp", "file"})) << to_string(paths);
  std::memcpy(contents_.data() + 100005, source.data(), source.size());
  EXPECT_EQ(read_file(path_), contents_) << "the WRITE did not land in the file";
  std::vector<Request> back{{Op::Read, memory.get() + 2 * 65536, segment, 100000, 30000}};
  expect_done(client_->submit(back));
  EXPECT_EQ(std::memcmp(memory.get() + 2 * 65536, contents_.data() + 100000, 30000), 0);

  auto remote = remote_reader();
  ASSERT_TRUE(remote);
  auto handle = remote->open_segment("shard");
  ASSERT_TRUE(handle.has_value());
  EXPECT_FALSE(remote->segment_info(*handle)->read_locally);
  auto buffer = make_buffer(65536);
  ASSERT_TRUE(remote->register_local(buffer.get(), 65536).has_value());
  std::vector<Request> read{{Op::Read, buffer.get(), *handle, 4096, 65536}};
  auto by_owner = remote->submit(read);
  expect_done(by_owner);
  EXPECT_EQ(std::memcmp(buffer.get(), contents_.data() + 4096, 65536), 0);
  EXPECT_EQ((*by_owner)->paths().file_requests_by_owner, 1u) << to_string((*by_owner)->paths());
  EXPECT_EQ((*by_owner)->paths().file_requests_local, 0u);
}

// A file that shrank under a local read fails that request, naming the file, the range and "shrank"; the
// request inside the remaining bytes succeeds.
TEST_F(XferFileLocal, AShrunkFileFailsTheRequestNamingFileAndRange) {
  auto segment = publish_and_open("shard", path_.string());
  ASSERT_EQ(::truncate(path_.c_str(), 1 << 20), 0);
  auto memory = local(2 * 8192);
  std::vector<Request> requests{{Op::Read, memory.get(), segment, 2 << 20, 5000},
                                {Op::Read, memory.get() + 8192, segment, (1 << 20) - 4000, 4000}};
  auto batch = client_->submit(requests);
  ASSERT_TRUE(batch.has_value() && (*batch)->wait(20s).has_value());
  EXPECT_EQ((*batch)->paths().file_requests_local, 2u);
  auto shrunk = *(*batch)->status(0);
  ASSERT_FALSE(shrunk.has_value());
  EXPECT_EQ(shrunk.error().code(), Errc::Unavailable) << shrunk.error().describe();
  for (const std::string& part : {path_.string(), std::string("[2097152, 2102152)"), std::string("shrank")})
    EXPECT_NE(shrunk.error().message().find(part), std::string::npos) << shrunk.error().describe();
  ASSERT_TRUE((*batch)->status(1)->has_value()) << (*batch)->status(1)->error().describe();
  EXPECT_EQ(std::memcmp(memory.get() + 8192, contents_.data() + (1 << 20) - 4000, 4000), 0);
}

// The path now leads to another file (replaced by a rename after publishing): the client does not read that
// one; the owner, which holds the published inode open, serves the published bytes.
TEST_F(XferFileLocal, APathThatLeadsToAnotherFileIsNotReadLocally) {
  ASSERT_TRUE(owner_->publish_file("shard", path_.string()).has_value());
  auto impostor = seeded_bytes(kFileSize, 4);
  write_file(dir_.path() / "new.bin", impostor);
  std::filesystem::rename(dir_.path() / "new.bin", path_);
  auto segment = client_->open_segment("shard");
  ASSERT_TRUE(segment.has_value());
  EXPECT_FALSE(client_->segment_info(*segment)->read_locally);
  auto memory = local(65536);
  std::vector<Request> read{{Op::Read, memory.get(), *segment, 4096, 65536}};
  auto batch = client_->submit(read);
  expect_done(batch);
  EXPECT_EQ(std::memcmp(memory.get(), contents_.data() + 4096, 65536), 0) << "not the published file's bytes";
  EXPECT_EQ((*batch)->paths().file_requests_by_owner, 1u);
}

// The owner runs in a process of its own and is killed: a READ the client makes locally still gets every
// byte of the file (the owner is not involved), and says so in its paths.
TEST_F(XferFileLocal, LocalReadsDoNotNeedTheOwnerAlive) {
  auto contents = seeded_bytes(4 << 20, 5);
  auto path = dir_.path() / "owned.bin";
  write_file(path, contents);
  PeerProcess owner(dir_.path(), "owned", "file:" + path.string(), "tcp");
  ASSERT_TRUE(owner.ready());
  FileMetadataStore store(dir_.path());
  auto client = make_engine(store, EngineOptions{.name = "client-2", .transports = {"tcp"}});
  ASSERT_TRUE(client);
  auto segment = client->open_segment("owned");
  ASSERT_TRUE(segment.has_value()) << segment.error().describe();
  owner.signal(SIGKILL);
  owner.reap();
  auto memory = make_buffer(4 << 20);
  ASSERT_TRUE(client->register_local(memory.get(), 4 << 20).has_value());
  std::vector<Request> read{{Op::Read, memory.get(), *segment, 0, 4 << 20}};
  auto batch = client->submit(read);
  expect_done(batch);
  EXPECT_EQ(std::memcmp(memory.get(), contents.data(), 4 << 20), 0);
  EXPECT_EQ((*batch)->paths().file_requests_local, 1u);
}

// A loop device over a file of random bytes (root and /dev/loop-control needed: skipped, and said so,
// elsewhere). Its group (disk) may write it, so it is refused until allow_other_writers; then its capacity is
// the segment's length, and READs through the owner and local READs both return the image's bytes.
TEST_F(XferFileLocal, ABlockDeviceIsPublishedAndReadBothWays) {
  auto image = dir_.path() / "disk.img";
  auto bytes = seeded_bytes(8 << 20, 8);
  write_file(image, bytes);
  std::string device;
  if (FILE* p = ::popen(("losetup -f --show " + image.string() + " 2>/dev/null").c_str(), "r")) {
    char line[256] = {};
    if (std::fgets(line, sizeof line, p) != nullptr) device = line;
    ::pclose(p);
  }
  while (!device.empty() && device.back() == '\n') device.pop_back();
  if (device.empty()) GTEST_SKIP() << "no loop device here (losetup needs root and /dev/loop-control)";
  struct Detach {
    std::string device;
    ~Detach() { (void)std::system(("losetup -d " + device).c_str()); }
  } detach{device};

  struct stat st {};
  ASSERT_EQ(::stat(device.c_str(), &st), 0);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    auto refused = owner_->publish_file("disk", device);
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.error().code(), Errc::InvalidArgument) << refused.error().describe();
  }
  auto segment = publish_and_open("disk", device, {.allow_other_writers = true});
  ASSERT_TRUE(segment);
  EXPECT_EQ(client_->segment_info(segment)->length, bytes.size());
  EXPECT_TRUE(client_->segment_info(segment)->read_locally);
  auto memory = local(2 << 20);
  std::vector<Request> reads{{Op::Read, memory.get(), segment, 0, 1 << 20},
                             {Op::Read, memory.get() + (1 << 20) + 64, segment, (7 << 20) + 3, 100000}};
  expect_done(client_->submit(reads));
  EXPECT_EQ(std::memcmp(memory.get(), bytes.data(), 1 << 20), 0);
  EXPECT_EQ(std::memcmp(memory.get() + (1 << 20) + 64, bytes.data() + (7 << 20) + 3, 100000), 0);

  auto remote = remote_reader();
  ASSERT_TRUE(remote);
  auto handle = remote->open_segment("disk");
  ASSERT_TRUE(handle.has_value());
  auto buffer = make_buffer(1 << 20);
  ASSERT_TRUE(remote->register_local(buffer.get(), 1 << 20).has_value());
  std::vector<Request> read{{Op::Read, buffer.get(), *handle, (8 << 20) - (1 << 20), 1 << 20}};
  auto by_owner = remote->submit(read);
  expect_done(by_owner);
  EXPECT_EQ(std::memcmp(buffer.get(), bytes.data() + (7 << 20), 1 << 20), 0);
  EXPECT_EQ((*by_owner)->paths().file_requests_by_owner, 1u);
  ASSERT_TRUE(owner_->unpublish("disk").has_value());
}

}  // namespace
}  // namespace rdmakit::xfer::testing
