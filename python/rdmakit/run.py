"""``python3 -m rdmakit.run``: torch's launcher (``torch.distributed.run``, the same arguments), made to work with
the torch 1.13 and Python 3.11 that Debian ships together::

    python3 -m rdmakit.run --nproc_per_node=2 examples/python/ddp_mlp.py --backend rdmakit

Why: torch 1.13 parses ``--redirects`` and ``--tee`` (default "0") with ``Std.from_str``, which looks the
number up by iterating over the ``IntFlag`` ``Std``. Since Python 3.11, iterating a flag enum yields only
its single-bit members (OUT, ERR), not NONE (0) or ALL (3), so ``from_str("0")`` returns None and the
launcher fails later in ``to_map`` with "AttributeError: 'NoneType' object has no attribute 'get'". The
plain launcher works with ``--redirects 2 --tee 2`` (values it can find); this one replaces ``from_str`` by
one that converts the number with ``Std(value)`` (only when the installed torch needs it) and then calls
``torch.distributed.run.main`` unchanged.
"""

import re
import sys

__all__ = ["main", "patch_std_parsing"]


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


def main(args=None):
    """Runs ``torch.distributed.run`` with ``args`` (default: the command line) after the fix above."""
    patch_std_parsing()
    from torch.distributed import run

    run.main(args)


if __name__ == "__main__":
    sys.exit(main())
