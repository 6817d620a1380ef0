"""The cube on disk or an object store: creation and growth, reading and writing, integrity,
attributes, the run lock, where a store lives.

See docs/developer/architecture.md for how the folders fit together.
"""
