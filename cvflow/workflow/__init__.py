"""What to fit: workflow files and their checks, data, designs (splits), params, size limits.

See docs/developer/architecture.md for how the folders fit together.
"""
