"""What runs beside candidate code or a reference, in a worker process (imports torch).

The parent never imports this package (import-linter contract). :mod:`.candidate` is the worker's entry
point (both roles), :mod:`.reference` the reference role, :mod:`.trials` and :mod:`.harness` the trials and
inputs both roles share, :mod:`.loader_hook` routes ``load_inline`` to the parent's build service.
"""
