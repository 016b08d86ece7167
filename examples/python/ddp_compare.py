"""Runs ddp_mlp.py with backend="gloo" and backend="rdmakit" (2 ranks, torch.distributed.run) and checks that
both reach the same final loss, and that training lowered it. Exit 0 on a match."""

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("ddp_mlp.py")


def run(backend, nproc=2, extra=()):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # --redirects 2 --tee 2: torch 1.13's launcher fails to parse its default "0" under Python 3.11.
    command = [sys.executable, "-m", "torch.distributed.run", "--redirects", "2", "--tee", "2",
               f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1", f"--master_port={port}", str(SCRIPT),
               "--backend", backend, *extra]
    result = subprocess.run(command, capture_output=True, text=True, timeout=200,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    output = result.stdout + result.stderr
    initial = re.search(r"initial loss ([0-9.eE+-]+)", output)
    final = re.search(r"final loss ([0-9.eE+-]+)", output)
    if result.returncode != 0 or not initial or not final:
        sys.exit(f"ddp_mlp.py with backend {backend} failed (exit {result.returncode}):\n{output}")
    print("\n".join(line for line in output.splitlines() if line.startswith("backend ")))
    return float(initial.group(1)), float(final.group(1))


def main():
    (initial, gloo), (_, rdmakit) = run("gloo"), run("rdmakit")
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
