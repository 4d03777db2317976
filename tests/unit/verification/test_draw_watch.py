"""DrawWatch: what a timed draw reaches, checked against its snapshot (musaenv.verification.draw_watch)."""

from __future__ import annotations

import builtins
import gc
import signal
import subprocess
import sys
import types
from collections.abc import Iterator

import pytest
import torch
from torch.overrides import TorchFunctionMode

from musaenv.verification.draw_watch import DrawWatch


def _program() -> types.ModuleType:
    m = types.ModuleType("task")
    exec("import torch\nbatch = 4\ndef get_inputs():\n    return [torch.randn(batch, 3)]\n", vars(m))
    return m


@pytest.fixture
def restore_randn() -> Iterator[None]:
    real = torch.randn
    yield
    torch.randn = real


def test_an_untouched_draw_finds_nothing() -> None:
    program = _program()
    watch = DrawWatch(program, {"batch"})
    with watch.around():
        program.get_inputs()
    program.batch = 7  # the harness sets size constants per shape
    import torch.fx  # noqa: F401 - a submodule imported since the snapshot is not a patch

    watch.check("after")
    assert watch.found == []


def test_a_replaced_torch_function_is_named_once(restore_randn: None) -> None:
    watch = DrawWatch(_program(), {"batch"})
    torch.randn = lambda *a, **k: torch.zeros(*a)  # type: ignore[assignment]
    watch.check("first")
    watch.check("second")
    assert watch.found == ["torch.randn (first)"]


def test_per_draw_the_names_the_draw_uses_and_at_the_end_every_name() -> None:
    watch = DrawWatch(_program(), {"batch"})
    real = torch.tril
    torch.tril = lambda *a, **k: real(*a, **k)  # type: ignore[assignment]
    try:
        watch.check("draw")  # get_inputs never looks up tril
        assert watch.found == []
        watch.check("end", full=True)
    finally:
        torch.tril = real
    assert watch.found == ["torch.tril (end)"]


def test_a_name_added_to_a_class_shadows_its_base_and_is_seen() -> None:
    def to_device(args: list[torch.Tensor]) -> list[torch.Tensor]:
        return [a.to("cpu") for a in args]

    watch = DrawWatch(reach=[to_device])
    torch.Tensor.to = lambda self, *a, **k: self  # type: ignore[method-assign]
    try:
        watch.check("draw")
    finally:
        del torch.Tensor.to
    assert watch.found == ["torch.Tensor.to (draw)"]


def test_a_patch_that_undoes_itself_inside_the_draw_is_seen_before_it(restore_randn: None) -> None:
    real = torch.randn

    def once(*args: object, **kwargs: object) -> torch.Tensor:
        torch.randn = real
        return real(*args, **kwargs)  # type: ignore[arg-type]

    watch = DrawWatch(_program(), {"batch"})
    torch.randn = once  # type: ignore[assignment]
    with watch.around():
        torch.randn(2)
    assert [f.split(" (")[0] for f in watch.found] == ["torch.randn"]
    assert "before" in watch.found[0]


def test_builtins_and_the_task_program_are_watched() -> None:
    program = _program()
    watch = DrawWatch(program, {"batch"})
    real_list = builtins.list
    program.get_inputs = lambda: []
    builtins.list = lambda *a: real_list(*a)  # type: ignore[assignment,misc]
    try:
        watch.check("now", full=True)
    finally:
        builtins.list = real_list
    assert sorted(f.split(" (")[0] for f in watch.found) == ["builtins.list", "task program.get_inputs"]


def test_a_mode_left_entered_and_a_gc_callback_are_seen() -> None:
    watch = DrawWatch()
    mode = TorchFunctionMode()
    mode.__enter__()
    try:
        watch.check("mode")
    finally:
        mode.__exit__(None, None, None)
    gc.callbacks.append(lambda phase, info: None)
    try:
        watch.check("gc")
    finally:
        gc.callbacks.pop()
    assert len(watch.found) == 2
    assert "mode stacks" in watch.found[0] and "(mode)" in watch.found[0]
    assert "gc callbacks" in watch.found[1]


def test_the_collector_is_off_inside_the_draw_only() -> None:
    watch = DrawWatch()
    assert gc.isenabled()
    with watch.around():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), watch.around():
        raise ValueError("a draw that fails")
    assert gc.isenabled()


def test_a_python_signal_handler_set_after_the_snapshot_is_seen() -> None:
    """A Python handler runs between any two bytecodes: one a timer fires would run between a draw and its window
    (found from outside: a ``SIGALRM`` handler that found the drawn inputs in the harness's frame)."""
    watch = DrawWatch()
    old = signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    try:
        watch.check("signal")
    finally:
        signal.signal(signal.SIGUSR1, old)
    watch.check("restored")
    assert len(watch.found) == 1 and "signal handlers" in watch.found[0] and "(signal)" in watch.found[0]


class _AlwaysEqual:
    """A profile function that says it equals anything: a ``==`` comparison of the hooks would pass it, and call
    its ``__eq__`` (candidate code) inside the check."""

    def __call__(self, frame: object, event: str, arg: object) -> None:
        return None

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


def test_hooks_are_compared_by_identity_not_by_their_own_eq() -> None:
    watch = DrawWatch()
    sys.setprofile(_AlwaysEqual())
    try:
        watch.check("profile")
    finally:
        sys.setprofile(None)
    assert len(watch.found) == 1 and "(profile)" in watch.found[0]


def test_a_name_that_is_not_a_plain_str_is_seen() -> None:
    class Sly(str):
        def __eq__(self, other: object) -> bool:
            return str.__eq__(self, other)

        __hash__ = str.__hash__

    m = types.ModuleType("ns")
    m.value = 1  # type: ignore[attr-defined]
    watch = DrawWatch(extra={"ns": vars(m)})
    vars(m)[Sly("other")] = 2
    watch.check("end", full=True)
    assert watch.found == ["ns: a name that is not a plain str (end)"]


def test_audit_hooks_added_later_are_refused() -> None:
    """In a process of its own: the refusal cannot be undone, and pytest's process should keep its hooks."""
    code = (
        "import sys\n"
        "from musaenv.verification.draw_watch import refuse_audit_hooks\n"
        "assert refuse_audit_hooks() == 0\n"
        "seen = []\n"
        "sys.addaudithook(lambda event, args: seen.append(event))\n"
        "sys.audit('musaenv.probe')\n"
        "assert seen == [], seen\n"
        "assert refuse_audit_hooks() == 1\n"
        "print('refused')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "refused", done.stderr[-2000:]


def test_names_the_interpreter_looks_up_for_the_code_are_watched_too() -> None:
    """``Word(...)`` names no ``__init__``, yet runs it: a replaced ``__init__`` of a class the timing loop builds
    its messages with would run between a draw and its window."""

    class Word:
        def __init__(self, index: int) -> None:
            self.index = index

    def ready(index: int) -> Word:
        return Word(index)

    watch = DrawWatch(extra={"Word": vars(Word)}, reach=[ready])
    real = Word.__init__
    Word.__init__ = lambda self, index: None  # type: ignore[method-assign]
    try:
        watch.check("draw")
    finally:
        Word.__init__ = real  # type: ignore[method-assign]
    assert watch.found == ["Word.__init__ (draw)"]
