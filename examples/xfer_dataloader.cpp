// A data loader over remote NVMe: a storage node publishes a directory of dataset shards as file segments,
// trainer processes (on other nodes) read random samples of them in batches, with prefetch, and verify every
// sample against the dataset's checksum table.
//
//   xfer_dataloader storage --dir DIR [--shards 8] [--samples 64] [--sample-kib 64] [--trainers 1]
//                           [--metadata URL] [--transport shm|tcp|verbs] [--keep]
//   xfer_dataloader trainer --metadata URL --rank R [--batch 32] [--batches 20] [--transport ...] [--gpu]
//                           [--via-owner]   (every READ to the storage node, even on its host)
//
// The storage node writes DIR/shard-NNN.bin (`samples` samples of `sample-kib` KiB each; sample s's words
// are sample_word(s, j), its first word is s) and DIR/checksums.bin (a header, then one checksum per
// sample), publishes DIR with publish_directory("dataset", DIR) (each file a read-only file segment
// "dataset/<file name>"), prints "ready <metadata URL>" and waits for one notification per trainer.
// A trainer READs the checksum table (one request), opens every shard, and reads `batches` batches of
// `batch` random samples: one submit of `batch` requests per batch, into registered (pinned) host memory,
// the next batch submitted before the current one is checked (two batches in flight, double buffered).
// Every sample is checked (its first word, its checksum); it prints samples/s, then WRITEs its result into
// the storage node's "dataset-control" segment with a notification, so the storage node knows it finished.
// --gpu: the batches land in device memory (cudaMalloc'ed, registered with MemoryKind::Cuda): the storage
// node pushes each sample straight into it where the transport reaches device memory (verbs with
// GPUDirect, shm through CUDA IPC), else it is received through pinned host memory and copied to the device
// as it arrives (tcp). Each batch is then copied back to the host to be checked: the CPU never touches
// device memory (docs/xfer.md, "File segments").
// Without --metadata the storage node serves a builtin store (as xfer_kvcache's decode does).
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "example_cuda.hpp"
#include "rdmakit/xfer/engine.hpp"
#include "rdmakit/xfer/metadata.hpp"

namespace {

using namespace std::chrono_literals;
using namespace rdmakit::xfer;
using rdmakit::examples::Cuda;

constexpr std::uint64_t kMagic = 0x6461746173657431ull;  // "dataset1"
constexpr const char* kPrefix = "dataset";
constexpr std::size_t kControlSlot = 64;  // bytes of "dataset-control" per trainer

// checksums.bin: this header, then one checksum per sample (shard-major).
struct TableHeader {
  std::uint64_t magic, shards, samples_per_shard, sample_bytes;
};

struct Args {
  std::string role, dir, metadata, transport = "tcp";
  std::size_t shards = 8, samples = 64, sample_kib = 64, trainers = 1, batch = 32, batches = 20, rank = 0;
  bool gpu = false, keep = false;
  bool via_owner = false;  // trainers: every READ to the storage node, even on its host (as from another)
};

// Word j of sample s (splitmix64 of its position), the sample's number in word 0: a sample read from the
// wrong place fails its check even where its checksum would match by chance.
std::uint64_t sample_word(std::uint64_t sample, std::uint64_t j, std::uint64_t words) {
  if (j == 0) return sample;
  std::uint64_t z = (sample * words + j) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A weighted sum of the words with odd weights (any one changed word changes it; examples/python's
// numpy loader computes the same in one vector expression).
std::uint64_t checksum(const std::uint64_t* words, std::size_t n) {
  std::uint64_t sum = 0;
  for (std::size_t j = 0; j < n; ++j) sum += words[j] * (0x9e3779b97f4a7c15ull + 2 * j);
  return sum;
}

std::string shard_name(std::size_t shard) {
  char name[32];
  std::snprintf(name, sizeof name, "shard-%03zu.bin", shard);
  return name;
}

template <typename T>
T must(rdmakit::Result<T> result, const std::string& what) {
  if (!result) throw std::runtime_error(what + ": " + result.error().describe());
  return std::move(*result);
}
void must(rdmakit::Result<void> result, const std::string& what) {
  if (!result) throw std::runtime_error(what + ": " + result.error().describe());
}

std::unique_ptr<MetadataStore> open_store(const std::string& url) {
  return must(open_metadata(url, {.name_space = "dataloader"}), "metadata " + url);
}

// Writes the shards and the checksum table into args.dir.
void write_dataset(const Args& args) {
  const std::size_t words = args.sample_kib * 1024 / 8;
  std::filesystem::create_directories(args.dir);
  std::vector<std::uint64_t> table(4 + args.shards * args.samples);
  TableHeader header{kMagic, args.shards, args.samples, words * 8};
  std::memcpy(table.data(), &header, sizeof header);
  std::vector<std::uint64_t> sample(words);
  for (std::size_t shard = 0; shard < args.shards; ++shard) {
    std::ofstream out(std::filesystem::path(args.dir) / shard_name(shard),
                      std::ios::binary | std::ios::trunc);
    for (std::size_t i = 0; i < args.samples; ++i) {
      std::uint64_t s = shard * args.samples + i;
      for (std::size_t j = 0; j < words; ++j) sample[j] = sample_word(s, j, words);
      table[4 + s] = checksum(sample.data(), words);
      out.write(reinterpret_cast<const char*>(sample.data()), static_cast<std::streamsize>(words * 8));
    }
    if (!out) throw std::runtime_error("writing " + shard_name(shard) + " failed");
  }
  std::ofstream out(std::filesystem::path(args.dir) / "checksums.bin", std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(table.data()), static_cast<std::streamsize>(table.size() * 8));
  if (!out) throw std::runtime_error("writing checksums.bin failed");
}

int storage(const Args& args) {
  if (args.dir.empty()) throw std::runtime_error("storage needs --dir DIR");
  std::unique_ptr<MetadataServer> server;  // declared first: it outlives the engine and the store
  std::string url = args.metadata;
  if (url.empty()) {
    server = must(serve_builtin_metadata("127.0.0.1:0"), "serve the builtin metadata");
    url = server->url();
  }
  if (!args.keep) write_dataset(args);
  auto metadata = open_store(url);
  auto engine =
      must(Engine::create(*metadata, {.name = "storage", .transports = {args.transport}}), "engine");
  auto control = must(engine->allocate_segment("dataset-control", args.trainers * kControlSlot), "control");
  std::memset(control.data(), 0, control.size());
  auto names = must(engine->publish_directory(kPrefix, args.dir), "publish_directory " + args.dir);
  std::cerr << "storage: published " << names.size() << " segments (" << names.front() << " ... "
            << names.back() << ")\n";
  std::cout << "ready " << url << std::endl;
  int failed = 0;
  for (std::size_t i = 0; i < args.trainers; ++i) {
    auto note = must(engine->wait_notification(120s), "waiting for the trainers");
    std::string text(reinterpret_cast<const char*>(note.message.data()), note.message.size());
    std::printf("storage: %s: %s\n", note.sender.c_str(), text.c_str());
    failed += !text.ends_with(", 0 bad");
  }
  return failed == 0 ? 0 : 1;
}

// Registered, page-aligned host memory (pinned where the transport pins: verbs), unregistered before it is
// freed.
class Pinned {
 public:
  Pinned(Engine& engine, std::size_t bytes)
      : engine_(engine),
        memory_(static_cast<std::byte*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096))) {
    if (!memory_) throw std::runtime_error("out of memory");
    must(engine.register_local(memory_.get(), bytes), "register_local");
  }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  ~Pinned() { (void)engine_.unregister_local(memory_.get()); }
  std::byte* get() const { return memory_.get(); }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  Engine& engine_;
  std::unique_ptr<std::byte, Free> memory_;
};

SegmentHandle open_when_published(Engine& engine, const std::string& name) {
  auto deadline = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    auto handle = engine.open_segment(name);
    // Only "not published yet" is worth waiting out; a record that does not verify (another job's, or
    // we lack the secret) or a store we may not use will not change.
    bool later = !handle && handle.error().code() == rdmakit::Errc::NotFound;
    if (!later || std::chrono::steady_clock::now() > deadline) return must(std::move(handle), "open " + name);
    std::this_thread::sleep_for(10ms);
  }
}

// The trainer's view of the dataset: the checksum table and a handle per shard.
struct Dataset {
  TableHeader header{};
  std::vector<std::uint64_t> checksums;
  std::vector<SegmentHandle> shards;
};

Dataset open_dataset(Engine& engine) {
  Dataset data;
  auto table = open_when_published(engine, std::string(kPrefix) + "/checksums.bin");
  auto length = must(engine.segment_info(table), "checksums.bin").length;
  Pinned memory(engine, length);
  auto batch =
      must(engine.submit(std::vector<Request>{{Op::Read, memory.get(), table, 0, length}}), "READ table");
  must(batch->wait(30s), "READ table");
  must(*batch->status(0), "READ checksums.bin");
  std::memcpy(&data.header, memory.get(), sizeof data.header);
  const auto& h = data.header;
  if (h.magic != kMagic || h.sample_bytes % 8 != 0 || length != 32 + h.shards * h.samples_per_shard * 8)
    throw std::runtime_error("checksums.bin: not a dataset table");
  data.checksums.resize(h.shards * h.samples_per_shard);
  std::memcpy(data.checksums.data(), memory.get() + 32, data.checksums.size() * 8);
  for (std::size_t s = 0; s < h.shards; ++s) {
    data.shards.push_back(open_when_published(engine, std::string(kPrefix) + "/" + shard_name(s)));
    if (must(engine.segment_info(data.shards.back()), "shard").length != h.samples_per_shard * h.sample_bytes)
      throw std::runtime_error(shard_name(s) + ": not the size the table says");
  }
  return data;
}

// One batch of random samples into `buffer`: a request per sample.
std::vector<Request> plan_batch(const Dataset& data, std::byte* buffer, std::size_t batch,
                                std::mt19937_64& random, std::vector<std::uint64_t>& samples) {
  const auto& h = data.header;
  std::vector<Request> requests;
  samples.clear();
  for (std::size_t i = 0; i < batch; ++i) {
    std::uint64_t s = random() % (h.shards * h.samples_per_shard);
    samples.push_back(s);
    requests.push_back({Op::Read, buffer + i * h.sample_bytes, data.shards[s / h.samples_per_shard],
                        (s % h.samples_per_shard) * h.sample_bytes, h.sample_bytes});
  }
  return requests;
}

// Checks each sample of a finished batch; returns how many are bad (failed requests included).
std::size_t check_batch(const Dataset& data, Batch& batch, const std::byte* buffer,
                        const std::vector<std::uint64_t>& samples) {
  std::size_t bad = 0;
  const std::size_t words = data.header.sample_bytes / 8;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (auto status = *batch.status(i); !status) {
      std::fprintf(stderr, "trainer: sample %llu: %s\n", (unsigned long long)samples[i],
                   status.error().describe().c_str());
      ++bad;
      continue;
    }
    const auto* w = reinterpret_cast<const std::uint64_t*>(buffer + i * data.header.sample_bytes);
    if (w[0] != samples[i] || checksum(w, words) != data.checksums[samples[i]]) {
      std::fprintf(stderr, "trainer: sample %llu is wrong (first word %llu)\n",
                   (unsigned long long)samples[i], (unsigned long long)w[0]);
      ++bad;
    }
  }
  return bad;
}

// A batch's memory: registered host memory, or (--gpu) device memory and a host copy to check it in.
class BatchBuffer {
 public:
  BatchBuffer(Engine& engine, std::size_t bytes, Cuda* cuda) : engine_(engine), cuda_(cuda), bytes_(bytes) {
    if (!cuda) {
      host_.emplace(engine, bytes);
      return;
    }
    device_ = static_cast<std::byte*>(cuda->allocate(bytes));
    check_.resize(bytes);
    must(engine.register_local(device_, bytes, rdmakit::MemoryKind::Cuda), "register_local (device)");
  }
  BatchBuffer(const BatchBuffer&) = delete;
  BatchBuffer& operator=(const BatchBuffer&) = delete;
  ~BatchBuffer() {
    if (!device_) return;
    (void)engine_.unregister_local(device_);
    cuda_->release(device_);
  }
  std::byte* target() const { return device_ ? device_ : host_->get(); }
  // The batch's bytes where the CPU may read them.
  const std::byte* landed() {
    if (!device_) return host_->get();
    cuda_->copy(check_.data(), device_, bytes_);
    return check_.data();
  }

 private:
  Engine& engine_;
  Cuda* cuda_;
  std::size_t bytes_;
  std::optional<Pinned> host_;
  std::byte* device_ = nullptr;
  std::vector<std::byte> check_;
};

int trainer(const Args& args) {
  auto name = "trainer-" + std::to_string(args.rank);
  std::optional<Cuda> cuda;
  if (args.gpu) cuda.emplace();
  if (args.metadata.empty()) throw std::runtime_error("trainer needs --metadata URL (storage prints it)");
  auto metadata = open_store(args.metadata);
  auto engine = must(
      Engine::create(*metadata,
                     {.name = name, .transports = {args.transport}, .file_local_reads = !args.via_owner}),
      "engine");
  auto data = open_dataset(*engine);
  const std::size_t bytes = args.batch * data.header.sample_bytes;
  BatchBuffer buffers[2]{{*engine, bytes, cuda ? &*cuda : nullptr},
                         {*engine, bytes, cuda ? &*cuda : nullptr}};
  std::mt19937_64 random(1000 + args.rank);
  std::vector<std::uint64_t> samples[2];
  std::size_t bad = 0;
  auto start = std::chrono::steady_clock::now();
  // Prefetch: batch k + 1 is in flight while batch k is checked.
  auto next =
      must(engine->submit(plan_batch(data, buffers[0].target(), args.batch, random, samples[0])), "submit");
  for (std::size_t k = 0; k < args.batches; ++k) {
    auto current = std::move(next);
    if (k + 1 < args.batches) {
      auto& slot = samples[(k + 1) % 2];
      next = must(engine->submit(plan_batch(data, buffers[(k + 1) % 2].target(), args.batch, random, slot)),
                  "submit");
    }
    must(current->wait(60s), "batch " + std::to_string(k));
    bad += check_batch(data, *current, buffers[k % 2].landed(), samples[k % 2]);
    // Which way the samples came: from the storage node, or (on its host) read from the shards here.
    if (k + 1 == args.batches) {
      const BatchPaths paths = current->paths();
      std::printf("%s: last batch: %s\n", name.c_str(), to_string(paths).c_str());
      for (rdmakit::MemoryPath path : paths.memory)
        if (cuda && path == rdmakit::MemoryPath::Host) {
          std::fprintf(stderr, "%s: --gpu, yet the batch went to host memory\n", name.c_str());
          ++bad;
        }
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::size_t total = args.batch * args.batches;
  char result[256];
  std::snprintf(result, sizeof result,
                "%zu samples of %llu KiB in %zu batches over %s%s, %.0f samples/s, %zu bad", total,
                (unsigned long long)data.header.sample_bytes / 1024, args.batches,
                must(engine->segment_info(data.shards[0]), "info").transport.c_str(),
                cuda ? " into device memory" : "", total / seconds, bad);
  std::printf("%s: %s\n", name.c_str(), result);
  // Tell the storage node: a WRITE of our result into our control slot, with the text as its notification.
  auto control = open_when_published(*engine, "dataset-control");
  Pinned word(*engine, kControlSlot);
  std::snprintf(reinterpret_cast<char*>(word.get()), kControlSlot, "%zu", total - bad);
  std::vector<Request> report{{Op::Write, word.get(), control, args.rank * kControlSlot, kControlSlot}};
  auto told = must(engine->submit(report, std::as_bytes(std::span(result, std::strlen(result)))), "report");
  must(told->wait(30s), "report");
  if (auto sent = told->notification(); !sent || !*sent)
    throw std::runtime_error("the report was not delivered");
  return bad == 0 ? 0 : 1;
}

Args parse(int argc, char** argv) {
  Args args;
  if (argc < 2) throw std::runtime_error("usage: xfer_dataloader storage|trainer [options] (see the source)");
  args.role = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--gpu" || flag == "--keep" || flag == "--via-owner") {
      (flag == "--gpu" ? args.gpu : flag == "--keep" ? args.keep : args.via_owner) = true;
      continue;
    }
    if (i + 1 >= argc) throw std::runtime_error(flag + " needs a value");
    std::string v = argv[++i];
    auto number = [&] { return static_cast<std::size_t>(std::stoull(v)); };
    if (flag == "--dir")
      args.dir = v;
    else if (flag == "--metadata")
      args.metadata = v;
    else if (flag == "--transport")
      args.transport = v;
    else if (flag == "--shards")
      args.shards = number();
    else if (flag == "--samples")
      args.samples = number();
    else if (flag == "--sample-kib")
      args.sample_kib = number();
    else if (flag == "--trainers")
      args.trainers = number();
    else if (flag == "--batch")
      args.batch = number();
    else if (flag == "--batches")
      args.batches = number();
    else if (flag == "--rank")
      args.rank = number();
    else
      throw std::runtime_error("unknown option " + flag);
  }
  if (args.shards == 0 || args.samples == 0 || args.sample_kib == 0 || args.batch == 0 || args.batches == 0 ||
      args.trainers == 0)
    throw std::runtime_error("--shards, --samples, --sample-kib, --batch, --batches and --trainers are >= 1");
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    auto args = parse(argc, argv);
    if (args.role == "storage") return storage(args);
    if (args.role == "trainer") return trainer(args);
    throw std::runtime_error("the role is storage or trainer");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xfer_dataloader: %s\n", e.what());
    return 1;
  }
}
