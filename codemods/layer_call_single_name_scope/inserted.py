"""What `layer-call-single-name-scope` puts around step 4 ("Call build") of `Layer.__call__`.

Parsed by the codemod, never imported. `UPSTREAM` stands for upstream's own
`with self._open_name_scope(): self._maybe_build(call_spec)` (3.0-3.1:
`with backend.name_scope(self.name, caller=self): ...`), kept node for node in the `else`.
"""
# ruff: noqa


def build_step(self, call_spec):
    if self.built and backend.backend() != "tensorflow":  # forkgen: layer-call-single-name-scope
        self._maybe_build(call_spec)
    else:
        UPSTREAM
