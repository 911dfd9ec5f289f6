"""The C entry points of libunimem_torch.so, through ctypes (no compiled Python extension, so
one wheel serves every CPython 3)."""

import ctypes
import json
import os
import pathlib

LIBRARY = "libunimem_torch.so"

#: Access modes of `op_begin` (as the library defines them).
READ, WRITE, READ_WRITE = 1, 2, 3


class UnimemError(RuntimeError):
    """A call into unimem failed; the message is the library's."""


def library_path():
    """The library to load: `UNIMEM_TORCH_LIB` if set, else the one installed with the package."""
    env = os.environ.get("UNIMEM_TORCH_LIB")
    if env:
        if not os.path.isfile(env):
            raise UnimemError(f"UNIMEM_TORCH_LIB={env}: no such file")
        return os.path.abspath(env)
    here = pathlib.Path(__file__).with_name(LIBRARY)
    if not here.is_file():
        raise UnimemError(
            f"{here} is missing: install the package with `pip install ./python` (it builds the "
            "library with cargo), or set UNIMEM_TORCH_LIB to a built libunimem_torch.so"
        )
    return str(here)


def _str(value):
    return None if value is None else str(value).encode()


class Native:
    """The loaded library, its functions typed."""

    def __init__(self, path=None):
        self.path = path or library_path()
        lib = ctypes.CDLL(self.path)
        c_char_p, c_int, c_void_p = ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p
        lib.unimem_enable.argtypes = [c_char_p] * 5
        lib.unimem_enable.restype = c_int
        lib.unimem_enabled.restype = c_int
        lib.unimem_malloc.argtypes = [ctypes.c_ssize_t, c_int, c_void_p]
        lib.unimem_malloc.restype = c_void_p
        lib.unimem_free.argtypes = [c_void_p, ctypes.c_ssize_t, c_int, c_void_p]
        lib.unimem_free.restype = None
        u64p = ctypes.POINTER(ctypes.c_uint64)
        lib.unimem_op_begin.argtypes = [c_char_p, u64p, u64p, ctypes.POINTER(ctypes.c_uint8), ctypes.c_size_t, c_void_p]
        lib.unimem_op_begin.restype = c_int
        lib.unimem_op_end.argtypes = [c_void_p]
        lib.unimem_op_end.restype = c_int
        lib.unimem_step.restype = c_int
        lib.unimem_stats.restype = c_char_p
        lib.unimem_stop_recording.restype = c_int
        lib.unimem_close_telemetry.restype = c_int
        lib.unimem_disable.restype = c_int
        lib.unimem_last_error.restype = c_char_p
        self.lib = lib

    def last_error(self):
        return (self.lib.unimem_last_error() or b"").decode(errors="replace")

    def check(self, rc, what):
        if rc < 0:
            raise UnimemError(self.last_error() or f"{what} failed")
        return rc

    def enable(self, budget=None, policy=None, config=None, record=None, backend=None):
        rc = self.lib.unimem_enable(_str(budget), _str(policy), _str(config), _str(record), _str(backend))
        self.check(rc, "unimem_enable")

    def enabled(self):
        return bool(self.lib.unimem_enabled())

    def op_begin(self, name, ptrs, lens, modes, stream):
        """Declares an operator's ranges (lists of equal length) before it runs on `stream`."""
        n = len(ptrs)
        rc = self.lib.unimem_op_begin(
            name, (ctypes.c_uint64 * n)(*ptrs), (ctypes.c_uint64 * n)(*lens), (ctypes.c_uint8 * n)(*modes), n, stream
        )
        self.check(rc, "unimem_op_begin")

    def op_end(self, stream):
        self.check(self.lib.unimem_op_end(stream), "unimem_op_end")

    def step(self):
        self.check(self.lib.unimem_step(), "unimem_step")

    def stats(self):
        raw = self.lib.unimem_stats()
        if raw is None:
            raise UnimemError(self.last_error() or "unimem_stats failed")
        return json.loads(raw)

    def stop_recording(self):
        return bool(self.check(self.lib.unimem_stop_recording(), "unimem_stop_recording"))

    def close_telemetry(self):
        self.check(self.lib.unimem_close_telemetry(), "unimem_close_telemetry")

    def disable(self):
        self.check(self.lib.unimem_disable(), "unimem_disable")
