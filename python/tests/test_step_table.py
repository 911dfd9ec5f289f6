"""The examples' per-step table (python/examples/step_table.py), without a GPU."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
import step_table  # noqa: E402


def host(holds, repopulate, pinned):
    moves = {"slots": 1.0, "holds": holds, "repopulate": repopulate, "swaps": 0.0}
    return {"moves": moves, "policy": 2.5, "new_buffers": 3, "staging_pinned_bytes": pinned}


class StepTable(unittest.TestCase):
    def test_rows_are_the_timed_steps_of_runs_with_per_step_figures(self):
        steps = [host(1, 2, 4e9), host(3, 0, 5e9)]
        runs = [
            {"build": "base", "round": 1, "step_ms": [10.0, 20.0], "unimem": {"each_step_host_ms": steps}},
            {"model": "gpt2", "step_ms": [30.0], "unimem": {}},
        ]
        rows = step_table.step_rows(runs)
        self.assertEqual([(r[0], r[1], r[2]) for r in rows], [("base 1", 1, 10.0), ("base 1", 2, 20.0)])
        lines = step_table.table(rows).splitlines()
        # A part zero in every step is left out; the others keep the library's order.
        head = "| run | step | ms | slots | holds | repopulate | new buffers | policy | staging pinned GB |"
        self.assertEqual(lines[0], head)
        self.assertEqual(lines[2], "| base 1 | 1 | 10.0 | 1.0 | 1.0 | 2.0 | 3 | 2.5 | 4.00 |")
        self.assertEqual(lines[3], "| base 1 | 2 | 20.0 | 1.0 | 3.0 | 0.0 | 3 | 2.5 | 5.00 |")
        self.assertEqual(len(lines), 4)

    def test_no_run_with_per_step_figures_gives_no_rows(self):
        self.assertEqual(step_table.step_rows([{"step_ms": [1.0], "unimem": {}}]), [])


if __name__ == "__main__":
    unittest.main()
