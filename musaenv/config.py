"""Frozen, self-validating configuration records that round-trip through JSON.

Every number that a paper leaves open is a field here, with the source of its default in a comment.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, TypeVar

from musaenv.errors import ConfigError

#: Verification policies (docs/verification.md has what each allows): ``strict`` (MooreEval: only tensor plumbing
#: in forward), ``kernelbench`` (KernelBench: some operators may stay in PyTorch; what KernelBench's checker refuses
#: is refused), ``permissive`` (torch glue is a warning), ``off`` (only the safety bans).
POLICIES = ("strict", "kernelbench", "permissive", "off")

__all__ = [
    "POLICIES",
    "EnvConfig",
    "EvalConfig",
    "RewardConfig",
    "SandboxConfig",
    "TimingConfig",
]

T = TypeVar("T", bound="_Config")


def _require(cond: bool, cls: str, what: str, found: object, fix: str) -> None:
    if not cond:
        raise ConfigError(f"{cls}: expected {what}, found {found!r}. {fix}")


class _Config:
    """Mixin: JSON round-trip for (possibly nested) frozen dataclasses."""

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def to_json(self) -> str:
        """Serialise to a JSON string."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls: type[T], d: dict[str, Any]) -> T:
        """Build from a dict; nested config dicts are converted; unknown keys raise."""
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = set(d) - set(fields)
        _require(not unknown, cls.__name__, "only known keys", sorted(unknown), f"Known: {sorted(fields)}.")
        kw: dict[str, Any] = {}
        for name, value in d.items():
            sub = _NESTED.get((cls.__name__, name))
            if sub is not None and isinstance(value, dict):
                value = sub.from_dict(value)
            elif isinstance(value, list):
                value = tuple(value)
            kw[name] = value
        return cls(**kw)

    @classmethod
    def from_json(cls: type[T], text: str) -> T:
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))

    def replace(self: T, **changes: Any) -> T:
        """Return a copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


@dataclass(frozen=True)
class TimingConfig(_Config):
    """How candidates and references are timed.

    Attributes:
        warmup: Untimed calls before timing (KernelBench uses 3).
        repeats: Timed calls; the median is reported (KernelBench uses 100 on GPU; fewer on the CPU tier).
        max_time_s: Stop timing early once this much wall time was spent (at least 3 calls are kept; paired
            timing: both programs' calls together).
        min_pairs: Paired timing: pairs always run (up to ``repeats``) before :attr:`stop_width` may end it.
        stop_width: Paired timing stops after :attr:`min_pairs` or more pairs once the speedup's 95 % interval is
            this narrow: half its width in log space, ``(ln high - ln low) / 2``, at most ``stop_width`` (0.15:
            the interval within about -14 % / +16 % of the median). A steady pair of programs then costs
            ``min_pairs`` pairs, a noisy one up to ``repeats``. 0 runs every one of ``repeats`` pairs. Between
            evaluations the speedup moved as much at 12 pairs as at 20 here (docs/verification.md, "Cost").
        flush_cache: Evict caches before each timed call (a buffer larger than the last-level cache).
        flush_bytes: Size of the eviction buffer; ``None`` = 32 MB on the CPU (more than this tier's caches) and
            256 MB on GPUs (KernelBench's L2 flush size; larger than an H100/H200 L2).
        baseline: Reference baseline timed for the speedup: ``eager`` or ``compile`` (``torch.compile``).
        reference: How the reference's time is measured (docs/verification.md, "Paired timing").
            ``paired`` (default): reference and candidate timed call by call, interleaved on the same cores by
            the parent's clock; the speedup is the median of the per-pair ratios, with a 95 % interval
            (``EvalResult.speedup_low``/``speedup_high``), so host load moves both calls of a pair alike and
            cancels; every timed output is checked against the reference's on the same input. ``dedicated_host``:
            the reference is timed once per task, shape, machine, torch version and these settings, sealed on
            disk and reused (cheap, but measured at another moment than the candidate: only for a host that
            runs nothing else; ``cached`` is its former name). ``every``: timed again after each candidate, in a
            block of its own (checks every timed output; under load its speedup still moves).
        cpu_threads: Intra-op threads for both reference and candidate on the CPU backend.
        probes: Timed calls, picked after the run from a seed the worker never sees, whose outputs are checked
            through fingerprints against the reference on the same input (besides the two rechecked in full and
            the last call). Each costs the reference a draw and a forward (~15-20 ms on the CPU tier of l1_relu;
            2, 4 and 8 probes gave 116, 128 and 113 repeated evaluations per minute side by side, i.e. below the
            noise); two catch a cheat that fakes half of the 17 unchecked calls of 20 79 % of the time, four
            98.5 %. With ``reference="every"`` every timed call is checked anyway; paired timing (eager baseline)
            checks every call through the reference's own timed outputs and runs no probes.
        enabled: When False, correctness only; speedup is ``None``.
        allocator: The C allocator's settings in both workers (docs/scaling.md, "Load independence"). ``steady``
            (default): glibc's ``malloc`` keeps freed memory and serves blocks under 32 MiB from its heap
            (:data:`musaenv.isolation.process.STEADY_MALLOC`), so a call's intermediate tensors reuse pages that
            are already mapped instead of faulting in fresh zeroed ones on some calls and not on others; a setting
            of those variables in the user's environment wins. ``system``: glibc's own adaptive defaults.
    """

    warmup: int = 3
    repeats: int = 20
    max_time_s: float = 5.0
    min_pairs: int = 10
    stop_width: float = 0.15
    flush_cache: bool = True
    flush_bytes: int | None = None
    baseline: str = "eager"
    reference: str = "paired"
    cpu_threads: int = 1
    probes: int = 4
    enabled: bool = True
    allocator: str = "steady"

    def __post_init__(self) -> None:
        n = type(self).__name__
        _require(self.warmup >= 0, n, "warmup >= 0", self.warmup, "Use 0 to skip warm-up.")
        _require(self.repeats >= 1, n, "repeats >= 1", self.repeats, "Use enabled=False to skip timing.")
        _require(self.max_time_s > 0, n, "max_time_s > 0", self.max_time_s, "Give a positive budget.")
        _require(self.min_pairs >= 3, n, "min_pairs >= 3", self.min_pairs, "An interval needs a few pairs.")
        _require(self.stop_width >= 0, n, "stop_width >= 0", self.stop_width, "Use 0 to run every pair.")
        _require(
            self.flush_bytes is None or self.flush_bytes >= 0,
            n,
            "flush_bytes None or >= 0",
            self.flush_bytes,
            "Use 0 for no flush, None for the device default.",
        )
        _require(self.baseline in ("eager", "compile"), n, "baseline eager/compile", self.baseline, "")
        if self.reference == "cached":  # its former name, kept readable
            object.__setattr__(self, "reference", "dedicated_host")
        modes = ("paired", "dedicated_host", "every")
        _require(self.reference in modes, n, "reference paired/dedicated_host/every", self.reference, "")
        _require(self.cpu_threads >= 1, n, "cpu_threads >= 1", self.cpu_threads, "Use 1 for single-core timing.")
        _require(self.probes >= 0, n, "probes >= 0", self.probes, "Use 0 to check only the rechecked calls.")
        _require(self.allocator in ("steady", "system"), n, "allocator steady/system", self.allocator, "")


@dataclass(frozen=True)
class SandboxConfig(_Config):
    """Resource limits and isolation of the worker that runs candidate code.

    Attributes:
        address_space_mb: Upper bound of the worker's RLIMIT_AS (0 = unlimited). On the CPU the limit itself is
            derived from the task (:mod:`musaenv.evaluator.memory`): the worker's size when ready, plus
            ``memory_factor`` times the reference's measured peak, plus ``memory_headroom_mb``, and at most this
            and the host's memory over two workers per core.
        memory_factor: How many times the reference's peak memory a candidate may use.
        memory_headroom_mb: Added to the derived limit (the harness's own first-run mappings: ~0.3 GB here).
        cpu_time_s: RLIMIT_CPU of the worker (0 = unlimited).
        max_open_files: RLIMIT_NOFILE.
        max_processes: Extra processes the candidate may start (RLIMIT_NPROC headroom; 0 = no limit set).
        block_network: Deny socket creation for network families (seccomp when the csrc helper is built).
        private_tmp: Give the candidate a private working directory, removed afterwards.
        device_memory_fraction: On a GPU (no RLIMIT_AS there: CUDA reserves address space beyond its use), the
            share of the device's memory torch's allocator may give the candidate (0 = no limit); half leaves the
            other half to the reference worker on the same device (musaenv.isolation.gpu_plan).
    """

    address_space_mb: int = 16384
    memory_factor: float = 4.0
    memory_headroom_mb: int = 2048
    cpu_time_s: int = 600
    max_open_files: int = 256
    max_processes: int = 0
    block_network: bool = True
    private_tmp: bool = True
    device_memory_fraction: float = 0.5

    def __post_init__(self) -> None:
        n = type(self).__name__
        _require(0 <= self.device_memory_fraction <= 1, n, "0 <= device_memory_fraction <= 1",
                 self.device_memory_fraction, "0 = no limit.")  # fmt: skip
        _require(self.address_space_mb >= 0, n, "address_space_mb >= 0", self.address_space_mb, "0 = unlimited.")
        _require(self.memory_factor >= 1, n, "memory_factor >= 1", self.memory_factor, "e.g. 4.")
        _require(self.memory_headroom_mb >= 0, n, "memory_headroom_mb >= 0", self.memory_headroom_mb, "e.g. 2048.")
        _require(self.cpu_time_s >= 0, n, "cpu_time_s >= 0", self.cpu_time_s, "0 = unlimited.")
        _require(self.max_open_files >= 16, n, "max_open_files >= 16", self.max_open_files, "Python needs some.")
        _require(self.max_processes >= 0, n, "max_processes >= 0", self.max_processes, "0 = no limit.")


@dataclass(frozen=True)
class EvalConfig(_Config):
    """How one candidate is verified.

    Attributes:
        num_trials: Correctness trials with fresh seeded inputs (KernelBench uses 5), spread over the tier's shapes.
        tier: Size tier: ``cpu`` (small), ``gpu`` (KernelBench-like), ``interp`` (smaller still where a derived
            file allows, for Triton's CPU interpreter; else the cpu tier) or ``auto`` (by backend).
        atol: Absolute tolerance override; ``None`` uses the task's per-dtype default.
        rtol: Relative tolerance override; ``None`` uses the task's per-dtype default.
        compile_timeout_s: CPU seconds one extension's build may use (its whole process tree).
        load_timeout_s: Limit on importing the candidate module beyond compile time.
        run_timeout_s: Limit on all correctness trials together.
        timing_timeout_s: Limit on timing. These four count the candidate's CPU seconds and its own time (wall
            minus run-queue waits), not a busy host's delays; a wall-clock backstop of ``3 x limit + 30 s`` that
            alone runs out is an ``infra_error`` (:mod:`musaenv.isolation.limits`, docs/sandbox.md).
        static_policy: ``strict`` (only tensor plumbing in forward), ``kernelbench`` (KernelBench's rules: some
            operators may stay in PyTorch), ``permissive`` (glue allowed) or ``off`` (see :data:`POLICIES`).
        runtime_policy: What the profiler check of one forward does with aten compute outside the allowlist:
            ``strict`` (a ``cheating`` verdict), ``kernelbench`` (a warning, and ``cheating`` when the candidate's
            own kernels take under 80 % of the compute time: ``low_kernel_coverage``), ``permissive`` (a warning and
            the kernel coverage), ``off`` (no profiling), or ``auto`` (the same as ``static_policy``). Under every
            policy but ``off``, forward's output is also followed by value when torch compute ran: an output a torch
            op computed from forward's inputs is ``torch_computed_output`` (``cheating`` under ``strict`` and
            ``kernelbench``, a warning under ``permissive``). See docs/verification.md.
        runtime_checks: The other runtime checks in the worker: the extension must run on every call and produce
            the output, outputs must follow inputs, a poisoned repeat must reproduce, no threads, timers or global
            settings touched. ``False`` keeps only the output, alias, input-mutation and timed-output checks.
        suspicious_speedup: Speedups above this are reported (warning ``suspicious_speedup``) and recomputed from a
            second measurement taken with a clock captured before the candidate loaded; the lower one counts.
        max_response_chars: Longer responses are refused as ``format_error`` without parsing.
        log_chars: Compiler and runtime logs are truncated to this many characters.
        fork_server: Fork workers from a server process that imported torch once (milliseconds per worker)
            instead of starting a fresh interpreter for each (about 1.5 s of CPU each here). Each candidate still
            gets its own new process; ``False`` is the slower, simplest path.
        triton_aot_arch: Triton without a GPU: a candidate the interpreter finds correct is also compiled to a
            cubin for ``sm_<arch>`` at the task's first GPU-tier shape (:mod:`musaenv.toolchains.triton_aot`); a
            kernel that does not compile is a ``compile_error``. ``None`` skips this check (saves ~4-7 s each).
        secret_plans: Mix 16 bytes of ``os.urandom`` into every evaluation's plan (trial inputs, rechecked and
            probed timed calls), so knowing the seed (``--seed``, an env's reset seed, a parent's argv) does not
            tell a candidate which calls will be checked. ``False`` makes plans a function of the seed alone:
            reproducible runs, at the price that a candidate which learns the seed can replay the plan and
            compute only the checked calls (docs/verification.md, "Secret plans").
        stress_trials: Further correctness trials on the task's inputs with every floating-point tensor scaled
            (x 50-100) or offset (x 8-16, + 32-48 times that), compared at the same tolerance; one counts only
            where the reference's outputs are finite and agree with the reference run in float64
            (docs/verification.md, "Stress trials"). They refuse kernels that are right only on the task's own
            randn: a softmax without its max subtracted, a one-pass variance. ``None``: 2 under the ``strict``
            policy, 0 under the others (``kernelbench`` keeps KernelBench's numbers comparable: its checker draws
            only the task's inputs).
        timing: :class:`TimingConfig`.
        sandbox: :class:`SandboxConfig`.
    """

    num_trials: int = 5
    tier: str = "auto"
    atol: float | None = None
    rtol: float | None = None
    compile_timeout_s: float = 300.0
    load_timeout_s: float = 60.0
    run_timeout_s: float = 60.0
    timing_timeout_s: float = 120.0
    static_policy: str = "strict"
    runtime_policy: str = "auto"
    runtime_checks: bool = True
    suspicious_speedup: float = 50.0
    max_response_chars: int = 200_000
    log_chars: int = 4000
    fork_server: bool = True
    triton_aot_arch: int | None = 90
    secret_plans: bool = True
    stress_trials: int | None = None
    timing: TimingConfig = field(default_factory=TimingConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)

    def __post_init__(self) -> None:
        n = type(self).__name__
        _require(self.num_trials >= 1, n, "num_trials >= 1", self.num_trials, "Use at least one trial.")
        tiers = ("auto", "cpu", "gpu", "interp")
        _require(self.tier in tiers, n, "tier in auto/cpu/gpu/interp", self.tier, "Pick one of those.")
        for name in ("compile_timeout_s", "load_timeout_s", "run_timeout_s", "timing_timeout_s"):
            v = getattr(self, name)
            _require(v > 0, n, f"{name} > 0", v, "Give a positive number of seconds.")
        _require(
            self.static_policy in POLICIES,
            n,
            f"static_policy in {'/'.join(POLICIES)}",
            self.static_policy,
            "Pick one of those.",
        )
        _require(
            self.runtime_policy in ("auto", *POLICIES),
            n,
            f"runtime_policy in auto/{'/'.join(POLICIES)}",
            self.runtime_policy,
            "Pick one of those.",
        )
        _require(self.suspicious_speedup > 1.0, n, "suspicious_speedup > 1", self.suspicious_speedup, "e.g. 50.")
        _require(self.max_response_chars >= 100, n, "max_response_chars >= 100", self.max_response_chars, "")
        _require(self.log_chars >= 100, n, "log_chars >= 100", self.log_chars, "Keep some log.")
        arch = self.triton_aot_arch
        _require(arch is None or arch >= 70, n, "triton_aot_arch None or >= 70", arch, "e.g. 90 (Hopper).")
        for name in ("atol", "rtol"):
            v = getattr(self, name)
            _require(v is None or v >= 0, n, f"{name} None or >= 0", v, "Tolerances are non-negative.")
        st = self.stress_trials
        ok = st is None or (isinstance(st, int) and not isinstance(st, bool) and 0 <= st <= 16)
        _require(ok, n, "stress_trials None or an int in 0..16", st, "None follows the policy; 0 turns them off.")

    @property
    def stress_count(self) -> int:
        """Stress trials of each evaluation: ``stress_trials``, or by policy (2 under ``strict``, else 0)."""
        if self.stress_trials is not None:
            return self.stress_trials
        return 2 if self.static_policy == "strict" else 0


@dataclass(frozen=True)
class RewardConfig(_Config):
    """Per-candidate score s(c) and the episode reward shaper.

    Attributes:
        speedup_weight: lambda in s = 1 + lambda * min(max(v - 1, 0), v_max) (MusaCoder eq. 2; value open there).
        speedup_cap: v_max in the same formula (open in the paper).
        shaper: Name of the reward shaper (``primeecho`` by default; see :mod:`musaenv.rewards`).
        shaper_kwargs: Keyword arguments of the shaper (PrimeEcho: ``alpha``, ``bonus_turn1``, ``bonus_turn2``).
    """

    speedup_weight: float = 0.5
    speedup_cap: float = 2.0
    shaper: str = "primeecho"
    shaper_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = type(self).__name__
        _require(self.speedup_weight >= 0, n, "speedup_weight >= 0", self.speedup_weight, "lambda is non-negative.")
        _require(self.speedup_cap >= 0, n, "speedup_cap >= 0", self.speedup_cap, "v_max is non-negative.")
        _require(isinstance(self.shaper, str) and bool(self.shaper), n, "a shaper name", self.shaper, "")


@dataclass(frozen=True)
class EnvConfig(_Config):
    """Episode-level settings of ``KernelGen-v0``.

    Attributes:
        max_turns: Responses per episode (MusaCoder uses at most 3).
        stop_on_success: End the episode at the first correct turn (MusaCoder does).
        feedback_chars: Budget for the verifier feedback appended to the prompt after a failed turn.
        eval: :class:`EvalConfig`.
        reward: :class:`RewardConfig`.
    """

    max_turns: int = 3
    stop_on_success: bool = True
    feedback_chars: int = 3000
    eval: EvalConfig = field(default_factory=EvalConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)

    def __post_init__(self) -> None:
        n = type(self).__name__
        _require(self.max_turns >= 1, n, "max_turns >= 1", self.max_turns, "An episode needs one turn.")
        _require(self.feedback_chars >= 200, n, "feedback_chars >= 200", self.feedback_chars, "")


_NESTED: dict[tuple[str, str], type[_Config]] = {
    ("EvalConfig", "timing"): TimingConfig,
    ("EvalConfig", "sandbox"): SandboxConfig,
    ("EnvConfig", "eval"): EvalConfig,
    ("EnvConfig", "reward"): RewardConfig,
}
