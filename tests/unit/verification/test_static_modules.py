"""Reachability through modules a model holds, type tests as plumbing, and the kernelbench policy."""

from __future__ import annotations

import textwrap

import pytest
from static_samples import candidate

from musaenv.verification import analyze_candidate

BLOCKS = """
class Act(nn.Module):
    def forward(self, x):
        return ext.k(x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = Act()

    def forward(self, x):
        return self.act(x)

"""

HONEST = {
    "module_list_loop": """
        class ModelNew(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.layers = nn.ModuleList([Block() for _ in range(n)])

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x
    """,
    "sequential_of_starred_list": """
        class ModelNew(nn.Module):
            def __init__(self, n):
                super().__init__()
                layers = []
                for _ in range(n):
                    layers.append(Block())
                self.body = nn.Sequential(*layers)

            def forward(self, x):
                return self.body(x)
    """,
    "appended_later_and_indexed": """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList()
                self.layers.append(Block())

            def forward(self, x):
                return self.layers[0](x)
    """,
    "module_dict_items_enumerate_zip": """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleDict({"a": Block(), "b": Act()})
                self.more = nn.ModuleList([Act(), Act()])

            def forward(self, x):
                for _, m in self.blocks.items():
                    x = m(x)
                for i, (a, b) in enumerate(zip(self.more, self.more)):
                    x = b(a(x))
                return x
    """,
    "isinstance_selects_linear_parameters": """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.network = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                for m in self.network:
                    if isinstance(m, nn.Linear) and type(m) is nn.Linear:
                        x = ext.k(x, m.weight, m.bias)
                return x
    """,
}

CHEATS = {
    "sequential_of_torch_modules": """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

            def forward(self, x):
                return ext.k(self.net(x))
    """,
    "torch_module_called_in_loop": """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList([Block(), nn.GELU()])

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x
    """,
    "torch_module_appended_then_indexed": """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList()
                self.layers.append(nn.Linear(4, 4))

            def forward(self, x):
                return ext.k(self.layers[0](x))
    """,
}


@pytest.mark.parametrize("name", list(HONEST))
def test_kernels_reached_through_held_modules_count(name: str) -> None:
    report = analyze_candidate(candidate(BLOCKS + textwrap.dedent(HONEST[name])), policy="strict", preprocess=False)
    assert report.ok and report.findings == (), report.messages
    assert report.kernel_calls == ("ext.k",)


@pytest.mark.parametrize("name", list(CHEATS))
def test_torch_compute_held_in_containers_is_still_compute(name: str) -> None:
    report = analyze_candidate(candidate(BLOCKS + textwrap.dedent(CHEATS[name])), policy="strict", preprocess=False)
    assert "forbidden_torch_op" in report.flags, report.messages


def test_an_unnamed_callable_leaves_the_kernel_check_to_the_runtime() -> None:
    body = """
        OPS = dict(k=ext.k)


        class ModelNew(nn.Module):
            def forward(self, x):
                return OPS["k"](x)
    """
    report = analyze_candidate(candidate(body), policy="strict", preprocess=False)
    assert report.ok and report.warning_flags == ("no_custom_kernel",), report.messages
    plain = analyze_candidate(candidate("class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"))
    assert "no_custom_kernel" in plain.flags  # nothing unnamed: still refused


KERNELBENCH_PARTIAL = """
class ModelNew(nn.Module):
    def forward(self, x):
        return ext.k(torch.matmul(x, x))
"""


def test_kernelbench_keeps_some_operators_in_pytorch() -> None:
    source = candidate(KERNELBENCH_PARTIAL)
    assert analyze_candidate(source, policy="strict", preprocess=False).flags == ("forbidden_torch_op",)
    report = analyze_candidate(source, policy="kernelbench", preprocess=False)
    assert report.ok and "forbidden_torch_op" in report.warning_flags
    assert "kernelbench" in " ".join(report.messages)


def test_kernelbench_refuses_what_its_checker_refuses() -> None:
    body = "class ModelNew(nn.Module):\n    def forward(self, x):\n        try:\n            return ext.k(x)\n"
    guarded = candidate(body + "        except RuntimeError:\n            raise\n")
    assert analyze_candidate(guarded, policy="strict", preprocess=False).ok  # re-raising is no fallback here
    assert analyze_candidate(guarded, policy="kernelbench", preprocess=False).flags == ("try_except_fallback",)
    no_global = analyze_candidate(candidate(), policy="kernelbench", backend="cuda", preprocess=False)
    assert no_global.flags == ("no_custom_kernel",) and "__global__" in no_global.messages[0]
    assert analyze_candidate(candidate(), policy="kernelbench", backend="cpu", preprocess=False).ok
