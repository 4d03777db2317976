"""The rule table (musaenv.verification.rules) against the code that emits flags, the hostile candidates and
docs/hacks.md: every flag the package emits has a rule, every rule names candidates that exist and trip it (or says
why none does), and the committed docs/hacks.md is the generator's output."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from musaenv.verification import analyze_candidate
from musaenv.verification.hack_classes import HACK_CLASSES
from musaenv.verification.rules import LAYERS, RULES, SEVERITIES, get_rule
from musaenv.verification.rules_doc import markdown
from tests.adversarial.hostile_kernels import render

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "musaenv"
ADVERSARIAL = ROOT / "tests" / "adversarial"
# Not verdict flags: toolchains/ appends compiler flags to lists named ``flags``; tasks/ puts a derived task's warnings
# (single_shape, no_cpu_tier...) on the task, never on an EvalResult.
SKIPPED = ("toolchains", "tasks")
_FLAG = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")
_EMITTERS = frozenset({"Finding", "CppHit", "_policy_finding", "_finding"})

# Call sites whose flag is not a literal: (file, enclosing function, flag expression) -> where its values come from:
# ``module:TABLE`` (a dict's values, the first item of tuple values, or the second item of pairs), ``module:func``
# (the literals it returns), or "" (it passes on a flag already emitted at a literal site). A new indirect site must
# be added here with its sources, or this test fails.
_V = "musaenv.verification."
INDIRECT: dict[tuple[str, str, str], tuple[str, ...]] = {
    ("evaluator/verdict.py", "early_verdict", "flag"): ("musaenv.evaluator.verdict:NOT_CANDIDATE_FAILURES",),
    ("verification/binary_imports.py", "binary_findings", "flag"): (
        f"{_V}binary_imports:judge_symbol",
        f"{_V}binary_imports:_ALWAYS",
    ),
    ("verification/static_cpp.py", "_to_finding", "hit.flag"): (),
    ("verification/static_cpp.py", "_scan_names", "flag"): (
        f"{_V}static_cpp:_qualified",
        f"{_V}static_cpp:_torch_name",
        f"{_V}allowlists:CPP_TORCH_SPECIAL",
        f"{_V}allowlists:CPP_STD_BANS",
    ),
    ("verification/static_cpp.py", "_check_identifier", "flag"): (
        f"{_V}allowlists:CPP_NAME_PATTERNS",
        f"{_V}allowlists:CPP_NAME_BANS",
        f"{_V}libtorch_symbols:symbol_flag",
        f"{_V}libtorch_symbols:_FLAG_BY_PREFIX",
    ),
    ("verification/static_cpp.py", "_check_include", "flag"): (f"{_V}allowlists:CPP_HEADER_FLAGS",),
    ("verification/static_cpp.py", "_scan_strings", "flag"): (f"{_V}static_cpp:_STRING_FLAGS",),
    ("verification/static_cupy.py", "_name_findings", "flag"): (
        f"{_V}static_cupy:cupy_flag",
        f"{_V}static_cupy:CUPY_FLAGS",
    ),
    ("verification/static_py.py", "_policy_finding", "flag"): (),
    ("verification/static_safety.py", "_finding", "flag"): (),
    ("verification/static_safety.py", "add", "flag"): (),
    **{
        ("verification/static_safety.py", fn, "flag"): (
            f"{_V}static_safety:qualname_flag",
            f"{_V}allowlists:BANNED_MODULES",
            f"{_V}allowlists:BANNED_QUALNAMES",
        )
        for fn in ("_module", "visit_ImportFrom", "_chain", "visit_Call")
    },
}

# Two-argument ``add`` calls that are no flag at all.
NOT_FLAGS = {("verification/runtime_provenance.py", "_remember", "sig"): "a value store keyed on a signature"}


def _flag_args(call: ast.Call) -> Iterator[ast.expr]:
    """The expressions in ``call`` that name a flag, by the emission forms the package uses."""
    f = call.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
    if (name in _EMITTERS and call.args) or (name == "add" and len(call.args) >= 2):
        yield call.args[0]  # Finding(flag, ...), out.add(flag, detail): a set's add takes one argument
    if name == "append" and isinstance(f, ast.Attribute) and call.args:
        recv = f.value
        if (recv.id if isinstance(recv, ast.Name) else getattr(recv, "attr", "")) in ("flags", "warnings"):
            yield call.args[0]
    for kw in call.keywords:
        if kw.arg in ("flags", "warnings") and isinstance(kw.value, ast.Tuple):
            yield from (e for e in kw.value.elts if not isinstance(e, ast.Starred))


def _functions(tree: ast.AST) -> dict[int, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Node id -> the innermost function enclosing it."""
    out: dict[int, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                out[id(node)] = fn  # inner functions are walked later and overwrite
    return out


def _literals(expr: ast.expr) -> set[str]:
    """String literals an expression evaluates to: itself, either branch of ``a if c else b``, a tuple's first."""
    out: set[str] = set()
    todo = [expr]
    while todo:
        v = todo.pop()
        if isinstance(v, ast.IfExp):
            todo += [v.body, v.orelse]
        elif isinstance(v, ast.Tuple) and v.elts:
            todo.append(v.elts[0])
        elif isinstance(v, ast.Constant) and isinstance(v.value, str):
            out.add(v.value)
    return out


def _assigned_literals(fn: ast.AST, name: str) -> set[str]:
    """Literals assigned to local ``name`` in ``fn`` (``flag = "x" if c else f()``, walrus included)."""
    out: set[str] = set()
    for node in ast.walk(fn):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.NamedExpr) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            out |= _literals(node.value)  # type: ignore[attr-defined]
    return out


def scan(source: str, where: str) -> tuple[dict[str, str], dict[tuple[str, str, str], str]]:
    """Literal flags emitted in ``source`` (flag -> file:line) and the non-literal sites (key -> file:line).

    A local name's flag counts its assigned literals as emitted; its other values come from :data:`INDIRECT`."""
    tree = ast.parse(source)
    consts = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    enclosing = _functions(tree)
    literal: dict[str, str] = {}
    indirect: dict[tuple[str, str, str], str] = {}
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        at = f"{where}:{call.lineno}"
        fn = enclosing.get(id(call))
        for arg in _flag_args(call):
            value = arg.value if isinstance(arg, ast.Constant) else None
            value = consts.get(arg.id) if isinstance(arg, ast.Name) and arg.id in consts else value
            if isinstance(value, str):
                literal.setdefault(value, at)
                continue
            indirect[(where, fn.name if fn else "<module>", ast.unparse(arg))] = at
            if fn is not None and isinstance(arg, ast.Name):
                literal.update({v: at for v in _assigned_literals(fn, arg.id) if v not in literal})
    return literal, indirect


def _table_flags(obj: object) -> set[str]:
    items = obj.values() if isinstance(obj, dict) else obj
    out: set[str] = set()
    for v in items:  # type: ignore[union-attr]
        if isinstance(v, str):
            out.add(v)
        elif isinstance(v, tuple) and v and isinstance(v[0], str) and _FLAG.match(v[0]):
            out.add(v[0])  # NOT_CANDIDATE_FAILURES: stage -> (flag, sentence)
        elif isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], str):
            out.add(v[1])  # (pattern or prefix, flag)
    return out


def _returned_flags(func: object) -> set[str]:
    """String literals ``func`` returns, alone or first in a tuple, through conditional expressions."""
    tree = ast.parse(inspect.getsource(func).strip())  # type: ignore[arg-type]
    return {v for n in ast.walk(tree) if isinstance(n, ast.Return) and n.value is not None for v in _literals(n.value)}


def _source_flags(ref: str) -> set[str]:
    module, name = ref.split(":")
    obj = getattr(importlib.import_module(module), name)
    return _returned_flags(obj) if callable(obj) else _table_flags(obj)


def _package() -> tuple[dict[str, str], dict[tuple[str, str, str], str]]:
    literal: dict[str, str] = {}
    indirect: dict[tuple[str, str, str], str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.split("/")[0] in SKIPPED:
            continue
        lit, ind = scan(path.read_text(), rel)
        literal = {**lit, **literal}
        indirect.update(ind)
    return literal, indirect


def test_every_flag_the_package_emits_has_a_rule() -> None:
    literal, indirect = _package()
    unknown = {f: at for f, at in literal.items() if get_rule(f) is None}
    assert not unknown, f"flags emitted without a rule in musaenv/verification/rules.py: {unknown}"
    unregistered = {k: at for k, at in indirect.items() if k not in INDIRECT and k not in NOT_FLAGS}
    assert not unregistered, f"flags from non-literal expressions: name their sources in INDIRECT: {unregistered}"
    stale = (set(INDIRECT) | set(NOT_FLAGS)) - set(indirect)
    assert not stale, f"INDIRECT names sites that no longer exist: {stale}"
    for key, sources in INDIRECT.items():
        for ref in sources:
            found = _source_flags(ref)
            assert found, f"{ref} ({key}) yields no flag: the table or function moved?"
            assert all(get_rule(f) is not None for f in found), (ref, sorted(f for f in found if not get_rule(f)))
    assert len(literal) >= 50  # the scan still sees the package's emission sites


BAD_SOURCE = """
NAME = "bogus_constant"
def f(out, flags, run, flag):
    out.add("bogus_add", "detail")
    flags.append("bogus_append")
    run.warnings.append("bogus_warning")
    Finding("bogus_finding", "error", "m")
    base.replace(flags=(NAME,), warnings=(*base.warnings, "bogus_kw"))
    out.add(flag, "detail")
    seen.add("not_a_flag")
    other = "bogus_ifexp" if flag else lookup(flag)
    out.add(other, "detail")
"""


def test_the_scan_finds_each_emission_form() -> None:
    literal, indirect = scan(BAD_SOURCE, "x.py")
    want = {"bogus_constant", "bogus_add", "bogus_append", "bogus_warning", "bogus_finding", "bogus_kw", "bogus_ifexp"}
    assert set(literal) == want
    assert set(indirect) == {("x.py", "f", "flag"), ("x.py", "f", "other")}
    assert all(get_rule(f) is None for f in want)  # so the package test would fail on them


def test_rules_are_well_formed() -> None:
    names = [r.name for r in RULES]
    assert len(names) == len(set(names)), "a flag with two rules"
    for r in RULES:
        assert _FLAG.match(r.name) and r.message, r.name
        assert set(r.hacks) <= set(HACK_CLASSES), (r.name, set(r.hacks) - set(HACK_CLASSES))
        assert r.layers and set(r.layers) <= set(LAYERS), r.name
        assert set(r.severity) <= set(SEVERITIES) and any(r.severity), r.name


def _candidate_files() -> dict[str, Path]:
    files: dict[str, Path] = {}
    for d in sorted(ADVERSARIAL.glob("candidates*")):
        for p in d.glob("*.py"):
            assert p.stem not in files, f"{p.stem} in two candidate folders"
            files[p.stem] = p
    return files


def test_every_rule_names_existing_candidates_or_why_none() -> None:
    files = _candidate_files()
    for r in RULES:
        assert r.candidates or r.no_candidate, f"{r.name}: name a candidate that trips it, or say why none does"
        assert not (r.candidates and r.no_candidate), f"{r.name}: both candidates and a reason for none"
        missing = [c for c in r.candidates if c not in files]
        assert not missing, f"{r.name}: no tests/adversarial/candidates*/<stem>.py for {missing}"


def _source(stem: str, files: dict[str, Path]) -> str:
    path = files[stem]
    return render(stem) if path.parent.name == "candidates" else path.read_text()


@pytest.mark.parametrize("rule", [r for r in RULES if r.layers[0] == "static" and r.candidates], ids=lambda r: r.name)
def test_static_candidates_trip_their_flag(rule: object) -> None:
    """Every candidate a static rule names trips that flag (error or warning) under some policy."""
    files = _candidate_files()
    for stem in rule.candidates:  # type: ignore[attr-defined]
        reports = [analyze_candidate(_source(stem, files), policy=p) for p in ("strict", "kernelbench")]
        seen = {f.flag for rep in reports for f in rep.findings}
        assert rule.name in seen, f"{stem} does not trip {rule.name}: {sorted(seen)}"  # type: ignore[attr-defined]


def _expectations() -> dict[str, set[str]]:
    """candidate -> flags the slow adversarial suites expect of it (their literal tables and test functions)."""
    out: dict[str, set[str]] = {}
    for path in sorted(ADVERSARIAL.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
                try:
                    table = ast.literal_eval(node.value)
                except ValueError:
                    continue
                for stem, v in table.items():
                    flat = {x for x in ast.walk(ast.parse(repr(v))) if isinstance(x, ast.Constant)}
                    out.setdefault(stem, set()).update(str(c.value) for c in flat)
            if isinstance(node, ast.FunctionDef):
                text = ast.get_source_segment(path.read_text(), node) or ""
                for stem in re.findall(r"\b([a-z]\d\d\w*|m_\w+)\b", text):
                    out.setdefault(stem, set()).update(re.findall(r'"([a-z_]+)"', text))
    pointer = ast.literal_eval(_assigned(ADVERSARIAL / "test_adversarial.py", "POINTER_CACHES"))
    for stem in pointer:  # their test asserts stale_output on each
        out.setdefault(stem, set()).add("stale_output")
    return out


def _assigned(path: Path, name: str) -> ast.expr:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    raise AssertionError(f"{name} is gone from {path.name}")


def test_other_candidates_are_what_the_adversarial_suites_expect() -> None:
    """Runtime, worker, timing and binary rules: each candidate named is expected to end with that flag by the
    slow suites (tests/adversarial/test_*.py), which run them."""
    expected = _expectations()
    for r in RULES:
        if r.layers[0] == "static":
            continue
        for stem in r.candidates:
            assert r.name in expected.get(stem, set()), f"{r.name}: no adversarial test expects it of {stem}"
    binary = ast.literal_eval(_assigned(ADVERSARIAL / "test_adversarial.py", "BINARY"))
    for stem, flag in binary.items():
        rule = get_rule(flag)
        assert rule is not None and "binary" in rule.layers and stem in rule.candidates, (stem, flag)


def test_docs_hacks_md_is_the_generators_output() -> None:
    committed = (ROOT / "docs" / "hacks.md").read_text()
    assert committed == markdown(), "regenerate: python -m musaenv.verification.rules_doc > docs/hacks.md"
