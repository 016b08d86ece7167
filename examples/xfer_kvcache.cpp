// Disaggregated serving: a prefill process moves paged KV-cache blocks into a decode process's pool.
//
//   xfer_kvcache decode  [--metadata URL] [--transport shm|tcp|verbs] [--devices D1,D2] [--slots 64]
//   xfer_kvcache prefill --metadata URL [--transport ...] [--devices D1,D2] [--blocks 16] [--layout
//   block|layer]
//                        [--seed 1]
//   --gpu (either role): that side's KV memory is CUDA device memory: decode's pool is allocated with
//     allocate_segment(..., MemoryKind::Cuda), prefill's cache is cudaMalloc'ed and registered as such, and
//     the engine moves blocks VRAM -> VRAM along the transport's device path (shm: CUDA IPC; tcp: staged;
//     verbs: GPUDirect, or refused without it). The control segment stays in host memory.
// --devices: the verbs devices, one rail each (default: the first active device); prefill's rail i pairs
// with decode's rail i, and large batches are striped over every rail.
//
// A block is 16 tokens x 32 layers x (K, V) x 8 heads x 128 dims of bf16 = 2 MiB. The decode process
// publishes its pool ("kv-pool", `slots` blocks) and a control segment ("kv-ctl"); prefill picks a random
// free slot for each of its blocks (the block table), WRITEs the blocks, and only after that batch has
// completed (the bytes are in decode's memory) WRITEs the block table with a checksum per block, then a
// sequence word. Decode waits for the word and checks every block on arrival: the pattern of its logical
// block and the checksum.
//   --layout block: prefill holds each block contiguously: one 2 MiB request per block.
//   --layout layer: prefill holds the cache layer-major (per layer, K/V and 4-head group: 16 KiB pieces of
//     every block side by side), as many inference engines do; a block is 128 requests of 16 KiB, adjacent
//     in the destination slot, which the engine coalesces into scatter-gather WRITEs.
// The third tier (decode; its pool in host or, with --gpu, device memory): once every block checked, decode
// evicts every other block from its pool to a storage node's NVMe, published as a writable file segment
// ("kv-nvme"), reuses their slots, and on a hit READs them back into the slots and checks them again byte for
// byte. The storage node's engine runs inside the decode process here (over the same transport; a deployment
// runs it on the storage node); its file goes in --nvme DIR (default: the temporary directory), --nvme off
// skips the tier. The metadata store: --metadata URL (builtin://, redis:// or etcd://host:port, see
// open_metadata). Without it, decode serves a builtin store itself (serve_builtin_metadata on a free loopback
// port) for as long as it runs, and prints its URL on its "ready" line for prefill's --metadata.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <optional>
#include <random>
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

constexpr std::size_t kTokens = 16, kLayers = 32, kHeads = 8, kDims = 128, kElement = 2;  // bf16
constexpr std::size_t kBlock = kTokens * kLayers * 2 * kHeads * kDims * kElement;         // 2 MiB
constexpr std::size_t kPiece = 16 << 10;          // 16 tokens x 4 heads
constexpr std::size_t kPieces = kBlock / kPiece;  // 128 per block
constexpr std::uint64_t kMagic = 0x6b7663616368654bull;

// The control segment: a sequence word, then one entry per block.
struct TableEntry {
  std::uint64_t slot, block, checksum;
};
constexpr std::size_t kTableOffset = 64;

struct Args {
  std::string role, metadata, transport = "shm", layout = "block", nvme;
  std::vector<std::string> devices;
  std::size_t blocks = 16, slots = 64;
  std::uint32_t seed = 1;
  bool gpu = false;
};

std::uint8_t value(std::uint64_t block, std::uint64_t byte) {  // the bytes of logical block `block`
  return static_cast<std::uint8_t>(((block + 1) * 0x9e3779b97f4a7c15ull + byte * 0xbf58476d1ce4e5b9ull) >>
                                   56);
}

std::uint64_t checksum(const std::byte* data, std::size_t size) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < size; ++i) h = (h ^ std::to_integer<std::uint8_t>(data[i])) * 1099511628211ull;
  return h;
}

std::unique_ptr<MetadataStore> open_store(const std::string& url) {
  auto store = open_metadata(url, {.name_space = "kvcache"});
  if (!store) throw std::runtime_error("metadata " + url + ": " + store.error().describe());
  return std::move(*store);
}

std::unique_ptr<Engine> open_engine(MetadataStore& metadata, const Args& args, const std::string& name) {
  auto engine =
      Engine::create(metadata, {.name = name, .transports = {args.transport}, .verbs_devices = args.devices});
  if (!engine) throw std::runtime_error(engine.error().describe());
  return std::move(*engine);
}

template <typename T>
T must(rdmakit::Result<T> result, const char* what) {
  if (!result) throw std::runtime_error(std::string(what) + ": " + result.error().describe());
  return std::move(*result);
}
void must(rdmakit::Result<void> result, const char* what) {
  if (!result) throw std::runtime_error(std::string(what) + ": " + result.error().describe());
}

// How many of the kBlock bytes at `data` differ from logical block `block`'s.
std::size_t wrong_bytes(const std::byte* data, std::uint64_t block) {
  std::size_t wrong = 0;
  for (std::size_t j = 0; j < kBlock; ++j) wrong += std::to_integer<std::uint8_t>(data[j]) != value(block, j);
  return wrong;
}

// The third tier: every other block of the table is evicted (WRITTEN to the storage node's file segment),
// its slot reused, and on a hit READ back into its slot, then checked byte for byte and by checksum.
int nvme_tier(const Args& args, MetadataStore& metadata, Engine& engine, std::byte* pool,
              const TableEntry* table, std::size_t count) {
  const auto dir = args.nvme.empty() ? std::filesystem::temp_directory_path().string() : args.nvme;
  const auto path = dir + "/rdmakit-kvcache-nvme-" + std::to_string(::getpid()) + ".bin";
  std::vector<const TableEntry*> evicted;
  for (std::size_t i = 0; i < count; i += 2) evicted.push_back(&table[i]);
  {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);  // its size: the evicted blocks
    file.seekp(static_cast<std::streamoff>(evicted.size() * kBlock - 1));
    file.put('\0');
    if (!file) throw std::runtime_error("--nvme: cannot create " + path);
  }
  struct Remove {
    std::string path;
    ~Remove() { std::filesystem::remove(path); }
  } remove{path};
  auto storage = open_engine(metadata, args, "storage");
  must(storage->publish_file("kv-nvme", path, {.writable = true}), "publish the NVMe file segment");
  auto nvme = must(engine.open_segment("kv-nvme"), "open kv-nvme");
  std::vector<Request> out, in;
  for (std::size_t n = 0; n < evicted.size(); ++n) {
    auto* slot = pool + evicted[n]->slot * kBlock;
    out.push_back({Op::Write, slot, nvme, n * kBlock, kBlock});
    in.push_back({Op::Read, slot, nvme, n * kBlock, kBlock});
  }
  auto run = [&](const std::vector<Request>& requests, const char* what) {
    auto batch = must(engine.submit(requests), what);
    must(batch->wait(60s), what);
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (auto s = batch->status(i); s && !*s)
        throw std::runtime_error(std::string(what) + ": request " + std::to_string(i) + ": " +
                                 s->error().describe());
    }
  };
  // A VRAM pool (--gpu) is written and checked through host copies: the CPU never touches device memory.
  std::optional<Cuda> cuda;
  if (args.gpu) cuda.emplace();
  std::vector<std::byte> host(kBlock);
  auto start = std::chrono::steady_clock::now();
  run(out, "evict to NVMe");
  std::vector<std::byte> reused(kBlock, std::byte{0xA5});
  for (const auto* e : evicted) {  // the slot is reused
    if (cuda)
      cuda->copy(pool + e->slot * kBlock, reused.data(), kBlock);
    else
      std::memcpy(pool + e->slot * kBlock, reused.data(), kBlock);
  }
  run(in, "read back from NVMe");
  auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::size_t bad = 0;
  for (const auto* e : evicted) {
    const std::byte* block = pool + e->slot * kBlock;
    if (cuda) block = (cuda->copy(host.data(), block, kBlock), host.data());
    if (wrong_bytes(block, e->block) != 0 || checksum(block, kBlock) != e->checksum) ++bad;
  }
  std::printf(
      "decode: %zu blocks evicted to NVMe (writable file segment 'kv-nvme' of 'storage', %s) and read "
      "back on a hit%s in %.1f ms: %zu bad\n",
      evicted.size(), path.c_str(), cuda ? " (VRAM pool)" : "", ms, bad);
  return bad == 0 ? 0 : 1;
}

int decode(const Args& args) {
  // No store given: this process serves one (declared first, so it outlives the engine and the store).
  std::unique_ptr<MetadataServer> server;
  std::string url = args.metadata;
  if (url.empty()) {
    server = must(serve_builtin_metadata("127.0.0.1:0"), "serve the builtin metadata");
    url = server->url();
  }
  auto metadata = open_store(url);
  auto engine = open_engine(*metadata, args, "decode");
  auto pool = must(engine->allocate_segment("kv-pool", args.slots * kBlock,
                                            args.gpu ? rdmakit::MemoryKind::Cuda : rdmakit::MemoryKind::Host),
                   "allocate kv-pool");
  auto ctl = must(engine->allocate_segment("kv-ctl", kTableOffset + args.slots * sizeof(TableEntry)),
                  "allocate kv-ctl");
  std::cout << "ready " << url << std::endl;
  auto* sequence = reinterpret_cast<std::uint64_t*>(ctl.data());
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::atomic_ref(*sequence).load(std::memory_order_acquire) != kMagic) {
    if (std::chrono::steady_clock::now() > deadline)
      return std::fprintf(stderr, "decode: no blocks in 60 s\n"), 1;
    std::this_thread::sleep_for(1ms);
  }
  auto count = std::atomic_ref(sequence[1]).load(std::memory_order_acquire);
  const auto* table = reinterpret_cast<const TableEntry*>(ctl.data() + kTableOffset);
  // Device memory is checked in a host copy (the CPU never touches VRAM); host memory in place.
  std::vector<std::byte> host_pool;
  if (args.gpu) {
    host_pool.resize(pool.size());
    Cuda().copy(host_pool.data(), pool.data(), pool.size());
  }
  const std::byte* blocks = args.gpu ? host_pool.data() : pool.data();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const auto& e = table[i];
    const auto* block = blocks + e.slot * kBlock;
    std::size_t wrong = wrong_bytes(block, e.block);
    bool sum_ok = checksum(block, kBlock) == e.checksum;
    if (wrong != 0 || !sum_ok) {
      ++bad;
      std::fprintf(stderr, "decode: block %llu in slot %llu: %zu bytes wrong, checksum %s\n",
                   (unsigned long long)e.block, (unsigned long long)e.slot, wrong, sum_ok ? "ok" : "WRONG");
    }
  }
  std::printf("decode: %llu blocks checked (pattern + checksum), %zu bad\n", (unsigned long long)count, bad);
  if (bad != 0 || count == 0) return 1;
  // The tier moves the pool's blocks, in host or device memory (the engine's rail reaches either).
  if (args.nvme == "off") return 0;
  return nvme_tier(args, *metadata, *engine, pool.data(), table, count);
}

// Where byte range [piece * 16 KiB, +16 KiB) of block b lies in prefill's memory.
std::size_t source_offset(const Args& args, std::size_t b, std::size_t piece) {
  if (args.layout == "block") return b * kBlock + piece * kPiece;
  return piece * args.blocks * kPiece + b * kPiece;  // layer-major
}

int prefill(const Args& args) {
  if (args.metadata.empty())
    throw std::runtime_error("prefill needs --metadata URL (decode prints it when it serves)");
  auto metadata = open_store(args.metadata);
  auto engine = open_engine(*metadata, args, "prefill");
  std::vector<std::byte> cache(args.blocks * kBlock);
  std::vector<std::uint64_t> sums(args.blocks);
  std::vector<std::byte> logical(kBlock);
  for (std::size_t b = 0; b < args.blocks; ++b) {
    for (std::size_t j = 0; j < kBlock; ++j) logical[j] = std::byte{value(b, j)};
    sums[b] = checksum(logical.data(), kBlock);
    for (std::size_t p = 0; p < kPieces; ++p)
      std::memcpy(&cache[source_offset(args, b, p)], &logical[p * kPiece], kPiece);
  }
  // --gpu: the cache moves from VRAM (filled here from the host copy, as a model's forward pass would).
  std::optional<Cuda> cuda;
  std::byte* source = cache.data();
  if (args.gpu) {
    cuda.emplace();
    source = static_cast<std::byte*>(cuda->allocate(cache.size()));
    cuda->copy(source, cache.data(), cache.size());
  }
  must(engine->register_local(source, cache.size(),
                              args.gpu ? rdmakit::MemoryKind::Cuda : rdmakit::MemoryKind::Host),
       "register the cache");
  auto deadline = std::chrono::steady_clock::now() + 30s;
  rdmakit::Result<SegmentHandle> pool = rdmakit::fail(rdmakit::Errc::NotFound, "");
  while (!(pool = engine->open_segment("kv-pool")) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  auto ctl = must(engine->open_segment("kv-ctl"), "open kv-ctl");
  auto pool_handle = must(std::move(pool), "open kv-pool");
  auto slots = must(engine->segment_info(pool_handle), "kv-pool info").length / kBlock;
  if (slots < args.blocks) throw std::runtime_error("the decode pool has fewer slots than blocks");

  // The block table: a random free slot per block.
  std::vector<std::uint64_t> slot(slots);
  std::iota(slot.begin(), slot.end(), 0);
  std::shuffle(slot.begin(), slot.end(), std::mt19937_64(args.seed));
  std::vector<Request> requests;
  for (std::size_t b = 0; b < args.blocks; ++b) {
    if (args.layout == "block") {
      requests.push_back(
          {Op::Write, source + source_offset(args, b, 0), pool_handle, slot[b] * kBlock, kBlock});
      continue;
    }
    for (std::size_t p = 0; p < kPieces; ++p) {
      requests.push_back({Op::Write, source + source_offset(args, b, p), pool_handle,
                          slot[b] * kBlock + p * kPiece, kPiece});
    }
  }
  auto start = std::chrono::steady_clock::now();
  auto batch = must(engine->submit(requests), "submit the blocks");
  must(batch->wait(60s), "wait for the blocks");
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (batch->failed() != 0) {
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (auto s = batch->status(i); s && !*s)
        std::fprintf(stderr, "request %zu: %s\n", i, s->error().describe().c_str());
    }
    return 1;
  }
  // The table, then (after it completed) the sequence word: decode reads nothing before the blocks landed.
  std::vector<std::byte> control(kTableOffset + args.blocks * sizeof(TableEntry));
  auto* entries = reinterpret_cast<TableEntry*>(control.data() + kTableOffset);
  for (std::size_t b = 0; b < args.blocks; ++b) entries[b] = {slot[b], b, sums[b]};
  std::uint64_t header[2] = {kMagic, args.blocks};
  std::memcpy(control.data(), header, sizeof header);
  must(engine->register_local(control.data(), control.size()), "register the table");
  // The count (at byte 8) travels with the table; the word (bytes 0-7) alone, last: one WRITE's bytes may
  // land in any order, two WRITEs' are ordered by the first one's completion.
  auto table =
      must(engine->submit(std::vector<Request>{{Op::Write, control.data() + 8, ctl, 8, control.size() - 8}}),
           "submit the table");
  must(table->wait(10s), "wait for the table");
  auto word =
      must(engine->submit(std::vector<Request>{{Op::Write, control.data(), ctl, 0, 8}}), "submit the word");
  must(word->wait(10s), "wait for the word");
  if (table->failed() + word->failed() != 0)
    return std::fprintf(stderr, "prefill: the table did not land\n"), 1;
  auto stats = engine->stats();
  std::printf(
      "prefill: %zu blocks%s (%s layout, %zu requests -> %llu work requests) over %s in %.1f ms: %.2f GB/s\n",
      args.blocks, args.gpu ? " from VRAM" : "", args.layout.c_str(), requests.size(),
      (unsigned long long)stats.work_requests,
      must(engine->segment_info(pool_handle), "info").transport.c_str(), seconds * 1e3,
      args.blocks * kBlock / seconds / 1e9);
  // Per rail: striped over two devices, both carry a share (tests/softroce/xfer-guest.sh checks it).
  for (std::size_t i = 0; i < stats.rails.size(); ++i) {
    const auto& rail = stats.rails[i];
    std::printf("prefill: rail %zu (%s%s%s): %llu work requests\n", i, rail.transport.c_str(),
                rail.device.empty() ? "" : " ", rail.device.c_str(), (unsigned long long)rail.work_requests);
  }
  if (cuda) {
    must(engine->unregister_local(source), "unregister the cache");
    cuda->release(source);
  }
  return 0;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  for (std::size_t start = 0; start <= list.size();) {
    auto comma = std::min(list.find(',', start), list.size());
    if (comma > start) out.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

Args parse(int argc, char** argv) {
  Args args;
  if (argc < 2)
    throw std::runtime_error("usage: xfer_kvcache decode|prefill [--metadata URL] [--transport T] ...");
  args.role = argv[1];
  for (int i = 2; i < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--gpu") {
      args.gpu = true;
      --i;  // a flag without a value
      continue;
    }
    if (i + 1 >= argc) throw std::runtime_error(flag + " needs a value");
    std::string v = argv[i + 1];
    if (flag == "--metadata")
      args.metadata = v;
    else if (flag == "--transport")
      args.transport = v;
    else if (flag == "--layout")
      args.layout = v;
    else if (flag == "--devices")
      args.devices = split(v);
    else if (flag == "--blocks")
      args.blocks = std::stoul(v);
    else if (flag == "--slots")
      args.slots = std::stoul(v);
    else if (flag == "--nvme")
      args.nvme = v;
    else if (flag == "--seed")
      args.seed = static_cast<std::uint32_t>(std::stoul(v));
    else
      throw std::runtime_error("unknown option " + flag);
  }
  if (args.layout != "block" && args.layout != "layer")
    throw std::runtime_error("--layout is block or layer");
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    auto args = parse(argc, argv);
    if (args.role == "decode") return decode(args);
    if (args.role == "prefill") return prefill(args);
    throw std::runtime_error("the role is decode or prefill");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xfer_kvcache: %s\n", e.what());
    return 1;
  }
}
