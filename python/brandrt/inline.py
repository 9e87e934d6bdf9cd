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

BrandLoader wraps its collate_fn in InlineSmall: in a worker, the plain
CPU tensors of the collated batch (in lists, tuples, named tuples and
dicts, however nested), in order, while their bytes add up to at most
INLINE_BYTES, are replaced by objects that pickle as the tensor's bytes
and unpickle as tensors again, in the training process. What the
training loop gets is the same: tensors of the same dtype, shape and
values. Two tensors that shared storage in the worker arrive as copies
that do not, as with torch's own sending of views of one batch.

The bound is small (16 KiB: a batch's labels, up to 2,048 of them),
though inline is cheaper up to ~256 KiB here, because what goes inline
goes through the pipe the workers share: a worker whose training
process was killed exits by joining its queue's feeder thread (torch
1.13), which waits for ever on a full pipe. Batches of decoded images
sent inline filled it and left such workers behind, holding the DDP
sockets the other ranks waited on; by descriptor they do not.
"""

import torch
import torch.utils.data

__all__ = ["INLINE_BYTES", "InlineSmall", "inline_small"]

INLINE_BYTES = 16 << 10


class InlineSmall:
    """A collate_fn: collate_fn's batch, with its small tensors sent
    inline when it runs in a DataLoader worker (a plain call otherwise).
    A class, not a closure: it pickles, for workers that are spawned."""

    def __init__(self, collate_fn):
        self.collate_fn = collate_fn

    def __call__(self, batch):
        out = self.collate_fn(batch)
        if torch.utils.data.get_worker_info() is None:
            return out
        return inline_small(out)

    def __repr__(self):
        return "InlineSmall(%r)" % (self.collate_fn,)


def inline_small(x, budget=None):
    """x with its plain tensors, in lists, tuples and dicts, replaced by
    _Inlines in order while their bytes add up to at most INLINE_BYTES;
    anything else as it is."""
    budget = [INLINE_BYTES] if budget is None else budget  # what is left, shared down the walk
    if isinstance(x, torch.Tensor):
        n = x.numel() * x.element_size()
        if not _plain(x) or n > budget[0]:
            return x
        got = _Inline.of(x)
        if got is not x:
            budget[0] -= n
        return got
    if type(x) is list:
        return [inline_small(v, budget) for v in x]
    if type(x) is dict:
        return {k: inline_small(v, budget) for k, v in x.items()}
    if isinstance(x, tuple):
        items = [inline_small(v, budget) for v in x]
        return type(x)(*items) if hasattr(x, "_fields") else tuple(items)
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
