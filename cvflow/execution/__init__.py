"""How a study is run: the plan, block sizing, the task bodies, the one loop, the schedulers,
racing's runner, extension of a store, progress.

See docs/developer/architecture.md for how the folders fit together.
"""
