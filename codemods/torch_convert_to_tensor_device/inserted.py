"""What `torch-convert-to-tensor-device` leaves where `if x.device != device:` was.

Parsed by the codemod, never imported. The piece is the body of `unconditional_move`:
`UPSTREAM` stands for the body of upstream's `if` (its `is_meta` branch in 3.10+, its single
`x = x.to(device)` before), which the codemod keeps node for node, one level out (`Unwrap`).
The comment above it is the only line forkgen adds.
"""
# ruff: noqa


def unconditional_move(x, device):
    # forkgen: torch-convert-to-tensor-device (keras#23189: `x.device != device` was always True)
    UPSTREAM
