"""Sizes written as literals inside ``get_inputs``, lifted into module-level names that derivation can vary. No torch.

KernelBench files often write an input's extents in ``get_inputs`` itself (level 1's ``50_conv_standard_2D``:
``torch.rand(batch_size, 3, 224, 224)``). A shape overrides module globals only
(:mod:`musaenv.tasks.constants`), so such a size keeps its value at every tier and only the batch can shrink.
:func:`lift_sizes` rewrites the program so that each such literal reads a module-level name instead:

* what is lifted: an ``int`` literal of at least :data:`~musaenv.tasks.shape_rules.LARGE` in a size position of
  ``torch.rand``/``randn``/``zeros``/``ones``/``empty`` (every positional argument, or a tuple/list passed as the
  size, or ``size=``) and of ``torch.randint`` (its size tuple/list or ``size=``), anywhere inside the top-level
  ``get_inputs``. Smaller literals (3 channels, a kernel of 11) stay as written: scaling never shrinks them;
* equal values share one name (``224, 224`` of a square image stays square; the inner extents of a matmul's two
  inputs stay equal), numbered in order of appearance (``dim_1``, ``dim_2``; a name the program already uses is
  skipped);
* the rewrite: each lifted literal's characters are replaced by its name, and the names' assignments are inserted
  as lines just above ``def get_inputs``; every other byte of the program is unchanged.

Which names are kept is decided by the reference (derivation probes each lifted name changed on its own and drops
those it rejects, e.g. a width a ``nn.Linear(1024, ...)`` written in ``__init__`` needs): pass ``keep``.
"""

from __future__ import annotations

import ast
from collections.abc import Collection
from dataclasses import dataclass

from musaenv.tasks.probe import ProbeClient
from musaenv.tasks.shape_rules import LARGE, META_LIMIT_S, ShapeConfig, scaled_value

__all__ = ["Lifted", "lift_checked", "lift_sizes"]

_SIZED = frozenset({"rand", "randn", "zeros", "ones", "empty"})  # every positional argument is a size
_PREFIX = "dim_"


@dataclass(frozen=True)
class Lifted:
    """A program with its ``get_inputs`` size literals lifted.

    Attributes:
        source: The rewritten program (the input unchanged when nothing was lifted).
        names: Lifted name -> the literal's value, in order of first appearance.
    """

    source: str
    names: dict[str, int]


def _is_size(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value >= LARGE


def _int(node: ast.Constant) -> int:
    assert isinstance(node.value, int)
    return node.value


def _torch_call(node: ast.AST) -> str | None:
    """``rand`` for ``torch.rand(...)`` (the function's name when it is one of the constructors handled)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    f = node.func
    if isinstance(f.value, ast.Name) and f.value.id == "torch" and (f.attr in _SIZED or f.attr == "randint"):
        return f.attr
    return None


def _size_literals(call: ast.Call, fn: str) -> list[ast.Constant]:
    """The literals in the size positions of one constructor call."""
    positions: list[ast.expr] = [k.value for k in call.keywords if k.arg == "size"]
    if fn == "randint":  # randint(high, size) / randint(low, high, size): only the size display
        positions += [a for a in call.args if isinstance(a, (ast.Tuple, ast.List))]
    elif len(call.args) == 1 and isinstance(call.args[0], (ast.Tuple, ast.List)):
        positions += call.args[0].elts
    else:
        positions += call.args
    out: list[ast.Constant] = []
    for p in positions:
        elts = p.elts if isinstance(p, (ast.Tuple, ast.List)) else [p]
        out += [e for e in elts if _is_size(e) and isinstance(e, ast.Constant)]
    return out


def _get_inputs(tree: ast.Module) -> ast.FunctionDef | None:
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"]
    return defs[-1] if len(defs) == 1 else None  # defined twice: which one runs depends on order; left alone


def lift_sizes(source: str, keep: Collection[int] | None = None) -> Lifted:
    """Lift the size literals of ``get_inputs`` (see the module docstring).

    Args:
        source: A KernelBench-format program (valid Python).
        keep: Lift only literals of these values (``None``: every one found).
    """
    tree = ast.parse(source)
    fn = _get_inputs(tree)
    if fn is None:
        return Lifted(source, {})
    found: list[ast.Constant] = []
    for node in ast.walk(fn):
        kind = _torch_call(node)
        if kind is not None:
            assert isinstance(node, ast.Call)
            found += [c for c in _size_literals(node, kind) if keep is None or _int(c) in keep]
    if not found:
        return Lifted(source, {})
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)
    }
    used |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))}
    names: dict[int, str] = {}
    i = 0
    for c in sorted(found, key=lambda c: (c.lineno, c.col_offset)):
        while _int(c) not in names:
            i += 1
            if f"{_PREFIX}{i}" not in used:
                names[_int(c)] = f"{_PREFIX}{i}"
    return Lifted(_rewrite(source, fn, found, names), {n: v for v, n in names.items()})


def _rewrite(source: str, fn: ast.FunctionDef, found: list[ast.Constant], names: dict[int, str]) -> str:
    data = source.encode("utf-8")
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    edits = []
    for c in found:
        a = starts[c.lineno - 1] + c.col_offset
        b = starts[(c.end_lineno or c.lineno) - 1] + (c.end_col_offset or c.col_offset)
        edits.append((a, b, names[_int(c)].encode()))
    top = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
    block = "".join(f"{name} = {value}\n" for value, name in names.items()) + "\n\n"
    edits.append((starts[top - 1], starts[top - 1], block.encode()))
    for a, b, text in sorted(edits, reverse=True):
        data = data[:a] + text + data[b:]
    return data.decode("utf-8")


def lift_checked(source: str, config: ShapeConfig, client: ProbeClient) -> tuple[str, list[str]]:
    """``source`` with the size literals of ``get_inputs`` lifted that the reference lets change, and notes.

    Each lifted name is probed on the meta device at half its value (:func:`scaled_value`), the others at the
    file's: a literal whose change the reference rejects (a width a layer written in ``__init__`` fixes) is left as
    written. One that is accepted becomes a derivation variable like any module constant. A probe that fails
    otherwise (the program does not load, hangs, kills the worker) ends lifting: the file is derived as written.
    """
    lifted = lift_sizes(source)
    if not lifted.names:
        return source, []
    keep, notes = [], []
    for name, value in lifted.names.items():
        reply = client.check(
            lifted.source, {name: scaled_value(value, 0.5)}, real=False, limit_s=config.check_timeout_s,
            repeats=config.repeats, meta_limit_s=META_LIMIT_S,
        )  # fmt: skip
        if reply.get("ok") or reply.get("kind") in ("meta_slow", "too_large"):
            keep.append(value)
            continue
        notes.append(f"get_inputs: {value} kept as written ({reply.get('kind')}: {reply.get('error')})")
        if reply.get("kind") != "reject":  # the program did not load or run (a hang, a dead worker): nothing lifted
            return source, notes
    if not keep:
        return source, notes
    final = lift_sizes(source, keep)
    said = ", ".join(f"{value} as {name}" for name, value in final.names.items())
    return final.source, [f"get_inputs: size literals lifted into module-level names: {said}", *notes]
