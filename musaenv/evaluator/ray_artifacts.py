"""Build artifacts of the Ray evaluator: static ``load_inline`` extraction, shipping and a build-once store.

A candidate's modules are named by content hash (:class:`~musaenv.toolchains.buildspec.BuildSpec`), so the bytes of a
module built on one node are valid on any node with the same toolchain, and a name can never stand in for
different code. :class:`ArtifactStore` keeps one object-store reference per set of names on the driver, so each
set is compiled once per cluster, by a prebuild task or by the first executor that needs it.
"""

from __future__ import annotations

import ast
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from musaenv.toolchains.buildspec import BuildSpec
from musaenv.toolchains.loadargs import LOAD_INLINE_ARGS, canonical

__all__ = ["ArtifactStore", "Prebuilt", "build_names", "collect_artifacts", "extract_build_specs",
           "install_artifacts", "run_prebuild"]  # fmt: skip

_LOAD_KWARGS = tuple(a.name for a in LOAD_INLINE_ARGS)  # positional order of torch's load_inline


def _constants(tree: ast.Module) -> dict[str, Any]:
    """Module-level ``NAME = <literal>`` assignments (later ones win, like execution would)."""
    env: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                env[node.targets[0].id] = _value(node.value, env)
            except ValueError:
                env.pop(node.targets[0].id, None)
    return env


def _value(node: ast.AST, env: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise ValueError(node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e, env) for e in node.elts]
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {_value(k, env): _value(v, env) for k, v in zip(node.keys, node.values) if k is not None}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _value(node.left, env) + _value(node.right, env)
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
        raise ValueError(str(e)) from None


def extract_build_specs(code: str, backend: str) -> list[BuildSpec]:
    """Build specs of the ``load_inline(...)`` calls in ``code`` whose arguments are literals or module constants.

    Calls it cannot read are skipped (never an error).
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    env = _constants(tree)
    specs: list[BuildSpec] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if (fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)) != "load_inline":
            continue
        try:
            kwargs = {k: _value(a, env) for k, a in zip(_LOAD_KWARGS, node.args)}
            kwargs.update({kw.arg: _value(kw.value, env) for kw in node.keywords if kw.arg})
            kwargs = canonical(kwargs)  # a backend's own spelling (musa_sources)
            specs.append(BuildSpec.from_load_inline(kwargs, backend=backend))
        except (ValueError, TypeError, KeyError):
            continue
    return specs


def install_artifacts(artifacts: Sequence[dict[str, Any]], root: Path | None = None) -> int:
    """Put shipped build results into the local extension cache; returns how many were new.

    Each artifact is ``{"name": ..., "so": bytes}`` for a built module or ``{"name": ..., "failed": text}`` for a
    deterministic compile error, so a known-bad candidate is not compiled again. Installed through the loader,
    which seals them with this node's key like a local build (:func:`musaenv.toolchains.loader.import_artifact`).
    """
    from musaenv.toolchains.loader import import_artifact

    return sum(import_artifact(art, root) for art in artifacts)


def collect_artifacts(names: Sequence[str], root: Path | None = None) -> list[dict[str, Any]]:
    """The shippable form of the named modules in the local cache: verified ``.so`` bytes or sealed compile-error
    verdicts (:func:`musaenv.toolchains.loader.export_artifact`).

    Names missing here, or failing verification (a timeout, an infra failure, a tampered file), are left out.
    """
    from musaenv.toolchains.loader import export_artifact

    out = [export_artifact(name, root) for name in names]
    return [a for a in out if a is not None]


def build_names(specs: Sequence[BuildSpec]) -> tuple[str, ...]:
    """Content-hash module names of build specs (sorted: the key of one candidate's build set)."""
    return tuple(sorted({spec.name for spec in specs}))


@dataclass(frozen=True)
class Prebuilt:
    """What a prebuild task built (:func:`run_prebuild`), shipped to the executors through the object store."""

    artifacts: list[dict[str, Any]] = field(default_factory=list)
    """The shippable modules (:func:`collect_artifacts`: the build cache's export form)."""
    compiled: int = 0
    """How many of them this task compiled (the rest were cache hits on its node)."""


def run_prebuild(specs: list[BuildSpec], timeout_s: float) -> Prebuilt:
    """Ray task body: build each spec in this node's cache; what it built, ready to ship."""
    from musaenv.toolchains.loader import build_extension

    compiled, names = 0, []
    for spec in specs:
        res = build_extension(spec, timeout_s=timeout_s)
        compiled += int(not res.cached and not res.infra_error and not res.timed_out)
        names.append(res.name)
    return Prebuilt(collect_artifacts(names), compiled)


class ArtifactStore:
    """Driver-side map from a candidate's build set to one object-store reference, each set built once.

    :meth:`claim` answers either the reference of a set already built, or makes the caller its builder; other
    callers of the same set wait (bounded) until the builder :meth:`publish` es, so concurrent requests of the same
    code do not compile it twice on different nodes. A builder that gives up publishes ``None`` and the next
    claimer becomes the builder.
    """

    def __init__(self, max_entries: int = 512) -> None:
        self._lock = threading.Lock()
        self.max_entries = max_entries  # dropped references free their bytes in the object store
        self._refs: OrderedDict[tuple[str, ...], Any] = OrderedDict()
        self._busy: dict[tuple[str, ...], threading.Event] = {}

    def claim(self, key: tuple[str, ...], timeout_s: float) -> tuple[Any, bool]:
        """``(ref, False)`` for a built set, ``(None, True)`` when the caller must build it and then publish,
        or ``(None, False)`` when another builder did not finish within ``timeout_s`` (evaluate without)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                if key in self._refs:
                    self._refs.move_to_end(key)
                    return self._refs[key], False
                event = self._busy.get(key)
                if event is None:
                    self._busy[key] = threading.Event()
                    return None, True
            if not event.wait(max(0.0, deadline - time.monotonic())):
                return None, False

    def publish(self, key: tuple[str, ...], ref: Any) -> None:
        """End a build claimed with :meth:`claim`: ``ref`` is its artifacts (``None``: nothing to share)."""
        with self._lock:
            if ref is not None:
                self._refs[key] = ref
                while len(self._refs) > self.max_entries:
                    self._refs.popitem(last=False)
            event = self._busy.pop(key, None)
        if event is not None:
            event.set()

    def __len__(self) -> int:
        with self._lock:
            return len(self._refs)
