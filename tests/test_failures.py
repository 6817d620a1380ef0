"""Failures grouped up to their numbers (cvflow.report.failures), and `cvflow status` showing it."""
from __future__ import annotations

import pytest

from cvflow.report.failures import group, normalise
from cvflow.execution.run import run
from cvflow.report import format_status, status


@pytest.mark.parametrize("message, expected", [
    ("n_samples_fit = 354, n_samples = 89", "n_samples_fit = #, n_samples = #"),
    ("alpha must be in [0.0, inf); got -1e-3", "alpha must be in [#, inf); got #"),
    ("float64 input, l1_ratio=0.5", "float64 input, l1_ratio=#"),        # names keep digits
    ("object at 0x7f3a9c, shape (3, 4)", "object at #, shape (#, #)"),
])
def test_normalise_masks_standalone_numbers_only(message, expected):
    assert normalise(message) == expected


def test_dotted_versions_differing_in_any_part_normalise_alike():
    assert normalise("needs 1.2.3") == normalise("needs 1.20.4") != normalise("needs x.2.3")


def test_group_keeps_the_most_frequent_example_and_counts_variants():
    messages = ["k = 5 > n = 353"] * 2 + ["k = 5 > n = 354"] * 3 + ["bad alpha"] + ["k = 5 > n = 442"]
    assert group(messages) == {"k = 5 > n = 354": {"count": 6, "variants": 3},
                               "bad alpha": {"count": 1, "variants": 1}}
    assert group([]) == {}
    # ties between groups: first seen first; ties inside a group: first seen is the example
    assert list(group(["b 1", "a 1", "a 2", "b 2"])) == ["b 1", "a 1"]


KNN = """\
name: knn
data: {source: sklearn, name: diabetes}
task: regression
learners:
  - name: knn
    class: sklearn.neighbors.KNeighborsRegressor
    grid: {n_neighbors: [5, 500]}
design: {folds: 5, seed: 0}
estimators: [kfold]
execution: {fits_per_task: 3}
"""


def test_status_groups_one_cause_whose_message_embeds_the_training_size(tmp_path, write_workflow,
                                                                        client):
    # 500 neighbours > every training set (353 or 354 samples in the folds, 442 in the full
    # fit): scikit-learn names the size in its message, one cause in three wordings
    result = run(write_workflow(KNN), store=tmp_path / "knn.zarr", client=client)
    info = status(result.store)
    assert info["failed"] == 6 and len(info["failures"]) == 1
    (example, count), = info["failures"].items()
    assert count == 6 and info["failure_variants"][example] == 3
    assert "n_samples_fit = 35" in example or "n_samples_fit = 442" in example
    text = format_status(info)
    assert f"6 fit(s) failed: {example} (and 2 similar message(s) differing only in numbers)" in text
