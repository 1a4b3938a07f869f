#!/usr/bin/env python3
"""tools/trace/block_timeline_summary.py on a timeline whose launches and chain times are worked out by hand.
Usage: block_timeline_summary_test.py TOOLS_TRACE_DIR"""
import os
import subprocess
import sys
import tempfile
import unittest

TRACE = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../tools/trace")
sys.path.insert(0, TRACE)
import block_timeline_summary as summary  # noqa: E402

A, B = (2, 1, 64), (3, 1, 128)
# (time_ns, shape, what, sm, block): A, B, A, B, A launched in a chain, each started before the one before it ended.
STAMPS = [
    (0, A, 0, 0, 0), (1000, A, 0, 1, 1), (5000, A, 1, 0, 0), (5100, A, 1, 1, 1),
    (2000, B, 0, 2, 0), (2100, B, 0, 3, 1), (2200, B, 0, 4, 2), (9000, B, 1, 2, 0), (9100, B, 1, 3, 1),  # block 2 returned before its wait
    (8000, A, 0, 0, 0), (8500, A, 0, 1, 1), (12000, A, 1, 0, 0), (12050, A, 1, 1, 1),
    (11000, B, 0, 2, 0), (11100, B, 0, 3, 1), (11200, B, 0, 4, 2), (20000, B, 1, 2, 0), (20100, B, 1, 3, 1), (20200, B, 1, 4, 2),
    (19000, A, 0, 0, 0), (19500, A, 0, 1, 1), (26000, A, 1, 0, 0), (26100, A, 1, 1, 1),
]


class BlockTimelineSummary(unittest.TestCase):
    def test_launches_are_told_apart_by_shape_and_repeated_blocks(self):
        runs = summary.launches(STAMPS)
        self.assertEqual([r["shape"] for r in runs], [A, B, A, B, A])
        self.assertEqual(len(runs[1]["starts"]), 3)
        self.assertEqual(len(runs[1]["waits"]), 2)       # the block that never waited is not given another's wait
        self.assertEqual(runs[3]["waits"][2], 20200)
        self.assertEqual((runs[2]["first_start"], runs[2]["last_wait"]), (8000, 12050))

    def test_chain_time_is_the_next_launchs_first_wait_less_this_ones(self):
        chain = summary.chain_times(summary.launches(STAMPS))
        self.assertEqual(chain[A], [4000, 8000])
        self.assertEqual(chain[B], [3000, 6000])

    def test_the_command_line_prints_each_shapes_median(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            for t, (gx, gy, threads), what, sm, block in STAMPS:
                f.write("%d %d %d %d %d %d %d\n" % (t, gx, gy, threads, what, sm, block))
        try:
            out = subprocess.run([sys.executable, os.path.join(TRACE, "block_timeline_summary.py"), f.name],
                                 capture_output=True, text=True, check=True).stdout
        finally:
            os.unlink(f.name)
        self.assertIn("5 launches", out)
        line_a = next(l for l in out.splitlines() if l.startswith(str(A)))
        self.assertEqual(line_a.split()[-4:-2], ["2", "6.00"])   # launches with a successor, median us
        line_b = next(l for l in out.splitlines() if l.startswith(str(B)))
        self.assertEqual(line_b.split()[-4:-2], ["2", "4.50"])


if __name__ == "__main__":
    unittest.main()
