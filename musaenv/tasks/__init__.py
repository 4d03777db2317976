"""Tasks: the model, the built-in suite and its loader, derived and external tasks, prompts, response parsing.

No torch at import: the environment and the reward code read tasks without the evaluator's side.
"""
