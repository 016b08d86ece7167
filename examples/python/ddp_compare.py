"""Runs ddp_mlp.py with backend="gloo" and backend="rdmakit" (2 ranks) and checks that both reach the same final
loss, and that training lowered it. Exit 0 on a match.

    python3 examples/python/ddp_compare.py [--launcher rdmakit|torch]

--launcher rdmakit (the default): ``python3 -m rdmakit.run --nproc_per_node=2 ddp_mlp.py ...``, torch's launcher
with its Python 3.11 bug fixed (rdmakit/run.py), no extra flags. --launcher torch: the plain
``python3 -m torch.distributed.run --redirects 2 --tee 2 --nproc_per_node=2 ...`` (the two flags avoid the bug).
The rendezvous address and a free port go through torch's PET_MASTER_ADDR / PET_MASTER_PORT variables.
"""

import argparse
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("ddp_mlp.py")


LAUNCHERS = {
    "rdmakit": ["-m", "rdmakit.run"],
    # --redirects 2 --tee 2: torch 1.13's launcher fails to parse its default "0" under Python 3.11.
    "torch": ["-m", "torch.distributed.run", "--redirects", "2", "--tee", "2"],
}


def run(backend, launcher, nproc=2, extra=()):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, *LAUNCHERS[launcher], f"--nproc_per_node={nproc}", str(SCRIPT), "--backend", backend,
               *extra]
    print("running:", " ".join(command), flush=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PET_MASTER_ADDR="127.0.0.1", PET_MASTER_PORT=str(port))
    result = subprocess.run(command, capture_output=True, text=True, timeout=200, env=env)
    output = result.stdout + result.stderr
    initial = re.search(r"initial loss ([0-9.eE+-]+)", output)
    final = re.search(r"final loss ([0-9.eE+-]+)", output)
    if result.returncode != 0 or not initial or not final:
        sys.exit(f"ddp_mlp.py with backend {backend} failed (exit {result.returncode}):\n{output}")
    print("\n".join(line for line in output.splitlines() if line.startswith("backend ")))
    return float(initial.group(1)), float(final.group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launcher", choices=sorted(LAUNCHERS), default="rdmakit")
    args = parser.parse_args()
    (initial, gloo), (_, rdmakit) = run("gloo", args.launcher), run("rdmakit", args.launcher)
    # Two ranks: each gradient element is a sum of two values, the same whichever backend adds them.
    tolerance = 1e-6 * max(1.0, abs(gloo))
    print(f"final loss: gloo {gloo:.10f} rdmakit {rdmakit:.10f} difference {abs(gloo - rdmakit):.3g}")
    if abs(gloo - rdmakit) > tolerance:
        sys.exit("MISMATCH: the rdmakit backend's loss differs from gloo's")
    if not gloo < 0.5 * initial:
        sys.exit(f"training did not lower the loss enough: {initial} -> {gloo}")
    print("MATCH")


if __name__ == "__main__":
    main()
