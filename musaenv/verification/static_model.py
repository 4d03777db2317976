"""Program-level facts the flow analysis needs: functions (units), classes and what their attributes hold.

A :class:`Val` is the abstract value of an expression (its *kind*). :class:`Program` knows every analysable
function (module-level functions and lambdas, methods, nested functions found on the way), every local class with
the kinds of its ``self.X`` attributes, and how attribute access on each kind behaves.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field

from musaenv.verification import allowlists as al
from musaenv.verification.static_names import FunctionNode, Symbols, self_attr

__all__ = ["CONTAINERS", "META", "TENSOR", "UNKNOWN", "ClassInfo", "Program", "Unit", "Val", "union"]


@dataclass(frozen=True)
class Val:
    """Abstract value: ``kind`` (tensor, meta, unknown, ext, kernel, fn, cls, obj, self, super, torch, torchok,
    numpy, lib, builtin, nnmod, nnattr, tmethod, umethod, seq, lambda, modules, mmethod, union, iter), a reference
    (qualified name, unit key, class name, method name) and, for sequences, the items.

    ``modules`` is an ``nn`` container (``ModuleList``, ``Sequential``, ``ModuleDict``) holding ``items``; ``union``
    is one of ``items``, unknown which (an element of a container); ``iter`` yields tuples of ``items``
    (``enumerate``, ``zip``, ``ModuleDict.items()``)."""

    kind: str
    ref: str = ""
    items: tuple[Val, ...] = ()


TENSOR, META, UNKNOWN = Val("tensor"), Val("meta"), Val("unknown")


def union(vals: list[Val]) -> Val:
    """One of ``vals`` (unknown which): the value itself when they agree, ``unknown`` when there are none."""
    unique = tuple(dict.fromkeys(vals))
    if not unique:
        return UNKNOWN
    return unique[0] if len(unique) == 1 else Val("union", items=unique)


# Lower rank wins when an attribute is assigned several kinds of value (the most suspicious one is kept).
_RANK = {"cls": 0, "nnmod": 1, "modules": 1, "torch": 2, "kernel": 3, "ext": 4, "fn": 5, "obj": 6, "tensor": 7,
         "meta": 8}  # fmt: skip
_PARAM_FUNCS = ("torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer")
_REGISTER = {"register_buffer": "tensor", "register_parameter": "tensor", "add_module": None}
#: nn containers: calling a Sequential runs its modules in turn; iterating or indexing any of them gives a module.
CONTAINERS = frozenset(
    f"torch.nn{mid}.{name}" for mid in ("", ".modules.container") for name in ("ModuleList", "Sequential", "ModuleDict")
)
_GROW = ("append", "extend", "insert", "add_module", "update")


@dataclass(frozen=True)
class Unit:
    """One analysable function.

    Attributes:
        key: Stable id (``fn:name``, ``m:Class.name``, ``<parent>.<locals>.name@line``).
        node: The function or lambda.
        cls: Owning class for methods (and functions nested in them).
        self_name: Name bound to the instance (``self``), if any.
        skip_first: The first parameter is the instance (not passed by callers).
    """

    key: str
    node: FunctionNode
    cls: str | None = None
    self_name: str | None = None
    skip_first: bool = False

    def params(self) -> list[ast.arg]:
        """Parameters callers pass positionally, in order."""
        a = self.node.args
        ps = a.posonlyargs + a.args
        return ps[1:] if self.skip_first else ps


@dataclass
class ClassInfo:
    """A local class: its bases (local names or qualified names), methods (unit keys) and attribute kinds."""

    name: str
    node: ast.ClassDef
    bases: list[str] = field(default_factory=list)
    methods: dict[str, str] = field(default_factory=dict)
    attrs: dict[str, Val] = field(default_factory=dict)


def _method_unit(cls: str, key: str, fn: FunctionNode, sym: Symbols) -> Unit:
    decorators = [] if isinstance(fn, ast.Lambda) else [sym.resolve(d) or ast.unparse(d) for d in fn.decorator_list]
    params = fn.args.posonlyargs + fn.args.args
    if any(d.endswith("staticmethod") for d in decorators) or not params:
        return Unit(key, fn, cls)
    if any(d.endswith("classmethod") for d in decorators):
        return Unit(key, fn, cls, None, skip_first=True)
    return Unit(key, fn, cls, params[0].arg, skip_first=True)


class Program:
    """Units, classes and attribute semantics of one candidate."""

    def __init__(self, sym: Symbols) -> None:
        self.sym = sym
        self.units: dict[str, Unit] = {}
        self.classes: dict[str, ClassInfo] = {}
        self.returns: dict[str, str] = {}
        self.taints: dict[str, Val] = {}
        self._ids = itertools.count()
        for name, fn in sym.functions.items():
            if name not in sym.jit_kernels:
                self.units[f"fn:{name}"] = Unit(f"fn:{name}", fn)
        for name, node in sym.classes.items():
            self._add_class(name, node)
        for stmt in sym.tree.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                v = self.classify(stmt.value)
                if v.kind in ("torch", "nnmod", "cls", "obj"):
                    self.taints[stmt.targets[0].id] = v

    def new_id(self) -> int:
        """A fresh id for a try region."""
        return next(self._ids)

    def _add_class(self, name: str, node: ast.ClassDef) -> None:
        info = ClassInfo(name, node, bases=[self.sym.resolve(b) or ast.unparse(b) for b in node.bases])
        self.classes[name] = info
        self._lists = _local_lists(node)  # what local lists of this class's methods hold (layers.append(...))
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name not in self.sym.jit_kernels:
                key = f"m:{name}.{stmt.name}"
                self.units[key] = _method_unit(name, key, stmt, self.sym)
                info.methods[stmt.name] = key
            for t, v in _class_assigns(stmt):
                fn = (
                    self.sym.functions.get(v.id)
                    if isinstance(v, ast.Name)
                    else v
                    if isinstance(v, ast.Lambda)
                    else None
                )
                if fn is not None:  # ``forward = _forward_impl`` makes a module function a method
                    key = f"m:{name}.{t}"
                    self.units[key] = _method_unit(name, key, fn, self.sym)
                    info.methods[t] = key
                else:
                    self._set_attr(info, t, self.classify(v, t))
        for sub in ast.walk(node):
            self._collect_self_attr(info, sub)
        for sub in ast.walk(node):  # self.layers.append(Block()) after self.layers = nn.ModuleList()
            self._grow_container(info, sub)

    def _grow_container(self, info: ClassInfo, node: ast.AST) -> None:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _GROW):
            return
        target = node.func.value
        attr = self_attr(target)
        held = info.attrs.get(attr) if attr is not None else None
        if held is None or held.kind != "modules":
            return
        added = [item for a in [*node.args, *(k.value for k in node.keywords)] for item in self._members(a)]
        info.attrs[attr] = Val("modules", held.ref, held.items + tuple(added))  # type: ignore[index]

    def _members(self, arg: ast.expr) -> list[Val]:
        """Kinds of the modules an argument of an nn container (or of its ``append``/``extend``) contributes."""
        if isinstance(arg, ast.Starred):
            arg = arg.value
        if isinstance(arg, (ast.List, ast.Tuple, ast.Set)):
            return [m for e in arg.elts for m in self._members(e)]
        if isinstance(arg, ast.Dict):
            return [m for v in arg.values for m in self._members(v)]
        if isinstance(arg, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return self._members(arg.elt)
        if isinstance(arg, ast.DictComp):
            return self._members(arg.value)
        if isinstance(arg, ast.Name) and arg.id in self._lists:
            return [m for e in self._lists[arg.id] for m in self._members(e)]
        if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr in ("items", "values"):
            return self._members(arg.func.value)
        return [self.classify(arg)]

    def _collect_self_attr(self, info: ClassInfo, node: ast.AST) -> None:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if self_attr(t) is not None:
                    self._set_attr(info, t.attr, self.classify(node.value, t.attr))  # type: ignore[attr-defined]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _REGISTER
            and self_attr(node.func) is not None
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Constant)
        ):
            kind = _REGISTER[node.func.attr]
            self._set_attr(
                info,
                str(node.args[0].value),
                Val(kind) if kind else self.classify(node.args[1], str(node.args[0].value)),
            )
        if isinstance(node, ast.Call) and self.sym.resolve(node.func) == "builtins.setattr" and len(node.args) == 3:
            obj, name, value = node.args
            if isinstance(obj, ast.Name) and obj.id == "self" and isinstance(name, ast.Constant):
                self._set_attr(info, str(name.value), self.classify(value, str(name.value)))

    @staticmethod
    def _set_attr(info: ClassInfo, name: str, v: Val) -> None:
        old = info.attrs.get(name)
        if old is None or _RANK.get(v.kind, 9) < _RANK.get(old.kind, 9):
            info.attrs[name] = v

    def classify(self, value: ast.AST, name: str = "") -> Val:
        """Kind of a value stored under ``name`` for later use (an attribute or module-level name)."""
        sym = self.sym
        if sym.is_ext_expr(value):
            return Val("ext", name or "ext")
        display = sym.kernel_display(value)
        if display is not None:
            return Val("kernel", display)
        if isinstance(value, ast.Call):
            return self._classify_call(value)
        q = sym.resolve(value)
        if q is not None:
            return self.torch_val(q)
        if isinstance(value, ast.Name) and f"fn:{value.id}" in self.units:
            return Val("fn", f"fn:{value.id}")
        if isinstance(value, ast.Name) and value.id in sym.classes:
            return Val("cls", value.id)
        if isinstance(value, ast.Constant):
            return META
        if isinstance(value, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            elts = value.values if isinstance(value, ast.Dict) else value.elts
            items = [self.classify(e) for e in elts]
            return min(items, key=lambda v: _RANK.get(v.kind, 9), default=UNKNOWN)
        return UNKNOWN

    def _classify_call(self, value: ast.Call) -> Val:
        q = self.sym.resolve(value.func)
        if q is None:
            f = value.func
            if isinstance(f, ast.Attribute) and f.attr[:1].isupper() and self.sym.is_ext_expr(f.value):
                return Val("ext", f"{ast.unparse(f)}()")  # a py::class_ object: its methods are the kernels
            if isinstance(f, ast.Name) and f.id in self.sym.classes:
                return Val("cls", "Model") if f.id == "Model" else Val("obj", f.id)
            return Val("cls", "Model") if isinstance(f, ast.Name) and f.id == "Model" else UNKNOWN
        if q in _PARAM_FUNCS or q in al.TORCH_PLUMBING_FUNCS:
            return TENSOR
        if q == "functools.partial" and value.args:
            return self.classify(value.args[0])
        if q in CONTAINERS:
            members = [m for a in [*value.args, *(k.value for k in value.keywords)] for m in self._members(a)]
            return Val("modules", q, tuple(members))
        if q.startswith("torch.nn.") and q.split(".")[-1][:1].isupper():
            return Val("nnmod", q)
        return TENSOR if q.startswith("torch.") else UNKNOWN

    def torch_val(self, q: str) -> Val:
        """Kind of a fully qualified library name."""
        root = q.split(".")[0]
        if root == "builtins":
            return Val("builtin", q.split(".", 1)[1])
        if root in ("torch", "torch_musa"):
            return Val("torchok" if al.is_torch_value_ok(q) else "torch", q)
        return Val("numpy" if root == "numpy" else "lib", q)

    def global_val(self, name: str) -> Val:
        """Kind of a name not bound in the current function."""
        sym = self.sym
        if name == "Model":
            return Val("cls", "Model")
        if name in sym.jit_kernels:
            return Val("kernel", name)
        if name in sym.ext_names:
            return Val("ext", name)
        if name in sym.kernel_names:
            return Val("kernel", sym.kernel_names[name])
        if f"fn:{name}" in self.units:
            return Val("fn", f"fn:{name}")
        if name in sym.classes:
            return Val("cls", name)
        if name in self.taints:
            return self.taints[name]
        if name in sym.meta_names:
            return META
        q = sym.resolve(ast.Name(id=name))
        return self.torch_val(q) if q is not None else UNKNOWN

    def find_method(self, cls: str, attr: str, depth: int = 0) -> str | None:
        """Unit key of ``cls.attr`` looked up through local base classes."""
        info = self.classes.get(cls)
        if info is None or depth > 10:
            return None
        if attr in info.methods:
            return info.methods[attr]
        return next((k for b in info.bases if (k := self.find_method(b, attr, depth + 1))), None)

    def class_attr(self, cls: str, attr: str, depth: int = 0) -> Val | None:
        """Kind of ``self.attr`` for an instance of ``cls`` (through local bases)."""
        info = self.classes.get(cls)
        if info is None or depth > 10:
            return None
        if attr in info.attrs:
            return info.attrs[attr]
        return next((v for b in info.bases if (v := self.class_attr(b, attr, depth + 1))), None)

    def attr_of(self, base: Val, attr: str) -> Val:
        """Kind of ``<base>.attr``."""
        k = base.kind
        if k in ("self", "obj"):
            key = self.find_method(base.ref, attr)
            return Val("fn", key) if key else self.class_attr(base.ref, attr) or UNKNOWN
        if k == "super":
            return self._super_attr(base.ref, attr)
        if k == "cls":
            if attr == "apply" and (key := self.find_method(base.ref, "forward")):
                return Val("fn", key + "#apply")  # torch.autograd.Function.apply runs forward
            key = self.find_method(base.ref, attr)
            return Val("fn", key) if key else UNKNOWN
        if k == "ext":
            return Val("kernel", f"{base.ref}.{attr}")
        if k == "kernel":
            return base if attr == "run" else UNKNOWN
        if k in ("torch", "torchok", "numpy", "lib"):
            return self.torch_val(f"{base.ref}.{attr}")
        if k == "tensor":
            if attr in al.TENSOR_META_ATTRS:
                return META
            return TENSOR if attr in al.TENSOR_VIEW_ATTRS else Val("tmethod", attr)
        if k == "nnmod":
            return (
                TENSOR
                if attr.endswith(("weight", "bias")) or attr.startswith("running_")
                else Val("nnattr", f"{base.ref}.{attr}")
            )
        if k == "meta":
            return META
        if k == "modules":  # a container's method (append, values, items, ...); what calling it gives: static_calls
            return Val("mmethod", attr, base.items)
        if k == "union":
            return union([self.attr_of(item, attr) for item in base.items])
        return META if attr in al.TENSOR_META_ATTRS else Val("umethod", attr)

    def _super_attr(self, cls: str, attr: str) -> Val:
        info = self.classes.get(cls)
        for b in info.bases if info else []:
            if b == "Model":
                return Val("cls", "Model")
            key = self.find_method(b, attr)
            if key:
                return Val("fn", key)
            if b.startswith("torch.nn.") and b not in ("torch.nn.Module", "torch.nn.modules.module.Module"):
                return Val("torch", f"{b}.{attr}")
        return UNKNOWN

    def add_nested(self, parent: Unit, node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
        """Register a function defined inside ``parent`` (it sees ``self`` through the closure)."""
        key = f"{parent.key}.<locals>.{node.name}@{node.lineno}"
        self.units.setdefault(key, Unit(key, node, parent.cls, parent.self_name))
        return key


def _class_assigns(stmt: ast.stmt) -> list[tuple[str, ast.expr]]:
    if isinstance(stmt, ast.Assign):
        return [(t.id, stmt.value) for t in stmt.targets if isinstance(t, ast.Name)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return [(stmt.target.id, stmt.value)]
    return []


def _local_lists(node: ast.ClassDef) -> dict[str, list[ast.expr]]:
    """Local list names in a class's methods -> what is put into them (literals, ``append``, ``extend``, ``+=``),
    so ``nn.Sequential(*layers)`` knows its modules."""
    out: dict[str, list[ast.expr]] = {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Assign) and isinstance(sub.value, (ast.List, ast.ListComp, ast.Tuple)):
            for t in sub.targets:
                if isinstance(t, ast.Name):
                    out.setdefault(t.id, []).append(sub.value)
        elif isinstance(sub, ast.AugAssign) and isinstance(sub.target, ast.Name):
            out.setdefault(sub.target.id, []).append(sub.value)
        elif (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr in ("append", "extend", "insert")
            and isinstance(sub.func.value, ast.Name)
        ):
            out.setdefault(sub.func.value.id, []).extend(sub.args[-1:])
    return out
