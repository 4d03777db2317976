"""The module-level size constants of a KernelBench-format program, read from its syntax tree. No torch here.

A *shape* (:data:`musaenv.tasks.task.Shape`) overrides module globals; the harness sets them on the loaded module
before ``get_init_inputs()`` and ``get_inputs()`` run. This module finds what can be overridden:

* literal constants: ``batch_size = 16``, ``M = 1024 * 2``, ``depth, height, width = 24, 48, 48``,
  ``kernel_size = (3, 5)``, ``layer_sizes = [1024] * 4`` (evaluated without running anything);
* their integer *slots*: each int of at least 2 (a scalar, or one element of a tuple or list). Floats, bools and
  0/1 (reduction axes, paddings, unit strides) are never varied;
* the literal elements of a tuple or list display that also names other constants
  (``input_shape = (batch_size, 3, 224, 224)``: its ``3`` and ``224`` are slots, ``batch_size`` follows its own);
* *dependents*: module-level assignments computed from other constants (``groups = in_channels``). They are
  recomputed for every shape, so the globals the harness sets agree with the program shown to the policy.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Constants", "Slot", "read_constants", "render"]

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.Div: operator.truediv,
}
_MAX_SEQUENCE = 256  # a longer literal list is data, not a size


class _NotConstant(Exception):
    pass


def _number_ok(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _evaluate(node: ast.expr, env: Mapping[str, Any]) -> Any:
    """Value of a constant expression of numbers, tuples, lists, arithmetic and names in ``env``."""
    if isinstance(node, ast.Constant) and _number_ok(node.value):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise _NotConstant(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _evaluate(node.operand, env)
        if _number_ok(v):
            return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) <= _MAX_SEQUENCE:
        items = [_evaluate(e, env) for e in node.elts]
        if all(_number_ok(i) for i in items):
            return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _evaluate(node.left, env), _evaluate(node.right, env)
        if isinstance(node.op, ast.Pow) and (not isinstance(b, int) or abs(b) > 64):
            raise _NotConstant("power")
        if isinstance(a, list) and isinstance(b, int) and isinstance(node.op, ast.Mult) and b <= _MAX_SEQUENCE:
            return a * b
        if _number_ok(a) and _number_ok(b):
            try:
                return _BINOPS[type(node.op)](a, b)
            except (ArithmeticError, ValueError):
                raise _NotConstant("arithmetic") from None
    raise _NotConstant(type(node).__name__)


@dataclass(frozen=True, order=True)
class Slot:
    """One integer that a derived shape may change.

    Attributes:
        name: The module global.
        index: Element index when the global is a tuple or list, else ``None``.
        value: The file's value.
    """

    name: str
    index: int | None
    value: int

    def label(self) -> str:
        """``name`` or ``name[i]``."""
        return self.name if self.index is None else f"{self.name}[{self.index}]"


@dataclass(frozen=True)
class Constants:
    """What of a program's module globals a shape can set.

    Attributes:
        literals: Global name -> the file's value (number, tuple or list of numbers), for literal assignments.
        slots: The integers that may be varied, in source order.
        dependents: Names computed from other globals, with their expressions, in source order.
        positions: Global name -> value nodes of its (last) assignment, for :func:`render`.
    """

    literals: dict[str, Any]
    slots: tuple[Slot, ...]
    dependents: tuple[tuple[str, ast.expr], ...]
    positions: dict[str, ast.expr]

    def shape(self, values: Mapping[Slot, int]) -> dict[str, Any]:
        """The shape that sets ``values`` (slots not given keep the file's value) and the dependents they change."""
        env = dict(self.literals)
        changed: set[str] = set()
        mixed: dict[str, dict[int, int]] = {}  # elements of displays that also name constants, set after evaluation
        for slot, v in values.items():
            if v == slot.value:
                continue
            if slot.name not in self.literals and slot.index is not None:
                mixed.setdefault(slot.name, {})[slot.index] = int(v)
                continue
            changed.add(slot.name)
            if slot.index is None:
                env[slot.name] = int(v)
            else:
                seq = list(env[slot.name])
                seq[slot.index] = int(v)
                env[slot.name] = tuple(seq) if isinstance(self.literals[slot.name], tuple) else seq
        out = {k: env[k] for k in self.literals if k in changed}
        for name, node in self.dependents:
            try:
                env[name] = _evaluate(node, env)
            except _NotConstant:
                continue
            if name in mixed:
                seq = list(env[name])
                for i, v in mixed[name].items():
                    seq[i] = v
                env[name] = tuple(seq) if isinstance(node, ast.Tuple) else seq
            default = self.default_of(name)
            if default is not None and env[name] != default:
                out[name] = env[name]
        return out

    def default_of(self, name: str) -> Any:
        """The file's value of a literal or dependent global (``None`` when it cannot be computed)."""
        if name in self.literals:
            return self.literals[name]
        env = dict(self.literals)
        for dep, node in self.dependents:
            try:
                env[dep] = _evaluate(node, env)
            except _NotConstant:
                continue
        return env.get(name)

    def normalise(self, shape: Mapping[str, Any]) -> dict[str, Any]:
        """A shape read back from JSON, with tuples restored where the file has tuples."""
        out = {}
        for k, v in shape.items():
            out[k] = tuple(v) if isinstance(v, list) and isinstance(self.default_of(k), tuple) else v
        return out


def _assignments(tree: ast.Module) -> list[tuple[str, ast.expr]]:
    """(name, value node) of every top-level assignment, with tuple targets split element by element."""
    out: list[tuple[str, ast.expr]] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) > 1:
            # ``height = width = 256``: the first name holds the value, the others follow it (one statement
            # cannot show two values, so the program shown stays consistent)
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if len(names) == len(node.targets):
                out.append((names[0], node.value))
                out.extend((n, ast.Name(id=names[0], ctx=ast.Load())) for n in names[1:])
            continue
        if isinstance(node, ast.Assign):
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name):
            out.append((target.id, value))
        elif (
            isinstance(target, ast.Tuple)
            and isinstance(value, ast.Tuple)
            and len(target.elts) == len(value.elts)
            and all(isinstance(t, ast.Name) for t in target.elts)
        ):
            out.extend((t.id, v) for t, v in zip(target.elts, value.elts) if isinstance(t, ast.Name))
    return out


def read_constants(source: str) -> Constants:
    """Parse a program's module-level constants (the source must be valid Python)."""
    tree = ast.parse(source)
    literals: dict[str, Any] = {}
    dependents: dict[str, ast.expr] = {}
    positions: dict[str, ast.expr] = {}
    counts: dict[str, int] = {}
    for name, value in _assignments(tree):
        counts[name] = counts.get(name, 0) + 1
        positions[name] = value
        literals.pop(name, None)
        dependents.pop(name, None)
        try:
            literals[name] = _evaluate(value, {})
        except _NotConstant:
            if any(isinstance(n, ast.Name) for n in ast.walk(value)):
                dependents[name] = value
    slots: list[Slot] = []
    for name, v in literals.items():
        if counts[name] > 1:
            continue  # assigned twice: which assignment a shape should rewrite is ambiguous
        items = [(None, v)] if not isinstance(v, (tuple, list)) else list(enumerate(v))
        slots.extend(Slot(name, i, x) for i, x in items if isinstance(x, int) and x >= 2)
    for name, node in dependents.items():
        if counts[name] == 1 and isinstance(node, (ast.Tuple, ast.List)) and _evaluates(node, literals, dependents):
            slots.extend(Slot(name, i, _size_of(e)) for i, e in enumerate(node.elts) if _literal_size(e))
    return Constants(literals, tuple(slots), tuple(dependents.items()), positions)


def _literal_size(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value >= 2


def _size_of(node: ast.expr) -> int:
    assert isinstance(node, ast.Constant) and isinstance(node.value, int)
    return node.value


def _evaluates(node: ast.expr, literals: dict[str, Any], dependents: dict[str, ast.expr]) -> bool:
    """Whether a display's value is known at the file's sizes (its names are constants or dependents of them)."""
    env = dict(literals)
    for name, value in dependents.items():
        try:
            env[name] = _evaluate(value, env)
        except _NotConstant:
            continue
    try:
        _evaluate(node, env)
    except _NotConstant:
        return False
    return True


def render(source: str, shape: Mapping[str, Any]) -> str:
    """``source`` with the assignments of ``shape``'s globals rewritten to its values (comments kept).

    Dependents absent from ``shape`` are left as written: they recompute from the rewritten constants.
    """
    if not shape:
        return source
    consts = read_constants(source)
    data = source.encode("utf-8")
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    edits = []
    for name, value in shape.items():
        node = consts.positions.get(name)
        if node is None:
            continue
        if name in consts.literals:
            edits.append((*_span(node, starts), repr(value).encode()))
        elif isinstance(node, (ast.Tuple, ast.List)) and isinstance(value, (tuple, list)):
            # a display that names constants: rewrite only its literal elements that changed, names recompute
            for elt, v in zip(node.elts, value):
                if _literal_size(elt) and _size_of(elt) != v:
                    edits.append((*_span(elt, starts), repr(v).encode()))
    for a, b, text in sorted(edits, reverse=True):
        data = data[:a] + text + data[b:]
    return data.decode("utf-8")


def _span(node: ast.expr, starts: list[int]) -> tuple[int, int]:
    """Byte offsets of ``node`` in the source whose line starts are ``starts``."""
    a = starts[node.lineno - 1] + node.col_offset
    b = starts[(node.end_lineno or node.lineno) - 1] + (node.end_col_offset or node.col_offset)
    return a, b
