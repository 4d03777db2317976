"""Reachability from ModelNew.forward: torch compute through every alias form, kernels, fallbacks, caches."""

from __future__ import annotations

import pytest
from static_samples import candidate, line_of, with_forward

from musaenv.errors import ConfigError
from musaenv.verification import analyze_candidate

# (id, prelude at module level, forward body, forward parameters): each computes with torch somewhere.
TORCH_COMPUTE = [
    ("torch_call", "", "return ext.k(torch.matmul(x, w))", "x, w"),
    ("import_as", "import torch as t", "return ext.k(t.relu(x))", "x"),
    ("module_alias", "F = torch.nn.functional", "return ext.k(F.gelu(x))", "x"),
    ("from_import_as", "from torch.nn.functional import relu as r", "return ext.k(r(x))", "x"),
    ("from_torch_import_nn_as", "from torch import nn as N", "return ext.k(N.functional.silu(x))", "x"),
    ("getattr_constant", "", "return ext.k(getattr(torch, 'matmul')(x, w))", "x, w"),
    ("tensor_method", "", "return ext.k(x.matmul(w))", "x, w"),
    ("matmul_operator", "", "return ext.k(x @ w)", "x, w"),
    ("unbound_tensor_method", "", "return ext.k(torch.Tensor.add(x, w))", "x, w"),
    ("add_operator", "", "out = ext.k(x)\nreturn out + w", "x, w"),
    ("scalar_multiply", "", "return ext.k(x) * 2", "x"),
    ("inplace_operator", "", "y = ext.k(x)\ny += 1\nreturn y", "x"),
    ("masked_assign", "", "y = ext.k(x)\ny[y < 0] = 0\nreturn y", "x"),
    ("builtin_on_tensor", "", "return abs(ext.k(x))", "x"),
    ("dunder_call", "", "return ext.k(x.__mul__(w))", "x, w"),
    ("type_of_tensor", "", "return ext.k(type(x).matmul(x, w))", "x, w"),
    ("torch_ops_aten", "", "return ext.k(torch.ops.aten.mm(x, w))", "x, w"),
    ("dict_of_ops", "OPS = {'act': torch.relu}", "return ext.k(OPS['act'](x))", "x"),
    ("loop_over_ops", "", "for op in (torch.relu,):\n    x = op(x)\nreturn ext.k(x)", "x"),
    ("star_import", "from torch import *", "return ext.k(matmul(x, w))", "x, w"),
    ("numpy_compute", "import numpy as np", "return ext.k(torch.from_numpy(np.maximum(x.numpy(), 0)))", "x"),
    ("lambda_helper", "act = lambda t: torch.tanh(t)", "return ext.k(act(x))", "x"),
    ("helper_param_kinds", "def helper(a, b):\n    return a + b", "return helper(ext.k(x), w)", "x, w"),
]


@pytest.mark.parametrize(
    ("prelude", "forward", "params"), [c[1:] for c in TORCH_COMPUTE], ids=[c[0] for c in TORCH_COMPUTE]
)
def test_torch_compute_in_forward_is_an_error_under_strict(prelude: str, forward: str, params: str) -> None:
    report = analyze_candidate(with_forward(forward, prelude, params), policy="strict")
    assert report.flags == ("forbidden_torch_op",), report.messages
    assert report.kernel_calls == ("ext.k",)


@pytest.mark.parametrize(
    ("prelude", "forward", "params"), [c[1:] for c in TORCH_COMPUTE], ids=[c[0] for c in TORCH_COMPUTE]
)
def test_permissive_policy_reports_torch_glue_as_warnings(prelude: str, forward: str, params: str) -> None:
    report = analyze_candidate(with_forward(forward, prelude, params), policy="permissive")
    assert report.ok, report.messages
    assert "forbidden_torch_op" in report.warning_flags
    assert report.torch_calls


def test_off_policy_ignores_torch_compute_and_missing_kernels() -> None:
    source = with_forward("return torch.relu(x)")
    assert analyze_candidate(source, policy="off").findings == ()
    assert set(analyze_candidate(source, policy="strict").flags) == {"forbidden_torch_op", "no_custom_kernel"}


def test_finding_names_the_construct_and_its_line() -> None:
    source = with_forward("y = ext.k(x)\nreturn torch.matmul(y, w)", params="x, w")
    (finding,) = analyze_candidate(source).errors
    assert finding.line == line_of(source, "torch.matmul")
    assert "torch.matmul" in finding.message and f"line {finding.line}" in finding.message
    assert analyze_candidate(source, policy="permissive").torch_calls == ("torch.matmul()",)


def test_helpers_and_methods_are_followed_transitively() -> None:
    body = """
    def deep(a):
        return torch.sigmoid(a)

    def middle(a):
        return deep(a)

    class ModelNew(nn.Module):
        def forward(self, x):
            return self._post(ext.k(x))

        def _post(self, y):
            return middle(y)

        def unused(self, y):
            return torch.tanh(y)
    """
    report = analyze_candidate(candidate(body))
    assert report.flags == ("forbidden_torch_op",)
    assert [f.line for f in report.errors] == [line_of(candidate(body), "torch.sigmoid")]


def test_nn_modules_called_in_forward_are_forbidden_but_their_weights_are_not() -> None:
    body = """
    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.act = torch.tanh

        def forward(self, x):
            y = ext.k(x, self.fc.weight, self.fc.bias)
            return self.act(self.fc(y))
    """
    report = analyze_candidate(candidate(body))
    assert report.flags == ("forbidden_torch_op",)
    assert len(report.errors) == 2  # self.fc(...) and self.act(...), not the weight reads


def test_subclassing_a_torch_layer_inherits_its_compute() -> None:
    body = """
    class ModelNew(nn.Linear):
        def forward(self, x):
            return ext.k(super().forward(x))
    """
    assert analyze_candidate(candidate(body)).flags == ("forbidden_torch_op",)


def test_overriding_call_is_analysed_like_forward() -> None:
    body = """
    class ModelNew(nn.Module):
        def forward(self, x):
            return ext.k(x)

        def __call__(self, x):
            return torch.relu(x)
    """
    assert analyze_candidate(candidate(body)).flags == ("forbidden_torch_op",)


@pytest.mark.parametrize(
    "body",
    [
        "class ModelNew(Model):\n    def forward(self, x):\n        return ext.k(x)\n",
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.ref = Model()\n"
        "    def forward(self, x):\n        ext.k(x)\n        return self.ref(x)\n",
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        ext.k(x)\n"
        "        return Model.forward(self, x)\n",
    ],
    ids=["subclass", "instance", "unbound_forward"],
)
def test_using_the_reference_model_is_flagged(body: str) -> None:
    report = analyze_candidate(candidate(body), policy="permissive")
    assert "reference_model" in report.flags


def test_forward_without_a_custom_kernel_is_flagged() -> None:
    body = """
    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()
            ext.k(torch.zeros(1))  # a decoy launch outside forward does not count

        def forward(self, x):
            return x.clone()
    """
    report = analyze_candidate(candidate(body))
    assert report.flags == ("no_custom_kernel",)
    assert report.kernel_calls == ()


def test_missing_model_new_is_flagged() -> None:
    report = analyze_candidate("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    assert report.flags == ("missing_model_new",)


FALLBACKS = {
    "handler_uses_torch": "try:\n    return ext.k(x)\nexcept Exception:\n    return torch.relu(x)",
    "handler_calls_helper": "try:\n    return ext.k(x)\nexcept RuntimeError:\n    return self.slow(x)",
    "suppress_then_torch": "out = None\nwith contextlib.suppress(Exception):\n    out = ext.k(x)\n"
    "if out is None:\n    out = torch.relu(x)\nreturn out",
    "flag_then_torch": "try:\n    out = ext.k(x)\n    ok = True\nexcept Exception:\n    ok = False\n"
    "return out if ok else torch.relu(x)",
}


@pytest.mark.parametrize("policy", ["strict", "permissive"])
@pytest.mark.parametrize("forward", list(FALLBACKS.values()), ids=list(FALLBACKS))
def test_try_except_fallback_to_torch_is_an_error(forward: str, policy: str) -> None:
    prelude = "import contextlib\n"
    source = with_forward(forward, prelude).replace(
        "class ModelNew(nn.Module):", "class ModelNew(nn.Module):\n    def slow(self, x):\n        return x * 2\n"
    )
    assert "try_except_fallback" in analyze_candidate(source, policy=policy).flags


def test_guarded_build_with_torch_fallback_is_an_error_even_when_permissive() -> None:
    body = """
    try:
        ext2 = load_inline(name="f", cpp_sources=SRC, functions=["k"])
    except Exception:
        ext2 = None

    class ModelNew(nn.Module):
        def forward(self, x):
            if ext2 is None:
                return torch.relu(x)
            return ext2.k(x)
    """
    assert analyze_candidate(candidate(body), policy="permissive").flags == ("try_except_fallback",)


def test_try_that_reraises_is_not_a_fallback() -> None:
    source = with_forward("try:\n    return ext.k(x)\nexcept RuntimeError as e:\n    raise ValueError('bad') from e")
    assert analyze_candidate(source).findings == ()


@pytest.mark.parametrize(
    ("prelude", "forward"),
    [
        ("_SEEN = {}", "k = id(x)\nif k not in _SEEN:\n    _SEEN[k] = ext.k(x)\nreturn _SEEN[k]"),
        ("_SEEN = {}", "if x.data_ptr() in _SEEN:\n    return _SEEN[x.data_ptr()]\nreturn ext.k(x)"),
        ("import functools\n@functools.lru_cache(maxsize=None)\ndef run(t):\n    return ext.k(t)", "return run(x)"),
    ],
    ids=["id_key", "data_ptr_key", "lru_cache_with_args"],
)
def test_output_caches_are_errors(prelude: str, forward: str) -> None:
    report = analyze_candidate(with_forward(forward, prelude), policy="off")
    assert "output_cache" in report.flags


def test_state_kept_on_self_is_only_a_warning() -> None:
    source = with_forward("self.calls = 1\nreturn ext.k(x)")
    report = analyze_candidate(source)
    assert report.ok
    assert report.warning_flags == ("output_cache",)


def test_computed_getattr_on_torch_is_dynamic_code() -> None:
    report = analyze_candidate(with_forward("return ext.k(getattr(torch, 'mat' + 'mul')(x, x))"))
    assert "dynamic_code" in report.flags


def test_syntax_error_is_a_single_finding() -> None:
    report = analyze_candidate("class ModelNew(nn.Module:\n    pass\n")
    assert [f.flag for f in report.findings] == ["syntax_error"]
    assert report.findings[0].line == 1


def test_unknown_policy_or_backend_is_a_usage_error() -> None:
    with pytest.raises(ConfigError):
        analyze_candidate(candidate(), policy="lenient")
    with pytest.raises(ConfigError):
        analyze_candidate(candidate(), backend="rocm")


def test_deeply_nested_expression_is_data_not_an_exception() -> None:
    source = with_forward("return ext.k(x)") + "\nZ = " + "(" * 120 + "1" + ")" * 120 + "\n"
    deep = with_forward("return ext.k(x" + " + x" * 3000 + ")")
    assert analyze_candidate(source).ok
    report = analyze_candidate(deep)
    assert not report.ok
    assert report.flags in (("forbidden_torch_op",), ("too_complex",), ("syntax_error",))


def test_backend_mismatch_is_a_warning() -> None:
    report = analyze_candidate(candidate(), backend="triton")
    assert report.ok
    assert report.warning_flags == ("backend_mismatch",)


def test_model_new_bound_to_another_class_is_followed() -> None:
    body = """
    class FusedNet(nn.Module):
        def forward(self, x):
            return torch.relu(ext.k(x))

    ModelNew = FusedNet
    """
    report = analyze_candidate(candidate(body))
    assert report.flags == ("forbidden_torch_op",)
    assert report.kernel_calls == ("ext.k",)


def test_reachability_switch_leaves_the_other_checks() -> None:
    """``reachability=False`` (benchmarks/reachability_value.py) skips only the analysis from forward."""
    torch_op = with_forward("return ext.k(torch.relu(x))")
    assert analyze_candidate(torch_op).flags == ("forbidden_torch_op",)
    off = analyze_candidate(torch_op, reachability=False)
    assert off.ok and off.kernel_calls == () and off.torch_calls == ()
    assert analyze_candidate("import torch\n", reachability=False).ok  # no ModelNew: not looked for either
    banned = with_forward('import os\nos.system("true")\nreturn ext.k(x)')
    assert analyze_candidate(banned, reachability=False).flags == ("process_or_thread",)
    assert analyze_candidate(with_forward("return ext.k(x)")).kernel_calls == ("ext.k",)
