"""The build service: one ``load_inline`` call in, a sealed, cached extension out.

:func:`.loader.build_extension` is the entry point (content hash, cache lookup, slot, private directory,
the confined :mod:`.builder`, install); :mod:`.fastbuild`, :mod:`.pch` and :mod:`.cuda_fast` are the fast
tiers; :mod:`.cuda_compile`, :mod:`.triton_aot` and :mod:`.cupy_nvrtc` the compile-only checks.
"""
