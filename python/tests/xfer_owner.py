"""The owner process of test_xfer.py: publishes segments, then checks on request what a peer wrote.

    xfer_owner.py <metadata url> <transport> <size>

Publishes "src" (a numpy array holding pattern(1, size)) and "dst" (allocate_segment, zeros). Prints "ready <engine name>"; then, per line on stdin:
"check <seed>" prints "dst ok" when dst holds pattern(seed, size) exactly, else the first differing offset.
"""

import sys

import numpy as np

from rdmakit import xfer


def pattern(seed, size):
    return np.random.default_rng(seed).integers(0, 256, size=size, dtype=np.uint8)


def main():
    url, transport, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = xfer.open_metadata(url, ttl=2.0, renew_interval=0.5)
    engine = xfer.Engine(store, transports=[transport], peer_timeout=2.0)
    engine.publish("src", pattern(1, size))  # no other reference: the engine keeps the array alive
    dst = engine.allocate_segment("dst", size)
    print("ready", engine.name, flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[0] == "check":
            diff = np.flatnonzero(dst != pattern(int(words[1]), size))
            print("dst ok" if diff.size == 0 else f"dst differs first at {diff[0]} of {diff.size}", flush=True)
    engine.close()


if __name__ == "__main__":
    main()
