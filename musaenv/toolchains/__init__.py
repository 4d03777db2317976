"""The build service: one ``load_inline`` call in, a sealed, cached extension out.

:func:`.loader.build_extension` is the entry point (content hash, cache lookup, slot, private directory,
the confined :mod:`.builder`, install); :mod:`.cpp.fastbuild`, :mod:`.cpp.pch` and :mod:`.cuda.fast` are the fast
tiers; :mod:`.cuda.compile`, :mod:`.triton_aot` and :mod:`.cupy_nvrtc` the compile-only checks.

Layout: the service shared by every toolchain is at this level (:mod:`.loader`, :mod:`.builder` and its launch,
:mod:`.buildspec`, :mod:`.loadargs`, :mod:`.job`, :mod:`.toolchain`, :mod:`.admission`, :mod:`.ext_cache`,
:mod:`.faults`, :mod:`.own_checks`, :mod:`.stopping`, :mod:`.flags`, :mod:`.torch_inline`, :mod:`.warmup`, and the
Triton and CuPy checks); the C++ toolchains are in :mod:`.cpp`, the CUDA ones in :mod:`.cuda`.
"""
