"""The C++ toolchains: the fast driver (:mod:`.fastbuild`, its split and ``pch`` tiers), torch's compile flags and
the compiler runner (:mod:`.compiler`), the precompiled-header store (:mod:`.pch`), the cached binding objects
(:mod:`.bindobj`), which candidate flags key a header or a binding object (:mod:`.flagkeys`), the names only
``torch/extension.h`` declares (:mod:`.header_names`, how a split-tier error is told from an artefact of the
narrower header) and clang++ as a second compiler (:mod:`.clang`). The CUDA toolchains
(:mod:`musaenv.toolchains.cuda`) build their host side through this fast path; nothing here imports them, the
loader or the builder.
"""
