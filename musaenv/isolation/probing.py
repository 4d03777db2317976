"""The shape-probe worker's request and reply (:mod:`musaenv.worker.shape_probe`), one JSON object per line.

The worker decodes each request strictly (:meth:`ProbeRequest.read`: an unknown field, a mistyped one or another
``op`` is a :class:`~musaenv.isolation.records.ProtocolError`, answered as a ``load`` error) and fills a
:class:`ProbeReply` as it measures. The client, :class:`musaenv.tasks.probe.ProbeClient`, sits below this layer
(``tasks`` never imports ``isolation``) and reads the replies as JSON objects: :meth:`ProbeReply.wire` leaves out
what was not measured, the form it has always read.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from musaenv.isolation.records import Message, ProtocolError

__all__ = ["ProbeReply", "ProbeRequest"]

OPS = ("load", "check")


@dataclass(frozen=True)
class ProbeRequest(Message):
    """One request: ``load`` a reference program, or ``check`` one shape of it (the client leaves out defaults)."""

    op: str
    """``load``: execute ``source`` once (shapes are then set as the harness does); ``check``: probe ``shape``."""
    source: str = ""
    """The program (``load``), or for a ``check``, a program executed fresh for this check only (empty: the loaded
    one)."""
    shape: dict[str, Any] = field(default_factory=dict)
    """Overrides of the program's size constants, by name (``musaenv.tasks.task.Shape``)."""
    real: bool = False
    """Also build, draw and run for real on the CPU, timing the forward."""
    limit_s: float = 10.0
    """CPU seconds the whole check may take."""
    meta_limit_s: float = 2.5
    """CPU seconds the meta-device forward may take (``musaenv.tasks.shape_rules.META_LIMIT_S`` says why)."""
    repeats: int = 2
    """Timed forwards of a real run (after one warm-up); the fastest counts."""
    max_real_bytes: int = 1 << 30
    """Inputs and state larger than this are not run for real here."""

    @classmethod
    def read(cls, d: Any) -> ProbeRequest:
        """One received request, fields it leaves out at their defaults (``shape``: ``null`` reads as none).

        Raises:
            ProtocolError: not an object, an unknown ``op``, an unknown field or one of the wrong type.
        """
        if not isinstance(d, dict):
            raise ProtocolError("probe request: not a JSON object")
        if d.get("op") not in OPS:
            raise ProtocolError(f"probe request: op {d.get('op')!r:.40}, expected one of {OPS}")
        given = {k: v for k, v in d.items() if not (k == "shape" and v is None)}
        return cls.from_dict({**_defaults(cls), **given})


def _defaults(cls: type[Message]) -> dict[str, Any]:
    """The default of each field of ``cls`` that has one."""
    out = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


@dataclass
class ProbeReply(Message):
    """One reply, filled by the worker as it measures (``None``: not measured; a failed check keeps what it
    measured before it failed, e.g. the inputs of a forward too slow on the meta device)."""

    ok: bool = False
    """The shape loaded, or built, drew and ran (on the meta device, and for real when asked)."""
    error: str | None = None
    """Why not."""
    kind: str | None = None
    """What failed: ``load``, ``reject``, ``meta_slow``, ``too_large``, ``timeout``, ``memory``."""
    validated: str | None = None
    """``meta`` or ``real``: how far the check went."""
    meta_unsupported: str | None = None
    """Why the meta-device forward gave no outputs (a real run measured them instead)."""
    inputs: list[Any] | None = None
    """Per input, ``[shape, dtype]`` of a tensor or ``["scalar", type name]``."""
    input_bytes: int | None = None
    """Bytes of the tensor inputs."""
    state: list[list[int]] | None = None
    """Shapes of the model's state tensors."""
    state_bytes: int | None = None
    """Bytes of the model's state."""
    outputs: list[Any] | None = None
    """Per output, as ``inputs``."""
    output_bytes: int | None = None
    """Bytes of the tensor outputs."""
    flops: int | None = None
    """FLOPs of one forward (torch's counter, meta device)."""
    forward_ms: float | None = None
    """CPU time of the fastest real forward, on one thread."""
    forward_wall_ms: float | None = None
    """Its wall time."""

    def failed(self, error: str, kind: str) -> ProbeReply:
        """This reply, ended by ``error`` (what it measured so far kept)."""
        self.ok, self.error, self.kind = False, error, kind
        return self

    def wire(self) -> dict[str, Any]:
        """The JSON object sent: every measured field (``None`` ones left out, as the client reads them)."""
        return {k: v for k, v in self.to_dict().items() if v is not None}
