#!/bin/sh
# mpirun's remote shell for bench/coll/run-netns.sh: the "host" is a network namespace made by netns.sh.
# Each daemon gets its own UTS namespace named after its host, so Open MPI sees four different nodes.
host=$1
shift
exec ip netns exec "$host" unshare --uts sh -c "hostname $host && $*"
