"""Nothing of the candidate's runs from the harness's draw of a timed call's inputs to the call's window.

With paired timing each timed call's inputs are drawn in the worker when the parent prepares the call
(:mod:`musaenv.evaluator.pairing`), outside every timed window: the task's ``get_inputs`` runs there, beside the
candidate's module. Any code of the candidate's that runs during that draw works for free. Found from outside
(2026-12-04, static checks off): ``torch.randn`` replaced in torch's namespace, or a ``TorchFunctionMode`` entered at
import and never left, computed half of each call's ReLU while the harness drew its input, and the speedup doubled
with every runtime check passing (the parent's out-of-window accounting only warns, and only past a whole call).

:class:`DrawWatch` takes, before the candidate's code loads, the identity of every attribute of the namespaces an
input program reaches by name (torch and its ``nn.functional``, ``nn.init``, ``random``, ``linalg``, ``special`` and
``fft``, ``torch.Tensor``, numpy and ``numpy.random``, ``random``, ``math``, ``builtins``, the harness's drawing
code and the timing loop's steps after it up to the window, given by the worker (``extra``, ``reach``:
:mod:`musaenv.worker.draw_reach`), and the task program's own module less its size constants, which the harness sets
per shape), the depth of torch's Python mode stacks (function and dispatch modes), the garbage collector's
callbacks, the Python-level signal handlers and the interpreter's trace, profile and ``sys.monitoring`` hooks. The
worker checks them right before each timed draw and right after it, with the collector off during the draw (and, in
:func:`musaenv.timing.timers.time_gated`, from the draw until the parent has read the worker's clock after the
window: no finaliser of the candidate's garbage runs with the inputs drawn and the clock not started): a patch made
by the previous call, by something it left to run when the harness frees its output, or by the draw itself is seen.
Per draw the large namespaces are compared at the names the drawing code looks up (cost, below); after the timed
calls every attribute once. What is found is reported as the harness's tampering (``harness_tampering``) with the
timing report.

What it cannot see: native code that runs inside the draw (an allocator the candidate installed, a signal
handler), which the binary check of the candidate's module refuses to link; a patch that undoes itself within
the draw and is made again by code that then runs outside the draw and its two checks; and what the compared
names reach further down (an attribute of an object they hold: only the few named in ``extra`` are compared).
Audit hooks cannot be listed, so :func:`refuse_audit_hooks` keeps them out.
"""

from __future__ import annotations

import _signal
import gc
import itertools
import math
import operator
import random
import signal
import sys
import types
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

__all__ = ["DrawWatch", "refuse_audit_hooks"]

_MAX_FOUND = 12
# Compared whole at every check: the globals of the drawing code, where an added name shadows a builtin.
_WHOLE = ("task program", "harness")
_GONE = object()
_SIGNALS = sorted(signal.valid_signals())


def _namespaces() -> dict[str, Mapping[str, Any]]:
    import builtins

    import torch.nn.functional as F
    import torch.nn.init

    owners: dict[str, Any] = {"torch": torch, "torch.Tensor": torch.Tensor, "torch.nn.functional": F}
    owners.update({"torch.nn.init": torch.nn.init, "torch.random": torch.random, "torch.linalg": torch.linalg})
    owners.update({"torch.special": torch.special, "torch.fft": torch.fft, "numpy": np, "numpy.random": np.random})
    owners.update({"random": random, "math": math, "builtins": builtins})
    return {name: vars(owner) for name, owner in owners.items()}


def _mode_depths() -> tuple[int, int]:
    """Depth of torch's Python function-mode and dispatch-mode stacks (0, 0 where this torch cannot say)."""
    function = getattr(torch._C, "_len_torch_function_stack", lambda: 0)
    dispatch = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)
    return int(function()), int(dispatch())


def _hooks() -> tuple[Any, ...]:
    """The ways the interpreter calls back into Python code on its own: the garbage collector's callbacks, the
    trace and profile functions, the Python-level signal handlers (a timer's ``SIGALRM`` would run one between
    a draw and its window), the tools holding a ``sys.monitoring`` id (3.12+). Not the import system's finders:
    a draw imports nothing, and an honest candidate's imports may add one (six's meta importer). Audit hooks
    cannot be listed: :func:`refuse_audit_hooks` keeps new ones out instead. Compared by :func:`_same_hooks`."""
    out: list[Any] = [*gc.callbacks, _GONE, sys.gettrace(), sys.getprofile()]
    out += map(_signal.getsignal, _SIGNALS)  # a Python handler runs between any two bytecodes (C's: no enum wrap)
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:  # a tool's events and callbacks need its id taken first (use_tool_id)
        out += [v for tool in range(6) for v in (monitoring.get_tool(tool), monitoring.get_events(tool))]
    return tuple(out)


def _same_hooks(now: tuple[Any, ...], was: tuple[Any, ...]) -> bool:
    """The same objects one by one, never through an object's own ``__eq__`` (a profile function whose ``__eq__``
    says True would pass a ``==``, and would run inside the check); a plain ``int`` or ``str`` by value."""
    if len(now) != len(was):
        return False
    return all(a is b or (type(a) is type(b) and type(a) in (int, str) and a == b) for a, b in zip(now, was))


class _AuditHooks:
    installed = False
    refused = 0  # hooks refused since refuse_audit_hooks


def refuse_audit_hooks() -> int:
    """From now on no audit hook can be added in this process (an existing hook that raises ``RuntimeError`` on
    ``sys.addaudithook`` makes CPython drop the new one and suppress the error; ``PySys_AddAuditHook`` from C asks
    the same hooks); returns how many were refused so far. An audit hook runs at events the harness itself raises
    between a draw and its window (``builtins.id``, ``compile``, ``object.__getattr__``), the inputs drawn: seen
    from outside. Refused silently, not reported: filelock adds one of its own on Python 3.12+ when imported (for
    fork safety, which the worker's sandbox refuses anyway). Installed once per process; a Python call per
    audited event from then on (~0.13 us)."""
    if not _AuditHooks.installed:

        def refuse(event: str, args: tuple[Any, ...]) -> None:
            if event == "sys.addaudithook":
                _AuditHooks.refused += 1
                raise RuntimeError("audit hooks are refused in a candidate's worker")

        sys.addaudithook(refuse)
        _AuditHooks.installed = True
    return _AuditHooks.refused


# Names the interpreter looks up for the code without their being in it: construction, calls, attribute access,
# with-blocks, iteration, truth, numbers and formatting, comparison, and torch's overrides (a ``TimeReady(...)``
# runs the class's ``__init__``; ``f"{x}"`` its ``__format__``).
_IMPLIED = frozenset(
    """__init__ __new__ __post_init__ __call__ __getattribute__ __getattr__ __setattr__ __delattr__ __get__ __set__
    __enter__ __exit__ __iter__ __next__ __len__ __getitem__ __setitem__ __contains__ __bool__ __index__ __int__
    __float__ __format__ __str__ __repr__ __hash__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__ __del__
    __torch_function__ __torch_dispatch__""".split()  # noqa: SIM905 - a table reads better than 35 literals
)


def _names(functions: Iterable[Any]) -> set[str]:
    """Every global and attribute name the code of ``functions`` (and the code nested in it) looks up, with the
    names the interpreter looks up for it (:data:`_IMPLIED`)."""
    functions = list(functions)
    members = [m for f in functions if isinstance(f, type) for m in vars(f).values()]  # a class: its methods
    todo = [c for f in [*functions, *members] if isinstance(c := getattr(f, "__code__", None), types.CodeType)]
    names: set[str] = set(_IMPLIED)
    while todo:
        code = todo.pop()
        names.update(code.co_names)
        todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return names


def _same(now: Any, was: Any) -> bool:
    """The same object, or a submodule imported since the snapshot (torch's lazy submodules): not a patch."""
    return now is was or (was is _GONE and isinstance(now, types.ModuleType))


class _Narrow:
    """One namespace at the names a draw uses: those present held by identity, the absent ones as a set."""

    def __init__(self, ns: Mapping[str, Any], used: set[str]) -> None:
        self.present = sorted(k for k in used if k in ns)
        self.values = [ns[k] for k in self.present]
        self.absent = frozenset(used - set(self.present))

    def unchanged(self, ns: Mapping[str, Any]) -> bool:
        """In C, no Python frame per name (~0.07 us a name in a Python loop, x 30 namespaces x ~200 names)."""
        now = map(ns.get, self.present, itertools.repeat(_GONE))
        return all(map(operator.is_, now, self.values)) and ns.keys().isdisjoint(self.absent)

    def added(self, ns: Mapping[str, Any]) -> list[str]:
        """Names absent at the snapshot that are there now (a submodule imported since is not a patch)."""
        return [k for k in self.absent & ns.keys() if not isinstance(ns[k], types.ModuleType)]


class DrawWatch:
    """Snapshot of what a draw may reach, taken before the candidate loads; :meth:`around` checks each draw.

    Args:
        program: The task program's module (its functions are what the draw runs).
        sizes: Its attributes the harness sets per shape (``ProgramModule``'s size constants): not watched.
    """

    def __init__(
        self,
        program: types.ModuleType | None = None,
        sizes: set[str] | frozenset[str] = frozenset(),
        extra: Mapping[str, Mapping[str, Any]] | None = None,
        reach: Iterable[Any] = (),
    ) -> None:
        self._live = {**_namespaces(), **(extra or {})}
        if program is not None:
            self._live["task program"] = vars(program)
        self._skip = {"task program": set(sizes)}
        # Per draw, a namespace is checked at the names the draw's code uses (the program's functions and
        # ``reach``, the harness's drawing functions), present or not: every name of every namespace took ~0.65 ms
        # a check right after the cache flush of a timed call (each object's reference count is touched), those
        # names ~0.1 ms. Every name at the end (``full``). The drawing code's globals always whole (_WHOLE).
        codes = [*(v for v in vars(program).values() if callable(v)), *reach] if program is not None else [*reach]
        used = _names(codes)
        self._narrow = {name: _Narrow(ns, used) for name, ns in self._live.items() if name not in _WHOLE}
        self._keys: dict[str, tuple[str, ...]] = {}
        self._values: dict[str, list[Any]] = {}  # held: compared by identity (operator.is_, no audit event)
        for name in self._live:
            self._take(name)
        self._modes = _mode_depths()
        self._hooks = _hooks()
        self.found: list[str] = []

    def _take(self, name: str) -> None:
        ns = self._live[name]
        self._keys[name], self._values[name] = tuple(ns), list(ns.values())

    def _changed(self, name: str) -> list[str]:
        ns, skip = self._live[name], self._skip.get(name, set())
        # The usual case: the same names in the same order and the same objects, compared in C (no Python frame
        # per attribute: a profile hook in the worker made a generator's compare of torch's namespace 5x slower).
        values = self._values[name]
        if not set(map(type, ns)) <= {str}:  # a str subclass key's __eq__ would run in every lookup of its name
            return [f"{name}: a name that is not a plain str"]
        if tuple(ns) == self._keys[name] and all(map(operator.is_, ns.values(), values)):  # same keys: same length
            return []
        before, found = dict(zip(self._keys[name], values)), []
        for key in sorted(set(before) | set(ns)):
            now, was = ns.get(key, _GONE), before.get(key, _GONE)
            if key not in skip and not _same(now, was):
                found.append(f"{name}.{key}")
        if not found:  # only such changes: they become the snapshot, so the next check takes the one pass again
            self._take(name)
        return found

    def _narrow_changed(self, name: str) -> list[str]:
        narrow, ns = self._narrow[name], self._live[name]
        if narrow.unchanged(ns):
            return []
        changed = [k for k, was in zip(narrow.present, narrow.values) if not _same(ns.get(k, _GONE), was)]
        return [f"{name}.{k}" for k in sorted({*changed, *narrow.added(ns)})]

    def check(self, when: str, full: bool = False) -> None:
        """Record (in :attr:`found`, once each) what is no longer as it was; ``when`` says at which point.
        ``full``: every attribute of every namespace, else the names the draw uses (the drawing code's globals
        whole)."""
        now: list[str] = []
        for name in self._live:
            now.extend(self._narrow_changed(name) if name in self._narrow and not full else self._changed(name))
        if _mode_depths() != self._modes:
            now.append(f"torch's Python mode stacks (function, dispatch): {self._modes} -> {_mode_depths()}")
        if not _same_hooks(_hooks(), self._hooks):
            now.append("the interpreter's hooks (gc callbacks, trace, profile, signal handlers, sys.monitoring)")
        for item in now:
            entry = f"{item} ({when})"
            if len(self.found) < _MAX_FOUND and not any(f.startswith(item + " (") for f in self.found):
                self.found.append(entry)

    @contextmanager
    def around(self) -> Iterator[None]:
        """One timed draw: checked before and after, the garbage collector off inside."""
        self.check("before a timed call's inputs were drawn")
        was = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if was:
                gc.enable()
        self.check("while a timed call's inputs were drawn")
