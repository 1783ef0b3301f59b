"""The synthetic keras/src/layers/input_spec.py that patch input-spec-single-fast-path anchors on.

The patch's own example (`BEFORE` of codemods/input_spec_single_fast_path/cases.py), shaped
like Keras 3.4.0-3.15.1's `assert_input_compatibility`, made to run against
`tests.support.fake_backend`-like objects: the unit test of the patch injects `backend` and
`tree` to execute it.
"""

from __future__ import annotations

from codemods.input_spec_single_fast_path.cases import BEFORE


def runnable(text: str) -> str:
    """An input_spec.py of codemods/input_spec_single_fast_path/cases.py importing `backend` and
    `tree` from `tests.support.fake_backend` (which the unit test of the patch injects)."""
    return text.replace("from keras.src import ", "from tests.support.fake_backend import ")


INPUT_SPEC_PY = runnable(BEFORE)

#: Relative path -> text, merged into the synthetic source trees (tests/support/synthetic.py).
FILES: dict[str, str] = {"keras/src/layers/input_spec.py": INPUT_SPEC_PY}
