"""The same tests with scikit-learn's own RandomizedSearchCV: which tests pass at all here (the
denominator of the compat ratio, printed at the end of the run by conftest.py)."""
import pytest
from generate import export

pytestmark = pytest.mark.compat

globals().update(export("randomizedsearchcv"))
