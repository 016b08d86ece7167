"""``python3 -m rdmakit.run``: torch's launcher (``torch.distributed.run``, the same arguments), made to work with
the torch 1.13 and Python 3.11 that Debian ships together::

    python3 -m rdmakit.run --nproc_per_node=2 examples/python/ddp_mlp.py --backend rdmakit

Why: torch 1.13 parses ``--redirects`` and ``--tee`` (default "0") with ``Std.from_str``, which looks the
number up by iterating over the ``IntFlag`` ``Std``. Since Python 3.11, iterating a flag enum yields only
its single-bit members (OUT, ERR), not NONE (0) or ALL (3), so ``from_str("0")`` returns None and the
launcher fails later in ``to_map`` with "AttributeError: 'NoneType' object has no attribute 'get'". The
plain launcher works with ``--redirects 2 --tee 2`` (values it can find); this one replaces ``from_str`` by
one that converts the number with ``Std(value)`` (only when the installed torch needs it) and then calls
``torch.distributed.run.main``.

A failing rank ends the job: torch's agent stops the other ranks (SIGTERM, SIGKILL 30 s later) once it
sees one exit non-zero and the others have had ``FAILURE_GRACE_S`` (3 s) to exit on their own (so the rank
that failed first reports its own error even when a rank it told exits before it), and this launcher checks
every half second (``--monitor_interval``; torch's
default is 5 s) unless told otherwise. Ranks of the rdmakit backend learn of the failure within
milliseconds anyway and raise naming the rank. It exits 1 and ends with one line per failed rank, the
cause first (a rank whose error blames no other): ``rdmakit.run: rank 1 failed (exit code 1): ValueError: boom``.
"""

import re
import sys
import time

__all__ = ["main", "patch_std_parsing", "patch_failure_grace", "summarize_failures"]

MONITOR_INTERVAL = "0.5"
# How long the agent waits, once it sees a rank fail, for the other ranks to exit on their own before it
# stops them. The rank that failed first is often not the first to exit: it tells its peers (they raise at
# once and exit) while it still runs its own exit handlers; stopped by SIGTERM, it leaves no error, and the
# summary would name only the ranks that blame it.
FAILURE_GRACE_S = 3.0


def patch_std_parsing():
    """Makes torch's ``Std.from_str`` find every value (0 to 3) under Python 3.11; True when it had to."""
    from torch.distributed.elastic.multiprocessing import api

    std = api.Std
    if std.from_str("0") is std.NONE and std.from_str("3") is std.ALL:
        return False  # a torch (or Python) without the bug

    def from_str(cls, vm):
        if re.match(api._VALUE_REGEX, vm):
            return cls(int(vm))
        if re.match(api._MAPPING_REGEX, vm):
            return {int(rank): cls(int(value)) for rank, value in (item.split(":") for item in vm.split(","))}
        raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")

    from_str.__doc__ = std.from_str.__doc__
    std.from_str = classmethod(from_str)
    return True


def patch_failure_grace(grace=FAILURE_GRACE_S):
    """Makes torch's agent, once it sees a rank fail, wait up to ``grace`` seconds for the other ranks to exit
    on their own (each then reports its own error) before it stops the rest; True when patched."""
    from torch.distributed.elastic.multiprocessing import api

    context = api.SubprocessContext
    if getattr(context._poll, "_rdmakit_grace", False):
        return False
    original = context._poll

    def _poll(self):
        running = [self.subprocess_handlers[r].proc for r in self._running_local_ranks]
        if any(proc.poll() not in (None, 0) for proc in running):
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(proc.poll() is None for proc in running):
                time.sleep(0.05)
        return original(self)

    _poll._rdmakit_grace = True
    context._poll = _poll
    return True


def _message(failure) -> str:
    message = failure.message
    if isinstance(message, dict):  # from an error file: {"message": ..., "extraInfo": {...}}
        message = message.get("message", "")
    return str(message or "").strip()


def _blames_another(rank, message) -> bool:
    # rdmakit's errors on the survivors name the rank that failed first ("rank 1 aborted", "rank 1 died").
    return any(int(other) != rank for other in re.findall(r"rank (\d+) (?:aborted|died)", message))


def summarize_failures(error) -> list:
    """One line per failed rank of torch's ``ChildFailedError``: the cause first (a rank whose error blames no
    other rank), then by time and rank."""
    failures = sorted(getattr(error, "failures", {}).items(),
                      key=lambda item: (_blames_another(item[0], _message(item[1])), item[1].timestamp, item[0]))
    lines = []
    for rank, failure in failures:
        message = _message(failure)
        if not message or message.startswith("To enable traceback"):
            message = "no error recorded (see its output above)"
        why = f"exit code {failure.exitcode}" if failure.exitcode >= 0 else f"signal {-failure.exitcode}"
        lines.append(f"rdmakit.run: rank {rank} failed ({why}): {message.splitlines()[0]}")
    return lines


def main(args=None):
    """Runs ``torch.distributed.run`` with ``args`` (default: the command line) after the fix above; 1 when a rank
    failed, after saying which and why."""
    patch_std_parsing()
    patch_failure_grace()
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    args = list(sys.argv[1:] if args is None else args)
    # Launcher options come before the script: only those count.
    options = args[: next((i for i, a in enumerate(args) if not a.startswith("-")), len(args))]
    if not any(a.startswith(("--monitor_interval", "--monitor-interval")) for a in options):
        args.insert(0, f"--monitor_interval={MONITOR_INTERVAL}")
    try:
        run.main(args)
    except ChildFailedError as error:
        print(str(error), file=sys.stderr)  # torch's table: every failed rank, its host, pid and traceback
        print("\n".join(summarize_failures(error)), file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
