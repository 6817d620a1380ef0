"""``SearchCV``'s HTML diagram (``_sk_visual_block_``): the one private scikit-learn name cvflow
uses, kept here alone.

DESIGN CHOICE: scikit-learn's diagram protocol has no public constructor for a block;
``BaseSearchCV`` builds its own from the private ``sklearn.utils._repr_html.estimator.
_VisualBlock`` of the same scikit-learn, and so does :func:`parallel_block`.
tests/test_search_diagram.py fails when scikit-learn moves, renames or changes it; at run time a
missing or changed class costs the diagram its inner block (scikit-learn then draws the search
as a single box, its own fallback), never an error.
"""
from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def parallel_block(estimator, name: str):
    """scikit-learn's block that shows ``estimator`` inside its search, labelled ``name``, as
    ``GridSearchCV``'s diagram shows it; None when this scikit-learn has no such block."""
    try:
        from sklearn.utils._repr_html.estimator import _VisualBlock
    except ImportError:
        logger.debug("scikit-learn has no sklearn.utils._repr_html.estimator._VisualBlock")
        return None
    try:
        return _VisualBlock("parallel", [estimator], names=[name], name_details=[str(estimator)])
    except TypeError as exc:                    # its signature changed
        logger.debug("scikit-learn's _VisualBlock refused a parallel block: %s", exc)
        return None
