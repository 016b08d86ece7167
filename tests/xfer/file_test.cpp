// File segments (docs/xfer.md, "File segments"): an owner publishes a file, a peer READs byte ranges of it
// into its registered memory with the batch API. Every byte is checked against the file (and the bytes
// around each destination, which must stay untouched: only the asked bytes are delivered); the owner
// refuses ranges beyond the published size, WRITEs to a read-only segment, names it does not publish, and
// everything from a peer that did not prove the secret; a file that shrank fails naming the file and the
// range; an owner killed mid-batch fails the batch within peer_timeout. A writable segment takes random
// WRITEs (unaligned ones sharing blocks in one batch) and every byte of the file matches a model, it never
// grows, and sync_writes holds the file O_DSYNC. Over tcp and shm.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <thread>

#include "bootstrap/peer_proof.hpp"
#include "rdmakit/context.hpp"
#include "xfer/engine/files.hpp"
#include "xfer/engine/files_open.hpp"
#include "xfer/engine/record.hpp"
#include "xfer/peer_process.hpp"
#include "xfer/xfer_test_support.hpp"

namespace rdmakit::xfer::testing {
namespace {

using namespace std::chrono_literals;

// Not a multiple of 4096, longer than one message (kFileMessageBytes, 4 MiB) and than many chunks.
constexpr std::size_t kFileSize = (5 << 20) + 777;
// The owner's ring: 4 chunks of 64 KiB, handed out in 16 KiB units (16 slots): requests of a byte, of a
// unit and of several chunks share it at once, so reads land in the ring at every offset.
constexpr std::uint64_t kChunk = 64 << 10;
// The writable files: 16 chunks and a last block of 777 bytes (smaller than kFileSize: less to write back).
constexpr std::size_t kWriteFileSize = (1 << 20) + 777;
constexpr std::byte kUntouched{0xEE};
constexpr const char* kJob = "the job's secret, 16+ characters";
constexpr const char* kStranger = "a stranger's secret, 16+ chars";

std::chrono::milliseconds sanitizer_slack() {
  const char* env = std::getenv("RDMAKIT_TEST_FAULT_SLACK_MS");
  return std::chrono::milliseconds(env && *env ? std::strtol(env, nullptr, 10) : 0);
}

std::vector<std::byte> random_bytes(std::size_t size, std::uint32_t seed) {
  std::mt19937 random(seed);
  std::vector<std::byte> bytes(size);
  for (auto& b : bytes) b = static_cast<std::byte>(random());
  return bytes;
}

std::string text(const Error& error) { return error.describe(); }

class XferFile : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ::setenv("RDMAKIT_JOB_SECRET", kJob, 1);
    metadata_ = std::make_unique<FileMetadataStore>(dir_.path());
    owner_ = make_engine(*metadata_, options("owner"));
    client_ = make_engine(*metadata_, options("client"));
    ::unsetenv("RDMAKIT_JOB_SECRET");
    ASSERT_TRUE(owner_ && client_);
    path_ = dir_.path() / "shard-0.bin";
    contents_ = random_bytes(kFileSize, 7);
    write_file(path_, contents_);
    auto published = owner_->publish_file("shard-0", path_.string());
    ASSERT_TRUE(published.has_value()) << text(published.error());
    auto handle = client_->open_segment("shard-0");
    ASSERT_TRUE(handle.has_value()) << text(handle.error());
    segment_ = *handle;
  }
  EngineOptions options(const std::string& name) {
    // peer_timeout 10 s: the owner answers a WRITE once its bytes are in the file, and an O_DIRECT write of
    // a block the test just wrote through the page cache waits for its writeback, which took up to 7 s on a
    // disk shared with parallel builds (the requester would take the owner for dead after 2 s).
    return EngineOptions{.name = name + "-" + GetParam(),
                         .transports = {GetParam()},
                         // Over verbs (the Soft-RoCE VM): the owner's rails pair with the client's.
                         .verbs_devices = name == "client" ? verbs_devices() : owner_verbs_devices(),
                         .peer_timeout = 10000ms,
                         .connect_timeout = 500ms,
                         .file_chunk_bytes = kChunk,
                         .file_ring_chunks = 4,
                         // The owner's path: the client is on the owner's host and would read the file
                         // itself (XferFileLocal tests that path).
                         .file_local_reads = false};
  }
  // Local memory registered with the client, filled with kUntouched.
  Buffer local(std::size_t size) { return registered_filled(*client_, size, kUntouched); }

  TempDir dir_;
  std::unique_ptr<MetadataStore> metadata_;
  std::unique_ptr<Engine> owner_, client_;
  std::filesystem::path path_;
  std::vector<std::byte> contents_;
  SegmentHandle segment_;
};

// 300 READs in one batch, 64 bytes apart in local memory: aligned and unaligned, a byte to several chunks,
// the file's last bytes, the whole file (two messages). Every byte equals the file's, and the bytes between
// destinations are untouched. The same list prepared once and submitted again reads the same.
TEST_P(XferFile, RandomRangesReadEveryByteOfTheFile) {
  auto info = client_->segment_info(segment_);
  ASSERT_TRUE(info.has_value());
  EXPECT_TRUE(info->file);
  EXPECT_FALSE(info->writable);
  EXPECT_EQ(info->length, kFileSize);

  std::mt19937_64 random(11);
  struct Range {
    std::uint64_t offset, length;
  };
  std::vector<Range> ranges{{0, kFileSize}, {kFileSize - 1, 1}, {kFileSize - 5000, 5000},
                            {0, 4096},      {4095, 2},          {kChunk - 1, kChunk + 2}};
  while (ranges.size() < 300) {
    auto pick = random() % 8;
    std::uint64_t length = pick < 3   ? 4096 * (1 + random() % 4)        // aligned
                           : pick < 6 ? 1 + random() % 5000              // small, unaligned
                           : pick < 7 ? 1 + random() % (kChunk * 3)      // up to several chunks
                                      : kChunk * 4 + random() % kChunk;  // past the whole ring
    std::uint64_t offset = random() % (kFileSize - length + 1);
    if (pick < 3) offset = offset / 4096 * 4096;
    ranges.push_back({offset, length});
  }
  constexpr std::uint64_t kGap = 64;
  std::uint64_t total = kGap;
  for (const auto& r : ranges) total += r.length + kGap;
  auto memory = local(total);
  std::vector<Request> requests;
  std::vector<std::uint64_t> at;
  std::uint64_t next = kGap;
  for (const auto& r : ranges) {
    requests.push_back(Request{Op::Read, memory.get() + next, segment_, r.offset, r.length});
    at.push_back(next);
    next += r.length + kGap;
  }
  auto check = [&](Batch& batch, const char* round) {
    ASSERT_TRUE(batch.wait(60s).has_value()) << round;
    ASSERT_EQ(batch.failed(), 0u) << round << ": " << text(batch.status(0)->error());
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      ASSERT_TRUE(batch.status(i)->has_value()) << round << " request " << i;
      ASSERT_EQ(std::memcmp(memory.get() + at[i], contents_.data() + ranges[i].offset, ranges[i].length), 0)
          << round << ": request " << i << " [" << ranges[i].offset << ", +" << ranges[i].length
          << ") differs from the file";
      for (std::uint64_t g = 1; g <= kGap; ++g)
        ASSERT_EQ(memory.get()[at[i] - g], kUntouched)
            << round << ": a byte before request " << i << " was written";
    }
    ASSERT_EQ(memory.get()[total - 1], kUntouched);
  };
  auto batch = client_->submit(requests);
  ASSERT_TRUE(batch.has_value()) << text(batch.error());
  check(**batch, "submit");

  for (std::size_t i = 0; i < ranges.size(); ++i) std::memset(memory.get() + at[i], 0, ranges[i].length);
  auto prepared = client_->prepare(requests);
  ASSERT_TRUE(prepared.has_value()) << text(prepared.error());
  auto again = client_->submit(**prepared);
  ASSERT_TRUE(again.has_value()) << text(again.error());
  check(**again, "prepared");
}

// The whole file as it is now, read with plain pread (not through the engine).
std::vector<std::byte> pread_all(const std::filesystem::path& path) {
  std::vector<std::byte> bytes(std::filesystem::file_size(path));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  std::size_t done = 0;
  while (fd >= 0 && done < bytes.size()) {
    auto got = ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (got <= 0) break;
    done += static_cast<std::size_t>(got);
  }
  if (fd >= 0) ::close(fd);
  EXPECT_EQ(done, bytes.size()) << path;
  return bytes;
}

// Ranges beyond the published size are refused at submit (the whole batch, naming the request), and an
// empty file, a directory, a missing file, a writable segment and a name already taken are refused at
// publish_file.
TEST_P(XferFile, BadRangesAndBadFilesAreRefused) {
  auto memory = local(8192);
  for (auto [offset, length] :
       {std::pair<std::uint64_t, std::uint64_t>{kFileSize - 10, 11}, {kFileSize, 1}, {UINT64_MAX - 1, 4}}) {
    std::vector<Request> one{Request{Op::Read, memory.get(), segment_, offset, length}};
    auto refused = client_->submit(one);
    ASSERT_FALSE(refused.has_value()) << offset;
    EXPECT_EQ(refused.error().code(), Errc::InvalidArgument) << text(refused.error());
    EXPECT_NE(refused.error().message().find("outside segment 'shard-0'"), std::string::npos)
        << text(refused.error());
  }
  EXPECT_EQ(memory.get()[0], kUntouched);

  // try_submit: file requests take in-flight credits as work requests do, so a batch of more messages than
  // max_inflight_per_peer (128) is refused (submit() would wait), and a small one goes at once.
  std::vector<Request> many(200, Request{Op::Read, memory.get(), segment_, 0, 100});
  auto too_many = client_->try_submit(many);
  ASSERT_FALSE(too_many.has_value());
  EXPECT_EQ(too_many.error().code(), Errc::InvalidArgument) << text(too_many.error());
  many.resize(3);
  auto few = client_->try_submit(many);
  ASSERT_TRUE(few.has_value()) << text(few.error());
  ASSERT_TRUE((*few)->wait(20s).has_value());
  EXPECT_EQ((*few)->failed(), 0u);
  EXPECT_EQ(std::memcmp(memory.get(), contents_.data(), 100), 0);

  write_file(dir_.path() / "empty", {});
  std::filesystem::create_directory(dir_.path() / "dir");
  EXPECT_EQ(owner_->publish_file("e", (dir_.path() / "empty").string()).error().code(),
            Errc::InvalidArgument);
  EXPECT_EQ(owner_->publish_file("d", (dir_.path() / "dir").string()).error().code(), Errc::InvalidArgument);
  EXPECT_EQ(owner_->publish_file("m", (dir_.path() / "missing").string()).error().code(), Errc::SystemError);
  EXPECT_EQ(owner_->publish_file("w", path_.string(), {.sync_writes = true}).error().code(),
            Errc::InvalidArgument);
  if (::geteuid() != 0) {  // a writable segment opens the file read-write: a file we may only read is refused
    ::chmod(path_.c_str(), 0400);
    auto read_only_file = owner_->publish_file("w", path_.string(), {.writable = true});
    ASSERT_FALSE(read_only_file.has_value());
    EXPECT_EQ(read_only_file.error().code(), Errc::SystemError) << text(read_only_file.error());
  }
  EXPECT_EQ(owner_->publish_file("shard-0", path_.string()).error().code(), Errc::InvalidArgument);
  EXPECT_EQ(owner_->publish_file("", path_.string()).error().code(), Errc::InvalidArgument);
  EXPECT_EQ(client_->open_segment("d").error().code(), Errc::NotFound);
}

// A WRITE to the read-only segment fails on its own (the READs of the same batch succeed), refused by the
// owner: the client sends it, the owner answers "read-only", and the file is unchanged.
TEST_P(XferFile, WriteToAReadOnlySegmentFailsAtTheOwner) {
  auto memory = local(3 * 4096);
  std::memset(memory.get() + 4096, 0x55, 4096);
  std::vector<Request> requests{Request{Op::Read, memory.get(), segment_, 100, 4096},
                                Request{Op::Write, memory.get() + 4096, segment_, 0, 4096},
                                Request{Op::Read, memory.get() + 8192, segment_, 8192, 4096}};
  auto batch = client_->submit(requests);
  ASSERT_TRUE(batch.has_value()) << text(batch.error());
  ASSERT_TRUE((*batch)->wait(20s).has_value());
  EXPECT_EQ((*batch)->failed(), 1u);
  EXPECT_TRUE((*batch)->status(0)->has_value());
  EXPECT_TRUE((*batch)->status(2)->has_value());
  auto write = *(*batch)->status(1);
  ASSERT_FALSE(write.has_value());
  EXPECT_EQ(write.error().code(), Errc::InvalidArgument) << text(write.error());
  EXPECT_NE(write.error().message().find("the owner refused: WRITE refused"), std::string::npos)
      << text(write.error());
  EXPECT_NE(write.error().message().find("read-only"), std::string::npos) << text(write.error());
  EXPECT_EQ(std::memcmp(memory.get(), contents_.data() + 100, 4096), 0);
  EXPECT_EQ(std::memcmp(memory.get() + 8192, contents_.data() + 8192, 4096), 0);
  std::ifstream in(path_, std::ios::binary);
  std::vector<char> head(4096);
  in.read(head.data(), 4096);
  EXPECT_EQ(std::memcmp(head.data(), contents_.data(), 4096), 0) << "the read-only file was written";
}

struct Range {
  std::uint64_t offset, length;
};

// WRITE ranges that share no byte (the order of one batch's requests is not defined), at random: aligned,
// small unaligned, across chunks and past the whole ring, the file's last (partial) block, and runs of
// requests that split 4 KiB blocks between them, so each one's read-modify-write must keep its neighbours'
// bytes.
std::vector<Range> disjoint_write_ranges(std::mt19937_64& random, std::size_t count) {
  constexpr std::uint64_t kSize = kWriteFileSize;
  std::vector<Range> ranges;
  auto add = [&](Range r) {
    bool free = std::ranges::none_of(ranges, [&](const Range& o) {
      return o.offset < r.offset + r.length && r.offset < o.offset + o.length;
    });
    if (free) ranges.push_back(r);
  };
  for (int k = 0; k < 6; ++k) {
    const std::uint64_t b = (random() % (kSize / 4096 - 2)) * 4096;
    for (Range r : {Range{b + 10, 100}, Range{b + 110, 1000}, Range{b + 4000, 200}, Range{b + 4200, 50}})
      add(r);
  }
  const std::uint64_t tail = kSize / 4096 * 4096;  // the last block holds 777 bytes
  for (Range r : {Range{kSize - 300, 300}, Range{tail - 5, 5}, Range{tail + 100, 100}}) add(r);
  add({random() % (kSize - 5 * kChunk), kChunk * 4 + 1234});
  for (int tries = 0; ranges.size() < count && tries < 100000; ++tries) {
    auto pick = random() % 8;
    std::uint64_t length = pick < 3   ? 4096 * (1 + random() % 4)  // aligned
                           : pick < 6 ? 1 + random() % 5000        // small, unaligned
                                      : 1 + random() % (kChunk * 2);
    std::uint64_t offset = random() % (kSize - length + 1);
    if (pick < 3) offset = offset / 4096 * 4096;
    add({offset, length});
  }
  return ranges;
}

// A writable segment, in a file on the test's file system (O_DIRECT where it takes it) and on tmpfs (the
// page cache): two batches of 50 random WRITEs (above), then every byte of the file equals the model, read
// with plain pread and through the engine, and the file kept its size (a WRITE of its last block never grows
// it).
TEST_P(XferFile, RandomWritesLandAndKeepEveryOtherByte) {
  std::vector<std::filesystem::path> dirs{dir_.path()};
  char shm[] = "/dev/shm/rdmakit-xfer-write-XXXXXX";
  if (std::filesystem::is_directory("/dev/shm") && ::mkdtemp(shm) != nullptr) dirs.emplace_back(shm);
  std::mt19937_64 random(GetParam() == "tcp" ? 31 : 32);
  // Registered once (memory freed while registered could come back at the same address): the ranges of one
  // batch share no byte of the file, so their sources fit in its size.
  auto source = local(kWriteFileSize), back = local(kWriteFileSize);
  for (std::size_t d = 0; d < dirs.size(); ++d) {
    SCOPED_TRACE(dirs[d].string());
    const auto path = dirs[d] / "rw.bin";
    auto model = random_bytes(kWriteFileSize, 21 + static_cast<std::uint32_t>(d));
    write_file(path, model);
    const std::string name = "rw-" + std::to_string(d);
    auto published = owner_->publish_file(name, path.string(), {.writable = true});
    ASSERT_TRUE(published.has_value()) << text(published.error());
    auto segment = client_->open_segment(name);
    ASSERT_TRUE(segment.has_value()) << text(segment.error());
    auto info = client_->segment_info(*segment);
    ASSERT_TRUE(info.has_value());
    EXPECT_TRUE(info->file && info->writable);

    for (int round = 0; round < 2; ++round) {
      auto ranges = disjoint_write_ranges(random, 50);
      std::uint64_t total = 0;
      for (const auto& r : ranges) total += r.length;
      ASSERT_LE(total, kWriteFileSize);
      auto bytes = random_bytes(total, static_cast<std::uint32_t>(100 + round + 10 * d));
      std::memcpy(source.get(), bytes.data(), total);
      std::vector<Request> requests;
      std::uint64_t at = 0;
      for (const auto& r : ranges) {
        requests.push_back(Request{Op::Write, source.get() + at, *segment, r.offset, r.length});
        std::memcpy(model.data() + r.offset, bytes.data() + at, r.length);
        at += r.length;
      }
      auto batch = client_->submit(requests);
      ASSERT_TRUE(batch.has_value()) << text(batch.error());
      ASSERT_TRUE((*batch)->wait(60s).has_value());
      for (std::size_t i = 0; i < requests.size(); ++i)
        ASSERT_TRUE((*batch)->status(i)->has_value())
            << "request " << i << ": " << text((*batch)->status(i)->error());

      auto on_disk = pread_all(path);
      ASSERT_EQ(on_disk.size(), kWriteFileSize) << "the file's size changed";
      for (std::size_t k = 0; k < kWriteFileSize; ++k)
        ASSERT_EQ(on_disk[k], model[k]) << "round " << round << ": byte " << k << " of the file (pread)";
      std::vector<Request> read{Request{Op::Read, back.get(), *segment, 0, kWriteFileSize}};
      auto readback = client_->submit(read);
      ASSERT_TRUE(readback.has_value() && (*readback)->wait(60s).has_value());
      ASSERT_EQ((*readback)->failed(), 0u) << text((*readback)->status(0)->error());
      for (std::size_t k = 0; k < kWriteFileSize; ++k)
        ASSERT_EQ(back.get()[k], model[k])
            << "round " << round << ": byte " << k << " read through the engine";
    }
    ASSERT_TRUE(owner_->unpublish(name).has_value());
  }
  if (dirs.size() > 1) std::filesystem::remove_all(dirs[1]);
}

// A WRITE beyond the published size is refused at submit (the whole batch, naming the request), and the
// file is unchanged and keeps its size; a WRITE of local memory the engine does not know is refused too.
TEST_P(XferFile, WriteBeyondThePublishedSizeIsRefused) {
  const auto path = dir_.path() / "rw.bin";
  auto model = random_bytes(kFileSize, 41);
  write_file(path, model);
  ASSERT_TRUE(owner_->publish_file("rw", path.string(), {.writable = true}).has_value());
  auto segment = client_->open_segment("rw");
  ASSERT_TRUE(segment.has_value());
  auto memory = local(8192);
  for (auto [offset, length] :
       {std::pair<std::uint64_t, std::uint64_t>{kFileSize - 10, 11}, {kFileSize, 1}, {UINT64_MAX - 1, 4}}) {
    std::vector<Request> one{Request{Op::Write, memory.get(), *segment, offset, length}};
    auto refused = client_->submit(one);
    ASSERT_FALSE(refused.has_value()) << offset;
    EXPECT_EQ(refused.error().code(), Errc::InvalidArgument) << text(refused.error());
    EXPECT_NE(refused.error().message().find("outside segment 'rw'"), std::string::npos)
        << text(refused.error());
  }
  std::vector<std::byte> stray(100);
  std::vector<Request> unknown{Request{Op::Write, stray.data(), *segment, 0, 100}};
  EXPECT_EQ(client_->submit(unknown).error().code(), Errc::InvalidArgument);
  EXPECT_TRUE(pread_all(path) == model) << "the file changed";
}

// The flags of every descriptor this process holds on `path` (from /proc/self/fdinfo).
std::vector<long> open_flags(const std::filesystem::path& path) {
  std::vector<long> flags;
  const auto target = std::filesystem::canonical(path);
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    if (std::filesystem::read_symlink(entry.path(), error) != target || error) continue;
    std::ifstream info("/proc/self/fdinfo/" + entry.path().filename().string());
    std::string key, value;
    while (info >> key >> value) {
      if (key == "flags:") flags.push_back(std::stol(value, nullptr, 8));
    }
  }
  return flags;
}

// sync_writes: the owner holds the file O_DSYNC only (every descriptor it has on it, where a plain writable
// segment's have no O_DSYNC), so each WRITE is on stable storage before it completes; its WRITEs land as any.
TEST_P(XferFile, SyncWritesOpenTheFileDsyncAndLand) {
  const auto sync_path = dir_.path() / "sync.bin", plain_path = dir_.path() / "plain.bin";
  auto model = random_bytes(kWriteFileSize, 51);
  write_file(sync_path, model);
  write_file(plain_path, model);
  ASSERT_TRUE(owner_->publish_file("sync", sync_path.string(), {.writable = true, .sync_writes = true}));
  ASSERT_TRUE(owner_->publish_file("plain", plain_path.string(), {.writable = true}));
  auto sync_flags = open_flags(sync_path), plain_flags = open_flags(plain_path);
  ASSERT_FALSE(sync_flags.empty());
  ASSERT_FALSE(plain_flags.empty());
  for (long f : sync_flags) EXPECT_EQ(f & O_DSYNC, O_DSYNC) << std::oct << f;
  for (long f : plain_flags) EXPECT_EQ(f & O_DSYNC, 0) << std::oct << f;

  auto segment = client_->open_segment("sync");
  ASSERT_TRUE(segment.has_value());
  auto memory = local(3 * 8192);
  auto bytes = random_bytes(3 * 8192, 52);
  std::memcpy(memory.get(), bytes.data(), bytes.size());
  std::vector<Request> requests{
      Request{Op::Write, memory.get(), *segment, 0, 8192},
      Request{Op::Write, memory.get() + 8192, *segment, 12345, 8000},
      Request{Op::Write, memory.get() + 16384, *segment, kWriteFileSize - 4000, 4000}};
  auto batch = client_->submit(requests);
  ASSERT_TRUE(batch.has_value() && (*batch)->wait(30s).has_value());
  ASSERT_EQ((*batch)->failed(), 0u) << text((*batch)->status(0)->error());
  std::memcpy(model.data(), bytes.data(), 8192);
  std::memcpy(model.data() + 12345, bytes.data() + 8192, 8000);
  std::memcpy(model.data() + kWriteFileSize - 4000, bytes.data() + 16384, 4000);
  EXPECT_TRUE(pread_all(sync_path) == model) << "the file differs from the model";
}

// The file shrank after it was published: a READ of bytes no longer there fails naming the file and the
// range; one of bytes still there succeeds. After unpublish the owner serves the name no more.
TEST_P(XferFile, ShrunkFileAndUnpublishedNameFailPerRequest) {
  ASSERT_EQ(::truncate(path_.c_str(), 1 << 20), 0);
  auto memory = local(2 * 8192);
  std::vector<Request> requests{Request{Op::Read, memory.get(), segment_, 3 << 20, 5000},
                                Request{Op::Read, memory.get() + 8192, segment_, (1 << 20) - 4000, 4000}};
  auto batch = client_->submit(requests);
  ASSERT_TRUE(batch.has_value()) << text(batch.error());
  ASSERT_TRUE((*batch)->wait(20s).has_value());
  auto shrunk = *(*batch)->status(0);
  ASSERT_FALSE(shrunk.has_value());
  EXPECT_NE(shrunk.error().message().find(path_.string()), std::string::npos) << text(shrunk.error());
  EXPECT_NE(shrunk.error().message().find("[3145728, 3150728)"), std::string::npos) << text(shrunk.error());
  EXPECT_NE(shrunk.error().message().find("shrank"), std::string::npos) << text(shrunk.error());
  ASSERT_TRUE((*batch)->status(1)->has_value()) << text((*batch)->status(1)->error());
  EXPECT_EQ(std::memcmp(memory.get() + 8192, contents_.data() + (1 << 20) - 4000, 4000), 0);

  ASSERT_TRUE(owner_->unpublish("shard-0").has_value());
  std::vector<Request> one{Request{Op::Read, memory.get(), segment_, 0, 100}};
  auto late = client_->submit(one);  // the handle is still cached: the owner answers
  ASSERT_TRUE(late.has_value()) << text(late.error());
  ASSERT_TRUE((*late)->wait(20s).has_value());
  auto gone = *(*late)->status(0);
  ASSERT_FALSE(gone.has_value());
  EXPECT_EQ(gone.error().code(), Errc::NotFound) << text(gone.error());
}

// The owner restarts (a new engine publishes the same file under the same name): the client's cached
// resolution names the dead life, so its READs' connection fails; each is retried after a re-resolve and
// reads every byte from the new life. A client whose owner stays dead fails within its retries, the error
// naming the first failure.
TEST_P(XferFile, RestartedOwnerIsReResolvedAndFileRequestsAreRetried) {
  auto memory = local(2 << 20);
  std::vector<Request> reads{Request{Op::Read, memory.get(), segment_, 4096, 1 << 20},
                             Request{Op::Read, memory.get() + (1 << 20) + 64, segment_, 77, 100000}};
  auto first = client_->submit(reads);
  ASSERT_TRUE(first.has_value() && (*first)->wait(20s).has_value());
  ASSERT_EQ((*first)->failed(), 0u);
  owner_.reset();
  ::setenv("RDMAKIT_JOB_SECRET", kJob, 1);
  owner_ = make_engine(*metadata_, options("owner"));
  ::unsetenv("RDMAKIT_JOB_SECRET");
  ASSERT_TRUE(owner_);
  ASSERT_TRUE(owner_->publish_file("shard-0", path_.string()).has_value());
  std::memset(memory.get(), 0, 2 << 20);
  const auto retries = client_->stats().retries;
  auto again = client_->submit(reads);
  ASSERT_TRUE(again.has_value()) << text(again.error());
  ASSERT_TRUE((*again)->wait(20s).has_value());
  for (std::size_t i = 0; i < reads.size(); ++i)
    ASSERT_TRUE((*again)->status(i)->has_value()) << text((*again)->status(i)->error());
  EXPECT_GT(client_->stats().retries, retries) << "the READs were not retried (the first attempt succeeded?)";
  EXPECT_EQ(std::memcmp(memory.get(), contents_.data() + 4096, 1 << 20), 0);
  EXPECT_EQ(std::memcmp(memory.get() + (1 << 20) + 64, contents_.data() + 77, 100000), 0);

  owner_.reset();  // for good: its record goes with it, and the retries find the name gone
  auto lost = client_->submit(std::span(reads).first(1));
  ASSERT_TRUE(lost.has_value()) << text(lost.error());
  ASSERT_TRUE((*lost)->wait(20s).has_value());
  auto status = *(*lost)->status(0);
  ASSERT_FALSE(status.has_value());
  std::printf("the lost owner's READ: %s\n", text(status.error()).c_str());
  EXPECT_NE(status.error().message().find("first failure"), std::string::npos) << text(status.error());
  EXPECT_NE(status.error().message().find("of file segment 'shard-0'"), std::string::npos)
      << text(status.error());
}

// Four threads submit batches to the same file at once: the owner's one serving thread and the bounded ring
// serve them all, every byte right.
TEST_P(XferFile, OwnerThreadKeepsServingManyBatchesAtOnce) {
  auto memory = local(16 * 65536);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 4; ++round) {
        std::vector<Request> requests;
        for (int k = 0; k < 4; ++k) {
          auto slot = static_cast<std::uint64_t>(t * 4 + k);
          requests.push_back(
              Request{Op::Read, memory.get() + slot * 65536, segment_, slot * 300001 + round, 65536});
        }
        auto batch = client_->submit(requests);
        if (!batch || !(*batch)->wait(30s) || (*batch)->failed() != 0) ++failures;
        for (int k = 0; k < 4; ++k) {
          auto slot = static_cast<std::uint64_t>(t * 4 + k);
          if (std::memcmp(memory.get() + slot * 65536, contents_.data() + slot * 300001 + round, 65536) != 0)
            ++failures;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

// publish_directory: every regular, non-empty file directly in the directory becomes `prefix/<name>`, read
// back byte for byte; a subdirectory (and the file in it), a symbolic link to a file outside, a FIFO, an
// empty file and a dot file are not published. publish_file of a FIFO is refused at once (it used to wait
// in open() for a writer: a hang).
TEST_P(XferFile, PublishDirectoryPublishesEachShardAndSkipsTheRest) {
  auto shards = dir_.path() / "shards";
  std::filesystem::create_directories(shards / "sub");
  std::vector<std::vector<std::byte>> contents{random_bytes(10000, 1), random_bytes(4096, 2),
                                               random_bytes(77, 3)};
  const std::vector<std::string> files{"a.bin", "b.bin", "c d.bin"};
  for (std::size_t i = 0; i < files.size(); ++i) write_file(shards / files[i], contents[i]);
  write_file(shards / "sub" / "inner.bin", contents[0]);
  write_file(shards / ".partial", contents[0]);
  write_file(shards / "empty", {});
  std::filesystem::create_symlink(path_, shards / "link");  // to shard-0.bin, outside the directory
  ASSERT_EQ(::mkfifo((shards / "pipe").c_str(), 0600), 0);
  auto fifo = owner_->publish_file("fifo", (shards / "pipe").string());
  ASSERT_FALSE(fifo.has_value());
  EXPECT_EQ(fifo.error().code(), Errc::InvalidArgument) << text(fifo.error());

  auto published = owner_->publish_directory("ds", shards.string());
  ASSERT_TRUE(published.has_value()) << text(published.error());
  EXPECT_EQ(*published, (std::vector<std::string>{"ds/a.bin", "ds/b.bin", "ds/c d.bin"}));
  auto memory = local(3 * 16384);
  std::vector<Request> requests;
  for (std::size_t i = 0; i < files.size(); ++i) {
    auto handle = client_->open_segment("ds/" + files[i]);
    ASSERT_TRUE(handle.has_value()) << files[i] << ": " << text(handle.error());
    EXPECT_EQ(client_->segment_info(*handle)->length, contents[i].size());
    requests.push_back(Request{Op::Read, memory.get() + i * 16384, *handle, 0, contents[i].size()});
  }
  auto batch = client_->submit(requests);
  ASSERT_TRUE(batch.has_value()) << text(batch.error());
  ASSERT_TRUE((*batch)->wait(20s).has_value());
  ASSERT_EQ((*batch)->failed(), 0u);
  for (std::size_t i = 0; i < files.size(); ++i)
    EXPECT_EQ(std::memcmp(memory.get() + i * 16384, contents[i].data(), contents[i].size()), 0) << files[i];
  for (const char* skipped : {"ds/sub", "ds/sub/inner.bin", "ds/link", "ds/pipe", "ds/empty", "ds/.partial"})
    EXPECT_EQ(client_->open_segment(skipped).error().code(), Errc::NotFound) << skipped;
}

// All or nothing: a shard that fails to publish (its name taken already) unpublishes the ones this call
// published before it; a file name with a control character, a segment name over the bound, an empty or
// bad prefix, a directory with nothing to publish and a path that is not a directory are refused, and
// nothing of the directory is published.
TEST_P(XferFile, PublishDirectoryIsAllOrNothing) {
  auto shards = dir_.path() / "shards";
  std::filesystem::create_directories(shards);
  write_file(shards / "a.bin", contents_);
  write_file(shards / "b.bin", contents_);
  ASSERT_TRUE(owner_->publish_file("ds/b.bin", path_.string()).has_value());
  auto taken = owner_->publish_directory("ds", shards.string());
  ASSERT_FALSE(taken.has_value());
  EXPECT_EQ(taken.error().code(), Errc::InvalidArgument) << text(taken.error());
  EXPECT_NE(taken.error().message().find("ds/b.bin"), std::string::npos) << text(taken.error());
  EXPECT_EQ(client_->open_segment("ds/a.bin").error().code(), Errc::NotFound) << "a.bin stayed published";
  EXPECT_TRUE(client_->open_segment("ds/b.bin").has_value()) << "the earlier publish_file was undone";

  write_file(shards / "bad\x1b[2Jname", contents_);
  auto control = owner_->publish_directory("ctl", shards.string());
  ASSERT_FALSE(control.has_value());
  EXPECT_EQ(control.error().code(), Errc::InvalidArgument) << text(control.error());
  EXPECT_NE(control.error().message().find("\\x1b"), std::string::npos) << text(control.error());
  EXPECT_EQ(client_->open_segment("ctl/a.bin").error().code(), Errc::NotFound);
  std::filesystem::remove(shards / "bad\x1b[2Jname");

  auto too_long =
      owner_->publish_directory(std::string(detail::kMaxFileSegmentName - 5, 'p'), shards.string());
  ASSERT_FALSE(too_long.has_value());
  EXPECT_EQ(too_long.error().code(), Errc::InvalidArgument) << text(too_long.error());
  // At the bound exactly: in the builtin store (the test double's file names cannot hold such a key).
  auto server = serve_builtin_metadata("127.0.0.1:0");
  ASSERT_TRUE(server.has_value()) << text(server.error());
  auto store = open_metadata((*server)->url());
  ASSERT_TRUE(store.has_value()) << text(store.error());
  auto long_owner = make_engine(**store, options("long"));
  ASSERT_TRUE(long_owner);
  auto fits =
      long_owner->publish_directory(std::string(detail::kMaxFileSegmentName - 6, 'p'), shards.string());
  ASSERT_TRUE(fits.has_value()) << text(fits.error());  // "p...p/a.bin" and "/b.bin": exactly the bound
  EXPECT_EQ(fits->front().size(), detail::kMaxFileSegmentName);

  std::filesystem::create_directories(dir_.path() / "none");
  write_file(dir_.path() / "none" / "empty", {});
  struct Bad {
    std::string prefix;
    std::filesystem::path dir;
    Errc code;
  };
  for (const auto& bad : std::vector<Bad>{{"", shards, Errc::InvalidArgument},
                                          {"x\ny", shards, Errc::InvalidArgument},
                                          {"n", dir_.path() / "none", Errc::InvalidArgument},
                                          {"f", path_, Errc::SystemError}}) {
    auto refused = owner_->publish_directory(bad.prefix, bad.dir.string());
    ASSERT_FALSE(refused.has_value()) << bad.prefix;
    EXPECT_EQ(refused.error().code(), bad.code) << text(refused.error());
  }
  EXPECT_EQ(client_->open_segment("n/empty").error().code(), Errc::NotFound);
  EXPECT_EQ(owner_->publish_directory("m", (dir_.path() / "missing").string()).error().code(),
            Errc::SystemError);
}

// The uid rule (files_open.hpp, SECURITY.md): a file another uid may write is not published, since every
// reader would get that uid's bytes as ours; allow_other_writers publishes it anyway. A file of another
// owner needs root to make (chown): CI runs as root, elsewhere that case is left out and says so.
TEST_P(XferFile, AFileAnotherUidMayWriteIsNotPublished) {
  auto shards = dir_.path() / "foreign";
  std::filesystem::create_directories(shards);
  const auto open = shards / "everyone-writes.bin";
  write_file(shards / "a.bin", contents_);
  write_file(open, contents_);
  ASSERT_EQ(::chmod(open.c_str(), 0646), 0);
  auto refused = owner_->publish_file("open", open.string());
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code(), Errc::InvalidArgument) << text(refused.error());
  EXPECT_NE(refused.error().message().find("written by everyone"), std::string::npos)
      << text(refused.error());
  EXPECT_NE(refused.error().message().find("mode 0646"), std::string::npos) << text(refused.error());
  EXPECT_EQ(client_->open_segment("open").error().code(), Errc::NotFound);
  // All or nothing: a.bin, published before it in name order, is unpublished again.
  auto directory = owner_->publish_directory("foreign", shards.string());
  ASSERT_FALSE(directory.has_value());
  EXPECT_NE(directory.error().message().find("everyone-writes.bin"), std::string::npos)
      << text(directory.error());
  EXPECT_EQ(client_->open_segment("foreign/a.bin").error().code(), Errc::NotFound);

  ASSERT_TRUE(owner_->publish_file("open", open.string(), {.allow_other_writers = true}).has_value());
  auto handle = client_->open_segment("open");
  ASSERT_TRUE(handle.has_value()) << text(handle.error());
  auto memory = local(4096);
  std::vector<Request> one{Request{Op::Read, memory.get(), *handle, 100, 4096}};
  auto batch = client_->submit(one);
  ASSERT_TRUE(batch.has_value()) << text(batch.error());
  ASSERT_TRUE((*batch)->wait(20s).has_value());
  ASSERT_EQ((*batch)->failed(), 0u);
  EXPECT_EQ(std::memcmp(memory.get(), contents_.data() + 100, 4096), 0);

  if (::geteuid() != 0) {
    const char* ci = std::getenv("CI");
    ASSERT_FALSE(ci != nullptr && *ci != '\0') << "CI runs this test as root (chown to another uid)";
    std::cout << "[   NOTE   ] not root: the case of a file owned by another uid is left out\n";
    return;
  }
  const auto theirs = shards / "theirs.bin";
  write_file(theirs, contents_);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chmod(theirs.c_str(), 0444), 0);  // read-only for everyone: its owner can still chmod it back
  auto foreign = owner_->publish_file("theirs", theirs.string());
  ASSERT_FALSE(foreign.has_value());
  EXPECT_EQ(foreign.error().code(), Errc::InvalidArgument) << text(foreign.error());
  EXPECT_NE(foreign.error().message().find("belongs to another uid"), std::string::npos)
      << text(foreign.error());
  EXPECT_NE(foreign.error().message().find("owner uid 65534"), std::string::npos) << text(foreign.error());
  ASSERT_TRUE(owner_->publish_file("theirs", theirs.string(), {.allow_other_writers = true}).has_value());
}

// Over verbs too where RDMAKIT_TEST_XFER_VERBS_DEVICES names devices (the Soft-RoCE VM, xfer-guest.sh).
std::vector<std::string> transports() {
  std::vector<std::string> all{"tcp", "shm"};
  if (!verbs_devices().empty()) all.push_back("verbs");
  return all;
}
INSTANTIATE_TEST_SUITE_P(Transports, XferFile, ::testing::ValuesIn(transports()),
                         [](const auto& info) { return info.param; });

// The rule itself, on made-up file states (no root needed): our uid or root, no write for everyone, group
// write only in our own user private group.
TEST(XferFileWriters, OnlyOurUidOrRootMayWriteAPublishedFile) {
  const uid_t me = 4242;
  auto state = [](uid_t uid, gid_t gid, mode_t mode) {
    struct stat st {};
    st.st_uid = uid;
    st.st_gid = gid;
    st.st_mode = S_IFREG | mode;
    return st;
  };
  EXPECT_TRUE(detail::check_writers(state(me, 1, 0644), me, "f").has_value());
  EXPECT_TRUE(detail::check_writers(state(0, 0, 0444), me, "f").has_value());
  EXPECT_TRUE(detail::check_writers(state(me, 1, 0600), me, "f").has_value());
  auto other = detail::check_writers(state(me + 1, 1, 0444), me, "f");
  ASSERT_FALSE(other.has_value());
  EXPECT_EQ(other.error().code(), Errc::InvalidArgument);
  EXPECT_NE(other.error().message().find("owner uid 4243"), std::string::npos) << text(other.error());
  EXPECT_FALSE(detail::check_writers(state(me, 1, 0602), me, "f").has_value());
  EXPECT_FALSE(detail::check_writers(state(0, 0, 0666), me, "f").has_value());
  // Group write: refused for a group that is not ours; ours counts only when it lists no other member.
  const gid_t not_ours = ::getegid() + 1;
  auto shared = detail::check_writers(state(me, not_ours, 0664), me, "f");
  ASSERT_FALSE(shared.has_value());
  EXPECT_NE(shared.error().message().find("written by group " + std::to_string(not_ours)), std::string::npos)
      << text(shared.error());
  struct group* ours = ::getgrgid(::getegid());
  bool private_group = ours != nullptr && (ours->gr_mem == nullptr || ours->gr_mem[0] == nullptr);
  EXPECT_EQ(detail::check_writers(state(me, ::getegid(), 0664), me, "f").has_value(), private_group);
}

// A file segment's record round-trips (file, read-only, its size), refuses every truncation and unknown
// flags, and is not mistaken for a memory record.
TEST(XferFileRecord, FileRecordRoundTripsAndRefusesEveryCut) {
  detail::SegmentRecord record{"owner", "host", kFileSize, {}, true, false};
  RemoteRegion region{};
  region.owner_epoch = 9;
  record.rails.push_back({"tcp", "127.0.0.1:1", region});
  auto bytes = detail::encode(record);
  auto decoded = detail::decode(bytes);
  ASSERT_TRUE(decoded.has_value()) << text(decoded.error());
  EXPECT_EQ(*decoded, record);
  EXPECT_TRUE(decoded->file);
  EXPECT_FALSE(decoded->writable);
  for (std::size_t cut = 0; cut < bytes.size(); ++cut)
    ASSERT_FALSE(detail::decode(std::span(bytes).first(cut)).has_value()) << "cut at " << cut;
  auto flags = bytes;
  flags.back() = std::byte{0x80};  // the flags word's high byte: an unknown flag
  EXPECT_FALSE(detail::decode(flags).has_value());
  // With the file's place for requesters on its host: the path and inode round-trip, every cut is refused,
  // and a path that is not absolute is refused.
  auto local = record;
  local.path = "/var/tmp/shard-0.bin";
  local.device = 0x803;
  local.inode = 123456789;
  auto local_bytes = detail::encode(local);
  auto local_decoded = detail::decode(local_bytes);
  ASSERT_TRUE(local_decoded.has_value()) << text(local_decoded.error());
  EXPECT_EQ(*local_decoded, local);
  for (std::size_t cut = 0; cut < local_bytes.size(); ++cut)
    ASSERT_FALSE(detail::decode(std::span(local_bytes).first(cut)).has_value()) << "cut at " << cut;
  local.path = "relative/shard.bin";
  EXPECT_FALSE(detail::decode(detail::encode(local)).has_value());
  record.file = false;  // the same rails as a memory record: its descriptor is shorter than the segment
  EXPECT_FALSE(detail::decode(detail::encode(record)).has_value());
}

// The file channel's messages come from peers: a header cut short, an empty or oversized name, an answer
// with a code that is no Errc, the wrong type: all refused; random payloads never decode past their bounds.
TEST(XferFileRecord, FileMessagesFromPeersAreCheckedBeforeUse) {
  using rdmakit::detail::Frame;
  detail::FileRequestMessage request{.id = 7, .offset = 1, .length = 2, .name = "shard"};
  auto payload = detail::encode_request(request);
  ASSERT_TRUE(payload.has_value());
  auto decoded = detail::decode_request(Frame{detail::kFileRead, *payload});
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->name, "shard");
  EXPECT_EQ(decoded->length, 2u);
  for (std::size_t cut = 0; cut <= 44; ++cut)  // the fixed fields, and no name at all
    EXPECT_FALSE(
        detail::decode_request(Frame{detail::kFileRead, std::span(*payload).first(cut)}).has_value());
  EXPECT_FALSE(detail::decode_request(Frame{detail::kFileDone, *payload}).has_value());
  EXPECT_FALSE(
      detail::encode_request({.name = std::string(detail::kMaxFileSegmentName + 1, 'n')}).has_value());
  auto reply = detail::encode_reply({.id = 7, .code = 0, .message = {}});
  ASSERT_TRUE(reply.has_value());
  (*reply)[8] = std::byte{200};  // no Errc
  EXPECT_FALSE(detail::decode_reply(Frame{detail::kFileDone, *reply}).has_value());
  EXPECT_FALSE(detail::decode_reply(Frame{detail::kFileRead, *reply}).has_value());
  std::mt19937 random(5);
  for (int i = 0; i < 5000; ++i) {
    auto bytes = random_bytes(random() % 1200, static_cast<std::uint32_t>(i));
    auto type = static_cast<std::uint8_t>(1 + random() % 3);
    if (auto r = detail::decode_request(Frame{type, bytes}); r) {
      ASSERT_TRUE(!r->name.empty() && r->name.size() <= detail::kMaxFileSegmentName);
    }
    if (auto a = detail::decode_reply(Frame{type, bytes}); a) {
      ASSERT_TRUE(a->code <= static_cast<std::uint8_t>(Errc::TransportFailure) &&
                  a->message.size() <= detail::kMaxFileReplyText);
    }
  }
}

// A stranger (another secret) cannot open the sealed record; and one that connects to the owner's listener
// and sends well-formed file requests naming a registered buffer of its own (at once, inside the proof
// window, or after a proof that failed) gets no byte: the owner opens its file channel only once the peer
// proved the secret. A job member asking the wire directly is held to the published range, to reads, and
// to published names (a path is no name).
TEST(XferFileTrust, OnlyPeersThatProvedTheSecretAreServedAndOnlyWhatWasPublished) {
  TempDir dir;
  FileMetadataStore owner_store(dir.path()), stranger_store(dir.path());
  ::setenv("RDMAKIT_JOB_SECRET", kJob, 1);
  auto owner = make_engine(owner_store,
                           EngineOptions{.name = "owner", .transports = {"tcp"}, .connect_timeout = 300ms});
  ::setenv("RDMAKIT_JOB_SECRET", kStranger, 1);
  auto stranger = make_engine(stranger_store, EngineOptions{.name = "stranger", .transports = {"tcp"}});
  ::unsetenv("RDMAKIT_JOB_SECRET");
  ASSERT_TRUE(owner && stranger);
  auto path = dir.path() / "secret.bin";
  auto contents = random_bytes(1 << 20, 3);
  write_file(path, contents);
  ASSERT_TRUE(owner->publish_file("secret", path.string()).has_value());
  auto opened = stranger->open_segment("secret");
  ASSERT_FALSE(opened.has_value());
  EXPECT_EQ(opened.error().code(), Errc::ConnectionRefused) << text(opened.error());

  auto record = detail::open_sealed(**owner_store.lookup(detail::segment_key("secret")), "secret", kJob);
  ASSERT_TRUE(record.has_value());
  EXPECT_TRUE(record->file);
  EXPECT_EQ(record->rails.front().region.rkey, 0u) << "a file segment's record names no memory";
  const auto& address = record->rails.front().address;

  auto context = Context::open(Options{.transport = "tcp"});
  ASSERT_TRUE(context.has_value()) << text(context.error());
  auto buffer = (*context)->allocate(1 << 20, Access::LocalWrite | Access::RemoteWrite);
  ASSERT_TRUE(buffer.has_value());
  std::memset((*buffer)->data(), 0, 1 << 20);
  auto request = [&](std::uint8_t type, std::uint64_t offset, std::uint64_t length, std::string name) {
    auto payload = detail::encode_request({.type = type,
                                           .id = 1,
                                           .offset = offset,
                                           .length = length,
                                           .dest_addr = reinterpret_cast<std::uint64_t>((*buffer)->data()),
                                           .dest_rkey = (*buffer)->descriptor().rkey,
                                           .dest_epoch = (*buffer)->descriptor().owner_epoch,
                                           .name = std::move(name)});
    EXPECT_TRUE(payload.has_value());
    return *payload;
  };
  auto read_all = request(detail::kFileRead, 0, 1 << 20, "secret");
  auto send_raw = [&](Connection& connection) {
    auto out = (*context)->allocate(4096, Access::LocalWrite);
    ASSERT_TRUE(out.has_value());
    auto size = rdmakit::detail::encode_frame(detail::kFileSpec, detail::kFileRead, read_all,
                                              std::span(static_cast<std::byte*>((*out)->data()), 4096));
    ASSERT_TRUE(size.has_value());
    for (int i = 0; i < 4; ++i) (void)connection.send((*out)->slice(0, static_cast<std::uint32_t>(*size)));
    std::this_thread::sleep_for(50ms);
  };
  auto eager = (*context)->connect(address);
  ASSERT_TRUE(eager.has_value());
  send_raw(**eager);
  auto refused = (*context)->connect(address);
  ASSERT_TRUE(refused.has_value());
  bootstrap::PeerProofConfig wrong{kStranger, std::string(detail::kPeerProofLabel), 5000ms};
  ASSERT_FALSE(bootstrap::prove_initiate(**context, **refused, wrong,
                                         std::string("stranger") + std::string(detail::kFileIdentitySuffix))
                   .has_value());
  send_raw(**refused);
  std::this_thread::sleep_for(500ms);  // past the owner's connect_timeout: both connections are dropped
  auto* got = static_cast<const std::byte*>((*buffer)->data());
  EXPECT_EQ(std::count(got, got + (1 << 20), std::byte{0}), 1 << 20) << "a stranger got bytes of the file";

  // A job member on the wire: only reads, of the published range, of published names.
  auto member = (*context)->connect(address);
  ASSERT_TRUE(member.has_value());
  bootstrap::PeerProofConfig right{kJob, std::string(detail::kPeerProofLabel), 5000ms};
  auto proven = bootstrap::prove_initiate(**context, **member, right,
                                          std::string("member") + std::string(detail::kFileIdentitySuffix));
  ASSERT_TRUE(proven.has_value()) << text(proven.error());
  auto channel =
      rdmakit::detail::MessageChannel::open(**context, **member, detail::kFileSpec, {.receives = 1});
  ASSERT_TRUE(channel.has_value());
  auto ask = [&](std::uint8_t type, std::uint64_t offset, std::uint64_t length, std::string name) {
    EXPECT_TRUE(channel->expect().has_value());
    EXPECT_TRUE(channel->send(type, request(type, offset, length, std::move(name))).has_value());
    auto frame = channel->receive(10s);
    EXPECT_TRUE(frame.has_value()) << text(frame.error());
    auto reply = detail::decode_reply(*frame);
    EXPECT_TRUE(reply.has_value());
    return *reply;
  };
  auto beyond = ask(detail::kFileRead, (1 << 20) - 10, 11, "secret");
  EXPECT_EQ(beyond.code, static_cast<std::uint8_t>(Errc::InvalidArgument)) << beyond.message;
  EXPECT_NE(beyond.message.find("outside"), std::string::npos) << beyond.message;
  auto write = ask(detail::kFileWrite, 0, 4096, "secret");
  EXPECT_EQ(write.code, static_cast<std::uint8_t>(Errc::InvalidArgument)) << write.message;
  EXPECT_NE(write.message.find("read-only"), std::string::npos) << write.message;
  // A writable segment holds a member to its size too, at the owner (submit() checks it on the client).
  const auto open_path = dir.path() / "open.bin";
  write_file(open_path, contents);
  ASSERT_TRUE(owner->publish_file("open", open_path.string(), {.writable = true}).has_value());
  auto write_beyond = ask(detail::kFileWrite, (1 << 20) - 10, 11, "open");
  EXPECT_EQ(write_beyond.code, static_cast<std::uint8_t>(Errc::InvalidArgument)) << write_beyond.message;
  EXPECT_NE(write_beyond.message.find("outside"), std::string::npos) << write_beyond.message;
  EXPECT_EQ(std::filesystem::file_size(open_path), 1u << 20);
  auto by_path = ask(detail::kFileRead, 0, 4096, path.string());
  EXPECT_EQ(by_path.code, static_cast<std::uint8_t>(Errc::NotFound)) << by_path.message;
  EXPECT_EQ(std::count(got, got + (1 << 20), std::byte{0}), 1 << 20) << "a refused request delivered bytes";
  auto fine = ask(detail::kFileRead, 4096, 8192, "secret");
  EXPECT_EQ(fine.code, 0) << fine.message;
  EXPECT_EQ(std::memcmp(got, contents.data() + 4096, 8192), 0);
  EXPECT_EQ(got[8192], std::byte{0});
}

// The owner runs in a process of its own, is stopped with requests in flight and killed: every request
// fails within peer_timeout (plus the connect bound and slack), naming the owner; none reports success.
class XferFileKill : public ::testing::TestWithParam<std::string> {};

TEST_P(XferFileKill, KilledOwnerFailsTheBatchWithinTheBound) {
  TempDir dir;
  auto path = dir.path() / "shard.bin";
  auto contents = random_bytes(8 << 20, 5);
  write_file(path, contents);
  PeerProcess owner(dir.path(), "shard", "file:" + path.string(), GetParam());
  ASSERT_TRUE(owner.ready());
  FileMetadataStore store(dir.path());
  auto client = make_engine(store, EngineOptions{.name = "client",
                                                 .transports = {GetParam()},
                                                 .verbs_devices = verbs_devices(),
                                                 .peer_timeout = 1000ms,
                                                 .connect_timeout = 1000ms,
                                                 .file_local_reads = false});
  ASSERT_TRUE(client);
  auto segment = client->open_segment("shard");
  ASSERT_TRUE(segment.has_value()) << text(segment.error());
  auto memory = make_buffer(8 << 20);
  ASSERT_TRUE(client->register_local(memory.get(), 8 << 20).has_value());
  std::vector<Request> warm{Request{Op::Read, memory.get(), *segment, 0, 1 << 20}};
  auto first = client->submit(warm);
  ASSERT_TRUE(first.has_value() && (*first)->wait(20s).has_value());
  ASSERT_EQ((*first)->failed(), 0u);
  ASSERT_EQ(std::memcmp(memory.get(), contents.data(), 1 << 20), 0);

  owner.signal(SIGSTOP);
  std::vector<Request> requests;
  for (std::uint64_t k = 0; k < 32; ++k)
    requests.push_back(
        Request{Op::Read, memory.get() + k * (256 << 10), *segment, k * (256 << 10) + 3, (256 << 10) - 8});
  auto batch = client->submit(requests);
  ASSERT_TRUE(batch.has_value()) << text(batch.error());
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE((*batch)->done()) << "the stopped owner answered";
  owner.signal(SIGKILL);
  auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE((*batch)->wait(30s).has_value()) << "the batch hung";
  auto took = std::chrono::steady_clock::now() - killed;
  std::printf("killed file owner (%s): its requests failed %lld ms after the kill\n", GetParam().c_str(),
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  EXPECT_LT(took, 1000ms + 1000ms + 1000ms + sanitizer_slack());
  EXPECT_EQ((*batch)->failed(), requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto status = *(*batch)->status(i);
    ASSERT_FALSE(status.has_value()) << "request " << i << " to the killed owner reported success";
    EXPECT_NE(status.error().message().find("of file segment 'shard'"), std::string::npos)
        << text(status.error());
  }
  owner.reap();
}

INSTANTIATE_TEST_SUITE_P(Transports, XferFileKill, ::testing::ValuesIn(transports()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace rdmakit::xfer::testing
