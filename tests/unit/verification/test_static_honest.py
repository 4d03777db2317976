"""Honest candidates must pass the strict static checks: one per backend flavour, plus every shipped solution."""

from __future__ import annotations

from pathlib import Path

import pytest
from static_samples import HONEST_CPU, HONEST_CUDA, HONEST_MUSA, HONEST_TRITON, candidate

from musaenv.verification import analyze_candidate

SOLUTIONS = sorted((Path(__file__).resolve().parents[3] / "musaenv" / "tasks" / "solutions").glob("*/*.py"))


@pytest.mark.parametrize(
    ("source", "backend", "kernel"),
    [
        (HONEST_CPU, "cpu", "relu_ext.relu_forward"),
        (HONEST_CUDA, "cuda", "fused.linear_relu"),
        (HONEST_TRITON, "triton", "scale_add_kernel[grid]"),
        (HONEST_MUSA, "musa", "ext.add_musa"),
    ],
    ids=["cpu_cpp", "cuda_src", "triton_jit", "musa_src"],  # a bare "musa" id would be skipped as a device test
)
def test_honest_candidate_has_no_findings_under_strict(source: str, backend: str, kernel: str) -> None:
    report = analyze_candidate(source, policy="strict", backend=backend)
    assert report.ok
    assert report.findings == ()
    assert report.kernel_calls == (kernel,)
    assert report.torch_calls == ()


@pytest.mark.parametrize("path", SOLUTIONS, ids=[f"{p.parent.name}/{p.stem}" for p in SOLUTIONS])
def test_shipped_solution_passes_strict(path: Path) -> None:
    backend = path.parent.name if path.parent.name in ("cpu", "cuda", "triton", "musa") else "cpu"
    report = analyze_candidate(path.read_text(encoding="utf-8"), policy="strict", backend=backend)
    assert report.errors == (), report.messages
    assert report.kernel_calls


def test_there_are_shipped_solutions_to_check() -> None:
    assert len(SOLUTIONS) >= 10


def test_autograd_function_wrapper_reaches_its_kernel() -> None:
    body = """
    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return ext.k(x)

    class ModelNew(nn.Module):
        def forward(self, x):
            return Fn.apply(x)
    """
    report = analyze_candidate(candidate(body))
    assert report.ok, report.messages
    assert report.kernel_calls == ("ext.k",)


def test_lazy_extension_loaders_are_followed() -> None:
    body = """
    import functools

    @functools.lru_cache(maxsize=None)
    def _lib():
        return load_inline(name="lazy", cpp_sources=SRC, functions=["k"])

    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()
            self.mod = load_inline(name="eager", cpp_sources=SRC, functions=["k"])

        def forward(self, x):
            return self.mod.k(_lib().k(x))
    """
    report = analyze_candidate(candidate(body))
    assert report.ok, report.messages
    assert set(report.kernel_calls) == {"mod.k", "_lib().k"}


def test_plumbing_and_integer_arithmetic_are_allowed_in_forward() -> None:
    body = """
    BLOCK = 256

    class ModelNew(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(n, n))
            self.register_buffer("scale", torch.ones(n))

        def _grid(self, n):
            return (n + BLOCK - 1) // BLOCK

        def forward(self, x, y):
            b, n = x.shape
            assert x.is_contiguous() and x.size(1) == n and x.dtype == torch.float32
            if not y.is_contiguous():
                y = y.contiguous()
            out = torch.empty((b, n), device=x.device, dtype=x.dtype)
            blocks = self._grid(x.numel()) * 2 + int(x.stride(0)) - len(x.shape)
            w = self.weight.t().contiguous().view(-1).reshape(n, n)
            with torch.no_grad():
                out = ext.k(x[:, :n].unsqueeze(0).squeeze(0).to(torch.float32))
            return out.view(b, n), blocks, w, self.scale
    """
    report = analyze_candidate(candidate(body))
    assert report.ok, report.messages
    assert report.findings == ()


_IDIOMS = Path(__file__).resolve().parents[2] / "adversarial" / "candidates"


@pytest.mark.parametrize(
    ("name", "kernel"),
    [
        ("honest_class_kernel", "ext.Relu().forward"),
        ("honest_module_list", "ext.linear_relu"),
        ("honest_getattr_ext", "ext.<computed>"),
    ],
)
def test_honest_idioms_pass_strict(name: str, kernel: str) -> None:
    """A py::class_ method as the kernel, modules collected in forward, a computed lookup on its own extension."""
    report = analyze_candidate((_IDIOMS / f"{name}.py").read_text(), policy="strict", backend="cpu")
    assert report.findings == () and report.kernel_calls == (kernel,), report.messages


@pytest.mark.parametrize(
    ("name", "old", "new", "flag"),
    [
        ("honest_module_list", "x = ext.linear_relu(x, layer.weight, layer.bias)", "x = layer(x)",
         "forbidden_torch_op"),
        ("honest_module_list", "[m for m in", "[m(x) for m in", "forbidden_torch_op"),
        ("honest_getattr_ext", 'getattr(ext, f"{self.op}_launch")', 'getattr(torch, f"{self.op}")', "dynamic_code"),
        ("honest_getattr_ext", 'getattr(ext, f"{self.op}_launch")', 'getattr(self, f"{self.op}")', "dynamic_code"),
        ("honest_class_kernel", "return self.kernel.forward(x)", "return torch.relu(self.kernel.forward(x))",
         "forbidden_torch_op"),
    ],
)  # fmt: skip
def test_the_idioms_do_not_open_a_way_around(name: str, old: str, new: str, flag: str) -> None:
    source = (_IDIOMS / f"{name}.py").read_text()
    assert old in source
    report = analyze_candidate(source.replace(old, new), policy="strict", backend="cpu")
    assert flag in report.flags, report.messages
