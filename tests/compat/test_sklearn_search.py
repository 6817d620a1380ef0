"""scikit-learn's GridSearchCV tests (the installed test_search.py) with GridSearchCV =
cvflow.SearchCV (shim.py); generated at collection time by generate.py. Expected failures:
known_failures.txt. Run: pytest -m compat tests/compat."""
import pytest
from generate import export

pytestmark = pytest.mark.compat

globals().update(export("searchcv"))
