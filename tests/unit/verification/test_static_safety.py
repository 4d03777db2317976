"""File-wide Python bans: each snippet, added to an honest candidate, raises its flag under every policy."""

from __future__ import annotations

import pytest
from static_samples import candidate, line_of

from musaenv.verification import analyze_candidate

HONEST_MODEL = """
class ModelNew(nn.Module):
    def forward(self, x):
        return ext.k(x)
"""

# (id, module-level snippet, expected flag)
BANS = [
    ("exec", "exec('x = 1')", "dynamic_code"),
    ("eval", "y = eval('1 + 1')", "dynamic_code"),
    ("compile", "c = compile('1', 'f', 'eval')", "dynamic_code"),
    ("dunder_import", "m = __import__('os')", "dynamic_code"),
    ("importlib", "import importlib", "dynamic_code"),
    ("ctypes", "import ctypes", "dynamic_code"),
    ("pickle", "import pickle", "dynamic_code"),
    ("base64", "from base64 import b64decode", "dynamic_code"),
    ("codecs", "import codecs", "dynamic_code"),
    ("builtins", "import builtins", "dynamic_code"),
    ("sys_modules", "import sys\nsys.modules['torch'].relu", "dynamic_code"),
    ("getattr_as_value", "import functools\nf = functools.reduce(getattr, ['nn'], torch)", "dynamic_code"),
    ("threading", "import threading", "process_or_thread"),
    ("multiprocessing", "import multiprocessing as mp", "process_or_thread"),
    ("concurrent", "from concurrent.futures import ThreadPoolExecutor", "process_or_thread"),
    ("subprocess", "import subprocess", "process_or_thread"),
    ("os_system", "import os\nos.system('true')", "process_or_thread"),
    ("os_fork", "import os\npid = os.fork()", "process_or_thread"),
    ("os_exec", "import os\nos.execv('/bin/true', ['true'])", "process_or_thread"),
    ("signal", "import signal", "process_or_thread"),
    ("socket", "import socket", "network"),
    ("urllib", "from urllib.request import urlopen", "network"),
    ("requests", "import requests", "network"),
    ("torch_hub", "m = torch.hub.load('a', 'b')", "network"),
    ("patch_allclose", "torch.allclose = lambda *a, **k: True", "monkeypatch"),
    ("patch_tensor_eq", "torch.Tensor.__eq__ = lambda a, b: True", "monkeypatch"),
    ("patch_timer", "import time\ntime.perf_counter = lambda: 0.0", "monkeypatch"),
    ("setattr_module", "setattr(torch.cuda, 'synchronize', lambda: None)", "monkeypatch"),
    ("patch_alias", "import torch.nn.functional as F\nF.relu = None", "monkeypatch"),
    ("forward_hook", "nn.modules.module.register_module_forward_hook(lambda m, i, o: o)", "monkeypatch"),
    ("torch_library", "lib = torch.library.Library('aten', 'IMPL')", "monkeypatch"),
    ("environ", "import os\nv = os.environ.get('MUSAENV_TIMING')", "introspection"),
    ("getenv", "import os\nv = os.getenv('X')", "introspection"),
    ("argv", "import sys\nv = sys.argv", "introspection"),
    ("gc", "import gc", "introspection"),
    ("inspect", "import inspect", "introspection"),
    ("getframe", "import sys\nf = sys._getframe(0)", "introspection"),
    ("frame_attr", "def f(tb):\n    return tb.tb_frame.f_back.f_locals", "introspection"),
    ("globals_attr", "g = (lambda: 0).__globals__", "introspection"),
    ("subclasses", "s = object.__subclasses__()", "introspection"),
    ("globals_call", "g = globals()", "introspection"),
    ("open", "data = open('/tmp/answers').read()", "file_access"),
    ("pathlib", "from pathlib import Path", "file_access"),
    ("os_remove", "import os\nos.remove('/tmp/x')", "file_access"),
    ("shutil", "import shutil", "file_access"),
    ("torch_load", "w = torch.load('/tmp/w.pt')", "file_access"),
    ("harness_import", "import musaenv", "harness_access"),
    ("harness_from", "from musaenv.verification import compare", "harness_access"),
    ("cuda_stream", "s = torch.cuda.Stream()", "side_stream"),
    ("stream_context", "from torch.cuda import stream", "side_stream"),
    ("cuda_event", "e = torch.cuda.Event(enable_timing=True)", "side_stream"),
    ("torch_compile", "f = torch.compile(lambda t: t)", "graph_replay"),
    ("torch_jit", "f = torch.jit.script(lambda t: t)", "graph_replay"),
    ("cuda_graph", "g = torch.cuda.CUDAGraph()", "graph_replay"),
    ("manual_seed", "torch.manual_seed(0)", "global_state"),
    ("tf32_switch", "torch.backends.cuda.matmul.allow_tf32 = False", "global_state"),
    ("num_threads", "torch.set_num_threads(1)", "global_state"),
    ("private_torch", "f = torch._C._nn.linear", "private_torch_api"),
    ("tensor_subclass", "class Lazy(torch.Tensor):\n    pass", "tensor_subclass"),
    ("torch_function", "class T:\n    def __torch_function__(self, *a):\n        return 0", "tensor_subclass"),
    ("scipy", "import scipy.linalg", "banned_import"),
    ("relative_import", "from . import helpers", "banned_import"),
    ("unresolved_loader", "other = torch.utils.cpp_extension.load(name='x', sources=['x.cpp'])", "unresolved_source"),
]


@pytest.mark.parametrize("policy", ["strict", "off"])
@pytest.mark.parametrize(("snippet", "flag"), [b[1:] for b in BANS], ids=[b[0] for b in BANS])
def test_banned_construct_is_an_error_under_every_policy(snippet: str, flag: str, policy: str) -> None:
    source = candidate(snippet + "\n" + HONEST_MODEL)
    report = analyze_candidate(source, policy=policy)
    assert flag in report.flags, report.messages
    first_line = line_of(source, snippet.splitlines()[-1])
    assert any(f.flag == flag and f.line is not None and f.line >= first_line - 2 for f in report.errors)


@pytest.mark.parametrize(
    "body",
    [
        HONEST_MODEL + "ModelNew.forward = lambda self, x: x\n",
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.forward = lambda x: x\n    def forward(self, x):\n        return ext.k(x)\n",
        "def deco(c):\n    return c\n@deco\n" + HONEST_MODEL.lstrip(),
        "class ModelNew(nn.Module):\n    def __getattribute__(self, n):\n        return 0\n"
        "    def forward(self, x):\n        return ext.k(x)\n",
    ],
    ids=["class_patched_later", "instance_forward_rebound", "class_decorator", "getattribute"],
)
def test_replacing_what_forward_dispatches_to_is_monkeypatching(body: str) -> None:
    assert "monkeypatch" in analyze_candidate(candidate(body)).flags


@pytest.mark.parametrize(
    "snippet",
    [
        "import math, typing, functools, itertools, collections, dataclasses, numpy as np, os.path",
        "import triton\nimport triton.language as tl",
        "x = hasattr(torch, 'compile')",
        "P = __file__ if False else None",
        "import os\nd = os.path.join('a', 'b')",
    ],
    ids=["stdlib_allowlist", "triton", "hasattr", "dunder_file", "os_path_join"],
)
def test_harmless_module_level_code_is_not_flagged(snippet: str) -> None:
    assert analyze_candidate(candidate(snippet + "\n" + HONEST_MODEL)).findings == ()
