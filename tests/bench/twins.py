"""Plain-PyTorch twins of the benchmark's Keras models (tests/bench/cases.py).

A twin is the same model written in `torch.nn`, with the Keras model's initial weights, the
same loss and optimizer, and the loops a PyTorch user writes by hand: `nox -s bench` times it
in the fork's environment beside the Keras builds ("fork / plain torch"), and
tests/installed/test_bench_twins.py checks that it computes what the Keras model computes
(forward outputs, loss, the weights after a training step, predict and evaluate), so that the
ratio compares the same work.

- `Dense(4)` -> `torch.nn.Linear(4, 4)`: Keras's kernel is `(in, out)`, torch's weight `(out, in)`.
- the MLP `Sequential` -> `torch.nn.Sequential` of `Linear` and `ReLU`.
- the Transformer-style model (`cases.transformer()`) -> `Transformer`: `Embedding`, the
  attention of `keras.layers.MultiHeadAttention` (its `EinsumDense` query/key/value kernels
  `(d, heads, key_dim)` with biases `(heads, key_dim)` become `Linear(d, heads * key_dim)`,
  its output kernel `(heads, key_dim, d)` a `Linear(heads * key_dim, d)`;
  `F.scaled_dot_product_attention` with scale `1/sqrt(key_dim)`, a softmax over the keys, which
  is what Keras's MultiHeadAttention calls on torch when it has no attention dropout),
  `LayerNorm(eps=1e-3)` (Keras's default epsilon), `Dropout`, `Linear`.
- the ConvNet (`cases.convnet()`) -> `ConvNet`: it takes the Keras model's channels-last images
  and permutes them to torch's channels-first once; `Conv2D` kernels `(kh, kw, in, out)` become
  `Conv2d` weights `(out, in, kh, kw)` ("same" padding of a 3x3 kernel: padding 1);
  `BatchNormalization` -> `BatchNorm2d` with its moving statistics, Keras's epsilon (1e-3) and
  momentum (torch's is `1 - 0.99`); `MaxPooling2D()` -> `MaxPool2d(2)`;
  `GlobalAveragePooling2D` -> a mean over the spatial axes.
- the KV-cached decoder (`cases.kv_decoder()`) -> `KVDecoder`: token and position embeddings
  (the position rows from `cache_update_index` on), pre-norm blocks (`LayerNorm(eps=1e-5)`,
  causal self-attention over the key/value cache with the padding mask,
  `F.scaled_dot_product_attention` with a boolean mask where Keras takes `Softmax(mask=)` of
  the scaled scores: no row is wholly masked, so the two agree; a GELU feedforward (exact GELU,
  Keras's default)), a final LayerNorm and the tied head (the token embedding transposed).
  `forward(token_ids, padding_mask, cache=None, cache_update_index=None)` returns the logits, or
  `(logits, cache)` with a cache: the new keys and values written into a copy of the cache, as
  Keras's `ops.slice_update` does on torch.
- the optimizer: `torch.optim.Adam(lr=0.001, betas=(0.9, 0.999))`, Keras's Adam defaults. Keras
  adds its epsilon (1e-7) to `sqrt(v)` before the bias correction, torch after it: the twin
  sets torch's `eps` to `1e-7 / sqrt(1 - 0.999**t)` before step `t`, which makes torch's update
  Keras's exactly (a float assignment per step).
- the losses: `F.cross_entropy` for the MLP (compiled with `from_logits=True`); for the
  Transformer, compiled with the string "sparse_categorical_crossentropy" (probabilities
  expected), what Keras's torch backend computes then: the outputs divided by their sum, clipped
  to `[1e-7, 1 - 1e-7]`, `log`, `nll_loss`. Both averaged over every label ("sum over batch
  size"); accuracy: `argmax == label`, averaged over every label.
- the loops: a Python loop over batches of 32 (Keras's default batch size), `torch.randperm`
  for `fit` (Keras's `shuffle=True`), `model.train()` for training, `model.eval()` and
  `torch.no_grad()` for `predict` and `evaluate`; results come back as Keras returns them
  (Python floats, a NumPy array of the predictions).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

#: Keras's defaults: `keras.config.epsilon()` (Adam's epsilon, and the clip of the probability
#: cross-entropy), Adam's learning rate and betas, LayerNormalization's epsilon, `fit`'s batch size.
EPSILON = 1e-7
LEARNING_RATE, BETA_1, BETA_2 = 0.001, 0.9, 0.999
LAYER_NORM_EPSILON = 1e-3
BATCH_SIZE = 32


def weight(variable: Any) -> torch.Tensor:
    """A Keras variable's value as a new float32 torch tensor (its own storage)."""
    return torch.tensor(np.asarray(variable.numpy()), dtype=torch.float32)


def linear(dense: Any) -> nn.Linear:
    """`keras.layers.Dense` -> `nn.Linear` with its weights: the kernel `(in, out)` transposed."""
    kernel = weight(dense.kernel)
    module = nn.Linear(kernel.shape[0], kernel.shape[1], bias=dense.bias is not None)
    with torch.no_grad():
        module.weight.copy_(kernel.T)
        if dense.bias is not None:
            module.bias.copy_(weight(dense.bias))
    return module


def mlp(model: Any) -> nn.Sequential:
    """A Keras `Sequential` of `Dense` layers (relu or no activation) -> `nn.Sequential`."""
    import keras

    modules: list[nn.Module] = []
    for layer in model.layers:
        if not isinstance(layer, keras.layers.Dense):
            raise TypeError(f"the MLP twin knows Dense layers only, not {type(layer).__name__}")
        modules.append(linear(layer))
        name = getattr(layer.activation, "__name__", None)
        if name == "relu":
            modules.append(nn.ReLU())
        elif name != "linear":
            raise TypeError(f"the MLP twin knows relu and linear activations only, not {name}")
    return nn.Sequential(*modules)


class Transformer(nn.Module):
    """`cases.transformer()` in torch.nn: embedding, multi-head self-attention, residual and
    LayerNorm, a relu feedforward, residual and LayerNorm, the vocabulary head."""

    def __init__(self, vocabulary: int, width: int, heads: int, key_dim: int, hidden: int,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.heads, self.key_dim = heads, key_dim
        self.embedding = nn.Embedding(vocabulary, width)
        self.query = nn.Linear(width, heads * key_dim)
        self.key = nn.Linear(width, heads * key_dim)
        self.value = nn.Linear(width, heads * key_dim)
        self.attention_output = nn.Linear(heads * key_dim, width)
        self.attention_dropout = nn.Dropout(dropout)
        self.attention_norm = nn.LayerNorm(width, eps=LAYER_NORM_EPSILON)
        self.hidden = nn.Linear(width, hidden)
        self.projection = nn.Linear(hidden, width)
        self.feedforward_dropout = nn.Dropout(dropout)
        self.feedforward_norm = nn.LayerNorm(width, eps=LAYER_NORM_EPSILON)
        self.head = nn.Linear(width, vocabulary)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        batch, length, _ = x.shape

        def heads(projected: torch.Tensor) -> torch.Tensor:  # (batch, heads, length, key_dim)
            return projected.view(batch, length, self.heads, self.key_dim).transpose(1, 2)

        attended = F.scaled_dot_product_attention(heads(self.query(x)), heads(self.key(x)), heads(self.value(x)),
                                                  scale=1.0 / math.sqrt(self.key_dim))
        attended = self.attention_output(attended.transpose(1, 2).reshape(batch, length, self.heads * self.key_dim))
        x = self.attention_norm(x + self.attention_dropout(attended))
        x = self.feedforward_norm(x + self.feedforward_dropout(self.projection(F.relu(self.hidden(x)))))
        return self.head(x)


def transformer(model: Any) -> Transformer:
    """`cases.transformer()`'s Keras model -> `Transformer` with its weights."""
    import keras

    def of(kind: type) -> list[Any]:
        return [layer for layer in model.layers if isinstance(layer, kind)]

    (embedding,), (attention,) = of(keras.layers.Embedding), of(keras.layers.MultiHeadAttention)
    attention_norm, feedforward_norm = of(keras.layers.LayerNormalization)
    hidden, projection, head = of(keras.layers.Dense)
    dropouts = of(keras.layers.Dropout)
    query_kernel = weight(attention._query_dense.kernel)  # (width, heads, key_dim)
    width, heads, key_dim = query_kernel.shape
    twin = Transformer(embedding.input_dim, width, heads, key_dim, hidden.units, dropout=dropouts[0].rate)
    with torch.no_grad():
        twin.embedding.weight.copy_(weight(embedding.embeddings))
        for dense, projected in ((attention._query_dense, twin.query), (attention._key_dense, twin.key),
                                 (attention._value_dense, twin.value)):
            projected.weight.copy_(weight(dense.kernel).reshape(width, heads * key_dim).T)
            projected.bias.copy_(weight(dense.bias).reshape(heads * key_dim))
        output = attention._output_dense
        twin.attention_output.weight.copy_(weight(output.kernel).reshape(heads * key_dim, width).T)
        twin.attention_output.bias.copy_(weight(output.bias))
        for norm, keras_norm in ((twin.attention_norm, attention_norm), (twin.feedforward_norm, feedforward_norm)):
            if keras_norm.epsilon != norm.eps:
                raise ValueError(f"LayerNormalization epsilon {keras_norm.epsilon}, the twin's {norm.eps}")
            norm.weight.copy_(weight(keras_norm.gamma))
            norm.bias.copy_(weight(keras_norm.beta))
    twin.hidden, twin.projection, twin.head = linear(hidden), linear(projection), linear(head)
    return twin


class ConvNet(nn.Module):
    """`cases.convnet()` in torch.nn: (Conv2d, BatchNorm2d, ReLU, MaxPool2d) x 2, a spatial mean,
    the classifier; it takes channels-last images as the Keras model does."""

    def __init__(self, channels: tuple[int, ...], classes: int, kernel: int = 3,
                 epsilon: float = 1e-3, momentum: float = 0.99) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        for before, after in zip(channels[:-1], channels[1:], strict=True):
            blocks += [nn.Conv2d(before, after, kernel, padding=kernel // 2),
                       nn.BatchNorm2d(after, eps=epsilon, momentum=1.0 - momentum), nn.ReLU(), nn.MaxPool2d(2)]
        self.features = nn.Sequential(*blocks)
        self.classifier = nn.Linear(channels[-1], classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.features(images.permute(0, 3, 1, 2))
        return self.classifier(x.mean(dim=(2, 3)))


def convnet(model: Any) -> ConvNet:
    """`cases.convnet()`'s Keras model -> `ConvNet` with its weights and moving statistics."""
    import keras

    def of(kind: type) -> list[Any]:
        return [layer for layer in model.layers if isinstance(layer, kind)]

    convolutions, norms = of(keras.layers.Conv2D), of(keras.layers.BatchNormalization)
    (dense,) = of(keras.layers.Dense)
    for conv in convolutions:
        if conv.padding != "same" or tuple(conv.strides) != (1, 1) or conv.kernel_size[0] % 2 != 1:
            raise TypeError("the ConvNet twin knows stride-1 'same' convolutions of odd kernels only")
    first = weight(convolutions[0].kernel)  # (kh, kw, in, out)
    channels = (first.shape[2], *(weight(conv.kernel).shape[3] for conv in convolutions))
    twin = ConvNet(channels, dense.units, kernel=first.shape[0], epsilon=norms[0].epsilon,
                   momentum=norms[0].momentum)
    convs = [m for m in twin.features if isinstance(m, nn.Conv2d)]
    batch_norms = [m for m in twin.features if isinstance(m, nn.BatchNorm2d)]
    with torch.no_grad():
        for conv, keras_conv in zip(convs, convolutions, strict=True):
            conv.weight.copy_(weight(keras_conv.kernel).permute(3, 2, 0, 1))
            conv.bias.copy_(weight(keras_conv.bias))
        for norm, keras_norm in zip(batch_norms, norms, strict=True):
            norm.weight.copy_(weight(keras_norm.gamma))
            norm.bias.copy_(weight(keras_norm.beta))
            norm.running_mean.copy_(weight(keras_norm.moving_mean))
            norm.running_var.copy_(weight(keras_norm.moving_variance))
    twin.classifier = linear(dense)
    return twin


class DecoderBlock(nn.Module):
    """A pre-norm decoder block over a key/value cache: causal self-attention, a GELU feedforward."""

    def __init__(self, width: int, heads: int, hidden: int, epsilon: float = 1e-5) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, width // heads
        self.attention_norm = nn.LayerNorm(width, eps=epsilon)
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.attention_output = nn.Linear(width, width)
        self.feedforward_norm = nn.LayerNorm(width, eps=epsilon)
        self.hidden = nn.Linear(width, hidden)
        self.projection = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cache: torch.Tensor | None = None,
                index: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`mask`: (batch, queries, keys), True where a query sees a key. `cache`: this block's
        (batch, 2, max_length, heads, head_dim)."""
        batch, length, width = x.shape
        normed = self.attention_norm(x)

        def split(projected: torch.Tensor) -> torch.Tensor:  # (batch, length, heads, head_dim)
            return projected.view(batch, length, self.heads, self.head_dim)

        query, key, value = split(self.query(normed)), split(self.key(normed)), split(self.value(normed))
        if cache is not None:
            key_cache, value_cache = cache[:, 0].clone(), cache[:, 1].clone()
            key_cache[:, index:index + length] = key
            value_cache[:, index:index + length] = value
            key, value = key_cache, value_cache
            cache = torch.stack((key, value), dim=1)
        attended = F.scaled_dot_product_attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                                  attn_mask=mask.unsqueeze(1), scale=1.0 / math.sqrt(self.head_dim))
        x = x + self.attention_output(attended.transpose(1, 2).reshape(batch, length, width))
        x = x + self.projection(F.gelu(self.hidden(self.feedforward_norm(x))))
        return x, cache


class KVDecoder(nn.Module):
    """`cases.kv_decoder()` in torch.nn: token and position embeddings, decoder blocks over a
    key/value cache, a final LayerNorm, the tied head."""

    def __init__(self, vocabulary: int, max_length: int, width: int, heads: int, hidden: int, blocks: int,
                 epsilon: float = 1e-5) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(vocabulary, width)
        self.position_embedding = nn.Parameter(torch.zeros(max_length, width))
        self.blocks = nn.ModuleList(DecoderBlock(width, heads, hidden, epsilon) for _ in range(blocks))
        self.norm = nn.LayerNorm(width, eps=epsilon)

    def forward(self, token_ids: torch.Tensor, padding_mask: torch.Tensor, cache: torch.Tensor | None = None,
                cache_update_index: int | None = None) -> Any:
        """The logits, or `(logits, cache)` with a cache `(batch, blocks, 2, max_length, heads,
        head_dim)`. `padding_mask`: the key positions that hold tokens (the cache's with one)."""
        batch, length = token_ids.shape
        index = cache_update_index or 0
        x = self.token_embedding(token_ids) + self.position_embedding[index:index + length]
        key_length = length if cache is None else cache.shape[3]
        rows = torch.arange(length, device=x.device).unsqueeze(1) + index
        mask = rows >= torch.arange(key_length, device=x.device).unsqueeze(0)
        mask = mask.unsqueeze(0) & padding_mask.bool().unsqueeze(1)
        caches = []
        for i, block in enumerate(self.blocks):
            x, block_cache = block(x, mask, None if cache is None else cache[:, i], index)
            caches.append(block_cache)
        logits = self.norm(x) @ self.token_embedding.weight.T
        return logits if cache is None else (logits, torch.stack(caches, dim=1))


def kv_decoder(model: Any) -> KVDecoder:
    """`cases.kv_decoder()`'s Keras model -> `KVDecoder` with its weights."""
    embeddings = model.embeddings
    tokens = weight(embeddings.token_embedding.embeddings)  # (vocabulary, width)
    positions = weight(embeddings.position_embedding.position_embeddings)  # (max_length, width)
    blocks = model.transformer_layers
    attention = blocks[0]._self_attention_layer
    width = tokens.shape[1]
    twin = KVDecoder(tokens.shape[0], positions.shape[0], width, attention.num_heads,
                     blocks[0].intermediate_dim, len(blocks), epsilon=model.layer_norm.epsilon)

    def norm(module: nn.LayerNorm, keras_norm: Any) -> None:
        if keras_norm.epsilon != module.eps:
            raise ValueError(f"LayerNormalization epsilon {keras_norm.epsilon}, the twin's {module.eps}")
        module.weight.copy_(weight(keras_norm.gamma))
        module.bias.copy_(weight(keras_norm.beta))

    with torch.no_grad():
        twin.token_embedding.weight.copy_(tokens)
        twin.position_embedding.copy_(positions)
        for block, keras_block in zip(twin.blocks, blocks, strict=True):
            keras_attention = keras_block._self_attention_layer
            for dense, projected in ((keras_attention._query_dense, block.query),
                                     (keras_attention._key_dense, block.key),
                                     (keras_attention._value_dense, block.value)):
                projected.weight.copy_(weight(dense.kernel).reshape(width, width).T)
                projected.bias.copy_(weight(dense.bias).reshape(width))
            output = keras_attention._output_dense
            block.attention_output.weight.copy_(weight(output.kernel).reshape(width, width).T)
            block.attention_output.bias.copy_(weight(output.bias))
            norm(block.attention_norm, keras_block._self_attention_layer_norm)
            norm(block.feedforward_norm, keras_block._feedforward_layer_norm)
            if getattr(keras_block._feedforward_intermediate_dense.activation, "__name__", None) != "gelu":
                raise TypeError("the KV-decoder twin knows a GELU feedforward only")
        norm(twin.norm, model.layer_norm)
    for block, keras_block in zip(twin.blocks, blocks, strict=True):
        block.hidden = linear(keras_block._feedforward_intermediate_dense)
        block.projection = linear(keras_block._feedforward_output_dense)
    return twin


def probability_crossentropy(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Keras's sparse categorical cross-entropy with `from_logits=False` on torch, averaged:
    the outputs normalised by their sum, clipped, `log`, the negative log-likelihood."""
    probabilities = torch.clip(output / output.sum(dim=-1, keepdim=True), EPSILON, 1.0 - EPSILON)
    return F.nll_loss(torch.log(probabilities).reshape(-1, output.shape[-1]), target.reshape(-1))


def logits_crossentropy(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sparse categorical cross-entropy from logits, averaged."""
    return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))


class Twin:
    """A module with the Keras model's optimizer (Adam, Keras's defaults) and loss, and the
    loops of `train_on_batch`, `fit`, `evaluate` and `predict` written by hand.

    `accuracy`: the Keras model was compiled with `metrics=["accuracy"]`, so its training
    steps and `evaluate` report it too."""

    def __init__(self, module: nn.Module, loss: Any, accuracy: bool, batch_size: int = BATCH_SIZE) -> None:
        self.module, self.loss, self.accuracy, self.batch_size = module, loss, accuracy, batch_size
        self.optimizer = torch.optim.Adam(module.parameters(), lr=LEARNING_RATE, betas=(BETA_1, BETA_2), eps=EPSILON)
        self.steps = 0

    def _step(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step on a batch: the loss and the logits (detached)."""
        self.optimizer.zero_grad()
        output = self.module(x)
        loss = self.loss(output, y)
        loss.backward()
        self.steps += 1
        # Keras: var -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps); torch divides by
        # sqrt(v) / sqrt(1 - b2^t) + eps: this eps makes the two the same.
        self.optimizer.param_groups[0]["eps"] = EPSILON / math.sqrt(1.0 - BETA_2 ** self.steps)
        self.optimizer.step()
        return loss.detach(), output.detach()

    def _correct(self, output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (output.argmax(dim=-1) == y).sum()

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> float | list[float]:
        """`train_on_batch(x, y)`: one step; the batch's loss (and accuracy), as floats."""
        self.module.train()
        loss, output = self._step(x, y)
        if not self.accuracy:
            return float(loss)
        return [float(loss), float(self._correct(output, y)) / y.numel()]

    def fit(self, x: torch.Tensor, y: torch.Tensor, shuffle: bool = True) -> list[float]:
        """One epoch over shuffled batches: the epoch's mean loss (and accuracy)."""
        self.module.train()
        count = x.shape[0]
        order = torch.randperm(count, device=x.device) if shuffle else torch.arange(count, device=x.device)
        total_loss, correct = torch.zeros((), device=x.device), torch.zeros((), dtype=torch.long, device=x.device)
        for start in range(0, count, self.batch_size):
            batch = order[start:start + self.batch_size]
            batch_y = y[batch]
            loss, output = self._step(x[batch], batch_y)
            total_loss += loss * batch.shape[0]
            if self.accuracy:
                correct += self._correct(output, batch_y)
        return self._result(total_loss, correct, count, y[:1].numel())

    def _result(self, total_loss: torch.Tensor, correct: torch.Tensor, count: int, per_sample: int) -> list[float]:
        result = [float(total_loss) / count]
        if self.accuracy:
            result.append(float(correct) / (count * per_sample))
        return result

    def evaluate(self, x: torch.Tensor, y: torch.Tensor) -> list[float]:
        """The mean loss (and accuracy) over batches, without gradients."""
        self.module.eval()
        count = x.shape[0]
        total_loss, correct = torch.zeros((), device=x.device), torch.zeros((), dtype=torch.long, device=x.device)
        with torch.no_grad():
            for start in range(0, count, self.batch_size):
                batch_x, batch_y = x[start:start + self.batch_size], y[start:start + self.batch_size]
                output = self.module(batch_x)
                total_loss += self.loss(output, batch_y) * batch_x.shape[0]
                if self.accuracy:
                    correct += self._correct(output, batch_y)
        return self._result(total_loss, correct, count, y[:1].numel())

    def predict(self, x: torch.Tensor) -> np.ndarray:
        """The outputs of every batch, without gradients, as one NumPy array."""
        self.module.eval()
        with torch.no_grad():
            outputs = [self.module(x[start:start + self.batch_size]) for start in range(0, x.shape[0], self.batch_size)]
        return torch.cat(outputs).cpu().numpy()
