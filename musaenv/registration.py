"""Register musaenv's environment ids with Gymnasium (no device touched, nothing imported eagerly)."""

from __future__ import annotations

import gymnasium as gym

__all__ = ["ENV_IDS", "register_envs"]

ENV_IDS = ("KernelGen-v0", "KernelGen-CPU-v0", "KernelGen-CUDA-v0", "KernelGen-MUSA-v0")


def register_envs() -> None:
    """Register every env id once (idempotent)."""
    specs = {
        "KernelGen-v0": {},
        "KernelGen-CPU-v0": {"backend": "cpu"},
        "KernelGen-CUDA-v0": {"backend": "cuda"},
        "KernelGen-MUSA-v0": {"backend": "musa"},
    }
    for env_id, kwargs in specs.items():
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point="musaenv.vector:make_env",  # KernelGenEnv with a shared-memory-safe Text space
                vector_entry_point="musaenv.vector:make_vector_env",  # N envs, one shared evaluator pool
                kwargs=kwargs,
            )
