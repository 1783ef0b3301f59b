"""What `loss-wrapper-tensor-fast-path` puts into keras/src/losses/losses.py.

Parsed by the codemod, never imported. The body of `call_fast_path` goes first in
`LossFunctionWrapper.call`, above upstream's body, which stays as it is and runs whenever the
fast path does not return. The body of `helpers` goes at the end of the module. The comments
are the markers that tell the pieces are forkgen's.
"""
# ruff: noqa


def call_fast_path(self, y_true, y_pred):
    # forkgen: loss-wrapper-tensor-fast-path (two torch tensors: the rank match, then `fn`, without tree walks)
    if (
        _forkgen_torch is not None
        and type(y_true) is _forkgen_torch.Tensor
        and type(y_pred) is _forkgen_torch.Tensor
        and _forkgen_torch.Tensor not in _forkgen_pytree.SUPPORTED_NODES
        and (tree.map_structure, tree.map_structure_up_to, squeeze_or_expand_to_same_rank)
        == _forkgen_wrapper_call_functions
    ):
        fast_pair = squeeze_or_expand_to_same_rank(y_true, y_pred)
        return self.fn(fast_pair[0], fast_pair[1], **self._fn_kwargs)


def helpers():
    # forkgen: loss-wrapper-tensor-fast-path (torch and its pytree on the torch backend; what `call` calls, as imported)
    if backend.backend() == "torch":
        import torch as _forkgen_torch
        from torch.utils import _pytree as _forkgen_pytree
    else:
        _forkgen_torch = None
        _forkgen_pytree = None
    _forkgen_wrapper_call_functions = (
        tree.map_structure,
        tree.map_structure_up_to,
        squeeze_or_expand_to_same_rank,
    )
