"""Small tensors of a batch sent inside its pickle, not by file descriptor.

A DataLoader worker sends each tensor of a batch to the training process
through shared memory: torch makes a shared-memory file for it, and the
training process fetches its descriptor over a new Unix-socket
connection to the worker, with multiprocessing's authentication
challenge in both directions. For a batch's labels (64 integers, 512
bytes) that costs the two processes about 0.7 ms of CPU together,
against 0.05 ms for the same tensor's bytes pickled with the batch (this
machine, torch 1.13; BENCHMARKS.md, "Labels sent with their batch").
With 8 KB files that is 11 µs a file, as much as a rank spends serving
it.

BrandLoader wraps its collate_fn in InlineSmall: in a worker, each plain
CPU tensor of the collated batch (in lists, tuples, named tuples and
dicts, however nested) that still fits the batch's bound is replaced by
an object that pickles as the tensor's bytes and unpickles as a tensor
again, in the training process. The training loop gets tensors of the
same dtype, shape and values, but contiguous and each in memory of its
own: two that were views of one storage in the worker (which torch's own
sending keeps shared) arrive as copies, so that writing into one no
longer changes the other.

The bound is small because what goes inline goes through the pipe the
workers share, though inline is cheaper up to ~256 KiB here. A worker
whose training process was killed exits by joining its queue's feeder
thread (torch 1.13), which waits for ever on a full pipe; batches of
decoded images sent inline filled it and left such workers behind,
holding the DDP sockets the other ranks waited on. By descriptor a batch
is a few hundred bytes there. The pipe (64 KiB by default) holds up to
num_workers x prefetch_factor batches, so BrandLoader bounds each at
bound(num_workers, prefetch_factor): half the pipe shared among them, at
most INLINE_BYTES (4 KiB: a batch's labels, up to 512 of them, with 4
workers each 2 batches ahead). InlineSmall's default is INLINE_BYTES;
with more workers or batches ahead, give it bound()'s.
"""

import torch
import torch.utils.data

__all__ = ["INLINE_BYTES", "InlineSmall", "bound", "inline_small"]

INLINE_BYTES = 4 << 10

_PIPE_SHARE = 32 << 10  # of the 64 KiB pipe, what the batches' inline tensors may fill together


def bound(num_workers, prefetch_factor=2):
    """The inline bytes a batch may carry when num_workers workers each
    fetch prefetch_factor batches ahead: together at most half of a
    64 KiB pipe, and at most INLINE_BYTES."""
    return min(INLINE_BYTES, _PIPE_SHARE // max(1, num_workers * (prefetch_factor or 2)))


class InlineSmall:
    """A collate_fn: collate_fn's batch, with its small tensors (at most
    budget bytes of them a batch) sent inline when it runs in a
    DataLoader worker (a plain call otherwise). A class, not a closure:
    it pickles, for workers that are spawned."""

    def __init__(self, collate_fn, budget=INLINE_BYTES):
        self.collate_fn, self.budget = collate_fn, budget

    def __call__(self, batch):
        out = self.collate_fn(batch)
        if torch.utils.data.get_worker_info() is None:
            return out
        return inline_small(out, [self.budget])

    def __repr__(self):
        return "InlineSmall(%r, budget=%d)" % (self.collate_fn, self.budget)


def inline_small(x, budget=None):
    """x with each plain tensor in it (in lists, tuples, named tuples and
    dicts) that still fits budget, a one-item list of the bytes left
    (default INLINE_BYTES), replaced by an _Inline; anything else as it
    is."""
    budget = [INLINE_BYTES] if budget is None else budget  # shared down the walk
    if isinstance(x, torch.Tensor):
        if not _plain(x):
            return x
        n = x.numel() * x.element_size()
        got = _Inline.of(x) if n <= budget[0] else x
        if got is not x:
            budget[0] -= n
        return got
    if type(x) is list:
        return [inline_small(v, budget) for v in x]
    if type(x) is dict:
        return {k: inline_small(v, budget) for k, v in x.items()}
    if type(x) is tuple:
        return tuple(inline_small(v, budget) for v in x)
    if isinstance(x, tuple) and hasattr(x, "_make"):  # a named tuple
        return x._make(inline_small(v, budget) for v in x)
    return x


def _plain(t):
    """Whether t may go inline: a plain dense CPU tensor without autograd
    or names."""
    return (type(t) is torch.Tensor and t.layout == torch.strided and t.device.type == "cpu" and not t.requires_grad
            and not t.is_quantized and all(n is None for n in t.names))


class _Inline:
    """A tensor's bytes, dtype and shape, that unpickle as the tensor."""

    __slots__ = ("data", "dtype", "shape")

    def __init__(self, data, dtype, shape):
        self.data, self.dtype, self.shape = data, dtype, shape

    @classmethod
    def of(cls, t):
        """t's _Inline, or t where its bytes cannot be had: taken here, in
        the collate_fn, so that pickling the batch cannot fail."""
        try:
            flat = t.resolve_conj().resolve_neg().contiguous().reshape(-1)
            return cls(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"", t.dtype, tuple(t.shape))
        except (RuntimeError, TypeError):
            return t

    def __reduce__(self):
        return _tensor, (self.data, self.dtype, self.shape)


def _tensor(data, dtype, shape):
    """The tensor an _Inline pickled, in memory of its own."""
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)
