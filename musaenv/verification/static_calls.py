"""How the flow analysis interprets one call expression (see :mod:`musaenv.verification.static_flow`)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from musaenv.verification import allowlists as al
from musaenv.verification.static_model import META, TENSOR, UNKNOWN, Program, Val, union
from musaenv.verification.static_names import is_load_inline_name
from musaenv.verification.static_safety import qualname_flag

if TYPE_CHECKING:
    from musaenv.verification.static_flow import FunctionAnalyzer

__all__ = ["evaluate_call"]

_TENSOR_BUILTINS = frozenset({"abs", "pow", "round", "sum", "max", "min", "divmod", "sorted", "any", "all"})
_META_BUILTINS = frozenset({"len", "int", "float", "bool", "isinstance", "range", "str", "issubclass", "callable",
                            "print", "repr", "format"})  # fmt: skip
_TENSOR_CLASS = ("torch.Tensor.", "torch._C.TensorBase.", "torch._C._TensorBase.")
# Builtins that only look at what a value is: a module class named there (isinstance(m, nn.Linear)) is not used.
_TYPE_TESTS = frozenset({"builtins.isinstance", "builtins.issubclass", "builtins.hasattr", "builtins.callable"})
_CONTAINER_VIEWS = ("values", "children", "modules")


def _const_attr(node: ast.Call) -> str | None:
    if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
        return node.args[1].value
    return None


def evaluate_call(fa: FunctionAnalyzer, node: ast.Call) -> Val:
    """Kind of the call's result, emitting compute/kernel/call/cache events on ``fa``."""
    q = fa.prog.sym.resolve(node.func)
    if q == "builtins.getattr" and (name := _const_attr(node)) is not None:
        for extra in node.args[2:]:
            fa.value(extra)
        return fa.value(ast.copy_location(ast.Attribute(value=node.args[0], attr=name, ctx=ast.Load()), node))
    if q == "builtins.getattr" and len(node.args) >= 2:  # a computed name: a kernel of its own extension, if that
        base = fa.value(node.args[0])
        for extra in node.args[1:]:
            fa.value(extra)
        return Val("kernel", f"{base.ref}.<computed>") if base.kind == "ext" else UNKNOWN
    if q in ("builtins.id", "builtins.hash"):
        fa.emit("cache", node, f"{q.split('.')[1]}() in forward-reachable code keys data on object identity")
    if q == "builtins.super":
        return Val("super", fa.unit.cls or "")
    if q in _TYPE_TESTS:  # plumbing: a type test runs no module and no torch op
        for a in [*node.args, *(k.value for k in node.keywords)]:
            fa.value(a)
        return META
    if q == "builtins.type" and len(node.args) == 1:
        return _builtin(fa, "type", [fa.value(node.args[0])], node)
    if isinstance(node.func, ast.Subscript):
        base = fa.value(node.func.value)
        fa.value(node.func.slice)
        if base.kind == "kernel":
            _args(fa, node)
            fa.emit("kernel", node, f"{base.ref}[grid]")
            return META
        if base.kind in ("modules", "union"):  # self.layers[i](x): one of the container's modules
            func = fa.element(base)
        else:
            func = base if base.kind in ("torch", "nnmod", "fn") else UNKNOWN
    else:
        func = fa.value(node.func)
    args, kws = _args(fa, node)
    return _apply(fa, func, args, kws, node)


def _args(fa: FunctionAnalyzer, node: ast.Call) -> tuple[list[Val], dict[str, Val]]:
    args = [fa.value(a) for a in node.args]
    kws = {k.arg or "**": fa.value(k.value) for k in node.keywords}
    for v, a in zip(args + list(kws.values()), node.args + [k.value for k in node.keywords]):
        fa.consume(v, a)
    return args, kws


def map_args(prog: Program, key: str, args: list[Val], kws: dict[str, Val], skip: int) -> dict[str, str]:
    """Argument kinds by parameter name of the callee ``key``."""
    unit = prog.units.get(key)
    if unit is None:
        return {}
    params = unit.params()[skip:]
    out = {p.arg: a.kind for p, a in zip(params, args)}
    out.update({k: v.kind for k, v in kws.items() if k != "**"})
    va = unit.node.args.vararg
    if va is not None and len(args) > len(params):
        extra = [a.kind for a in args[len(params) :]]
        out[va.arg] = "tensor" if "tensor" in extra else "unknown"
    return out


def _apply(fa: FunctionAnalyzer, f: Val, args: list[Val], kws: dict[str, Val], node: ast.Call) -> Val:
    k = f.kind
    if k == "kernel" and f.ref.endswith(".get_function"):  # a CuPy kernel taken from its module: launched next
        return Val("kernel", f"{f.ref}()")
    if k == "kernel" and f.ref.rsplit(".", 1)[-1] in _RAW_MODULE_METHODS and _imports_cupy(fa.prog):
        return META  # RawModule.compile() and friends launch nothing
    if k == "kernel" and f.ref.rsplit(".", 1)[-1][:1].isupper() and not f.ref.startswith("cupy"):
        return Val("ext", f"{f.ref}()")  # ext.Relu(): a py::class_ object of the extension, its methods kernels
    if k == "kernel":
        fa.emit("kernel", node, f.ref)
        return TENSOR
    if k == "fn":
        key = f.ref.removesuffix("#apply")
        name = key.rsplit(".", 1)[-1].removeprefix("fn:")
        if name in fa.prog.sym.ext_factories:
            fa.emit("call", node, key, callee=key)
            return Val("ext", f"{name}()")
        mapping = map_args(fa.prog, key, args, kws, skip=1 if f.ref.endswith("#apply") else 0)
        fa.emit("call", node, key, callee=key, args=mapping)
        return Val(fa.prog.returns.get(key, "unknown"))
    if k in ("cls", "obj"):
        return _instance(fa, f, args, kws, node)
    if k in ("torch", "torchok"):
        return _torch_call(fa, f.ref, node)
    if k == "numpy":
        return fa.compute(node, f"{f.ref}() (numpy compute)")
    if k == "lib":
        if f.ref == "functools.partial" and args:
            return args[0]
        if f.ref.startswith("cupy."):
            return _cupy_call(f.ref)
        return META if f.ref.split(".")[0] in ("math", "triton") else UNKNOWN
    if k == "builtin":
        return _builtin(fa, f.ref, args, node)
    if k in ("tmethod", "umethod"):
        return _method(fa, f, node)
    if k == "nnmod":
        return fa.compute(node, f"call of the nn module {f.ref}")
    if k in ("modules", "union"):  # a Sequential runs its modules in turn; one of several modules runs one of them
        results = [_apply(fa, item, args, kws, node) for item in f.items]
        return TENSOR if any(r.kind == "tensor" for r in results) else union(results)
    if k == "mmethod":
        return _container_method(f)
    if k == "nnattr" and f.ref.rsplit(".", 1)[-1] not in al.NN_MODULE_READ_METHODS:
        return fa.compute(node, f"{f.ref}() of an nn module")
    if k == "unknown":  # a callable the static view cannot name (it may be the kernel): the runtime check decides
        fa.emit("opaque", node, f"call of {ast.unparse(node.func)}")
    return UNKNOWN


_RAW_MODULE_METHODS = frozenset({"compile", "get_global", "get_texref"})


def _imports_cupy(prog: Program) -> bool:
    return any(q.split(".")[0] == "cupy" for q in prog.sym.aliases.values())


def _cupy_call(q: str) -> Val:
    """CuPy in a CuPy candidate (:mod:`.static_cupy`): its kernels, and views of torch tensors (whose math is
    compute like a tensor's); every other CuPy name is already a finding of its own."""
    if q == "cupy.RawKernel":
        return Val("kernel", q)
    if q == "cupy.RawModule":
        return Val("ext", q)
    return TENSOR if q in ("cupy.from_dlpack", "cupy.asarray") else META


def _instance(fa: FunctionAnalyzer, f: Val, args: list[Val], kws: dict[str, Val], node: ast.Call) -> Val:
    """Instantiating a local class runs ``__init__``; calling an instance runs ``forward``/``__call__``."""
    if f.ref == "Model":
        return UNKNOWN
    methods = ("__init__",) if f.kind == "cls" else ("__call__", "forward")
    key = next((m for name in methods if (m := fa.prog.find_method(f.ref, name))), None)
    if key is not None:
        fa.emit("call", node, key, callee=key, args=map_args(fa.prog, key, args, kws, skip=0))
    return Val("obj", f.ref) if f.kind == "cls" else Val(fa.prog.returns.get(key or "", "unknown"))


def _torch_call(fa: FunctionAnalyzer, q: str, node: ast.Call) -> Val:
    if is_load_inline_name(q):
        return Val("ext", "load_inline")
    if q.startswith(_TENSOR_CLASS):
        method = q.rsplit(".", 1)[1]
        if method in al.TENSOR_PLUMBING_METHODS:
            return TENSOR
        if method in al.TENSOR_META_METHODS:
            return META
        return fa.compute(node, f"{q}()")
    if q in al.TORCH_PLUMBING_FUNCS:
        return TENSOR
    if q in al.TORCH_META_FUNCS or al.is_torch_value_ok(q):
        return META
    if qualname_flag(q) is not None:
        return UNKNOWN  # already reported by the safety scan under its own flag
    return fa.compute(node, f"{q}()")


def _builtin(fa: FunctionAnalyzer, name: str, args: list[Val], node: ast.Call) -> Val:
    if name in _TENSOR_BUILTINS and any(a.kind == "tensor" for a in args):
        return fa.compute(node, f"builtin {name}() on a tensor")
    if name in _META_BUILTINS:
        return META
    if name == "type" and args and args[0].kind == "tensor":
        return Val("torchok", "torch.Tensor")  # type(x).matmul is torch.Tensor.matmul
    if name in ("list", "tuple") and args:
        return fa.element(args[0])
    if name in ("enumerate", "zip") and args:
        elements = [fa.element(a) for a in args]
        return Val("iter", items=tuple([META, *elements] if name == "enumerate" else elements))
    if name == "reversed" and args:
        return args[0]
    return UNKNOWN


def _container_method(f: Val) -> Val:
    """What calling a method of an nn container gives: its modules (``values()``), pairs (``items()``), or plumbing."""
    if f.ref in _CONTAINER_VIEWS:
        return Val("modules", items=f.items)
    if f.ref == "items":
        return Val("iter", items=(META, union(list(f.items))))
    return META  # append, extend, insert, __len__, parameters(), ...: building or reading the container


def _method(fa: FunctionAnalyzer, f: Val, node: ast.Call) -> Val:
    name = f.ref
    if f.kind == "tmethod":
        if name in al.TENSOR_PLUMBING_METHODS:
            return TENSOR
        if name in al.TENSOR_META_METHODS:
            return META
        return fa.compute(node, f"Tensor.{name}()")
    if name in ("get", "setdefault", "pop", "__contains__", "__getitem__") and node.args:
        fa.check_key(node.args[0])
    if al.is_compute_name(name):
        return fa.compute(node, f".{name}() (tensor compute)")
    return META if name in al.TENSOR_META_METHODS else UNKNOWN
