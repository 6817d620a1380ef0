"""scikit-learn's RandomizedSearchCV tests (the installed test_search.py) with
RandomizedSearchCV = cvflow.RandomizedSearchCV (shim.py); generated at collection time by
generate.py. Expected failures: the ``random:`` lines of known_failures.txt. Run:
pytest -m compat tests/compat."""
import pytest
from generate import export

pytestmark = pytest.mark.compat

globals().update(export("random_searchcv"))
