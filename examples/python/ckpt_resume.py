#!/usr/bin/env python3
"""Auto-resume with rdmakit's checkpoint engine: train, get killed, start again, continue where it stopped.

A small linear model is fitted with SGD on synthetic data that depends only on the step number, so a run
that is killed and restarted must end with exactly the weights of a run that never stopped. Checkpoints
are taken every --every steps with save(), which returns once the state is copied (the disk write runs in
the background, overlapping the next steps).

    /usr/bin/python3 examples/python/ckpt_resume.py --dir /tmp/run1 --steps 200 --kill-at 120   # dies (SIGKILL)
    /usr/bin/python3 examples/python/ckpt_resume.py --dir /tmp/run1 --steps 200                 # resumes
    /usr/bin/python3 examples/python/ckpt_resume.py --dir /tmp/ref  --steps 200 --print-hash    # compare
"""

import argparse
import hashlib
import os
import signal
import sys

import numpy as np

from rdmakit.ckpt import Checkpointer


def batch(step, features):
    """The step's data: the same on every run, so resumed and uninterrupted runs see the same batches."""
    rng = np.random.default_rng(step)
    x = rng.standard_normal((64, features)).astype(np.float32)
    y = x @ np.linspace(-1, 1, features, dtype=np.float32) + 0.5
    return x, y


def train_step(state, step):
    x, y = batch(step, state["w"].size)
    error = x @ state["w"] + state["b"][0] - y
    state["w"] -= 0.01 * (x.T @ error) / len(y)   # in place: the engine registered these arrays
    state["b"] -= 0.01 * error.mean()
    state["step"][0] = step
    return float((error ** 2).mean())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--features", type=int, default=4096)
    parser.add_argument("--kill-at", type=int, default=-1, help="SIGKILL this process at that step (a crash)")
    parser.add_argument("--print-hash", action="store_true")
    args = parser.parse_args()
    state = {"w": np.zeros(args.features, np.float32), "b": np.zeros(1, np.float32), "step": np.zeros(1, np.int64)}
    with Checkpointer(args.dir, state, keep=2, direct_io=False) as ckpt:
        restored = ckpt.restore_latest()
        start = 0 if restored is None else restored + 1
        print(f"{'resumed after step ' + str(restored) if restored is not None else 'fresh start'}", flush=True)
        loss = None
        for step in range(start, args.steps):
            loss = train_step(state, step)
            if step == args.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            if step % args.every == 0 or step == args.steps - 1:
                ckpt.save(step)
        ckpt.wait()
    digest = hashlib.sha256(state["w"].tobytes() + state["b"].tobytes()).hexdigest()[:16]
    print(f"done: {args.steps} steps, loss {loss}, weights {digest if args.print_hash else ''}".rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
