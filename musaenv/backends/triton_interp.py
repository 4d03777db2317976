"""Guards for Triton's interpreter (``TRITON_INTERPRET=1``), which runs Triton candidates when there is no GPU.

The interpreter stores bfloat16 values as raw ``uint16`` bit patterns and hands them to numpy as they are,
so arithmetic, comparisons, reductions and math functions on bf16 values compute on integers and return
garbage silently (measured with triton 3.9: ``x * 2 + 1`` on bf16 gives ``inf``). Loads, stores, ``tl.where``
and casts between bf16 and fp32 are emulated correctly. :func:`install_interpreter_guards` makes every
operation of the first kind raise :class:`TritonInterpreterLimitError` instead, so a bf16 candidate is
reported with a clear reason rather than judged wrong; a kernel that upcasts with ``x.to(tl.float32)``
before computing keeps working.

It also fills two gaps of older interpreters that raised confusing errors on correct kernels (seen with triton
3.6): no ``get_bf16`` (a Python scalar meeting a bf16 value failed with an AttributeError instead of reaching the
bf16 guard), and ``__index__`` calling ``int()`` on a one-element array, which numpy >= 2.5 refuses (every
``range(0, n, BLOCK)`` over a kernel argument failed). Triton 3.9 has both fixed; the shims do what it does.

Call it in the process that runs the kernels, before the candidate launches any.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["INTERPRETER_LIMIT_PREFIX", "TritonInterpreterLimitError", "install_interpreter_guards"]

log = logging.getLogger(__name__)

INTERPRETER_LIMIT_PREFIX = "Triton interpreter limit"

# InterpreterBuilder methods that compute on values (operands are TensorHandles). Casts, loads, stores and
# select (np.where copies bits) are correct for bf16 and stay unguarded.
_GUARDED_BUILDER_METHODS = (
    "binary_op",
    "unary_op",
    "create_fma",
    "create_dot",
    "create_clampf",
    "create_erf",
    "create_rsqrt",
    "create_extern_elementwise",
)


class TritonInterpreterLimitError(RuntimeError):
    """A candidate used a feature that Triton's interpreter does not emulate correctly."""


def _message(op: str) -> str:
    return (
        f"{INTERPRETER_LIMIT_PREFIX}: bfloat16 {op} is not emulated by TRITON_INTERPRET=1 (it computes on the raw "
        "uint16 bits and returns garbage). No GPU is present, so Triton kernels run in that interpreter here. "
        "Convert bf16 values with .to(tl.float32) before computing, or evaluate on a GPU."
    )


def _is_bf16(obj: Any, bf16: Any) -> bool:
    dtype = getattr(obj, "dtype", None)
    scalar = getattr(dtype, "scalar", dtype)
    return scalar == bf16


def _guard(method: Callable[..., Any], name: str, bf16: Any) -> Callable[..., Any]:
    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        values = [*args, *kwargs.values()]
        values += [v for a in args if isinstance(a, (list, tuple)) for v in a]  # extern_elementwise's argList
        if any(_is_bf16(v, bf16) for v in values):
            op = getattr(args[-1], "__name__", name) if name in ("binary_op", "unary_op") and args else name
            raise TritonInterpreterLimitError(_message(str(op).replace("create_", "")))
        return method(self, *args, **kwargs)

    guarded.__musaenv_guard__ = True  # type: ignore[attr-defined]
    return guarded


def _guard_reduce(method: Callable[..., Any], bf16: Any) -> Callable[..., Any]:
    @functools.wraps(method)
    def guarded(self: Any, input: Any) -> Any:
        items = input if isinstance(input, tuple) else (input,)
        if any(_is_bf16(t, bf16) for t in items):
            raise TritonInterpreterLimitError(_message(f"{type(self).__name__} (tl.sum/max/min/cumsum ...)"))
        return method(self, input)

    guarded.__musaenv_guard__ = True  # type: ignore[attr-defined]
    return guarded


def install_interpreter_guards() -> bool:
    """Make bf16 arithmetic in Triton's interpreter raise :class:`TritonInterpreterLimitError` (idempotent).

    Returns:
        True when the guards are in place; False when triton (or its interpreter module) is not importable.
    """
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError as e:
        log.warning("Triton interpreter guards not installed: %s", e)
        return False
    builder = interpreter.InterpreterBuilder
    _install_compat_shims(interpreter, tl)
    for name in _GUARDED_BUILDER_METHODS:
        method = getattr(builder, name, None)
        if method is not None and not getattr(method, "__musaenv_guard__", False):
            setattr(builder, name, _guard(method, name, tl.bfloat16))
    for cls_name in ("ReduceOps", "ScanOps"):
        cls = getattr(interpreter, cls_name, None)
        method = getattr(cls, "apply", None)
        if cls is not None and method is not None and not getattr(method, "__musaenv_guard__", False):
            cls.apply = _guard_reduce(method, tl.bfloat16)
    return True


def _install_compat_shims(interpreter: Any, tl: Any) -> None:
    """The two fixes of newer interpreters described in the module docstring, where they are missing."""
    builder = interpreter.InterpreterBuilder
    if not hasattr(builder, "get_bf16") and hasattr(builder, "create_fp_trunc"):

        def get_bf16(self: Any, value: float) -> Any:  # as triton 3.9: an fp32 constant rounded to bf16
            return self.create_fp_trunc(self.get_fp32(value), tl.bfloat16)

        builder.get_bf16 = get_bf16
    patch_tensor = getattr(interpreter, "_patch_lang_tensor", None)
    if patch_tensor is None or getattr(patch_tensor, "__musaenv_guard__", False):
        return

    @functools.wraps(patch_tensor)
    def patched(tensor: Any, *scope: Any) -> None:  # triton < 3.5 sets the attributes directly, without a scope
        patch_tensor(tensor, *scope)

        def index(self: Any) -> int:  # ``.item()`` takes a one-element array of any rank, refuses a block
            return int(self.handle.data.item())

        if scope:
            scope[0].set_attr(tensor, "__index__", index)
        else:
            tensor.__index__ = index

    patched.__musaenv_guard__ = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patched
