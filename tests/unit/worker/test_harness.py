"""Input drawing of the harness: seeded, and straight on the device for GPU tiers."""

from __future__ import annotations

import torch

from musaenv.worker.harness import ProgramModule, load_program

FACTORY_ONLY = """
import torch
n = 8
def get_inputs():
    return [torch.randn(n, n), torch.randint(0, 5, (n,)), 3]
def get_init_inputs():
    return []
"""

CPU_ONLY = """
import torch
def get_inputs():
    a = torch.randn(16)
    return [torch.from_numpy(a.numpy() * 2)]  # .numpy() needs a CPU tensor
def get_init_inputs():
    return []
"""


def _program(source: str, device: str | None) -> ProgramModule:
    return ProgramModule(load_program(source, "t", "<t>"), torch.device(device) if device else None)


def test_inputs_are_drawn_on_the_draw_device():
    # "meta" stands in for a GPU here: the factory calls of get_inputs follow the device context.
    drawn = _program(FACTORY_ONLY, "meta").inputs(7)
    assert [x.device.type for x in drawn[:2]] == ["meta", "meta"] and drawn[2] == 3
    a, b = _program(FACTORY_ONLY, None).inputs(7), _program(FACTORY_ONLY, None).inputs(7)
    assert a[0].device.type == "cpu" and torch.equal(a[0], b[0])  # seeded


def test_cpu_only_input_code_falls_back_to_the_cpu_for_good():
    program = _program(CPU_ONLY, "meta")
    first = program.inputs(3)
    assert program.draw_device is None and first[0].device.type == "cpu"
    assert torch.equal(first[0], _program(CPU_ONLY, None).inputs(3)[0])  # same values as a plain CPU draw


CUDA_INPUTS = """
import torch
n = 8
def get_inputs():
    dev = torch.device("cuda")
    return [torch.randn(n).cuda(), torch.zeros(n, device="cuda"), torch.ones(n).to("cuda:0"), torch.ones(2, device=dev)]
def get_init_inputs():
    return [torch.ones(1).cuda()]
"""


def test_cuda_in_reference_code_is_mapped_to_the_evaluation_device():
    program = ProgramModule(load_program(CUDA_INPUTS, "t", "<t>"), None, device=torch.device("cpu"))
    inputs = program.inputs(0)
    assert [t.device.type for t in inputs] == ["cpu"] * 4
    assert program.init_inputs(0)[0].device.type == "cpu"
    meta = program.meta_inputs(0)
    assert [t.device.type for t in meta] == ["meta"] * 4


def test_without_a_device_the_reference_code_runs_as_written():
    program = ProgramModule(load_program(CUDA_INPUTS, "t", "<t>"), None)
    if not torch.cuda.is_available():
        try:
            program.inputs(0)
        except (AssertionError, RuntimeError) as e:  # CPU torch: "Torch not compiled with CUDA enabled"
            assert "CUDA" in str(e)
        else:
            raise AssertionError("a CPU torch drew CUDA tensors")


def test_apply_shape_restores_tuples_and_resets_sequences():
    module = load_program("ks = (3, 5)\nlayers = [4, 4]\nn = 2\n", "m", "<m>")
    program = ProgramModule(module)
    program.apply_shape({"ks": [3, 7], "layers": [4, 5], "n": 9})  # shapes travel as JSON: tuples become lists
    assert (module.ks, module.layers, module.n) == ((3, 7), [4, 5], 9)
    program.apply_shape({})
    assert (module.ks, module.layers, module.n) == ((3, 5), [4, 4], 2)


def test_stress_trials_transform_only_floating_point_inputs_the_same_way_every_time():
    from musaenv.isolation.plans import TrialSpec
    from musaenv.worker.harness import DrawnInputs, stress_transform

    program = _program(FACTORY_ONLY, None)
    plain = program.inputs(5)
    trial = TrialSpec(0, 5, scale=12.5, offset=500.0)
    got = DrawnInputs.nothing().trial_inputs(program, trial)
    assert torch.equal(got[0], plain[0] * 12.5 + 500.0) and got[0].dtype == torch.float32
    assert torch.equal(got[1], plain[1]) and got[2] == 3  # indices and plain numbers keep their meaning
    assert torch.equal(DrawnInputs.nothing().trial_inputs(program, trial)[0], got[0])  # both workers: same bits
    ordinary = DrawnInputs.nothing().trial_inputs(program, TrialSpec(0, 5))
    assert torch.equal(ordinary[0], plain[0]) and stress_transform(plain, 1.0, 0.0) is plain
