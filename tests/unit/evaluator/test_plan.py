"""The seeded evaluation plan: secret by default, seeded, every shape covered, probe calls apart from rechecks."""

from __future__ import annotations

from musaenv.config import EvalConfig, TimingConfig
from musaenv.evaluator.plan import OFFSET_IN_SCALES, OFFSET_TRIAL_SCALE, SCALE_RANGE, first_use_calls, make_plan
from musaenv.isolation.plans import TrialSpec
from musaenv.tasks.builtin import get_task


def test_plan_is_secret_by_default():
    task = get_task("l1_relu")
    cfg = EvalConfig(num_trials=5, timing=TimingConfig(repeats=20))
    plans = [make_plan(task, "cpu", cfg, 0) for _ in range(4)]
    # the same public seed gives unpredictable plans: inputs, rechecked calls and probes all change
    assert len({p.trials for p in plans}) == 4 and len({p.probe_seed for p in plans}) == 4


def test_plan_is_seeded_and_covers_every_shape():
    task = get_task("l1_relu")
    cfg = EvalConfig(num_trials=5, timing=TimingConfig(repeats=20), secret_plans=False)
    a, b, c = make_plan(task, "cpu", cfg, 1), make_plan(task, "cpu", cfg, 1), make_plan(task, "cpu", cfg, 2)
    assert a == b and a != c
    assert {k for k, _ in a.trials} == set(range(len(task.shapes_for("cpu"))))
    assert len({s for _, s in a.trials}) == 5  # fresh inputs every trial
    assert all(i < 10 for i in a.keep) and len(a.recheck_trials()) == len(a.keep)


def test_probe_calls_are_seeded_disjoint_from_the_rechecked_ones_and_cover_short_runs():
    task = get_task("l1_relu")
    plan = make_plan(task, "cpu", EvalConfig(timing=TimingConfig(repeats=20)), 3)
    kept = sorted({*plan.keep, 19})
    probes = plan.probe_calls(20, kept)
    assert len(probes) == 4 and not set(probes) & set(kept) and all(0 <= p < 20 for p in probes)
    assert probes == plan.probe_calls(20, kept)  # a function of the plan's secret seed
    for seed in range(20):  # 5 timed calls (the test suites' timing): at most one is left unchecked
        short = make_plan(task, "cpu", EvalConfig(timing=TimingConfig(repeats=5)), seed)
        kept = sorted({*short.keep, 4})
        assert len(set(kept) | set(short.probe_calls(5, kept))) >= 4


def test_only_first_uses_of_an_input_count_for_the_time():
    # 3 warm-up calls take pool entries 15, 14, 13; timed calls 13-15 repeat them, 16-19 repeat 0-3
    assert first_use_calls(20, 3, 16) == list(range(13))
    assert first_use_calls(5, 1, 6) == [0, 1, 2, 3, 4]  # the test suites' timing: every timed input is new
    assert first_use_calls(4, 0, 2) == [0, 1]
    plan = make_plan(get_task("l1_relu"), "cpu", EvalConfig(timing=TimingConfig(warmup=1, repeats=5)), 0)
    assert plan.timing_pool == 6


def test_stress_trials_are_drawn_with_the_plan_and_sent_after_the_ordinary_ones():
    task = get_task("l1_layernorm")
    cfg = EvalConfig(num_trials=5, secret_plans=False)
    plan = make_plan(task, "cpu", cfg, 1)
    assert plan == make_plan(task, "cpu", cfg, 1) and plan.stress != make_plan(task, "cpu", cfg, 2).stress
    offset, scaled = plan.stress  # two by default under strict: one offset trial, one scale trial
    assert OFFSET_TRIAL_SCALE[0] <= offset.scale <= OFFSET_TRIAL_SCALE[1]
    lo, hi = OFFSET_IN_SCALES
    assert lo * offset.scale - 0.01 <= offset.offset <= hi * offset.scale + 0.01
    assert offset.offset > 88.7  # exp() of the offset values overflows fp32
    assert SCALE_RANGE[0] <= scaled.scale <= SCALE_RANGE[1] and scaled.offset == 0.0
    assert {offset.shape_index, scaled.shape_index} == {0, 1}  # both shapes
    assert len({offset.seed, scaled.seed, *(s for _, s in plan.trials)}) == 7  # fresh inputs
    sent = plan.trial_specs([(0, 99)])
    assert plan.n_trials == 7 and len(sent) == 8 and sent[-1] == TrialSpec(0, 99)
    assert sent[5] == TrialSpec(offset.shape_index, offset.seed, offset.scale, offset.offset)
    assert all(t.scale is None for t in sent[:5])


def test_stress_trials_leave_the_other_draws_alone_and_follow_the_policy():
    task = get_task("l1_relu")
    base = EvalConfig(secret_plans=False)
    on, off = make_plan(task, "cpu", base, 4), make_plan(task, "cpu", base.replace(stress_trials=0), 4)
    assert off.stress == () and len(on.stress) == 2
    assert (on.trials, on.init_seed, on.timing_seed, on.keep, on.probe_seed) == (
        off.trials, off.init_seed, off.timing_seed, off.keep, off.probe_seed
    )  # fmt: skip
    assert make_plan(task, "cpu", base.replace(static_policy="kernelbench"), 4).stress == ()
    assert len(make_plan(task, "cpu", base.replace(stress_trials=5), 4).stress) == 5
