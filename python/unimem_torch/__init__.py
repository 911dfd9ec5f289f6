"""unimem as PyTorch's CUDA allocator: train on less GPU memory than the program needs.

    import unimem_torch
    unimem_torch.enable(budget="50%")

Every CUDA allocation PyTorch makes then lives in CUDA managed memory under unimem's budget,
and each operator declares what it touches before it runs, so that unimem's advisor moves
data to the GPU ahead of use and evicts what will not be needed soon. See docs/pytorch.md.
"""

import atexit
import threading

from ._native import Native, UnimemError, library_path

__all__ = ["enable", "enabled", "step", "stats", "record", "stop_recording", "close_telemetry", "UnimemError", "library_path"]

_lock = threading.Lock()
_state = None
_record_path = None


class _State:
    def __init__(self, native, declarations):
        self.native = native
        self.declarations = declarations


def enable(budget="50%", policy="advisor", config=None, record=None, backend="cuda", declare=True):
    """Makes unimem PyTorch's CUDA allocator in this process, before its first CUDA allocation.

    budget: device memory the program may use: a percent of the GPU ("50%") or bytes ("8GiB").
    policy: "advisor" (learns the program's accesses), "oracle" or "none" (the driver alone).
    config: a unimem TOML configuration file; its keys apply where the arguments above are None.
    record: write the program's trace v1 to this file (for `unimem replay` and `unimem plan`).
    declare: declare each operator's accesses (off: the allocator alone, which leaves the
        advisor nothing to learn from).
    """
    global _state
    import torch

    with _lock:
        if _state is not None:
            raise UnimemError("unimem_torch is already enabled in this process")
        native = Native()
        native.enable(budget, policy, config, record if record is not None else _record_path, backend)
        try:
            allocator = torch.cuda.memory.CUDAPluggableAllocator(native.path, "unimem_malloc", "unimem_free")
            torch.cuda.memory.change_current_allocator(allocator)
        except RuntimeError as e:
            native.disable()
            raise UnimemError(
                f"PyTorch refused unimem as its allocator ({e}); enable unimem before the first CUDA tensor"
            ) from e
        declarations = None
        if declare:
            from ._declare import Declarations

            declarations = Declarations(native, budget=native.stats()["budget_bytes"])
            declarations.__enter__()
        _state = _State(native, declarations)
        atexit.register(_at_exit)


def enabled():
    """Whether unimem is PyTorch's allocator in this process."""
    return _state is not None


def _require():
    if _state is None:
        raise UnimemError("unimem_torch is not enabled (call unimem_torch.enable first)")
    return _state


def step():
    """Marks the end of a step (an iteration of the training loop): the advisor aligns its
    predictions to steps."""
    _require().native.step()


def stats():
    """unimem's counters as a dict, once its own work issued so far is done (not PyTorch's):
    budget, live and resident bytes, the peak footprint, bytes moved each way, operators
    declared and the host time per operator, both in the library (`op_host_ns`) and in the
    declaring mode (`mode_host_ns`)."""
    s = _require()
    out = s.native.stats()
    d = s.declarations
    out["mode_ops"] = d.ops if d else 0
    out["mode_split_ops"] = d.split_ops if d else 0
    out["mode_host_ns"] = (d.host_ns / d.ops) if d and d.ops else 0.0
    return out


def record(path):
    """Records the program's trace v1 to `path` (gzip if it ends in .gz); call before enable().
    The file is complete at stop_recording() or when the process exits."""
    global _record_path
    if _state is not None:
        raise UnimemError("record() comes before enable(): a trace starts with the program's first allocation")
    _record_path = str(path)


def stop_recording():
    """Completes the trace being recorded; True if there was one."""
    return _require().native.stop_recording()


def close_telemetry():
    """Completes the telemetry log (the configuration's `telemetry.log`) now; otherwise it is
    completed at exit. Later events are not logged."""
    _require().native.close_telemetry()


def _at_exit():
    # The trace and the telemetry log are complete at exit; the runtime itself lives on until
    # the process ends, as PyTorch may free tensors later in its own teardown.
    if _state is not None:
        for finish in (_state.native.stop_recording, _state.native.close_telemetry):
            try:
                finish()
            except UnimemError:
                pass
