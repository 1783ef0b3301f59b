"""What `layer-call-state-writes` puts around two assignments of `Layer.__call__`.

Parsed by the codemod, never imported. Each function's body is one piece; `UPSTREAM` stands
for upstream's own assignment, which the codemod keeps node for node inside the `if`.
"""
# ruff: noqa


def called_write(self):
    if not self._called:  # forkgen: layer-call-state-writes
        UPSTREAM


def built_write(self):
    if not self.built:  # forkgen: layer-call-state-writes
        UPSTREAM
