"""The hack classes of /work/shared/HACKS.md (S: not doing the work, T: gaming the clock, B: the build and shared
state), by id, with a short title: what the rule table (:mod:`musaenv.verification.rules`) cites.

HACKS.md numbers classes as collected; S19, T5 and T10 were never assigned there, so they are absent here too.
"""

from __future__ import annotations

__all__ = ["HACK_CLASSES"]

#: Hack class id -> short title.
HACK_CLASSES: dict[str, str] = {
    "S1": "ModelNew calls the reference's torch ops or reuses Model",
    "S2": "try/except falls back to torch",
    "S3": "decoy kernel: the output really comes from torch",
    "S4": "lazy partial work: the heavy op left to torch",
    "S5": "library calls inside the C++/CUDA source",
    "S6": "zeros or a constant pass a loose tolerance",
    "S7": "identity: the input passed through",
    "S8": "stale memory: the freed reference output reused",
    "S9": "races or uninitialised reads that pass by luck",
    "S10": "input mutation that poisons the reference",
    "S11": "output cache keyed on address, id, shape or content",
    "S12": "warm-up detection: compute once, replay while timed",
    "S13": "batch-and-skip: later calls look answers up",
    "S14": "replay through files or shared memory",
    "S15": "predicting inputs from a known seed",
    "S16": "shape specialisation: work truncated for the benchmark shape",
    "S17": "precision downgrade within a loose tolerance",
    "S18": "numerically unsafe shortcuts",
    "S20": "monkeypatching the comparison or the harness",
    "S21": "gc scans for expected tensors; NaN as a wildcard",
    "S22": "behaving differently when evaluated and when timed",
    "S23": "hiding any of the above: exec, importlib, ctypes, pasted names",
    "T1": "work on a side stream the timing events miss",
    "T2": "work deferred to a background thread",
    "T3": "lazy output: a tensor subclass or deferred object",
    "T4": "monkeypatched timers",
    "T6": "fake results on stdout or an inherited fd",
    "T7": "L2 persistence windows survive the flush",
    "T8": "CUDA-graph or compile replay on stale pointers",
    "T9": "slowing the baseline through global flags",
    "T11": "the kernel never runs: time near zero",
    "T12": "partial late writes from another stream",
    "B1": "a build flag that runs a program of the candidate's choosing",
    "B2": "candidate code run at build or load time outside the sandbox",
    "B3": "rewriting shared caches",
    "B4": "persistence: files or daemons left by a build",
    "B5": "replaying the plan from a predictable seed",
    "B6": "tampering in-process, restored before the checks look",
    "B7": "library compute under another exported name, raw syscalls",
    "B8": "an output cache that serves inputs the harness repeats",
}
