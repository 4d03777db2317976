"""The verifiers taskset plugin ``musaenv-kernelgen``: KernelGen-v0 with multi-turn feedback (extra ``verifiers``).

verifiers 0.4 resolves a taskset id to a top-level package that exports its ``Taskset`` (and optionally ``Env``)
subclass via ``__all__``; the implementation lives in :mod:`musaenv.rl.adapters.verifiers_v1`.
"""

from musaenv.rl.adapters.verifiers_v1 import KernelGenTaskset, KernelGenVerifiersEnv

__all__ = ["KernelGenTaskset", "KernelGenVerifiersEnv"]
