// Auto-resume: a training loop that checkpoints every few steps and, restarted after kill -9 at any
// moment, continues from the last committed step with bit-identical state.
//
//   ckpt_resume DIR [STEPS=400] [EVERY=5] [REPLICA]                  single process
//   mpirun -np 2 ckpt_resume DIR [STEPS=400] [EVERY=5] [REPLICA]     (or torchrun, srun): one checkpoint of
//                                                                     all ranks
// DIR may be each node's own directory; REPLICA is the address of an `rdmakit-ckpt serve` (on another node)
// that also holds each checkpoint in its memory. Prints "resumed at step N from <where each shard came
// from>" (or "fresh start (why)"), "committed N" for each committed checkpoint and, at the end, "final <hash
// of the state>" (each prefixed with "rank R" when launched, after a line naming the communicator's
// transports): the hash of a run killed and restarted any number of times equals that of an uninterrupted run
// (tests/ckpt/resume.sh checks this, tests/ckpt/resume_mpirun.sh with mpirun, tests/ckpt/node_loss_netns.sh
// with a node lost with its disk).
//
// Launched, each rank calls from_environment() twice, as docs/ckpt.md recommends: the application's
// communicator, then one for the engine alone (its own key prefix, over the same store): the engine commits a
// checkpoint only when every rank's shard is durable, so after a restart every rank resumes at one step.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rdmakit/bootstrap.hpp"
#include "rdmakit/ckpt/engine.hpp"
#include "rdmakit/coll/communicator.hpp"

namespace ckpt = rdmakit::ckpt;

namespace {

// A stand-in for one optimizer step: deterministic, so any two runs from the same state agree bit for bit.
void train_step(std::vector<float>& weights, std::vector<float>& momentum, std::uint64_t step) {
  for (std::size_t i = 0; i < weights.size(); ++i) {
    float gradient = std::sin(static_cast<float>((i * 7 + step * 13) % 1000) * 0.01f) - 0.1f * weights[i];
    momentum[i] = 0.9f * momentum[i] + gradient;
    weights[i] += 0.01f * momentum[i];
  }
}

std::uint64_t fnv1a(const void* data, std::size_t size, std::uint64_t hash = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) hash = (hash ^ p[i]) * 0x100000001b3ull;
  return hash;
}

// Under a launcher (mpirun, torchrun, srun): a communicator with `prefix` (the application's, then the
// checkpoint engine's own over the same store: from_environment() a second time); alone: none.
std::unique_ptr<rdmakit::coll::Communicator> launched_communicator(const std::string& prefix) {
  auto launch = rdmakit::bootstrap::detect_launch();
  if (!launch || launch->launcher == "single") return nullptr;
  auto comm = rdmakit::coll::Communicator::from_environment({.key_prefix = prefix});
  if (!comm) {
    std::fprintf(stderr, "%s\n", comm.error().describe().c_str());
    std::exit(1);
  }
  return std::move(*comm);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [STEPS=400] [EVERY=5]\n", argv[0]);
    return 2;
  }
  std::uint64_t steps = argc > 2 ? std::stoull(argv[2]) : 400, every = argc > 3 ? std::stoull(argv[3]) : 5;
  std::string replica = argc > 4 ? argv[4] : "";
  auto app = launched_communicator("");  // what training's own collectives would run on
  auto comm = launched_communicator("ckpt/");
  std::string who = comm ? "rank " + std::to_string(comm->rank()) + " " : "";
  if (comm)  // which transports carry the engine's collectives: shm between ranks of one host
    std::printf("%son %d of %d ranks of this host, over %s\n", who.c_str(), comm->local_rank() + 1,
                comm->local_size(), comm->transports().c_str());
  float start = comm ? 0.5f + 0.125f * static_cast<float>(comm->rank()) : 0.5f;  // ranks differ
  std::vector<float> weights(1 << 18, start), momentum(1 << 18, 0.0f);
  std::uint64_t last_step = 0;  // the step whose update the state includes; part of the state itself
  auto report_commit = [who](std::uint64_t step, const rdmakit::Result<ckpt::PersistReport>& outcome) {
    if (!outcome) return;
    std::printf("%scommitted %llu%s\n", who.c_str(), static_cast<unsigned long long>(step),
                outcome->replicated ? " (replicated)" : "");
    std::fflush(stdout);
  };
  auto engine =
      ckpt::Engine::create({.directory = argv[1],
                            .keep = 2,
                            .communicator = comm.get(),
                            .replica = replica,
                            .on_persisted = report_commit},
                           {{"weights", weights.data(), weights.size() * 4, ckpt::DType::F32, {512, 512}},
                            {"momentum", momentum.data(), momentum.size() * 4, ckpt::DType::F32, {512, 512}},
                            {"last_step", &last_step, sizeof(last_step), ckpt::DType::U64, {1}}});
  if (!engine) return std::fprintf(stderr, "%s\n", engine.error().describe().c_str()), 1;

  auto restored = (*engine)->restore_latest();
  if (restored) {
    std::printf("%sresumed at step %llu from %s\n", who.c_str(),
                static_cast<unsigned long long>(last_step + 1), (*engine)->restored_from().c_str());
  } else if (restored.error().code() == rdmakit::Errc::NotFound) {
    // Nothing to resume from; the reason says whether checkpoints existed but lost shards (which ranks).
    std::printf("%sfresh start (%s)\n", who.c_str(), restored.error().message().c_str());
  } else {
    return std::fprintf(stderr, "%s\n", restored.error().describe().c_str()), 1;
  }
  std::fflush(stdout);
  for (std::uint64_t step = restored ? last_step + 1 : 1; step <= steps; ++step) {
    train_step(weights, momentum, step);
    last_step = step;
    if (step % every == 0)
      if (auto ok = (*engine)->snapshot(step); !ok)
        return std::fprintf(stderr, "%s\n", ok.error().describe().c_str()), 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a real step takes longer still
  }
  if (auto done = (*engine)->wait_persisted(); !done && done.error().code() != rdmakit::Errc::NotFound)
    return std::fprintf(stderr, "%s\n", done.error().describe().c_str()), 1;
  if (app)  // every rank finished: the application's communicator works beside the engine's
    if (auto ok = app->barrier(); !ok) return std::fprintf(stderr, "%s\n", ok.error().describe().c_str()), 1;
  std::uint64_t hash = fnv1a(weights.data(), weights.size() * 4);
  hash = fnv1a(momentum.data(), momentum.size() * 4, hash);
  std::printf("%sfinal %016llx\n", who.c_str(), static_cast<unsigned long long>(hash));
  return 0;
}
