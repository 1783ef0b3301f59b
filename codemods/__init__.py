"""libcst codemods that insert the CallSpec fast path into upstream Keras.

Pure: source text in, source text out. One codemod per insertion:

* :mod:`codemods.callspec_fast_path.precompute_fast_path_eligibility` - the eligibility plan in `Layer.__init__`;
* :mod:`codemods.callspec_fast_path.add_callspec_fast` - the `CallSpec._fast` constructor;
* :mod:`codemods.callspec_fast_path.guard_callspec_construction` - the guarded branch in `Layer.__call__`.
"""

from __future__ import annotations
