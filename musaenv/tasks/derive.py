"""Derive the shapes of any KernelBench-format file: a scaled-down ``cpu`` tier and odd sizes per tier. No torch.

Rules (docs/tasks.md has the measured numbers behind the defaults):

* **Variables** are the module-level integer constants of at least 2 (:mod:`musaenv.tasks.constants`), and the
  size literals of ``get_inputs`` (``torch.rand(batch_size, 3, 224, 224)``'s 224) that :mod:`musaenv.tasks.lift`
  lifts into module-level names first, when the reference accepts them changed (the shapes are then for the
  rewritten program, :attr:`Derivation.source`). Those of
  at least :data:`LARGE` are *sizes* that scaling shrinks; smaller ones (kernel sizes, strides, heads, small
  channel counts) keep their values when scaling (unless validation shows them to be extents of the inputs,
  like a batch of 10) and are only nudged to an odd neighbour for the odd shape.
* **gpu tier**: the file's own sizes first (``{}``), then an *odd* shape: every variable moved to an odd value
  near 3/4 of it. Validated on the ``meta`` device (shapes, bytes, FLOPs; nothing allocated) and for real too
  when small enough to run here.
* **cpu tier**: the sizes scaled by one common factor (ratios kept; each value keeps the file's alignment to
  16) until inputs + outputs fit :attr:`ShapeConfig.cpu_bytes` (meta) and the reference forward
  fits :attr:`ShapeConfig.cpu_forward_ms` on one core (measured for real; up to ``cpu_forward_max_ms`` with the
  warning ``slow_cpu_tier`` when no accepted size is faster), then an odd shape derived from it and run for real
  as well (untimed in evaluations, so held to ``cpu_forward_max_ms``).
* **interp tier** (what Triton's CPU interpreter is judged at): the same search from the cpu tier's sizes on, under
  :attr:`ShapeConfig.interp_bytes` and :attr:`ShapeConfig.interp_flops` (the interpreter's time follows a launch's
  program instances times their loop steps: bytes bound the first, FLOPs the product), the batch (the variable
  that sets the leading extent of every input and nothing else) held at :data:`INTERP_BATCH` while the other sizes
  scale, with its own odd shape (batch 3); none when the cpu tier already fits both budgets or nothing smaller is
  accepted (an evaluation then uses the cpu tier, :meth:`musaenv.tasks.task.Task.shapes_for`).
* **Coupled constants** (channels divisible by groups, heads dividing the embedding, a kernel no larger than its
  input) are found by validation: when the all-odd shape is rejected, variables are changed one at a time, each
  through a ladder of candidates (odd values first, then 3, 5, 7 times an odd value, then 2, 4, ... 32 times one),
  keeping the first the reference accepts *and* that changes the shapes of its inputs, outputs or parameters.
* A tier left with one shape gets the warning ``single_shape`` (with the reason in :attr:`Derivation.notes`).

Size: shape derivation of one task file (probe, scale, validate, cache) as one pipeline; its rule table already
lives in shape_rules.py.
"""
# Kept whole (~415 lines): one search (_Deriver) whose steps share its probe replies and state.

# Over ~400 lines on purpose: _Deriver is one rule set applied in the order the docstring states it, each rule a
# short method; split across modules, the order (which a derived shape depends on) would no longer read in one place.
from __future__ import annotations

import json
import logging
import math
import time
from typing import Any

from musaenv.tasks.constants import Constants, Slot, read_constants
from musaenv.tasks.lift import lift_checked
from musaenv.tasks.probe import ProbeClient
from musaenv.tasks.shape_rules import (
    INTERP_BATCH,
    LARGE,
    META_LIMIT_S,
    MIN_SCALED,
    PEAK_FLOPS,
    REAL_FLOPS,
    REAL_STATE_BYTES,
    STEPS,
    Derivation,
    ShapeConfig,
    call_bytes,
    ladder,
    leading_only,
    scaled_value,
    shape_info,
    signature,
)

__all__ = ["Derivation", "ShapeConfig", "derive_shapes", "ladder"]

log = logging.getLogger(__name__)


class _Deriver:
    """One file's derivation (state shared by the steps below)."""

    def __init__(self, source: str, config: ShapeConfig, client: ProbeClient) -> None:
        self.source, self.config, self.client = source, config, client
        self.consts: Constants = read_constants(source)
        self.deadline = time.monotonic() + config.file_timeout_s
        self.result = Derivation()
        self._memo: dict[tuple[str, bool], dict[str, Any]] = {}
        self._extents: set[Slot] | None = None
        self.meta_slow = False  # the meta device is too slow for this program: cpu checks run for real
        self.slow_tier = False  # no size met cpu_forward_ms; the tier is held to cpu_forward_max_ms instead
        self.frozen: dict[Slot, int] = {}  # sizes the cpu search stopped scaling (coupled to a fixed constant)
        self.pinned: dict[Slot, int] = {}  # the interp tier's batch: INTERP_BATCH at every scale factor
        self.budget_bytes = config.cpu_bytes  # inputs + outputs of the tier being searched (cpu, then interp)
        self.budget_flops = config.cpu_forward_max_ms * 1e-3 * PEAK_FLOPS  # a forward's FLOPs (the interp tier's own)
        self.tier_name = "cpu"

    def probe(self, values: dict[Slot, int], real: bool) -> dict[str, Any]:
        shape = self.consts.shape(values)
        key = (json.dumps(shape, sort_keys=True), real)
        if key not in self._memo:
            left = self.deadline - time.monotonic()
            if left <= 0:
                return {"ok": False, "kind": "timeout", "error": "the file's derivation budget is spent"}
            limit = min(self.config.check_timeout_s, left)
            t0 = time.monotonic()
            self._memo[key] = self.client.check(
                self.source, shape, real=real, limit_s=limit, repeats=self.config.repeats,
                max_real_bytes=max(self.config.real_limit_bytes, self.config.cpu_bytes) + REAL_STATE_BYTES,
                meta_limit_s=0.001 if self.meta_slow else META_LIMIT_S,  # known slow on meta: straight to real
            )  # fmt: skip
            self._memo[key]["shape"] = shape
            self.meta_slow = self.meta_slow or self._memo[key].get("kind") == "meta_slow"
            log.debug("probe %s real=%s: %s in %.2f s", shape, real, self._memo[key].get("kind", "ok"),
                      time.monotonic() - t0)  # fmt: skip
        return self._memo[key]

    def fits_cpu(self, reply: dict[str, Any]) -> bool:
        flops_ok = int(reply.get("flops") or 0) <= self.budget_flops
        return bool(reply.get("ok")) and call_bytes(reply) <= self.budget_bytes and flops_ok

    def consistent(self, reply: dict[str, Any]) -> bool:
        """The program shown for the shape (its constants rewritten) has the sizes the harness's overrides give."""
        from musaenv.tasks.constants import render

        if not reply["shape"]:
            return True
        shown = self.client.check(
            render(self.source, reply["shape"]), {}, real=False, limit_s=self.config.check_timeout_s, fresh=True
        )
        ran = shown.get("ok") or shown.get("kind") == "meta_slow"  # inputs and parameters decide the outputs
        same = (shown.get("inputs"), shown.get("state")) == (reply.get("inputs"), reply.get("state"))
        return bool(ran) and same

    def ladder(self, slot: Slot, value: int) -> list[int]:
        """:func:`ladder`; for a size scaled below :data:`LARGE` (which :func:`ladder` leaves alone, as it would a
        kernel size) also its odd neighbours: 2 -> 3 (a batch of 2 is even), 13 -> 11 or 15 (13 is odd already,
        and the odd shape must differ from the timing one)."""
        out = ladder(value)
        scaled = value < slot.value and (slot.value >= LARGE or slot in self.small_extents())
        if not out and scaled:
            out = [3] if value == 2 else [v for v in (value - 2, value + 2) if v >= 3]
        return out

    def odd_variant(self, base: dict[Slot, int], base_reply: dict[str, Any], cpu: bool) -> dict[str, Any] | None:
        """The odd shape next to ``base`` (accepted by the reference, with other sizes), or ``None``."""
        slots = [s for s in self.consts.slots if self.ladder(s, base[s])]
        if not slots or (self.meta_slow and not cpu):  # gpu sizes of such a program cannot be checked here
            return None
        base_sig = signature(base_reply)

        def good(r: dict[str, Any]) -> bool:
            small = self.fits_cpu(r) if cpu else r.get("ok") and call_bytes(r) <= call_bytes(base_reply)
            return bool(small) and signature(r) != base_sig

        real_first = cpu and self.meta_slow
        every = {**base, **{s: self.ladder(s, base[s])[0] for s in slots}}
        reply = self.probe(every, real=real_first)
        if not good(reply):
            current, sig = dict(base), base_sig
            for slot in sorted(slots, key=lambda s: -base[s]):
                for cand in self.ladder(slot, base[slot]):
                    r = self.probe({**current, slot: cand}, real=real_first)
                    if r.get("ok") and good(r) and signature(r) != sig:
                        current[slot], sig = cand, signature(r)
                        break
            reply = self.probe(current, real=real_first)
            if not good(reply):
                return None
            every = current
        small = call_bytes(reply) - int(reply.get("output_bytes", 0)) <= self.config.real_limit_bytes
        real = cpu or (small and int(reply.get("flops") or 0) <= REAL_FLOPS)
        if real:
            reply = self.probe(every, real=True)
            # Only the first shape is timed: the odd one (smaller) is held to the ceiling, not the noisy target.
            ms = reply.get("forward_ms")
            slow = cpu and (ms is None or float(ms) > self.config.cpu_forward_max_ms)
            if not reply.get("ok") or slow:
                self.result.notes.append(f"odd shape {reply['shape']} failed when run: {reply.get('error', 'slow')}")
                return None
        return reply if self.consistent(reply) else None

    def _fast(self, reply: dict[str, Any]) -> bool:
        ms = reply.get("forward_ms")
        budget = self.config.cpu_forward_max_ms if self.slow_tier else self.config.cpu_forward_ms
        return ms is not None and float(ms) <= budget

    # ---- cpu tier: one common factor f = 2^(-k/STEPS) for every size, ratios kept -----------------------------------

    def scaled(self, k: int) -> dict[Slot, int]:
        factor = 2.0 ** (-k / STEPS)
        extents = self.small_extents()
        out = {}
        for s in self.consts.slots:
            if s in self.pinned:
                out[s] = self.pinned[s]
            elif s in self.frozen:
                out[s] = self.frozen[s]
            elif s.value >= LARGE:
                out[s] = scaled_value(s.value, factor)
            elif s in extents:
                # at least 2: a batch of one makes training-mode BatchNorm reject a 1 x 1 map, and hides batch bugs
                out[s] = max(2, min(s.value, round(s.value * factor)))
            else:
                out[s] = s.value
        return out

    def small_extents(self) -> set[Slot]:
        """Small constants that are extents of the inputs, not hyper-parameters: found by validation.

        Changing one (v -> v - 1, on the meta device) must change the inputs' shapes and leave every parameter
        shape alone: a batch of 10 with image sizes written in ``get_inputs`` qualifies; a kernel size, a group
        or head count or a layer count changes parameters, a stride or padding leaves the inputs alone.
        """
        if self._extents is None:
            self._extents = set()
            base = self.probe({s: s.value for s in self.consts.slots}, real=False)
            for slot in (s for s in self.consts.slots if s.value < LARGE):
                r = self.probe({**{s: s.value for s in self.consts.slots}, slot: slot.value - 1}, real=False)
                ran = r.get("ok") or r.get("kind") == "meta_slow"
                if ran and r.get("state") == base.get("state") and r.get("inputs") != base.get("inputs"):
                    self._extents.add(slot)
        return self._extents

    def batch_slot(self) -> Slot | None:
        """The variable that is the batch: one less changes the leading extent of every input tensor and nothing
        else (:func:`leading_only`, on the meta device); ``None`` when none is, or none is above INTERP_BATCH."""
        values = {s: s.value for s in self.consts.slots}
        base = self.probe(values, real=False)
        for slot in (s for s in self.consts.slots if s.value > INTERP_BATCH):
            if leading_only(base, self.probe({**values, slot: slot.value - 1}, real=False)):
                return slot
        return None

    def _k_max(self) -> int:
        sizes = [s.value for s in self.consts.slots if s.value >= LARGE or s in self.small_extents()]
        return math.ceil(STEPS * math.log2(max(sizes) / MIN_SCALED)) if sizes else 0

    def _status(self, k: int) -> str:
        """``fit`` (accepted, within the byte budget), ``big`` (accepted, over it) or ``reject``."""
        r = self.probe(self.scaled(k), real=False)
        if r.get("kind") == "too_large":  # the meta forward could not give outputs and this is too big to run
            return "big"
        if r.get("kind") == "meta_slow":  # outputs unknown: judged by the inputs; the real run decides later
            self.meta_slow = True
            return "fit" if int(r.get("input_bytes", 0)) <= self.budget_bytes else "big"
        if not r.get("ok"):
            return "reject"
        return "fit" if self.fits_cpu(r) else "big"

    def _next_fit(self, k: int, direction: int, k_max: int) -> int | None:
        """The first k past ``k`` in ``direction`` that fits, skipping rejections (and, shrinking, sizes still too
        big); ``None`` at the end, or growing into a size that is too big."""
        k += direction
        while 0 <= k <= k_max:
            status = self._status(k)
            if status == "fit":
                return k
            if status == "big" and direction < 0:
                return None
            k += direction
        return None

    def _fit_memory(self, k: int, k_max: int) -> int | None:
        """The largest sizes (smallest k) whose meta run is accepted and fits the byte budget, searched from ``k``.

        Too big: shrink until it fits. Rejected (too small for a coupled constant, e.g. channels below the group
        count): grow until accepted. Then grow further past rejections (an alignment may clash with a coupling)
        until the budget is exceeded, keeping the largest that fits.
        """
        status = self._status(k)
        while status == "big" and k < k_max:
            k += 1
            status = self._status(k)
            if status == "reject" and self._freeze(k - 1, k):  # e.g. an image size the model checks: batch shrinks
                status = self._status(k)
        if status == "reject":
            found = self._next_fit(k, -1, k_max) if k > 0 else None
            k_fit = found if found is not None else self._next_fit(k, 1, k_max)
            if k_fit is None:
                # every common factor is rejected: a size the model fixes (its image size) is kept at the file's
                # value, the others shrink (the file's own sizes are accepted, or derivation would not be here)
                return self._fit_memory(k, k_max) if k > 0 and self._freeze(0, k) else None
            k = k_fit
        elif status != "fit":
            return None
        best = k
        for j in range(k - 1, -1, -1):
            status = self._status(j)
            if status == "big":
                break
            if status == "fit":
                best = j
        return best

    def cpu_timing_shape(self, file_reply: dict[str, Any]) -> tuple[dict[str, Any], dict[Slot, int]] | None:
        """The largest scaled shape within both cpu budgets, run for real, and its values (``None``: none found)."""
        k_max = self._k_max()
        over = call_bytes(file_reply) / self.budget_bytes  # inputs alone when the meta forward gave no outputs
        if self.tier_name == "interp":  # FLOPs bound it too (the cpu tier's guess is by bytes, as before)
            over = max(over, int(file_reply.get("flops") or 0) / self.budget_flops)
        # Bytes of two scaled dimensions fall by 2^(2/STEPS) per step: the first guess; _fit_memory corrects it.
        k = self._fit_memory(min(k_max, max(0, math.ceil(STEPS / 2 * math.log2(max(over, 1.0))))), k_max)
        if k is None:
            tiny = self.probe(self.scaled(k_max), real=False)
            why = (
                tiny.get("error")
                or f"{call_bytes(tiny):,} bytes, {int(tiny.get('flops') or 0):,} FLOPs at the smallest"
            )
            self.result.notes.append(f"{self.tier_name} tier: no scaled shape fits {self.budget_bytes:,} bytes ({why})")
            return None
        last: dict[str, Any] = {}
        slow, slow_ok = k - 1, None
        while k <= k_max:
            last = self.probe(self.scaled(k), real=True)
            ok = bool(last.get("ok"))
            if (ok and self._fast(last)) or (not ok and last.get("kind") == "reject"):
                # fast: look back for larger sizes the jump skipped; rejected (e.g. too small): they may be left
                found = self._back_up(slow, k)
                if found is None and not ok:
                    k += 0 if slow_ok is not None and self._freeze(slow_ok, k) else 1
                    continue
                k = k if found is None else found
                last = self.probe(self.scaled(k), real=True)
                if self.consistent(last):
                    return last, self.scaled(k)
                self._note_inconsistent(last)
                return None
            slow = k
            slow_ok = k if ok else slow_ok
            ms = last.get("forward_ms")
            # Time falls at least as fast as f^3 (a matmul; convolutions faster): never overshoots a 3-d problem.
            step = math.ceil(STEPS / 3 * math.log2(float(ms) / self.config.cpu_forward_ms)) if ms else 1
            k += max(1, step)
        fallback = self._slow_fallback()
        if fallback is not None:
            return fallback
        why = last.get("error") or f"{float(last.get('forward_ms') or 0):.1f} ms at the smallest sizes"
        self.result.notes.append(
            f"{self.tier_name} tier: no shape within {self.config.cpu_forward_ms:g} ms on one core ({why})"
        )
        return None

    def _freeze(self, accepted: int, rejected: int) -> bool:
        """Once per file: keep one size at its value at ``accepted`` (a k the reference accepts) so that the others
        scale on to ``rejected``.

        One common factor stops at the first size that a fixed constant bounds (16 channels in 8 groups cannot
        go below 8), although the other sizes could shrink further: tried smallest size first, on the meta device.
        """
        if self.frozen:
            return False
        base = self.scaled(accepted)
        sizes = sorted((s for s in self.consts.slots if base[s] != s.value or s.value >= LARGE), key=lambda s: base[s])
        # one size at a time, then the sizes sharing a value together (height and width of a square image)
        groups = [[s] for s in sizes] + [g for v in sorted({base[s] for s in sizes}) if len(g := [
            s for s in sizes if base[s] == v]) > 1]  # fmt: skip
        for group in groups:
            self.frozen = {s: base[s] for s in group}
            if self.scaled(rejected) != base and self._status(rejected) != "reject":
                kept = ", ".join(s.label() for s in group)
                tier = self.tier_name
                self.result.notes.append(f"{tier} tier: {kept} kept at {base[group[0]]} while the others scale")
                return True
        self.frozen = {}
        return False

    def _slow_fallback(self) -> tuple[dict[str, Any], dict[Slot, int]] | None:
        """The fastest accepted shape run so far, when within ``cpu_forward_max_ms`` (warning ``slow_cpu_tier``)."""
        ran = [r for (_, real), r in self._memo.items() if real and r.get("ok") and r.get("forward_ms") is not None]
        ran = [r for r in ran if self.fits_cpu(r) and float(r["forward_ms"]) <= self.config.cpu_forward_max_ms]
        if not ran:
            return None
        best = min(ran, key=lambda r: float(r["forward_ms"]))
        values = next((self.scaled(k) for k in range(self._k_max() + 1) if self.consts.shape(self.scaled(k)) ==
                       best["shape"]), None)  # fmt: skip
        if values is None or not self.consistent(best):
            return None
        self.slow_tier = True
        if "slow_cpu_tier" not in self.result.warnings:
            self.result.warnings.append("slow_cpu_tier")
        self.result.notes.append(
            f"{self.tier_name} tier: {float(best['forward_ms']):.1f} ms per forward at the smallest accepted sizes, "
            "over the "
            f"{self.config.cpu_forward_ms:g} ms target (within {self.config.cpu_forward_max_ms:g} ms)"
        )
        return best, values

    def _back_up(self, slow: int, fast: int) -> int | None:
        """After a jump, the largest sizes between the last slow k and ``fast`` that are fast (``None``: none).

        Reference kernels are not smooth in size (a depthwise convolution took 140, 49 and 1.3 ms at three
        consecutive steps here), so the jump's estimate may overshoot.
        """
        for j in range(slow + 1, fast):
            r = self.probe(self.scaled(j), real=True)
            if r.get("ok") and self._fast(r) and self.fits_cpu(r):
                return j
        return None

    def _note_inconsistent(self, reply: dict[str, Any]) -> None:
        self.result.notes.append(
            f"shape {reply['shape']}: the program as shown (constants rewritten) has other sizes than the overrides "
            "give (a constant captured at definition time, e.g. a default argument); not used"
        )

    # ---- the whole file --------------------------------------------------------------------------------------------

    def tier(self, name: str, first: dict[str, Any], base: dict[Slot, int]) -> None:
        shapes, info = [first["shape"]], [shape_info(first)]
        odd = self.odd_variant(base, first, cpu=name != "gpu")
        if odd is not None:
            shapes.append(odd["shape"])
            info.append(shape_info(odd))
        else:
            self.result.notes.append(f"{name} tier: {self._why_single()}")
            if "single_shape" not in self.result.warnings:
                self.result.warnings.append("single_shape")
        self.result.shapes[name], self.result.info[name] = shapes, info

    def interp_tier(self, file_reply: dict[str, Any], cpu_reply: dict[str, Any]) -> None:
        """The interp tier: the cpu search again under :attr:`ShapeConfig.interp_bytes` and
        :attr:`ShapeConfig.interp_flops`, from the cpu tier's sizes (their memo reused, budgets of its own); none
        when the cpu tier fits both already or nothing smaller is found."""
        budget, flops = self.config.interp_bytes, self.config.interp_flops
        cpu_flops = int(cpu_reply.get("flops") or 0)
        if call_bytes(cpu_reply) <= budget and cpu_flops <= flops:
            self.result.notes.append(
                f"interp tier: the cpu tier's {call_bytes(cpu_reply):,} bytes per call fit {budget:,} and its "
                f"{cpu_flops:,} FLOPs fit {flops:,}; the interpreter uses the cpu tier"
            )
            return
        self.budget_bytes, self.budget_flops, self.tier_name = budget, float(flops), "interp"
        self.deadline = time.monotonic() + self.config.file_timeout_s
        batch, found = self.batch_slot(), None
        if batch is not None:  # the batch first: the others scale by the common factor within both budgets
            self.pinned = {batch: INTERP_BATCH}
            found = self.cpu_timing_shape(file_reply)
            if found is None:  # no size accepted with that batch (a model that needs more): it scales with the rest
                self.pinned = {}
            else:
                self.result.notes.append(f"interp tier: the batch {batch.label()} held at {INTERP_BATCH}")
        found = found or self.cpu_timing_shape(file_reply)
        if found is None or signature(found[0]) == signature(cpu_reply):
            self.result.notes.append("interp tier: no smaller shape accepted; the interpreter uses the cpu tier")
            return
        self.tier("interp", *found)

    def _why_single(self) -> str:
        if not self.consts.slots:
            return "no module-level integer size constant to vary (sizes written inside get_inputs?)"
        return "no odd variant of the constants was accepted by the reference with other input/output/parameter sizes"

    def run(self) -> Derivation:
        start = time.monotonic()
        defaults = {s: s.value for s in self.consts.slots}
        file_reply = self.probe(defaults, real=False)
        if not file_reply.get("ok") and file_reply.get("kind") in ("load", "worker", "reject", None):
            self.result.warnings.append("not_derived")
            self.result.notes.append(f"the reference does not run at the file's sizes: {file_reply.get('error')}")
            self.result.shapes = {"cpu": [{}], "gpu": [{}]}
        else:
            self.tier("gpu", file_reply, defaults)
            cpu_first = self.cpu_timing_shape(file_reply)
            if cpu_first is None:
                self.result.warnings.append("no_cpu_tier")
            else:
                self.tier("cpu", *cpu_first)
                self.interp_tier(file_reply, cpu_first[0])
        self.result.seconds = time.monotonic() - start
        return self.result


def derive_shapes(
    source: str, config: ShapeConfig | None = None, client: ProbeClient | None = None, lift: bool = True
) -> Derivation:
    """Derive the tiers of one KernelBench-format program (runs it in a probe worker; see the module docstring).

    Args:
        source: The program (valid Python with Model, get_inputs, get_init_inputs).
        config: Budgets; defaults to :class:`ShapeConfig`.
        client: A probe worker to reuse across files (one is started and stopped here otherwise).
        lift: First lift the size literals of ``get_inputs`` into module-level names (:mod:`musaenv.tasks.lift`);
            the shapes are then for :attr:`Derivation.source`, the rewritten program.
    """
    cfg = config or ShapeConfig()
    own = client is None
    probe = client or ProbeClient(cfg.probe_memory_mb)
    try:
        lifted, notes = lift_checked(source, cfg, probe) if lift else (source, [])
        result = _Deriver(lifted, cfg, probe).run()
        result.notes[:0] = notes
        result.source = lifted if lifted != source else None
        return result
    finally:
        if own:
            probe.close()
