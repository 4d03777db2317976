"""Static reward-hacking checks of a candidate: :func:`analyze_candidate`.

What runs, in order:

1. Parse (a syntax error is one ``syntax_error`` finding).
2. File-wide bans (:mod:`~musaenv.verification.static_safety`): dynamic code, processes, network, files,
   monkeypatching, introspection, side streams, graph replay, global state, banned imports.
3. Every ``load_inline`` call: its sources are recovered (:mod:`~musaenv.verification.static_sources`) and
   scanned after preprocessing (:mod:`~musaenv.verification.static_cpp`).
4. Reachability from ``ModelNew.forward`` (:mod:`~musaenv.verification.static_flow`), following helper functions
   and methods transitively: torch compute (policy-dependent), at least one custom kernel, ``try``/``except``
   fallbacks, use of the reference ``Model``, output caches.

Policies: ``strict`` allows only tensor plumbing in reachable code (MusaCoder, REFERENCES.md); ``kernelbench``
lets some operators stay in PyTorch (warnings) and refuses what KernelBench's own checker refuses; ``permissive``
reports torch glue as warnings and lists it in ``torch_calls``; ``off`` keeps only the safety bans.
"""

from __future__ import annotations

import ast
import logging

from musaenv.backends import get_backend
from musaenv.errors import ConfigError
from musaenv.verification import allowlists as al
from musaenv.verification.findings import BACKENDS, ERROR, POLICIES, WARNING, Finding, StaticReport, sort_findings
from musaenv.verification.static_cpp import check_build
from musaenv.verification.static_cupy import cupy_findings
from musaenv.verification.static_flow import Event, FunctionAnalyzer, Summary
from musaenv.verification.static_model import Program, Unit
from musaenv.verification.static_names import Symbols, build_symbols
from musaenv.verification.static_safety import safety_findings
from musaenv.verification.static_sources import RecoveredBuild, find_builds

__all__ = ["analyze_candidate"]

logger = logging.getLogger(__name__)

_MAX_ROUNDS = 4  # parameter kinds and return kinds settle in two or three rounds on real candidates
_CACHE_DECORATORS = ("functools.lru_cache", "functools.cache")
_TOO_DEEP = "the candidate is nested too deeply to be analysed statically"
_NN_MODULE = ("torch.nn.Module", "torch.nn.modules.module.Module")


def _policy_finding(flag: str, policy: str, message: str, line: int | None) -> Finding | None:
    severity = al.policy_severity(flag, policy)
    return Finding(flag, severity, message, line) if severity else None


def _forward_params(unit: Unit) -> dict[str, str]:
    a = unit.node.args
    params = {p.arg: "tensor" for p in unit.params() + a.kwonlyargs}
    if a.vararg is not None:
        params[a.vararg.arg] = "tensor"
    return params


def _default_params(unit: Unit) -> dict[str, str]:
    a = unit.node.args
    ps = unit.params()
    with_default = ps[len(ps) - len(a.defaults) :] if a.defaults else []
    out = {p.arg: "unknown" for p in ps + a.kwonlyargs}
    out.update({p.arg: "meta" for p, d in zip(with_default, a.defaults) if isinstance(d, ast.Constant)})
    return out


def _explore(prog: Program, roots: list[str]) -> dict[str, Summary]:
    """Analyse every unit reachable from ``roots``, refining parameter and return kinds to a fixed point."""
    fixed = {r: _forward_params(prog.units[r]) for r in roots}
    params: dict[str, dict[str, str]] = dict(fixed)
    summaries: dict[str, Summary] = {}
    for _ in range(_MAX_ROUNDS):
        summaries = {}
        work = list(reversed(roots))
        while work:
            key = work.pop()
            if key in summaries or key not in prog.units:
                continue
            unit = prog.units[key]
            kinds = fixed[key] if key in fixed else {**_default_params(unit), **params.get(key, {})}
            summaries[key] = FunctionAnalyzer(prog, unit, kinds).run()
            work.extend(e.callee for e in summaries[key].events if e.kind == "call")
        new_params: dict[str, dict[str, str]] = dict(fixed)
        for s in summaries.values():
            for e in s.events:
                if e.kind == "call" and e.callee not in fixed:
                    slot = new_params.setdefault(e.callee, {})
                    for name, kind in e.args:
                        slot[name] = "tensor" if "tensor" in (kind, slot.get(name)) else slot.get(name, kind)
        returns = {k: s.returns for k, s in summaries.items()}
        if new_params == params and returns == prog.returns:
            break
        params, prog.returns = new_params, returns
    return summaries


def _closure(summaries: dict[str, Summary], kind: str) -> dict[str, bool]:
    """Unit key -> whether it (or anything it calls) has an event of ``kind``."""
    reach = {k: any(e.kind == kind for e in s.events) for k, s in summaries.items()}
    changed = True
    while changed:
        changed = False
        for k, s in summaries.items():
            if not reach[k] and any(e.kind == "call" and reach.get(e.callee, False) for e in s.events):
                reach[k] = changed = True
    return reach


def _reaches(e: Event, kind: str, closure: dict[str, bool]) -> bool:
    return e.kind == kind or (e.kind == "call" and closure.get(e.callee, False))


def _fallbacks(summaries: dict[str, Summary], compute: dict[str, bool], kernel: dict[str, bool]) -> list[Finding]:
    out = []
    for s in summaries.values():
        for t in s.tries:
            body = [e for e in s.events if (t.id, "body") in e.region]
            handler = [e for e in s.events if (t.id, "handler") in e.region]
            outside = [e for e in s.events if (t.id, "body") not in e.region]
            what = "contextlib.suppress" if t.suppress else "try/except"
            if any(_reaches(e, "compute", compute) for e in handler):
                msg = f"line {t.line}: the except handler of this {what} falls back to torch compute"
            elif (
                t.swallows
                and any(_reaches(e, "kernel", kernel) for e in body)
                and any(_reaches(e, "compute", compute) for e in outside)
            ):
                msg = f"line {t.line}: this {what} swallows kernel errors while the function computes with torch"
            else:
                continue
            out.append(Finding("try_except_fallback", ERROR, msg, t.line))
    return out


def _guarded_builds(sym: Symbols, reachable: set[int]) -> list[int]:
    """Lines of try statements outside reachable code that build an extension and swallow the error."""
    lines = []
    for node in sym.nodes:
        if not isinstance(node, ast.Try) or node.lineno in reachable:
            continue
        builds = any(isinstance(n, ast.Call) and sym.is_ext_expr(n) for b in node.body for n in ast.walk(b))
        swallows = any(not (h.body and isinstance(h.body[-1], ast.Raise)) for h in node.handlers)
        if builds and swallows:
            lines.append(node.lineno)
    return lines


def _event_findings(prog: Program, summaries: dict[str, Summary], policy: str) -> list[Finding]:
    out: list[Finding] = []
    advice = {
        "strict": "; only tensor plumbing may run there, so write this computation as a custom kernel",
        "kernelbench": " (KernelBench lets some operators stay in PyTorch: tolerated under the kernelbench policy)",
        "permissive": " (tolerated as glue under the permissive policy)",
    }.get(policy, "")
    for s in summaries.values():
        for e in s.events:
            f: Finding | None = None
            if e.kind == "compute":
                msg = f"line {e.line}: {e.desc} is torch compute reachable from ModelNew.forward{advice}"
                f = _policy_finding("forbidden_torch_op", policy, msg, e.line)
            elif e.kind == "reference":
                msg = f"line {e.line}: forward reaches the reference Model; reimplement it with custom kernels"
                f = _policy_finding("reference_model", policy, msg, e.line)
            elif e.kind in ("cache", "state"):
                f = Finding("output_cache", ERROR if e.kind == "cache" else WARNING, f"line {e.line}: {e.desc}", e.line)
            if f is not None:
                out.append(f)
    for key in summaries:
        node = prog.units[key].node
        if isinstance(node, ast.Lambda) or not prog.units[key].params():
            continue
        for dec in node.decorator_list:
            if prog.sym.resolve(dec.func if isinstance(dec, ast.Call) else dec) in _CACHE_DECORATORS:
                msg = f"line {node.lineno}: {node.name} is memoised with {ast.unparse(dec)} and reachable from forward"
                out.append(Finding("output_cache", ERROR, msg, node.lineno))
    return out


def _model_class(prog: Program) -> str:
    """Name of the class ``ModelNew`` refers to (``ModelNew = FusedNet`` is followed)."""
    for stmt in prog.sym.tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and [getattr(t, "id", None) for t in stmt.targets] == ["ModelNew"]
            and isinstance(stmt.value, ast.Name)
            and stmt.value.id in prog.classes
        ):
            return stmt.value.id
    return "ModelNew"


def _model_findings(prog: Program, policy: str) -> tuple[list[Finding], list[Event]]:
    """Findings about ModelNew and the events of everything reachable from its forward."""
    info = prog.classes.get(_model_class(prog))
    if info is None:
        return [Finding("missing_model_new", ERROR, "no class ModelNew is defined", None)], []
    out: list[Finding | None] = []
    for b in info.bases:
        if b == "Model":
            msg = f"line {info.node.lineno}: ModelNew subclasses the reference Model"
            out.append(_policy_finding("reference_model", policy, msg, info.node.lineno))
        elif b.startswith("torch.") and b not in _NN_MODULE:
            msg = f"line {info.node.lineno}: ModelNew subclasses {b} and inherits its torch compute"
            out.append(_policy_finding("forbidden_torch_op", policy, msg, info.node.lineno))
    fwd = prog.find_method(info.name, "forward")
    if fwd is None:
        out.append(_policy_finding("no_custom_kernel", policy, "ModelNew defines no forward method", None))
        return [f for f in out if f is not None], []
    # nn.Module.__call__ runs forward, unless ModelNew overrides the dispatch itself: then that runs too.
    extra = [k for name in ("__call__", "_call_impl") if (k := prog.find_method(info.name, name))]
    summaries = _explore(prog, [fwd, *extra])
    compute, kernel = _closure(summaries, "compute"), _closure(summaries, "kernel")
    out.extend(_event_findings(prog, summaries, policy))
    if not kernel.get(fwd, False):
        msg = "ModelNew.forward never calls a custom kernel (a load_inline extension function or a Triton launch)"
        line = prog.units[fwd].node.lineno
        if _closure(summaries, "opaque").get(fwd, False) and policy != "off":  # calls the static view cannot name
            unsure = f"{msg} that the static view can see; it also calls values it cannot name (left to the runtime "
            out.append(Finding("no_custom_kernel", WARNING, unsure + "check that a kernel ran: no_kernel_call)", line))
        else:
            out.append(_policy_finding("no_custom_kernel", policy, msg, line))
    if policy != "off":
        out.extend(_fallbacks(summaries, compute, kernel))
        if compute.get(fwd, False):
            reachable_tries = {t.line for s in summaries.values() for t in s.tries}
            for line in _guarded_builds(prog.sym, reachable_tries):
                msg = f"line {line}: building the extension is wrapped in a try that swallows failures, and forward "
                out.append(Finding("try_except_fallback", ERROR, msg + "computes with torch", line))
    events = sorted((e for s in summaries.values() for e in s.events), key=lambda e: e.line)
    return [f for f in out if f is not None], events


def _backend_warnings(backend: str, kernels: list[str], kinds: set[str]) -> list[Finding]:
    b = get_backend(backend)
    triton = any(k.endswith("[grid]") for k in kernels)
    device_src = bool(kinds & {"cuda", "musa"})
    mismatch = bool(kernels) and not any(map(b.kernel_call, kernels)) if b.kernel_call else False
    if not (mismatch or (not b.device_code and (triton or device_src))):
        return []
    return [Finding("backend_mismatch", WARNING, b.mismatch, None)]


def _kernelbench_findings(sym: Symbols, builds: list[RecoveredBuild], backend: str) -> list[Finding]:
    """What KernelBench's own static checker refuses and musaenv's other checks do not already refuse.

    KernelBench (``src/kernelbench/kernel_static_checker.py``, ``STRICT_CHECKS`` plus the backend's ``*_impl``)
    refuses every ``try``/``except`` (``code_bypass``), and for CUDA a program without a ``__global__`` kernel
    (``cuda_impl``). Its other strict checks (timing patches, threads, tensor subclasses, ``pass`` as inheritance
    bypass: ``ModelNew(Model)``) are musaenv's safety and contract checks under every policy.
    """
    tries = [n for n in sym.nodes if isinstance(n, ast.stmt) and type(n).__name__ in ("Try", "TryStar")]
    out = [Finding("try_except_fallback", ERROR, f"line {n.lineno}: KernelBench refuses every try/except", n.lineno)
           for n in tries]  # fmt: skip
    texts = [src.text for spec in builds for src in spec.sources]
    marker = get_backend(backend).kernel_marker
    if marker and builds and not any(marker in t for t in texts):
        msg = "KernelBench's CUDA check needs a __global__ kernel in the kernel sources; none was found"
        out.append(Finding("no_custom_kernel", ERROR, msg, builds[0].line))
    return out


def analyze_candidate(
    source: str, *, policy: str = "strict", backend: str = "cpu", preprocess: bool = True, reachability: bool = True
) -> StaticReport:
    """Statically check one candidate for forbidden compute, missing kernels and reward hacks.

    Args:
        source: The candidate's Python source (defines ``class ModelNew``).
        policy: ``strict``, ``kernelbench``, ``permissive`` or ``off`` (see the module docstring).
        backend: ``cpu``, ``cuda``, ``triton``, ``musa`` or ``cupy``; a mismatch between it and the kernels is a
            warning.
        preprocess: Expand C/C++ macros with ``g++ -E`` before scanning extension sources.
        reachability: Run step 4 (reachability from ``ModelNew.forward``). ``False`` leaves the file-wide bans,
            the extension scan and the policy's file-wide checks; ``ModelNew`` itself is not looked at (no
            ``missing_model_new``, ``reference_model``), and no kernels or torch calls are reported: what
            ``benchmarks/reachability_value.py`` compares the analysis against. Evaluations always run it.

    Returns:
        A :class:`StaticReport`; ``report.ok`` is False when some error-level finding was made. A syntax error
        gives exactly one ``syntax_error`` finding (the caller maps it to ``format_error``).

    Raises:
        ConfigError: ``policy`` or ``backend`` is not one of the known values.
    """
    if policy not in POLICIES:
        raise ConfigError(f"policy must be one of {POLICIES}, got {policy!r}; pick one of those")
    if backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {BACKENDS}, got {backend!r}; pick one of those")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as e:
        line = getattr(e, "lineno", None)
        msg = f"line {line}: {getattr(e, 'msg', str(e))}" if line else str(e)
        return StaticReport((Finding("syntax_error", ERROR, f"the candidate is not valid Python: {msg}", line),))
    except RecursionError:
        return StaticReport((Finding("too_complex", ERROR, _TOO_DEEP, None),))
    try:
        sym = build_symbols(tree)
        findings = list(safety_findings(sym, backend))
        builds = find_builds(source, sym)
        for spec in builds:
            findings.extend(check_build(spec, policy, preprocess))
        if get_backend(backend).cupy_api:
            cupy, cupy_sources = cupy_findings(sym, policy, preprocess)
            findings.extend(cupy)
            if cupy_sources:  # KernelBench's __global__ check covers them too
                builds.append(RecoveredBuild(line=cupy_sources[0].line, sources=cupy_sources))
        model_findings, events = _model_findings(Program(sym), policy) if reachability else ([], [])
        if policy == "kernelbench":
            findings.extend(_kernelbench_findings(sym, builds, backend))
    except RecursionError:
        return StaticReport((Finding("too_complex", ERROR, _TOO_DEEP, None),))
    kernels = list(dict.fromkeys(e.desc for e in events if e.kind == "kernel"))
    torch_calls = list(dict.fromkeys(e.desc for e in events if e.kind == "compute"))
    kinds = {src.kind for spec in builds for src in spec.sources}
    findings += model_findings + _backend_warnings(backend, kernels, kinds)
    return StaticReport(sort_findings(findings), tuple(kernels), tuple(torch_calls))
