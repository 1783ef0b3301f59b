"""What `torch-flash-probe-compile-skip` puts first in the torch backend's
`_can_use_flash_attention`.

Parsed by the engine, never imported. The piece is the body of `probe_skip`.
"""
# ruff: noqa


def probe_skip(raise_error):
    # forkgen: torch-flash-probe-compile-skip (keras#23327: dynamo cannot trace the SDPAParams probe)
    if not raise_error and getattr(getattr(torch, "compiler", None), "is_compiling", bool)():
        return False
