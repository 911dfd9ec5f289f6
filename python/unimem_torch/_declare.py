"""Each PyTorch operator's accesses, declared to unimem before the operator runs.

A `TorchDispatchMode` sees every operator that reaches the dispatcher (forward, backward on
autograd's threads, optimizer steps), with its arguments: the CUDA tensors among them are
what it reads, and those its schema marks as written (in-place and `out=` arguments) what it
writes. Each is declared over its whole storage (a view touches part of it; declaring the whole
is the safe side) as read or read-write: never as a plain write, which would tell unimem the
old bytes are dead. Outputs the operator allocates as it runs are its writes; the library
knows them from their allocations. Views and metadata operators touch no data and are not
declared.
"""

import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ._native import READ, READ_WRITE


class _Schema:
    """What an operator's schema says, once per operator: which arguments it writes, whether
    it only makes views."""

    __slots__ = ("name", "written", "written_names", "view")

    def __init__(self, func):
        schema = func._schema
        self.name = str(func).encode()
        self.written = frozenset(
            i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write
        )
        self.written_names = frozenset(schema.arguments[i].name for i in self.written)
        returns = schema.returns
        self.view = bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)


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


class Declarations(TorchDispatchMode):
    """Declares each operator to the library before it runs (see the module documentation),
    and counts its own host time."""

    def __init__(self, native):
        super().__init__()
        self.native = native
        self.schemas = {}
        self.ops = 0
        self.host_ns = 0

    def schema(self, func):
        s = self.schemas.get(func)
        if s is None:
            s = self.schemas[func] = _Schema(func)
        return s

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        t0 = time.perf_counter_ns()
        s = self.schema(func)
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
