# Sourced by the bench/coll scripts: builds the peers' benchmark programs, sets up one-host runs, tags rows.
build_peers() {  # build_peers <bench/coll dir> <work dir>
  local missing=()
  for package in openmpi-bin libopenmpi-dev libgloo-dev; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  mpicxx -O2 -std=c++17 -o "$2/mpi_allreduce" "$1/mpi_allreduce.cpp"
  g++ -O2 -std=c++17 -o "$2/gloo_allreduce" "$1/gloo_allreduce.cpp" -lgloo -lpthread
}

# For the one-host comparisons (run.sh, run-shm.sh): sets `work` (a temporary directory, removed at exit)
# with the peers' programs built in it, `mpi` (mpirun on loopback, oversubscribed, unbound) and `perf`
# (rdmakit-coll-perf of the rdmakit build).
one_host_setup() {  # one_host_setup <bench/coll dir> <rdmakit build dir>
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  build_peers "$1" "$work"
  mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl_tcp_if_include lo
       --mca oob_tcp_if_include lo)
  perf="$2/tools/rdmakit-coll-perf"
}

# For the A/B scripts (run-netns-ab.sh, run-onehost-ab.sh): appends JSON rows to $out tagged with a label,
# the repetition and the load average.
tag_rep() {  # tag_rep <label> <rep>
  sed "s/^{/{\"label\":\"$1\",\"rep\":$2,\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",/" >>"$out"
}

# A contender "<label>=<rdmakit build dir>[@VAR=value...]": sets `label`, `build` (absolute) and `settings`
# (the VAR=value list).
parse_contender() {  # parse_contender <contender>
  label=${1%%=*}
  local parts
  IFS=@ read -r -a parts <<<"${1#*=}"
  build=$(realpath "${parts[0]}")
  settings=("${parts[@]:1}")
}
