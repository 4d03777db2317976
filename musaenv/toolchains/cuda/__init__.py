"""The CUDA toolchains: the split build (:mod:`.fast`: device, host and binding compiled at once, :mod:`.parts` the
compiles in flight), the split of a source into device and host code (:mod:`.split`, reading its top level with
:mod:`.chunks`, template instances from :mod:`.templates`, the names torch's headers could change from
:mod:`.names`) and the compile-only check on a machine without a GPU (:mod:`.compile`, linking as torch does with
:mod:`.link`). The host side and the binding go through the C++ fast path (:mod:`musaenv.toolchains.cpp`).
"""
