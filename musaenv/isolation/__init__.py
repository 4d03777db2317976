"""Process plumbing and confinement, used by both sides of the process boundary.

Worker processes and the fork server (:mod:`.process`, :mod:`.forkserver`), the pickle-free channel and its
typed records (:mod:`.channel`, :mod:`.messages`, their base :mod:`.records`), process trees and CPU limits
(:mod:`.proctree`, :mod:`.limits`), the sandbox (:mod:`.sandbox`, :mod:`.seccomp`, :mod:`.hidden_paths`,
:mod:`.build_jail`) and sealed shared state (:mod:`.integrity`). Nothing here imports the evaluator, the workers
or the build service (import-linter layers in pyproject.toml).
"""
