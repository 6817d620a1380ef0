"""Plots of the HTML report, one module per concept (the report's text lives in
:mod:`cvflow.report.html` and :mod:`cvflow.report.summary`):

- :mod:`cvflow.report.plots.style`: sizes, colours and the figure every plot starts from;
- :mod:`cvflow.report.plots.grid`: how a learner's grid is laid out (a value axis for a 1-D grid: log,
  linear or categorical; a heatmap for a 2-D grid) and the heatmaps;
- :mod:`cvflow.report.plots.oof`: diagnostics of the out-of-fold predictions at the chosen param
  (ROC, precision-recall, calibration, confusion matrix; predicted against observed), computed
  with scikit-learn's public functions from the stored predictions (no refit).

Documented for users in docs/guide/plots.md.
"""
