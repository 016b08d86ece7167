// Data-parallel training: logistic regression on synthetic data, each rank holding a shard of the
// samples, gradients averaged with rdmakit's allreduce. The same program also trains on the whole data
// set in one process and prints both losses, so a launch can be checked against the single-process run:
//
//   mpirun -np 4 train_logreg                       # Open MPI
//   RANK=.. WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 train_logreg   # torchrun-style
//
// Rank 0 prints "distributed loss X single-process loss Y" and exits 1 when they differ by more than
// 1e-5 (relative): summation order differs between the two, nothing else does.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "rdmakit/coll/communicator.hpp"

namespace {

constexpr int kSamples = 4096;  // divisible by 1, 2, 4, 8: equal shards, so the mean of means is the mean
constexpr int kFeatures = 16;
constexpr int kSteps = 60;
constexpr float kLearningRate = 0.5f;

struct Data {
  std::vector<float> x;  // kSamples x kFeatures
  std::vector<float> y;  // 0 or 1
};

// Deterministic data: every rank builds the same set and takes its shard.
Data make_data() {
  std::uint64_t state = 42;
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((state >> 40) & 0xffffff) / 16777216.0f - 0.5f;
  };
  std::vector<float> truth(kFeatures);
  for (float& w : truth) w = 4 * uniform();
  Data d{std::vector<float>(kSamples * kFeatures), std::vector<float>(kSamples)};
  for (int i = 0; i < kSamples; ++i) {
    float z = 0;
    for (int j = 0; j < kFeatures; ++j) z += (d.x[i * kFeatures + j] = 2 * uniform()) * truth[j];
    d.y[i] = z + 0.5f * uniform() > 0 ? 1.0f : 0.0f;
  }
  return d;
}

// Mean loss over samples [begin, end) and its gradient (kFeatures weights + bias) into grad.
float loss_and_gradient(const Data& d, const std::vector<float>& w, int begin, int end,
                        std::vector<float>& grad) {
  std::fill(grad.begin(), grad.end(), 0.0f);
  double loss = 0;
  for (int i = begin; i < end; ++i) {
    float z = w[kFeatures];
    for (int j = 0; j < kFeatures; ++j) z += w[j] * d.x[i * kFeatures + j];
    float p = 1.0f / (1.0f + std::exp(-z));
    loss += -(d.y[i] * std::log(p + 1e-7f) + (1 - d.y[i]) * std::log(1 - p + 1e-7f));
    for (int j = 0; j < kFeatures; ++j) grad[j] += (p - d.y[i]) * d.x[i * kFeatures + j];
    grad[kFeatures] += p - d.y[i];
  }
  for (float& g : grad) g /= static_cast<float>(end - begin);
  return static_cast<float>(loss / (end - begin));
}

void step(std::vector<float>& w, const std::vector<float>& grad) {
  for (std::size_t j = 0; j < w.size(); ++j) w[j] -= kLearningRate * grad[j];
}

float train_single(const Data& d) {
  std::vector<float> w(kFeatures + 1, 0.0f), grad(kFeatures + 1);
  float loss = 0;
  for (int s = 0; s < kSteps; ++s) {
    loss = loss_and_gradient(d, w, 0, kSamples, grad);
    step(w, grad);
  }
  return loss;
}

}  // namespace

int main() {
  using namespace rdmakit::coll;
  auto comm = Communicator::from_environment();
  if (!comm) {
    std::fprintf(stderr, "train_logreg: %s\n", comm.error().describe().c_str());
    return 2;
  }
  Communicator& c = **comm;
  Data data = make_data();
  int shard = kSamples / c.size(), begin = c.rank() * shard;
  std::vector<float> w(kFeatures + 1, 0.0f), grad(kFeatures + 1);
  // Loss and gradient travel together: one allreduce per step.
  std::vector<float> message(kFeatures + 2);
  float loss = 0;
  for (int s = 0; s < kSteps; ++s) {
    message[0] = loss_and_gradient(data, w, begin, begin + shard, grad);
    std::copy(grad.begin(), grad.end(), message.begin() + 1);
    if (auto ok = c.allreduce(message.data(), message.data(), message.size(), DataType::F32, ReduceOp::Avg);
        !ok) {
      std::fprintf(stderr, "rank %d: allreduce: %s\n", c.rank(), ok.error().describe().c_str());
      return 2;
    }
    loss = message[0];
    std::copy(message.begin() + 1, message.end(), grad.begin());
    step(w, grad);
    if (c.rank() == 0 && (s % 20 == 0 || s == kSteps - 1)) std::printf("step %2d loss %.6f\n", s, loss);
  }
  if (c.rank() != 0) return 0;
  float single = train_single(data);
  double diff = std::fabs(loss - single) / std::max(1e-12f, std::fabs(single));
  std::printf("ranks %d (%s): distributed loss %.7f single-process loss %.7f relative difference %.2e %s\n",
              c.size(), c.transports().c_str(), loss, single, diff, diff <= 1e-5 ? "MATCH" : "MISMATCH");
  return diff <= 1e-5 ? 0 : 1;
}
