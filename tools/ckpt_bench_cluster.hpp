// `rdmakit-ckpt bench-cluster`: a cluster checkpoint in one process (tools/ckpt_bench_cluster.cpp).
#pragma once

#include <cstddef>
#include <string>

int bench_cluster(const std::string& dir, std::size_t mib, int rounds);
