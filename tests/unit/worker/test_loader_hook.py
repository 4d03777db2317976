"""The loader hook binds a candidate's ``load_inline`` call with the installed torch's own signature."""

from __future__ import annotations

from typing import Any

import pytest
import torch.utils.cpp_extension as ce

from musaenv.worker.loader_hook import with_signature_of

BAD_CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((), {"name": "x", "cpp_sources": "", "extra_cuda_flags": ["-O3"]}),  # a keyword torch does not have
    ((), {"name": "x", "cuda_sources": "__global__ void k() {}"}),  # no cpp_sources
    (("x",), {}),
    ((), {}),
    (("x", "", None, None, None, None, None, None, None, None, None, False, None, None, True, True, True, False, False,
      "one too many"), {}),
    (("x", ""), {"name": "y"}),  # name given twice
]  # fmt: skip


@pytest.mark.parametrize("args,kwargs", BAD_CALLS)
def test_what_torch_rejects_is_rejected_with_torchs_own_message(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError) as real:
        ce.load_inline(*args, **kwargs)  # binding fails before torch builds anything
    hooked = with_signature_of(ce.load_inline, lambda bound: pytest.fail(f"bound {bound}"))
    with pytest.raises(TypeError) as ours:
        hooked(*args, **kwargs)
    assert str(ours.value) == str(real.value)


def test_accepted_calls_arrive_bound_by_name_with_torchs_defaults() -> None:
    hooked = with_signature_of(ce.load_inline, lambda bound: bound)
    bound = hooked("ext", "int f();", None, functions=["f"], extra_cflags=["-O3"])
    assert bound["name"] == "ext" and bound["cpp_sources"] == "int f();" and bound["functions"] == ["f"]
    assert bound["extra_cflags"] == ["-O3"] and bound["with_pytorch_error_handling"] is True
    assert set(bound) == set(ce.load_inline.__code__.co_varnames[: ce.load_inline.__code__.co_argcount])
    assert hooked.__name__ == "load_inline" and hooked.__doc__ == ce.load_inline.__doc__
