"""Route a candidate's ``torch.utils.cpp_extension.load_inline`` through musaenv's build service.

Runs inside the candidate worker. The hook turns the call into a :class:`~musaenv.toolchains.buildspec.BuildSpec`,
asks the parent (which owns the compilers and the content-addressed cache) to build it, and imports the
resulting module by its content-hash name. The worker itself never starts a compiler, so its sandbox can
forbid process creation.

Every function of a loaded extension is wrapped so that its successful calls are counted
(:class:`KernelCalls`): the runtime proof that the candidate's own kernel ran (docs/verification.md).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.machinery
import importlib.util
import inspect
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from musaenv.backends import get_backend
from musaenv.isolation.channel import Channel
from musaenv.isolation.messages import BuildRequest, BuildResult
from musaenv.toolchains.buildspec import BuildSpec
from musaenv.toolchains.loadargs import canonical
from musaenv.types import BuildRecord

__all__ = [
    "BuildFailedError",
    "BuildState",
    "DeviceAbsentError",
    "KernelCalls",
    "WorkerHookError",
    "install_loader_hook",
]


class BuildFailedError(ImportError):
    """The candidate's extension did not build or load; the message carries the compiler output."""


class WorkerHookError(RuntimeError):
    """A backend's worker hook cannot load its runtime here (CuPy, NVRTC): the machine's problem."""


class DeviceAbsentError(RuntimeError):
    """A compiled-only extension was used: its device is not on this machine (compile-only evaluations)."""


class CompiledOnlyModule(types.ModuleType):
    """Stands for an extension compiled for a device that is not here: any use raises :class:`DeviceAbsentError`."""

    def __getattr__(self, item: str) -> Any:
        raise DeviceAbsentError(
            f"extension {self.__name__} was compiled for a device that is not present; not runnable"
        )


CallHook = Callable[[int, tuple[Any, ...], dict[str, Any], Any], None]
#: Makes the context one kernel call runs in (the runtime guard's profiler span around each call).
CallSpan = Callable[[], contextlib.AbstractContextManager[Any]]


@dataclass
class KernelCalls:
    """Calls into the candidate's extension functions, counted by wrappers installed at import.

    Attributes:
        count: Calls that returned (a call that raised is not counted: the kernel did not produce anything).
        wrapped: Extension functions wrapped so far.
        hook: Called as ``hook(count, args, kwargs, result)`` after each counted call (the perturbation probe).
        span: When set, each counted call runs inside ``span()`` (the runtime guard sets it to a profiler range
            while it profiles one forward, so the time spent inside the candidate's own kernels can be measured).
    """

    count: int = 0
    wrapped: int = 0
    hook: CallHook | None = None
    span: CallSpan | None = None

    def around(self) -> contextlib.AbstractContextManager[Any]:
        """The context one counted call runs in: :attr:`span`'s, or nothing."""
        return contextlib.nullcontext() if self.span is None else self.span()

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """A counting wrapper around one extension function."""

        @functools.wraps(fn)
        def kernel_call(*args: Any, **kwargs: Any) -> Any:
            if self.span is None:
                result = fn(*args, **kwargs)
            else:
                with self.span():
                    result = fn(*args, **kwargs)
            self.count += 1
            if self.hook is not None:
                self.hook(self.count, args, kwargs, result)
            return result

        self.wrapped += 1
        return kernel_call

    def wrap_module(self, module: types.ModuleType) -> None:
        """Replace every builtin (pybind11) function of ``module`` by a counting wrapper, once."""
        if getattr(module, "__musaenv_counted__", False):
            return
        for name, value in list(vars(module).items()):
            if not name.startswith("__") and isinstance(value, types.BuiltinFunctionType):
                setattr(module, name, self.wrap(value))
            elif isinstance(value, type) and getattr(value, "__module__", None) == module.__name__:
                self._wrap_methods(value)
        module.__musaenv_counted__ = True  # type: ignore[attr-defined]

    def _wrap_methods(self, cls: type) -> None:
        """Count the methods of a ``py::class_`` the module defines: a kernel exposed as a method is a kernel call."""
        for name, attr in list(vars(cls).items()):
            fn = getattr(attr, "__func__", None)  # pybind11 keeps each method as an instancemethod of a builtin
            if not name.startswith("__") and isinstance(fn, types.BuiltinFunctionType):
                with contextlib.suppress(TypeError, AttributeError):  # a type that refuses new attributes
                    setattr(cls, name, self.wrap(fn))


@dataclass
class BuildState:
    """Builds requested by this candidate (whether any was, for the compile-only drive). The parent keeps its own
    record of the builds it served (their tiers and times); of the builds reported with the result it takes only
    CuPy kernels, which compile here."""

    chan: Channel
    backend: str
    compile_only: bool
    builds: list[BuildRecord] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    calls: KernelCalls = field(default_factory=KernelCalls)

    def request(self, spec: BuildSpec) -> BuildResult:
        """Ask the parent to build ``spec``; blocks until it answers."""
        self.chan.send(BuildRequest(spec.to_dict()).to_dict())
        while True:
            msg, _ = self.chan.recv()
            if msg.get("type") == BuildResult.TYPE:
                return BuildResult.from_dict(msg)


def _import_extension(name: str, so_path: str) -> types.ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    loader = importlib.machinery.ExtensionFileLoader(name, so_path)
    spec = importlib.util.spec_from_file_location(name, so_path, loader=loader)
    if spec is None:
        raise BuildFailedError(f"cannot import extension {so_path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = module
    return module


class _DefaultRef:
    """Stands for one default value in a generated signature: its ``repr`` is the expression that fetches it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"_defaults[{self.name!r}]"


def with_signature_of(original: Callable[..., Any], impl: Callable[[dict[str, Any]], Any]) -> Callable[..., Any]:
    """A function with exactly ``original``'s parameters that calls ``impl`` with the bound arguments by name.

    Python itself binds the call, so what the installed torch rejects (an unknown keyword such as
    ``extra_cuda_flags``, a missing ``cpp_sources``, too many positional arguments) raises the very ``TypeError``
    torch's own ``load_inline`` raises, word for word; a signature read at install time follows every torch version.
    """
    sig = inspect.signature(original)
    defaults: dict[str, Any] = {}
    params = []
    for p in sig.parameters.values():
        default = p.default
        if default is not inspect.Parameter.empty:
            defaults[p.name] = default
            default = _DefaultRef(p.name)
        params.append(p.replace(annotation=inspect.Parameter.empty, default=default))
    text = str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))
    named = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    extra = [f"**{p.name}" for p in params if p.kind is p.VAR_KEYWORD]
    body = "{" + ", ".join([*(f"{n!r}: {n}" for n in named), *extra]) + "}"
    name = getattr(original, "__name__", "load_inline")
    namespace: dict[str, Any] = {"_defaults": defaults, "_impl": impl, "__name__": __name__}
    exec(f"def {name}{text}:\n    return _impl({body})\n", namespace)  # our text: torch's parameter names
    fn: Callable[..., Any] = namespace[name]
    fn.__doc__ = original.__doc__
    return fn


def _build(state: BuildState, kwargs: dict[str, Any]) -> types.ModuleType:
    """Ask the parent to build one ``load_inline`` call's extension and import it (or stand in for it)."""
    name = kwargs.get("name")
    spec = BuildSpec.from_load_inline(kwargs, backend=state.backend, compile_only=state.compile_only)
    reply = state.request(spec)
    state.builds.append(BuildRecord(reply.name, reply.ok, reply.seconds, reply.cached))
    if not reply.ok:
        state.failed.append(reply.log)
        raise BuildFailedError(f"building extension {name!r} failed:\n{reply.log}")
    if state.compile_only:
        return CompiledOnlyModule(reply.name)
    try:
        module = _import_extension(reply.name, str(reply.so_path))
    except ImportError as e:
        state.failed.append(f"the extension built but failed to load: {e}")
        raise BuildFailedError(state.failed[-1]) from None
    state.calls.wrap_module(module)
    return module


def install_loader_hook(chan: Channel, backend: str, compile_only: bool = False) -> BuildState:
    """Replace ``load_inline`` (and refuse ``load``) in :mod:`torch.utils.cpp_extension` for this process.

    On the MUSA backend ``torch_musa.utils.musa_extension`` gets the same replacements.
    """
    import torch.utils.cpp_extension as ce

    state = BuildState(chan, backend, compile_only)

    def build(kwargs: dict[str, Any]) -> types.ModuleType:
        kwargs = canonical(kwargs)  # a backend's own spelling (torch_musa's musa_sources); its builder hands them on
        if kwargs.get("sycl_sources"):
            raise TypeError("load_inline: sycl_sources are not supported by musaenv's backends")
        return _build(state, kwargs)

    load_inline = with_signature_of(ce.load_inline, build)

    def load(*args: Any, **kwargs: Any) -> types.ModuleType:
        raise RuntimeError("musaenv candidates build kernels with load_inline(...); load() of files is not supported")

    ce.load_inline = load_inline
    ce.load = load
    if get_backend(backend).loader_module:  # ported candidates import torch_musa's loader (musaenv port --to musa)
        try:
            musa_extension: Any = importlib.import_module(get_backend(backend).loader_module)
        except Exception:  # no torch_musa: the worker already refused the device with a clear message
            pass
        else:  # torch_musa's own signature (musa_sources, extra_musa_cflags), as a ported candidate calls it
            musa_extension.load_inline = with_signature_of(musa_extension.load_inline, build)
            musa_extension.load = load
    return state
