"""Recover, without running anything, the C++/CUDA sources and build flags a candidate passes to ``load_inline``.

Sources may be string literals, module-level or local constants, concatenations, f-strings whose fields are
themselves constants, lists of those, ``textwrap.dedent``/``strip``/``replace``/``join``/``format`` of those. When a
name is assigned several times every value is kept, so a branch-dependent source is scanned in all its forms. An
argument that cannot be recovered is reported by the caller as ``unresolved_source``: what cannot be read cannot
be checked.
"""

from __future__ import annotations

import ast
import itertools
import textwrap
from dataclasses import dataclass, field

from musaenv.toolchains.loadargs import flag_keywords, positional_name, source_kind
from musaenv.verification.static_names import Symbols, is_load_inline_name

__all__ = ["RecoveredBuild", "SourceText", "find_builds"]

_MAX_VALUES = 16  # alternatives kept per expression; more than this is treated as unresolvable
# The arguments read: each source keyword (torch's and a backend's own spelling, musa_sources) with the kind of
# text it holds, and every flag keyword, from the one table of load_inline's arguments (musaenv.toolchains.loadargs).
_FLAG_KWS = flag_keywords()
_POSITIONAL = {i: positional_name(i) or "" for i in (1, 2)}  # cpp_sources, cuda_sources; later ones: see _args_of


class _Unresolved(Exception):
    """An expression whose value cannot be known statically."""


Value = str | tuple[str, ...] | None | int | float | bool


@dataclass(frozen=True)
class SourceText:
    """One source file handed to the compiler.

    Attributes:
        kind: ``cpp``, ``cuda``, ``musa`` or ``sycl``.
        text: The source text (list elements joined with newlines, as torch does).
        line: Python line of the argument.
        first_line: Python line of the text's first line when lines map one to one (a plain triple-quoted
            literal), else ``None``.
    """

    kind: str
    text: str
    line: int
    first_line: int | None = None

    def python_line(self, cpp_line: int | None) -> int:
        """Python line of a 1-based line inside the source text (the argument's line when unknown)."""
        if self.first_line is None or cpp_line is None:
            return self.line
        return self.first_line + cpp_line - 1


@dataclass
class RecoveredBuild:
    """One ``load_inline`` call as far as it could be recovered from the source, never run.

    Not a build request (that is :class:`musaenv.toolchains.buildspec.BuildSpec`, normalised and hashed): a name may
    have several values here, arguments that could not be recovered are listed, and lines are kept for findings.

    Attributes:
        line: Python line of the call.
        sources: Every recovered source text (several per argument when a name has several values).
        cflags: Compiler flags of every ``extra_*cflags`` argument.
        ldflags: Linker flags.
        include_paths: ``extra_include_paths`` entries.
        build_directory: True when a ``build_directory`` other than ``None`` was passed.
        unresolved: Names of the arguments that could not be recovered.
        functions: The ``functions=`` names to bind (first recovered value), ``None`` when not given or not
            recoverable (a dict of docstrings, a computed list): not a finding, the call still names its sources.
        flags_by_keyword: The flags of each flag keyword apart (``extra_cflags``, ``extra_cuda_cflags``, ...), as a
            build request needs them (``cflags`` holds them all).
    """

    line: int
    sources: list[SourceText] = field(default_factory=list)
    cflags: list[str] = field(default_factory=list)
    ldflags: list[str] = field(default_factory=list)
    include_paths: list[str] = field(default_factory=list)
    build_directory: bool = False
    unresolved: list[str] = field(default_factory=list)
    functions: list[str] | None = None
    flags_by_keyword: dict[str, list[str]] = field(default_factory=dict)


class _Evaluator:
    """Evaluates constant expressions against every value each name was ever assigned."""

    def __init__(self, sym: Symbols) -> None:
        self.sym = sym
        self.values: dict[str, list[ast.expr]] = {}
        self.aug: dict[str, list[ast.expr]] = {}
        self.binding: dict[str, list[Value]] = {}
        # Every assignment anywhere in the file counts: keeping all values of a name is conservative.
        for node in sym.nodes:
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self.values.setdefault(t.id, []).append(node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                self.values.setdefault(node.target.id, []).append(node.value)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                self.aug.setdefault(node.target.id, []).append(node.value)

    def eval(self, node: ast.AST, depth: int = 0) -> list[Value]:
        if depth > 20:
            raise _Unresolved("too deep")
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
            return [node.value]
        if isinstance(node, ast.Name):
            return self._name(node.id, depth)
        if isinstance(node, (ast.List, ast.Tuple)):
            parts = [self.eval(e, depth + 1) for e in node.elts]
            return _cap([tuple(_flatten(c)) for c in itertools.product(*parts)])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return _cap([_add(a, b) for a in self.eval(node.left, depth + 1) for b in self.eval(node.right, depth + 1)])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return self._percent(node, depth)
        if isinstance(node, ast.JoinedStr):
            pieces = [self._fstring_part(v, depth) for v in node.values]
            return _cap(["".join(c) for c in itertools.product(*pieces)])
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        raise _Unresolved(type(node).__name__)

    def _percent(self, node: ast.BinOp, depth: int) -> list[Value]:
        """``"..." % (a, b)`` with constant operands."""
        elts = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
        operands = [self.eval(e, depth + 1) for e in elts]
        out: list[Value] = []
        for left in self.eval(node.left, depth + 1):
            for combo in itertools.product(*operands):
                if not isinstance(left, str) or any(isinstance(c, tuple) for c in combo):
                    raise _Unresolved("% formatting")
                try:
                    out.append(left % combo)
                except (TypeError, ValueError, KeyError) as e:
                    raise _Unresolved("% formatting") from e
        return _cap(out)

    def _name(self, name: str, depth: int) -> list[Value]:
        if name in self.binding:
            return self.binding[name]
        exprs = self.values.get(name)
        if not exprs:
            raise _Unresolved(name)
        refers = [any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(e)) for e in exprs]
        base = [v for e, r in zip(exprs, refers) if not r for v in self.eval(e, depth + 1)]
        if not base:
            raise _Unresolved(name)
        self.binding[name] = base
        try:
            # ``src = src + more`` and ``src += more`` extend every value seen so far, once.
            grown = [v for e, r in zip(exprs, refers) if r for v in self.eval(e, depth + 1)]
            for extra in self.aug.get(name, []):
                grown += [_add(a, b) for a in base + grown for b in self.eval(extra, depth + 1)]
        finally:
            del self.binding[name]
        return _cap(list(dict.fromkeys(base + grown)))

    def _fstring_part(self, v: ast.AST, depth: int) -> list[str]:
        if isinstance(v, ast.Constant) and isinstance(v.value, str):
            return [v.value]
        if isinstance(v, ast.FormattedValue) and v.format_spec is None and v.conversion in (-1, 115):
            return [str(x) for x in self.eval(v.value, depth + 1) if not isinstance(x, tuple)]
        raise _Unresolved("f-string field")

    def _call(self, node: ast.Call, depth: int) -> list[Value]:
        q = self.sym.resolve(node.func)
        args = [self.eval(a, depth + 1) for a in node.args]
        if q == "textwrap.dedent" and len(args) == 1:
            return [textwrap.dedent(a) for a in args[0] if isinstance(a, str)]
        if q == "builtins.str" and len(args) == 1:
            return [str(a) for a in args[0]]
        if not isinstance(node.func, ast.Attribute) or (node.keywords and node.func.attr != "format"):
            raise _Unresolved("call")
        method = node.func.attr
        out: list[Value] = []
        for recv in self.eval(node.func.value, depth + 1):
            if not isinstance(recv, str):
                raise _Unresolved("method on non-string")
            for combo in itertools.product(*args):
                out.append(self._str_method(recv, method, list(combo), node, depth))
        return _cap(out)

    def _str_method(self, recv: str, method: str, args: list[Value], node: ast.Call, depth: int) -> str:
        if method in ("strip", "lstrip", "rstrip") and all(isinstance(a, str) for a in args) and len(args) <= 1:
            return str(getattr(recv, method)(*args))
        if method == "replace" and len(args) == 2 and all(isinstance(a, str) for a in args):
            return recv.replace(str(args[0]), str(args[1]))
        if method == "join" and len(args) == 1 and isinstance(args[0], tuple):
            return recv.join(args[0])
        if method == "format":
            kw = {k.arg: self.eval(k.value, depth + 1)[0] for k in node.keywords if k.arg}
            try:
                return recv.format(*args, **kw)
            except (IndexError, KeyError, ValueError, AttributeError) as e:
                raise _Unresolved("str.format") from e
        raise _Unresolved(f"str.{method}")


def _flatten(items: tuple[Value, ...]) -> list[str]:
    out: list[str] = []
    for x in items:
        if isinstance(x, tuple):
            out.extend(x)
        elif isinstance(x, str):
            out.append(x)
        else:
            raise _Unresolved("non-string list element")
    return out


def _add(a: Value, b: Value) -> Value:
    if isinstance(a, str) and isinstance(b, str):
        return a + b
    if isinstance(a, tuple) and isinstance(b, tuple):
        return a + b
    raise _Unresolved("mixed +")


def _cap(values: list[Value]) -> list[Value]:
    if len(values) > _MAX_VALUES:
        raise _Unresolved("too many alternatives")
    return values


def _exact_first_line(source: str, node: ast.AST, text: str) -> int | None:
    """Python line of the text's first line when ``node`` is a plain literal whose lines map one to one."""
    if not isinstance(node, ast.Constant):
        return None
    seg = ast.get_source_segment(source, node) or ""
    if seg.count("\n") != text.count("\n"):
        return None
    return node.lineno


def _args_of(call: ast.Call, ev: _Evaluator, spec: RecoveredBuild) -> dict[str, ast.AST]:
    args: dict[str, ast.AST] = {_POSITIONAL[i]: a for i, a in enumerate(call.args) if i in _POSITIONAL}
    for i, a in enumerate(call.args):
        if i > 2:
            args[f"positional argument {i}"] = a
    for kw in call.keywords:
        if kw.arg is not None:
            args[kw.arg] = kw.value
            continue
        target = kw.value
        if isinstance(target, ast.Name) and len(ev.values.get(target.id, [])) == 1:
            target = ev.values[target.id][0]
        if isinstance(target, ast.Dict) and all(isinstance(k, ast.Constant) for k in target.keys):
            args.update({str(k.value): v for k, v in zip(target.keys, target.values)})  # type: ignore[union-attr]
        else:
            spec.unresolved.append("**kwargs")
    return args


def _literal_node(node: ast.AST, ev: _Evaluator) -> ast.AST:
    """The literal behind ``node`` when it is a name with exactly one literal value (for line mapping)."""
    if isinstance(node, ast.Name) and len(ev.values.get(node.id, [])) == 1 and node.id not in ev.aug:
        node = ev.values[node.id][0]
    if isinstance(node, ast.Call) and len(node.args) == 1 and ev.sym.resolve(node.func) == "textwrap.dedent":
        return node.args[0]  # dedent keeps every line where it was
    return node


def _build_spec(source: str, call: ast.Call, ev: _Evaluator) -> RecoveredBuild:
    spec = RecoveredBuild(line=call.lineno)
    for name, node in _args_of(call, ev, spec).items():
        if name == "functions":
            spec.functions = _names_value(node, ev)
            continue
        kind = source_kind(name) or ("cpp" if name.startswith("positional") else None)
        is_flags = name in _FLAG_KWS or name in ("extra_include_paths", "build_directory")
        if kind is None and not is_flags:
            continue
        try:
            values = ev.eval(node)
        except _Unresolved:
            spec.unresolved.append(name)
            continue
        for v in values:
            if kind is not None and v is not None:
                text = v if isinstance(v, str) else "\n".join(map(str, v)) if isinstance(v, tuple) else str(v)
                lit = _literal_node(node, ev)
                spec.sources.append(
                    SourceText(kind, text, getattr(node, "lineno", call.lineno), _exact_first_line(source, lit, text))
                )
            elif name == "build_directory":
                spec.build_directory = spec.build_directory or v is not None
            elif v is not None:
                items = [v] if isinstance(v, str) else list(v) if isinstance(v, tuple) else [str(v)]
                target = {"extra_ldflags": spec.ldflags, "extra_include_paths": spec.include_paths}
                target.get(name, spec.cflags).extend(items)
                spec.flags_by_keyword.setdefault(name, []).extend(items)
    return spec


def _names_value(node: ast.AST, ev: _Evaluator) -> list[str] | None:
    """The first recovered value of a ``functions=`` argument as a list of names, ``None`` when unknown."""
    try:
        values = ev.eval(node)
    except _Unresolved:
        return None
    first = values[0] if values else None
    return [first] if isinstance(first, str) else list(first) if isinstance(first, tuple) else None


def find_builds(source: str, sym: Symbols) -> list[RecoveredBuild]:
    """Every ``load_inline`` call in the candidate, with what could be recovered of its arguments."""
    ev = _Evaluator(sym)
    return [
        _build_spec(source, node, ev)
        for node in sym.nodes
        if isinstance(node, ast.Call) and is_load_inline_name(sym.resolve(node.func))
    ]
