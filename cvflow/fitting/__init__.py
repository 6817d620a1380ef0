"""One block of fits, without Dask or a store: learners, path kernels,
shared Pipeline prefixes, isolation in a child process, trial fits.

See docs/developer/architecture.md for how the folders fit together.
"""
