"""What `torch-moments-axes-tuple` puts first in the torch backend's `moments`.

Parsed by the engine, never imported. The piece is the body of `axes_tuple`.
"""
# ruff: noqa


def axes_tuple(axes):
    # forkgen: torch-moments-axes-tuple (dynamo cannot hand a list subclass of axes to torch.mean)
    if isinstance(axes, list) and getattr(getattr(torch, "compiler", None), "is_compiling", bool)():
        axes = tuple(axes)
