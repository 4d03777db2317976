"""Name resolution for a candidate's Python source.

:class:`Symbols` answers "what does this name or attribute chain refer to?" through every alias form a candidate
can use (``import torch as t``, ``from torch import nn as N``, ``F = torch.nn.functional``, ``getattr(torch, "mm")``,
``for op in (torch.relu,)``, default arguments), and "which names hold a compiled extension, a kernel function or a
Triton kernel?". It is built once per candidate and shared by the safety scan and the reachability analysis.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

__all__ = ["FunctionNode", "Symbols", "build_symbols", "is_load_inline_name", "self_attr"]

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda

_BUILTIN_NAMES = frozenset(dir(builtins)) | {"__builtins__"}


def is_load_inline_name(qualname: str | None) -> bool:
    """True for torch's (or torch_musa's) ``load_inline``, however it was imported."""
    if not qualname:
        return False
    parts = qualname.split(".")
    return parts[-1] == "load_inline" and parts[0] in ("torch", "torch_musa")


def self_attr(node: ast.AST) -> str | None:
    """``X`` for an expression ``self.X``, else ``None``."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _const_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _assign_pairs(node: ast.AST) -> list[tuple[ast.expr, ast.expr]]:
    """(target, value) pairs of an assignment-like node, tuple targets matched elementwise where possible."""
    if isinstance(node, ast.Assign):
        raw = [(t, node.value) for t in node.targets]
    elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
        raw = [(node.target, node.value)]
    elif isinstance(node, (ast.For, ast.AsyncFor)) and isinstance(node.iter, (ast.Tuple, ast.List)):
        raw = [(node.target, e) for e in node.iter.elts]
    else:
        return []
    out: list[tuple[ast.expr, ast.expr]] = []
    for t, v in raw:
        if isinstance(t, (ast.Tuple, ast.List)) and isinstance(v, (ast.Tuple, ast.List)) and len(t.elts) == len(v.elts):
            out.extend(zip(t.elts, v.elts))
        else:
            out.append((t, v))
    return out


@dataclass
class Symbols:
    """Module-level facts about one candidate.

    Attributes:
        tree: The parsed module.
        aliases: Local name -> fully qualified name of what it is bound to (``F`` -> ``torch.nn.functional``).
        star_modules: Modules imported with ``*`` (unbound names resolve into them).
        functions: Module-level functions and lambdas bound to names.
        classes: Module-level classes.
        jit_kernels: Names of ``@triton.jit`` (or autotuned) kernels.
        ext_names: Names bound to a compiled extension (the result of ``load_inline``).
        ext_attrs: ``self`` attributes bound to a compiled extension.
        ext_factories: Functions or methods that return a compiled extension.
        kernel_names: Names bound to one extension function or kernel -> display name.
        kernel_attrs: ``self`` attributes bound to one extension function -> display name.
        bound_names: Every name bound anywhere (so it is not mistaken for a builtin).
        meta_names: Module-level names bound to plain numbers, strings, booleans or ``None``.
        nodes: Every node of the tree, walked once (the checks iterate over it many times).
    """

    tree: ast.Module
    nodes: list[ast.AST] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    star_modules: list[str] = field(default_factory=list)
    functions: dict[str, FunctionNode] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    jit_kernels: set[str] = field(default_factory=set)
    ext_names: set[str] = field(default_factory=set)
    ext_attrs: set[str] = field(default_factory=set)
    ext_factories: set[str] = field(default_factory=set)
    kernel_names: dict[str, str] = field(default_factory=dict)
    kernel_attrs: dict[str, str] = field(default_factory=dict)
    bound_names: set[str] = field(default_factory=set)
    meta_names: set[str] = field(default_factory=set)

    def resolve(self, node: ast.AST) -> str | None:
        """Fully qualified name of a name/attribute chain (or constant ``getattr``), or ``None``."""
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return self.aliases[node.id]
            if node.id in self.bound_names:
                return None
            if node.id in _BUILTIN_NAMES:
                return f"builtins.{node.id}"
            return f"{self.star_modules[0]}.{node.id}" if self.star_modules else None
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call) and len(node.args) >= 2 and self.resolve(node.func) == "builtins.getattr":
            name = _const_str(node.args[1])
            base = self.resolve(node.args[0])
            return f"{base}.{name}" if base and name else None
        return None

    def is_ext_expr(self, node: ast.AST) -> bool:
        """True when ``node`` evaluates to a compiled extension module."""
        if isinstance(node, ast.Call):
            if is_load_inline_name(self.resolve(node.func)) or self.resolve(node.func) == "cupy.RawModule":
                return True  # a CuPy RawModule holds kernels the way an extension does
            func = node.func
            name = func.id if isinstance(func, ast.Name) else self_attr(func)
            return name is not None and name in self.ext_factories
        if isinstance(node, ast.Name):
            return node.id in self.ext_names
        attr = self_attr(node)
        if attr is not None:
            return attr in self.ext_attrs
        if isinstance(node, ast.Subscript):
            return self.is_ext_expr(node.value)
        return False

    def kernel_display(self, node: ast.AST) -> str | None:
        """Display name when ``node`` is a kernel function (``ext.fn``, an alias of one, a Triton kernel, a CuPy
        ``RawKernel`` or ``RawModule.get_function``)."""
        if isinstance(node, ast.Call):
            func = node.func
            if self.resolve(func) == "cupy.RawKernel":
                return "cupy.RawKernel"
            if isinstance(func, ast.Attribute) and func.attr == "get_function" and self.is_ext_expr(func.value):
                name = _const_str(node.args[0]) if node.args else None
                return f"get_function({name or '?'})"
            return None
        if isinstance(node, ast.Attribute) and self.is_ext_expr(node.value):
            base = node.value
            prefix = base.id if isinstance(base, ast.Name) else (self_attr(base) or "ext")
            return f"{prefix}.{node.attr}"
        if isinstance(node, ast.Name):
            if node.id in self.jit_kernels:
                return node.id
            return self.kernel_names.get(node.id)
        attr = self_attr(node)
        return self.kernel_attrs.get(attr) if attr is not None else None

    def is_triton_decorated(self, fn: FunctionNode) -> bool:
        """True for functions decorated with ``triton.*`` (``jit``, ``autotune``, ``heuristics``)."""
        if isinstance(fn, ast.Lambda):
            return False
        for dec in fn.decorator_list:
            q = self.resolve(dec.func if isinstance(dec, ast.Call) else dec)
            if q and q.split(".")[0] == "triton":
                return True
        return False


def _collect_imports(sym: Symbols) -> None:
    for node in sym.nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    sym.aliases[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    sym.aliases[top] = top
        elif isinstance(node, ast.ImportFrom):
            mod = "." * node.level + (node.module or "")
            for a in node.names:
                if a.name == "*":
                    sym.star_modules.append(mod)
                else:
                    sym.aliases[a.asname or a.name] = f"{mod}.{a.name}"


def _collect_bound(sym: Symbols) -> None:
    for node in sym.nodes:
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            sym.bound_names.add(node.id)
        elif isinstance(node, ast.arg):
            sym.bound_names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            sym.bound_names.add(node.name)
    for stmt in sym.tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            sym.functions[stmt.name] = stmt
        elif isinstance(stmt, ast.ClassDef):
            sym.classes[stmt.name] = stmt
        for t, v in _assign_pairs(stmt):
            if isinstance(t, ast.Name) and isinstance(v, ast.Lambda):
                sym.functions[t.id] = v
            elif isinstance(t, ast.Name) and isinstance(v, ast.Constant):
                sym.meta_names.add(t.id)


def _collect_aliases(sym: Symbols) -> None:
    """Aliases through assignments, loops over literal tuples and default arguments, to a fixed point."""
    pairs: list[tuple[ast.expr, ast.expr]] = []
    for node in sym.nodes:
        pairs.extend(_assign_pairs(node))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            positional = a.posonlyargs + a.args
            pairs.extend(
                (ast.Name(id=p.arg), d) for p, d in zip(positional[len(positional) - len(a.defaults) :], a.defaults)
            )
            pairs.extend((ast.Name(id=p.arg), d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None)
    for _ in range(4):
        changed = False
        for t, v in pairs:
            if isinstance(t, ast.Name) and t.id not in sym.aliases:
                q = sym.resolve(v)
                if q is not None:
                    sym.aliases[t.id] = q
                    changed = True
        if not changed:
            break


def _collect_extensions(sym: Symbols) -> None:
    """Names, attributes and factories holding compiled extensions, and aliases of their functions."""
    pairs = [p for node in sym.nodes for p in _assign_pairs(node)]
    funcs: list[ast.FunctionDef | ast.AsyncFunctionDef] = [
        n for n in sym.nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    for _ in range(4):
        before = (len(sym.ext_names), len(sym.ext_attrs), len(sym.ext_factories))
        for t, v in pairs:
            if sym.is_ext_expr(v):
                if isinstance(t, ast.Name):
                    sym.ext_names.add(t.id)
                elif self_attr(t) is not None:
                    sym.ext_attrs.add(t.attr)  # type: ignore[attr-defined]
                elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                    sym.ext_names.add(t.value.id)
        for fn in funcs:
            returns = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
            if any(sym.is_ext_expr(r) for r in returns):
                sym.ext_factories.add(fn.name)
        if before == (len(sym.ext_names), len(sym.ext_attrs), len(sym.ext_factories)):
            break
    for t, v in pairs:
        display = sym.kernel_display(v)
        if display is None:
            continue
        if isinstance(t, ast.Name):
            sym.kernel_names[t.id] = display
        elif self_attr(t) is not None:
            sym.kernel_attrs[t.attr] = display  # type: ignore[attr-defined]


def build_symbols(tree: ast.Module) -> Symbols:
    """Resolve imports, aliases, extensions and Triton kernels of a parsed candidate."""
    sym = Symbols(tree=tree, nodes=list(ast.walk(tree)))
    _collect_imports(sym)
    _collect_bound(sym)
    _collect_aliases(sym)
    for name, fn in sym.functions.items():
        if sym.is_triton_decorated(fn):
            sym.jit_kernels.add(name)
    _collect_extensions(sym)
    return sym
