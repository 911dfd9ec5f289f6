"""The package's parts that need neither PyTorch nor a GPU: the library's entry points through
ctypes (on unimem's simulator, whose addresses are not memory and are never dereferenced), its
errors, and the package's own checks. Run with UNIMEM_TORCH_LIB naming a built library:

    UNIMEM_TORCH_LIB=target/debug/libunimem_torch.so python3 -m unittest discover -s python/tests
"""

import ctypes
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import unimem_torch  # noqa: E402
from unimem_torch import _native  # noqa: E402

MIB = 1 << 20


class Library(unittest.TestCase):
    def setUp(self):
        self.native = _native.Native()

    def tearDown(self):
        if self.native.enabled():
            self.native.disable()

    def test_it_exports_what_pytorchs_pluggable_allocator_loads(self):
        for symbol in ("unimem_malloc", "unimem_free", "unimem_op_begin", "unimem_op_end", "unimem_step", "unimem_stats"):
            self.assertTrue(hasattr(self.native.lib, symbol), symbol)

    def test_a_step_on_the_simulator_is_counted_within_the_budget(self):
        self.native.enable(budget="24MiB", backend="sim")
        lib = self.native.lib
        stream = ctypes.c_void_p(0)
        w = lib.unimem_malloc(8 * MIB, 0, stream)
        self.assertTrue(w, self.native.last_error())
        for _ in range(3):
            self.native.op_begin(b"aten::mm", [w], [8 * MIB], [_native.READ], 0)
            out = lib.unimem_malloc(16 * MIB, 0, stream)
            self.native.op_end(0)
            self.native.op_begin(b"aten::mm_backward", [out, w], [16 * MIB, 8 * MIB], [_native.READ, _native.READ_WRITE], 0)
            self.native.op_end(0)
            lib.unimem_free(out, 16 * MIB, 0, stream)
            self.native.step()
        s = self.native.stats()
        self.assertEqual((s["ops"], s["steps"], s["mallocs"], s["frees"]), (6, 3, 4, 3))
        self.assertEqual(s["live_bytes"], 8 * MIB)
        self.assertLessEqual(s["peak_footprint_bytes"], 24 * MIB)
        self.assertGreaterEqual(s["peak_footprint_bytes"], 24 * MIB, "weights and output fill the budget")

    def test_the_examples_host_time_per_step_is_the_counters_difference(self):
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
        import _common

        self.native.enable(budget="24MiB", backend="sim")
        lib = self.native.lib
        w = lib.unimem_malloc(8 * MIB, 0, ctypes.c_void_p(0))
        snapshots = []
        for _ in range(3):
            snapshots.append(self.native.stats())
            for _ in range(4):
                self.native.op_begin(b"aten::mm", [w], [8 * MIB], [_native.READ], 0)
                self.native.op_end(0)
            self.native.step()
        first, second, last = snapshots[0], snapshots[1], self.native.stats()
        per = _common._per_step_ms(second, last, 2)
        # The library keeps means per operator: the steps' time is the totals' difference.
        total_ns = last["op_host_ns"] * last["ops"] - second["op_host_ns"] * second["ops"]
        self.assertGreater(total_ns, 0)
        self.assertAlmostEqual(per["op"], round(total_ns / 1e6 / 2, 2))
        self.assertEqual(per["malloc"], 0.0, "no allocation in those steps")
        engine = per["engine"]
        self.assertGreater(engine["program_launch"], 0.0, per)
        self.assertGreaterEqual(min(engine.values()), 0.0, per)
        self.assertGreater(_common._per_step_ms(first, last, 3)["op"], 0.0)

    def test_errors_carry_the_librarys_reason(self):
        with self.assertRaisesRegex(_native.UnimemError, "budget"):
            self.native.enable(budget="lots", backend="sim")
        with self.assertRaisesRegex(_native.UnimemError, "not enabled"):
            self.native.step()
        self.native.enable(budget="8MiB", backend="sim")
        with self.assertRaisesRegex(_native.UnimemError, "already enabled"):
            self.native.enable(backend="sim")
        with self.assertRaisesRegex(_native.UnimemError, "mode 9"):
            self.native.op_begin(b"bad", [1], [1], [9], 0)

    def test_a_missing_library_is_named(self):
        old = os.environ.get("UNIMEM_TORCH_LIB")
        os.environ["UNIMEM_TORCH_LIB"] = "/nonexistent/libunimem_torch.so"
        try:
            with self.assertRaisesRegex(_native.UnimemError, "/nonexistent/libunimem_torch.so"):
                _native.library_path()
        finally:
            if old is None:
                del os.environ["UNIMEM_TORCH_LIB"]
            else:
                os.environ["UNIMEM_TORCH_LIB"] = old


class Package(unittest.TestCase):
    def test_it_imports_without_pytorch_and_refuses_calls_before_enable(self):
        self.assertFalse(unimem_torch.enabled())
        with self.assertRaisesRegex(unimem_torch.UnimemError, "not enabled"):
            unimem_torch.step()
        with self.assertRaisesRegex(unimem_torch.UnimemError, "not enabled"):
            unimem_torch.stats()

    def test_a_recorded_trace_is_complete_after_stop_recording(self):
        # In a process of its own: the library holds one runtime per process.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "program.jsonl")
            code = (
                "import ctypes, sys; sys.path.insert(0, %r); from unimem_torch import _native;"
                "n = _native.Native(); n.enable(budget='64MiB', backend='sim', record=%r);"
                "p = n.lib.unimem_malloc(1 << 20, 0, None); n.op_begin(b'aten::fill_', [p], [1 << 20], [3], 0);"
                "n.op_end(0); assert n.stop_recording()" % (os.path.dirname(HERE), path)
            )
            subprocess.check_call([sys.executable, "-c", code])
            with open(path) as f:
                lines = f.read().splitlines()
            self.assertIn('"unimem-trace"', lines[0])
            self.assertTrue(any('"aten::fill_"' in line for line in lines), lines)

    def test_the_configured_telemetry_log_is_complete_after_close_telemetry(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "program.log.jsonl")
            code = (
                "import ctypes, sys; sys.path.insert(0, %r); from unimem_torch import _native;"
                "n = _native.Native(); n.enable(budget='64MiB', backend='sim');"
                "p = n.lib.unimem_malloc(1 << 20, 0, None); n.op_begin(b'aten::fill_', [p], [1 << 20], [3], 0);"
                "n.op_end(0); n.close_telemetry()" % (os.path.dirname(HERE),)
            )
            env = dict(os.environ, UNIMEM_TELEMETRY_LOG=path)
            subprocess.check_call([sys.executable, "-c", code], env=env)
            with open(path) as f:
                lines = f.read().splitlines()
            self.assertIn('"unimem-telemetry"', lines[0])
            self.assertTrue(any('"kind":"kernel"' in line and "aten::fill_" in line for line in lines), lines)
            self.assertIn('"kind":"end"', lines[-1])


if __name__ == "__main__":
    unittest.main()
