"""The extension loader: content-hash names, cache behaviour across processes, killed builds, failures as data.

The compiling tests share one C++ source (built once per run into a private extension directory; the
precompiled headers and binding objects in the user's cache are shared with every other run).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from musaenv import _env
from musaenv.toolchains.loader import BuildSpec, build_extension, configure_builds

RELU = r"""
#include <torch/extension.h>
torch::Tensor relu_fwd(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 input expected");
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) po[i] = px[i] > 0.0f ? px[i] : 0.0f;
    return out;
}
torch::Tensor scale(const torch::Tensor& x, double s) { return relu_fwd(x) * s; }
"""

BROKEN = "torch::Tensor broken(torch::Tensor x) { return x.no_such_method(); }\n"


def spec_of(cpp: str, **kw: Any) -> BuildSpec:
    # -O3 like the built-in solutions, so the precompiled headers of that flag set are shared
    args = {"cpp_sources": cpp, "functions": ["relu_fwd", "scale"], "extra_cflags": ["-O3"], **kw}
    return BuildSpec.from_load_inline(args, "cpu")


_BUILD_IN_CHILD = """
import json, sys
from pathlib import Path
from musaenv.toolchains.loader import BuildSpec, build_extension, configure_builds
spec = BuildSpec.from_dict(json.loads(sys.argv[1]))
out = build_extension(spec, timeout_s=1800, root=Path(sys.argv[2]))
print(json.dumps(out.to_dict()))
"""

_USE_IN_CHILD = """
import importlib.machinery, importlib.util, json, sys, torch
name, path = sys.argv[1], sys.argv[2]
loader = importlib.machinery.ExtensionFileLoader(name, path)
m = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, path, loader=loader))
loader.exec_module(m)
x = torch.randn(64)
try:
    m.relu_fwd(torch.ones(3, dtype=torch.int64))
    err = None
except Exception as e:
    err = [type(e).__name__, str(e)]
print(json.dumps({"name": m.__name__, "relu_ok": bool(torch.equal(m.relu_fwd(x), torch.relu(x))),
                  "scale_ok": bool(torch.allclose(m.scale(x, 2.0), torch.relu(x) * 2.0)),
                  "doc": m.relu_fwd.__doc__, "err": err}))
"""


def _child(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env.child_env())  # fmt: skip


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=1800)
    assert proc.returncode == 0, err[-2000:]
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_names_are_content_hashes() -> None:
    a, b = spec_of(RELU), spec_of(RELU)
    assert a.name == b.name and a.name.startswith("musaenv_")
    assert spec_of(RELU + "// changed\n").name != a.name
    assert spec_of(RELU, extra_cflags=["-O2"]).name != a.name
    fns = {"relu_fwd": "relu", "scale": "scale"}
    assert BuildSpec.from_load_inline({"cpp_sources": [RELU], "functions": fns}, "cpu").name == \
        BuildSpec.from_load_inline({"cpp_sources": RELU, "functions": dict(fns)}, "cpu").name  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Kill a build half-way, then build the same spec from two processes at once."""
    root = tmp_path_factory.mktemp("ext")
    spec = spec_of(RELU + f"// test run {uuid.uuid4().hex}\n")
    killed = build_extension(spec, timeout_s=1.0, root=root)
    procs = [_child(_BUILD_IN_CHILD, json.dumps(spec.to_dict()), str(root)) for _ in range(2)]
    return {"root": root, "spec": spec, "killed": killed, "pair": [_result(p) for p in procs]}


@pytest.mark.slow
def test_killed_build_leaves_no_lock_and_concurrent_builds_succeed(built: dict[str, Any]) -> None:
    killed = built["killed"]
    assert not killed.ok and killed.timed_out and "limit" in killed.log
    assert all(r["ok"] for r in built["pair"]), built["pair"]
    assert built["pair"][0]["so_path"] == built["pair"][1]["so_path"]
    assert not list((built["root"] / "tmp").iterdir())  # no half-built leftovers


@pytest.mark.slow
def test_cache_hit_from_another_process(built: dict[str, Any]) -> None:
    hit = _result(_child(_BUILD_IN_CHILD, json.dumps(built["spec"].to_dict()), str(built["root"])))
    assert hit["ok"] and hit["cached"]
    assert hit["so_path"] == built["pair"][0]["so_path"]


@pytest.mark.slow
def test_module_behaves_like_load_inline(built: dict[str, Any]) -> None:
    info = _result(_child(_USE_IN_CHILD, built["spec"].name, built["pair"][0]["so_path"]))
    assert info["name"] == built["spec"].name
    assert info["relu_ok"] and info["scale_ok"]
    # load_inline's binding: the function name as docstring, pybind11's signature line above it
    assert info["doc"].strip().splitlines() == ["relu_fwd(arg0: torch.Tensor) -> torch.Tensor", "", "relu_fwd"]
    # torch::wrap_pybind_function turns a TORCH_CHECK failure into a Python RuntimeError
    assert info["err"][0] == "RuntimeError" and "float32 input expected" in info["err"][1]


@pytest.mark.slow
def test_compile_error_is_a_verdict_with_compiler_output(tmp_path: Path) -> None:
    spec = BuildSpec.from_load_inline({"cpp_sources": BROKEN, "functions": ["broken"], "extra_cflags": ["-O3"]}, "cpu")
    first = build_extension(spec, timeout_s=1800, root=tmp_path)
    assert not first.ok and not first.infra_error and not first.timed_out
    assert "no_such_method" in first.log and "error" in first.log
    again = build_extension(spec, timeout_s=1800, root=tmp_path)
    assert not again.ok and again.cached and again.log == first.log


@pytest.mark.slow
def test_own_pybind11_module_builds_through_the_full_header(tmp_path: Path) -> None:
    cpp = RELU + 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu_fwd", &relu_fwd, py::arg("x")); }\n'
    spec = BuildSpec.from_load_inline({"cpp_sources": cpp, "extra_cflags": ["-O3"]}, "cpu")
    out = build_extension(spec, timeout_s=1800, root=tmp_path)
    assert out.ok, out.log
    assert out.extra.get("tier") in ("pch", "torch")  # never the pybind11-free split


@pytest.mark.slow
def test_torch_mode_builds_an_equivalent_module(built: dict[str, Any], tmp_path: Path) -> None:
    torch_out = build_extension(built["spec"], timeout_s=1800, root=tmp_path, mode="torch")
    assert torch_out.ok and torch_out.extra.get("tier") == "torch"
    ours = _result(_child(_USE_IN_CHILD, built["spec"].name, built["pair"][0]["so_path"]))
    theirs = _result(_child(_USE_IN_CHILD, torch_out.name, str(torch_out.so_path)))
    assert ours == theirs


def test_unknown_build_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="build mode"):
        configure_builds(mode="fastest")


def test_malformed_arguments_raise_type_error_before_any_build() -> None:
    with pytest.raises(TypeError):
        BuildSpec.from_load_inline({"cpp_sources": 42}, "cpu")
