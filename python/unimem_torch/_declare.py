"""Each PyTorch operator's accesses, declared to unimem before the operator runs.

A `TorchDispatchMode` sees every operator that reaches the dispatcher (forward, backward on
autograd's threads, optimizer steps), with its arguments: the CUDA tensors among them are
what it reads, and those its schema marks as written (in-place and `out=` arguments) what it
writes. Each is declared over its whole storage (a view touches part of it; declaring the whole
is the safe side) as read or read-write: never as a plain write, which would tell unimem the
old bytes are dead. Outputs the operator allocates as it runs are its writes; the library
knows them from their allocations. Views and metadata operators touch no data and are not
declared.

A multi-tensor operator (`_foreach_*`, `_fused_*`: an optimizer's step over every parameter at
once) whose data would take more than half the budget runs as several calls over slices of its
lists, each declared on its own: its lists are aligned tensor by tensor, so the slices compute
what the whole does, and each slice's data fits beside the rest.
"""

import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ._native import READ, READ_WRITE


class _Schema:
    """What an operator's schema says, once per operator: which arguments it writes, whether
    it only makes views."""

    __slots__ = ("name", "written", "written_names", "view", "lists", "names", "list_returns")

    def __init__(self, func):
        schema = func._schema
        self.name = str(func).encode()
        self.written = frozenset(
            i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write
        )
        self.written_names = frozenset(schema.arguments[i].name for i in self.written)
        returns = schema.returns
        self.view = bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)
        # A multi-tensor operator's list arguments, which may be sliced (None: it may not be
        # split): it returns nothing or only lists of tensors, joined slice after slice.
        self.names = tuple(a.name for a in schema.arguments)
        self.list_returns = len(returns)
        base = schema.name.split("::")[-1]
        lists = tuple(i for i, a in enumerate(schema.arguments) if str(a.type).startswith("List["))
        splittable = base.startswith(("_foreach_", "_fused_")) and all(str(r.type) == "List[Tensor]" for r in returns)
        self.lists = lists if splittable and lists else None


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, torch.Tensor):
                yield v


class _Ranges:
    """The storages of one operator's CUDA tensors, each once (read-write if any use writes)."""

    __slots__ = ("by_ptr",)

    def __init__(self):
        self.by_ptr = {}

    def add(self, tensor, writes):
        if not tensor.is_cuda:
            return
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return  # sparse, nested or subclass tensors without one storage: not declared
        ptr = storage.data_ptr()
        if ptr == 0:
            return
        old = self.by_ptr.get(ptr)
        mode = READ_WRITE if writes or (old is not None and old[1] == READ_WRITE) else READ
        self.by_ptr[ptr] = (storage.nbytes(), mode)


def _current_stream():
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(torch.cuda.current_device())
    return torch.cuda.current_stream().cuda_stream


def _storage_bytes(value):
    """Bytes of the CUDA storages of a tensor or a list's tensors."""
    total = 0
    for t in _tensors(value):
        if t.is_cuda:
            try:
                total += t.untyped_storage().nbytes()
            except (RuntimeError, NotImplementedError):
                pass
    return total


def _joined(schema, outs):
    """The results of an operator's slices as the whole's: nothing, or each returned list
    joined in slice order."""
    if schema.list_returns == 0:
        return None
    if schema.list_returns == 1:
        return [t for out in outs for t in out]
    return tuple([t for out in outs for t in out[i]] for i in range(schema.list_returns))


class Declarations(TorchDispatchMode):
    """Declares each operator to the library before it runs (see the module documentation),
    and counts its own host time. `budget`: the device budget in bytes, which a multi-tensor
    operator's data may take at most half of before it is split (0: never split)."""

    def __init__(self, native, budget=0):
        super().__init__()
        self.native = native
        self.schemas = {}
        self.ops = 0
        self.split_ops = 0
        self.host_ns = 0
        self.split_above = budget // 2
        self.slice_bytes = budget // 4

    def schema(self, func):
        s = self.schemas.get(func)
        if s is None:
            s = self.schemas[func] = _Schema(func)
        return s

    def slices(self, s, args, kwargs):
        """A multi-tensor operator's arguments cut into slices of at most `slice_bytes` of
        storage each (a tensor over it is a slice of its own), or None where the operator's
        data takes at most `split_above` or its lists are not aligned."""
        values = [args[i] if i < len(args) else kwargs.get(s.names[i]) for i in s.lists]
        lengths = {len(v) for v in values if isinstance(v, (list, tuple)) and len(v) > 0}
        if len(lengths) != 1:
            return None
        (n,) = lengths
        aligned = [isinstance(v, (list, tuple)) and len(v) == n for v in values]
        sizes = [sum(_storage_bytes(v[j]) for v, a in zip(values, aligned) if a) for j in range(n)]
        if n < 2 or sum(sizes) <= self.split_above:
            return None
        cuts, lo, held = [], 0, 0
        for j, size in enumerate(sizes):
            if j > lo and held + size > self.slice_bytes:
                cuts.append((lo, j))
                lo, held = j, 0
            held += size
        cuts.append((lo, n))
        out = []
        for lo, hi in cuts:
            a, k = list(args), dict(kwargs)
            for i, v, is_aligned in zip(s.lists, values, aligned):
                if not is_aligned:
                    continue
                if i < len(args):
                    a[i] = v[lo:hi]
                else:
                    k[s.names[i]] = v[lo:hi]
            out.append((tuple(a), k))
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        t0 = time.perf_counter_ns()
        s = self.schema(func)
        if s.lists is not None and self.split_above:
            parts = self.slices(s, args, kwargs)
            if parts is not None:
                self.split_ops += 1
                self.host_ns += time.perf_counter_ns() - t0
                return _joined(s, [self.run(func, s, a, k, time.perf_counter_ns()) for a, k in parts])
        return self.run(func, s, args, kwargs, t0)

    def run(self, func, s, args, kwargs, t0):
        """Declares the operator's storages (unless it touches none), then runs it; `t0`: when
        its declaration began, for the mode's host time."""
        ranges = None
        if not s.view:
            ranges = _Ranges()
            for i, a in enumerate(args):
                for t in _tensors(a):
                    ranges.add(t, i in s.written)
            for k, a in kwargs.items():
                for t in _tensors(a):
                    ranges.add(t, k in s.written_names)
            device = kwargs.get("device")
            makes_cuda = device is not None and torch.device(device).type == "cuda"
            if not ranges.by_ptr and not makes_cuda:
                ranges = None
        if ranges is None:
            self.host_ns += time.perf_counter_ns() - t0
            return func(*args, **kwargs)
        stream = _current_stream()
        ptrs = list(ranges.by_ptr)
        lens = [ranges.by_ptr[p][0] for p in ptrs]
        modes = [ranges.by_ptr[p][1] for p in ptrs]
        self.native.op_begin(s.name, ptrs, lens, modes, stream)
        t1 = time.perf_counter_ns()
        try:
            return func(*args, **kwargs)
        finally:
            t2 = time.perf_counter_ns()
            self.native.op_end(stream)
            self.ops += 1
            self.host_ns += (t1 - t0) + (time.perf_counter_ns() - t2)
