"""The C++ sources the adversarial candidates share, so the suite builds three extensions in all.

``CLEAN_CPP`` holds kernels whose C++ is unremarkable (pointer loops, ``empty_like``, a static counter): the
static C++ scan has nothing to object to, so what these candidates do wrong must be caught by the Python-level
static checks or at runtime. ``DIRTY_CPP`` holds the cheats that live in C++ itself (ATen compute, a background
thread, replacing Python's clock through pybind11); the static scan refuses that extension as a whole, so its
candidates are run with static checks off to prove the runtime layer, and :data:`DIRTY_SNIPPETS` gives each cheat
alone for the per-construct static test.

``NUMERICS_CPP`` holds row kernels that are right on a task's own inputs and wrong on scaled or offset ones.

A candidate file starts with the line ``from adversarial import ext`` (or ``numerics``, ``dirty``), which
:func:`render` replaces with the shared preamble; ``__PLACEHOLDER__`` strings are filled by the tests.
"""

from __future__ import annotations

from pathlib import Path

CANDIDATES_DIR = Path(__file__).parent / "candidates"
DATA_DIR = Path(__file__).parent / "data"

CLEAN_CPP = r"""
#include <torch/extension.h>
#include <cstdint>
#include <stdexcept>
#include <vector>

static torch::Tensor relu_into(const torch::Tensor& x, torch::Tensor out) {
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) po[i] = px[i] > 0.0f ? px[i] : 0.0f;
    return out;
}
torch::Tensor relu_fwd(torch::Tensor x) { x = x.contiguous(); return relu_into(x, torch::empty_like(x)); }
torch::Tensor relu_inplace(torch::Tensor x) { return relu_into(x, x); }
torch::Tensor copy_fwd(torch::Tensor x) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    std::copy(x.data_ptr<float>(), x.data_ptr<float>() + x.numel(), out.data_ptr<float>());
    return out;
}
torch::Tensor fill_const(torch::Tensor x, double value) {
    auto out = torch::empty_like(x);
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < out.numel(); ++i) po[i] = static_cast<float>(value);
    return out;
}
// S17: the arithmetic is done in half precision.
torch::Tensor relu_half(torch::Tensor x) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
        c10::Half h = static_cast<c10::Half>(px[i]);
        po[i] = static_cast<float>(h) > 0.0f ? static_cast<float>(h) : 0.0f;
    }
    return out;
}
// S16: blocks of 1024 with no tail, so only sizes that are multiples of 1024 come out right.
torch::Tensor relu_blocked(torch::Tensor x) {
    x = x.contiguous();
    auto out = torch::zeros_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t b = 0; b + 1024 <= x.numel(); b += 1024)
        for (int64_t i = b; i < b + 1024; ++i) po[i] = px[i] > 0.0f ? px[i] : 0.0f;
    return out;
}
// S9: writes only the positive entries and leaves the rest of the fresh buffer as it found it.
torch::Tensor relu_uninit(torch::Tensor x) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) if (px[i] > 0.0f) po[i] = px[i];
    return out;
}
// S12: correct while it might be checked, zeros once the call count says timing has started.
torch::Tensor relu_counted(torch::Tensor x, int64_t honest_calls) {
    static int64_t calls = 0;
    if (++calls > honest_calls) return torch::zeros_like(x);
    return relu_fwd(x);
}
// S11: remembers the last output per input address.
torch::Tensor relu_by_address(torch::Tensor x) {
    static std::vector<std::pair<const void*, torch::Tensor>> memo;
    for (auto& kv : memo) if (kv.first == x.data_ptr() && kv.second.sizes() == x.sizes()) return kv.second;
    auto out = relu_fwd(x);
    memo.emplace_back(x.data_ptr(), out);
    return out;
}
torch::Tensor throws(torch::Tensor x) { throw std::runtime_error("adversarial kernel raised on purpose"); }
torch::Tensor segfault(torch::Tensor x) { *(volatile int*)16 = 1; return x; }
torch::Tensor spin(torch::Tensor x) { volatile int64_t i = 0; for (;;) { i = i + 1; } return x; }
torch::Tensor big_alloc(torch::Tensor x) {
    std::vector<char> block(static_cast<size_t>(64) << 30, 1);  // 64 GiB
    return relu_fwd(x);
}
"""

CLEAN_FUNCTIONS = [
    "relu_fwd",
    "relu_inplace",
    "copy_fwd",
    "fill_const",
    "relu_half",
    "relu_blocked",
    "relu_uninit",
    "relu_counted",
    "relu_by_address",
    "throws",
    "segfault",
    "spin",
    "big_alloc",
]

# Each C++-side cheat alone: name -> function body (after the shared include), for the static per-construct test.
DIRTY_SNIPPETS: dict[str, str] = {
    "relu_aten": "torch::Tensor relu_aten(torch::Tensor x) { return at::relu(x); }",
    "relu_method": "torch::Tensor relu_method(torch::Tensor x) { return x.clamp_min(0); }",
    "relu_cpu_direct": "torch::Tensor relu_cpu_direct(torch::Tensor x) { return at::cpu::clamp_min(x, 0); }",
    "relu_no_record": (
        "torch::Tensor relu_no_record(torch::Tensor x) { at::RecordFunctionGuard off(false); return at::relu(x); }"
    ),
    # Unqualified: argument-dependent lookup finds at::clamp_min, with no at:: or torch:: in the source.
    "relu_adl": "torch::Tensor relu_adl(torch::Tensor x) { return clamp_min(x, 0); }",
    "relu_adl_unrecorded": (
        "torch::Tensor relu_adl_unrecorded(torch::Tensor x) { at::RecordFunctionGuard off(false); "
        "return clamp_min(x, 0); }"
    ),
    "relu_bg_thread": r"""torch::Tensor relu_bg_thread(torch::Tensor x) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    std::thread([x, out]() mutable {
        const float* px = x.data_ptr<float>();
        float* po = out.data_ptr<float>();
        for (int64_t i = 0; i < x.numel(); ++i) po[i] = px[i] > 0.0f ? px[i] : 0.0f;
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }).detach();
    return out;
}""",
    "patch_timer": r"""void patch_timer() {
    py::object time_mod = py::module_::import("time");
    py::object real = time_mod.attr("perf_counter_ns");
    time_mod.attr("perf_counter_ns") = py::cpp_function([real]() { return real().cast<int64_t>() / 100; });
}""",
}

DIRTY_HEADER = r"""
#include <torch/extension.h>
#include <ATen/CPUFunctions.h>
#include <ATen/record_function.h>
#include <chrono>
#include <thread>
"""

DIRTY_CPP = DIRTY_HEADER + "\n".join(DIRTY_SNIPPETS.values()) + "\n"
DIRTY_FUNCTIONS = list(DIRTY_SNIPPETS)

# Row kernels over the last dimension, as a policy chasing speed writes them first (fp32 accumulators, one
# thread), each numerically unsafe one beside its honest form: right on the task's own randn, so only the
# stress trials (scaled or offset inputs) tell them apart.
NUMERICS_CPP = r"""
#include <torch/extension.h>
#include <cmath>

// Without the row max subtracted: exp() overflows to inf once a value passes 88.7, and inf / inf is NaN.
torch::Tensor softmax_no_max(torch::Tensor x) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const int64_t n = x.size(-1), rows = x.numel() / n;
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        float total = 0.0f;
        for (int64_t i = 0; i < n; ++i) total += std::exp(px[r * n + i]);
        for (int64_t i = 0; i < n; ++i) po[r * n + i] = std::exp(px[r * n + i]) / total;
    }
    return out;
}
torch::Tensor softmax_max(torch::Tensor x) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const int64_t n = x.size(-1), rows = x.numel() / n;
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = px + r * n;
        float top = row[0];
        for (int64_t i = 1; i < n; ++i) top = row[i] > top ? row[i] : top;
        float total = 0.0f;
        for (int64_t i = 0; i < n; ++i) total += std::exp(row[i] - top);
        for (int64_t i = 0; i < n; ++i) po[r * n + i] = std::exp(row[i] - top) / total;
    }
    return out;
}
// passes == 1: variance as E[x^2] - E[x]^2 from one sweep (cancels once the mean dwarfs the spread);
// passes == 2: the mean first, then the mean of squared deviations.
torch::Tensor layernorm_rows(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps, int64_t passes) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const int64_t n = x.size(-1), rows = x.numel() / n;
    const float* px = x.data_ptr<float>();
    const float* pw = w.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = px + r * n;
        float sum = 0.0f, squares = 0.0f;
        for (int64_t i = 0; i < n; ++i) { sum += row[i]; squares += row[i] * row[i]; }
        const float mean = sum / n;
        float var = squares / n - mean * mean;
        if (passes == 2) {
            float dev = 0.0f;
            for (int64_t i = 0; i < n; ++i) dev += (row[i] - mean) * (row[i] - mean);
            var = dev / n;
        }
        const float rstd = 1.0f / std::sqrt(std::fmax(var, 0.0f) + static_cast<float>(eps));
        for (int64_t i = 0; i < n; ++i) po[r * n + i] = (row[i] - mean) * rstd * pw[i] + pb[i];
    }
    return out;
}
"""
NUMERICS_FUNCTIONS = ["softmax_no_max", "softmax_max", "layernorm_rows"]

_PREAMBLE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

{var}_CPP = r"""{cpp}"""

{var} = load_inline(
    name="{name}", cpp_sources={var}_CPP, functions={functions!r}, extra_cflags=["-O2"], verbose=False
)
'''


def preamble(kind: str) -> str:
    """The shared imports and ``load_inline`` call for ``ext`` (clean), ``numerics`` or ``dirty``."""
    if kind == "ext":
        return _PREAMBLE.format(var="ext", cpp=CLEAN_CPP, name="musaenv_adv_clean", functions=CLEAN_FUNCTIONS)
    if kind == "numerics":
        return _PREAMBLE.format(
            var="numerics", cpp=NUMERICS_CPP, name="musaenv_adv_numerics", functions=NUMERICS_FUNCTIONS
        )
    return _PREAMBLE.format(var="dirty", cpp=DIRTY_CPP, name="musaenv_adv_dirty", functions=DIRTY_FUNCTIONS)


def render(name: str, **subs: str) -> str:
    """Source of candidate ``candidates/<name>.py`` with the preamble and ``__KEY__`` placeholders filled in."""
    text = (CANDIDATES_DIR / f"{name}.py").read_text()
    for kind in ("ext", "numerics", "dirty"):
        text = text.replace(f"from adversarial import {kind}\n", preamble(kind))
    for key, value in subs.items():
        text = text.replace(f"__{key}__", value)
    return text
