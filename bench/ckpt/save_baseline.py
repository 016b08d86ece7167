#!/usr/bin/python3
"""torch.save / numpy.save of the state rdmakit-ckpt bench checkpoints (8 uint8 tensors of MiB/8 each).

    save_baseline.py torch|numpy DIR MiB

Prints one JSON object: save_ms = until save() returned (training could resume: the page cache holds
it), durable_ms = save() + fsync of the file (what rdmakit's save_ms is: committed on disk). One untimed
save first, so both run with the file system warm, as the engine's warm-up checkpoint does for it.
"""
import json
import os
import sys
import time

import numpy as np


def main():
    tool, directory, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
    parts = 8
    each = (mib << 20) // parts
    arrays = [np.ones(each, dtype=np.uint8) for _ in range(parts)]
    path = os.path.join(directory, "state.pt" if tool == "torch" else "state.npy")
    if tool == "torch":
        import torch

        state = {f"part{i}": torch.from_numpy(a) for i, a in enumerate(arrays)}

        def save(f):
            torch.save(state, f)
    elif tool == "numpy":
        # numpy.save writes one array per call: the 8 parts one after the other into one file.
        def save(f):
            for a in arrays:
                np.save(f, a)
    else:
        sys.exit("usage: save_baseline.py torch|numpy DIR MiB")

    def timed():
        start = time.perf_counter()
        with open(path, "wb") as f:
            save(f)
            f.flush()
            returned = time.perf_counter()
            os.fsync(f.fileno())
        durable = time.perf_counter()
        os.unlink(path)
        return returned - start, durable - start

    timed()  # warm-up
    save_s, durable_s = timed()
    print(json.dumps({"tool": f"{tool}.save", "bytes": each * parts, "save_ms": round(save_s * 1e3, 1),
                      "durable_ms": round(durable_s * 1e3, 1)}), flush=True)


if __name__ == "__main__":
    main()
