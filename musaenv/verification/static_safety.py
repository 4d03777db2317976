"""File-wide Python bans (HACKS.md S14, S20-S23, T1-T4, T8, T9): checked on every line, reachable or not.

These do not depend on the policy: a candidate that execs strings, starts threads, opens files or sockets,
patches torch or reads the interpreter's frames is never evaluated, whatever else it does.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from musaenv.backends import get_backend
from musaenv.verification import allowlists as al
from musaenv.verification.findings import ERROR, Finding, describe
from musaenv.verification.static_names import Symbols

__all__ = ["safety_findings"]

_PLAIN_PREFIX = ("os.exec", "os.spawn", "os.wait", "os.posix_spawn")
_ATTR_BUILTINS = ("builtins.getattr", "builtins.setattr", "builtins.delattr", "builtins.hasattr")
_READ_BUILTINS = ("builtins.getattr", "builtins.hasattr")  # lookups that change nothing
_DISPATCH_ATTRS = frozenset({"forward", "__call__", "_call_impl"})
_LOOKUP_HOOKS = frozenset({"__getattribute__", "__setattr__", "__instancecheck__", "__subclasscheck__"})
_HOOK_RE = re.compile(r"register_(?:module_)?(?:full_)?(?:forward|backward)(?:_pre)?_hook")
_CUPY_ROOTS = ("cupy", "cupyx", "cupy_backends")
_TENSOR_BASES = ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase", "torch.nn.Parameter")


def _prefix_lookup(table: dict[str, str], name: str) -> str | None:
    for key, flag in table.items():
        if name == key or name.startswith(key + ".") or (key in _PLAIN_PREFIX and name.startswith(key)):
            return flag
    return None


def qualname_flag(q: str) -> str | None:
    """Flag for using the fully qualified name ``q`` anywhere in a candidate, or ``None``."""
    flag = _prefix_lookup(al.BANNED_QUALNAMES, q)
    if flag is None and not q.startswith("builtins."):  # bare builtins resolve to builtins.<name>
        flag = _prefix_lookup(al.BANNED_MODULES, q)
    if flag is not None:
        return flag
    if q.startswith("torch._") and q not in al.PRIVATE_TORCH_OK:
        return "private_torch_api"
    return None


def _finding(flag: str, line: int, what: str) -> Finding:
    return Finding(flag, ERROR, f"line {line}: {what}: {describe(flag)}", line)


class _SafetyVisitor(ast.NodeVisitor):
    def __init__(self, sym: Symbols, allow_cupy: bool = False) -> None:
        self.sym = sym
        self.allow_cupy = allow_cupy  # the cupy format: its CuPy names are judged by static_cupy
        self.findings: list[Finding] = []
        self.parents: dict[int, ast.AST] = {}
        for node in sym.nodes:
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node

    def add(self, flag: str, node: ast.AST, what: str) -> None:
        self.findings.append(_finding(flag, getattr(node, "lineno", 0), what))

    def _module(self, name: str, node: ast.AST) -> None:
        flag = "dynamic_code" if name == "builtins" else qualname_flag(name)
        if flag is None and self.allow_cupy and name.split(".")[0] in _CUPY_ROOTS:
            return
        if flag is not None:
            self.add(flag, node, f"import of {name}")
        elif name.startswith(".") or name.split(".")[0] not in al.ALLOWED_IMPORTS:
            self.add("banned_import", node, f"import of {name}")

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._module(a.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = "." * node.level + (node.module or "")
        before = len(self.findings)
        self._module(mod, node)
        if len(self.findings) == before:
            for a in node.names:
                flag = qualname_flag(f"{mod}.{a.name}")
                if flag is not None:
                    self.add(flag, node, f"import of {mod}.{a.name}")

    def _chain(self, node: ast.Name | ast.Attribute) -> None:
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return  # only the longest chain is judged
        q = self.sym.resolve(node)
        if q is None:
            return
        flag = qualname_flag(q)
        if flag is not None:
            self.add(flag, node, q)
        elif q in _ATTR_BUILTINS and not (isinstance(parent, ast.Call) and parent.func is node):
            self.add("dynamic_code", node, f"{q.split('.')[1]} used as a value")

    def visit_Name(self, node: ast.Name) -> None:
        self._chain(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in al.INTROSPECTION_ATTRS:
            self.add("introspection", node, f"attribute {node.attr}")
        if node.attr == "__class__" and isinstance(node.ctx, ast.Store):
            self.add("tensor_subclass", node, "assignment to __class__")
        self._chain(node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and _HOOK_RE.fullmatch(node.func.attr):
            self.add("monkeypatch", node, f"{node.func.attr}() changes what a module call returns")
        q = self.sym.resolve(node.func)
        if q in _ATTR_BUILTINS and len(node.args) >= 2:
            name = node.args[1]
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                if not (q in _READ_BUILTINS and self.sym.is_ext_expr(node.args[0])):  # its own extension: kernels
                    self.add("dynamic_code", node, f"{q.split('.')[1]}() with a computed attribute name")
            elif q in ("builtins.setattr", "builtins.delattr"):
                what = f"{q.split('.')[1]}() on {ast.unparse(node.args[0])}"
                self._patched(node.args[0], node, what, name.value)
            elif (full := self.sym.resolve(node)) is not None and (flag := qualname_flag(full)) is not None:
                self.add(flag, node, full)
        self.generic_visit(node)

    def _patched(self, base: ast.AST, node: ast.AST, what: str, attr: str | None = None) -> None:
        if isinstance(base, ast.Name) and (base.id in self.sym.classes or base.id == "Model"):
            self.add("monkeypatch", node, f"{what} patches class {base.id} outside its definition")
        elif isinstance(base, ast.Name) and base.id == "self" and attr in _DISPATCH_ATTRS:
            self.add("monkeypatch", node, f"{what} rebinds the method nn.Module.__call__ dispatches to")
        elif self.sym.resolve(base) is not None:
            self.add("monkeypatch", node, what)

    def _targets(self, targets: list[ast.expr], node: ast.stmt) -> None:
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                    self._patched(sub.value, node, f"assignment to {ast.unparse(sub)}", sub.attr)
                elif isinstance(sub, ast.Subscript) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                    self._patched(sub.value, node, f"item assignment on {ast.unparse(sub.value)}")

    def visit_Assign(self, node: ast.Assign) -> None:
        self._targets(node.targets, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._targets([node.target], node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._targets([node.target], node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        self._targets(node.targets, node)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if node.name == "ModelNew" and (node.decorator_list or node.keywords):
            self.add("monkeypatch", node, "a decorator or metaclass on ModelNew can replace its methods")
        for base in node.bases:
            if self.sym.resolve(base) in _TENSOR_BASES:
                self.add("tensor_subclass", node, f"class {node.name} subclasses {ast.unparse(base)}")
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in (
                "__torch_function__",
                "__torch_dispatch__",
            ):
                self.add("tensor_subclass", stmt, f"{node.name}.{stmt.name}")
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in _LOOKUP_HOOKS:
                self.add("monkeypatch", stmt, f"{node.name}.{stmt.name} intercepts attribute lookups")
        self.generic_visit(node)


def safety_findings(sym: Symbols, backend: str = "cpu") -> Iterator[Finding]:
    """Policy-independent findings anywhere in the candidate's Python source (``backend="cupy"``: CuPy imports
    are left to :mod:`~musaenv.verification.static_cupy`)."""
    visitor = _SafetyVisitor(sym, allow_cupy=get_backend(backend).cupy_api)
    visitor.visit(sym.tree)
    seen: set[tuple[str, int | None]] = set()
    for f in visitor.findings:
        if (f.flag, f.line) not in seen:
            seen.add((f.flag, f.line))
            yield f
