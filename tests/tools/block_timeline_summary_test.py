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
# (time_ns, grid_id, shape, what, sm, block): launches 11 (A), 12 (B), 13 (A), 14 (B), 15 (A) in a chain, each
# started before the one before it ended; the stamps in the order their slots were taken.
STAMPS = [
    (0, 11, A, 0, 0, 0), (1000, 11, A, 0, 1, 1), (2000, 12, B, 0, 2, 0), (2100, 12, B, 0, 3, 1),
    (2200, 12, B, 0, 4, 2), (5000, 11, A, 1, 0, 0), (5100, 11, A, 1, 1, 1),
    (8000, 13, A, 0, 0, 0), (8500, 13, A, 0, 1, 1),
    (9000, 12, B, 1, 2, 0), (9100, 12, B, 1, 3, 1),                      # block 2 returned before its wait
    (11000, 14, B, 0, 2, 0), (11100, 14, B, 0, 3, 1), (11200, 14, B, 0, 4, 2),
    (12000, 13, A, 1, 0, 0), (12050, 13, A, 1, 1, 1),
    (19000, 15, A, 0, 0, 0), (19500, 15, A, 0, 1, 1),
    (20000, 14, B, 1, 2, 0), (20100, 14, B, 1, 3, 1), (20200, 14, B, 1, 4, 2),
    (26000, 15, A, 1, 0, 0), (26100, 15, A, 1, 1, 1),
    (30000, 16, A, 0, 0, 0),                                               # started, never waited: left out
]


class BlockTimelineSummary(unittest.TestCase):
    def test_stamps_are_grouped_by_launch(self):
        runs = summary.launches(STAMPS)
        self.assertEqual([r["shape"] for r in runs], [A, B, A, B, A])
        self.assertEqual(len(runs[1]["starts"]), 3)
        self.assertEqual(len(runs[1]["waits"]), 2)       # the block that never waited has no wait
        self.assertEqual(runs[3]["waits"][2], 20200)
        self.assertEqual((runs[2]["first_start"], runs[2]["last_wait"]), (8000, 12050))
        self.assertEqual(runs[0]["sms"], {0, 1})

    def test_a_later_launch_starting_a_block_before_an_earlier_ones_wait_keeps_its_own(self):
        # Launch 22 starts block 0 on SM 0 before launch 21's block 0 there has returned from its wait.
        stamps = [(0, 21, A, 0, 0, 0), (10, 21, A, 0, 1, 1), (100, 22, A, 0, 0, 0), (200, 21, A, 1, 0, 0),
                  (210, 21, A, 1, 1, 1), (300, 22, A, 0, 1, 1), (400, 22, A, 1, 0, 0), (410, 22, A, 1, 1, 1)]
        runs = summary.launches(stamps)
        self.assertEqual([(r["first_wait"], r["last_wait"]) for r in runs], [(200, 210), (400, 410)])

    def test_a_graph_replayed_is_one_launch_a_replay(self):
        # Grid ids 31 and 32 are a recorded graph's two kernel nodes, replayed twice: four launches in all, each
        # with its own blocks' times and SMs.
        stamps = [(0, 31, A, 0, 0, 0), (10, 31, A, 0, 1, 1), (100, 32, B, 0, 2, 0), (200, 31, A, 1, 0, 0),
                  (210, 31, A, 1, 1, 1), (500, 32, B, 1, 2, 0),
                  (1000, 31, A, 0, 5, 0), (1010, 31, A, 0, 6, 1), (1100, 32, B, 0, 7, 0), (1300, 31, A, 1, 5, 0),
                  (1310, 31, A, 1, 6, 1), (1700, 32, B, 1, 7, 0)]
        runs = summary.launches(stamps)
        self.assertEqual([(r["shape"], r["first_wait"]) for r in runs], [(A, 200), (B, 500), (A, 1300), (B, 1700)])
        self.assertEqual([r["sms"] for r in runs], [{0, 1}, {2}, {5, 6}, {7}])
        self.assertEqual(summary.chain_times(runs)[A], [300, 400])

    def test_chain_time_is_the_next_launchs_first_wait_less_this_ones(self):
        chain = summary.chain_times(summary.launches(STAMPS))
        self.assertEqual(chain[A], [4000, 8000])
        self.assertEqual(chain[B], [3000, 6000])

    def test_the_command_line_prints_each_shapes_median(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            for t, grid, (gx, gy, threads), what, sm, block in STAMPS:
                f.write("%d %d %d %d %d %d %d %d\n" % (t, grid, gx, gy, threads, what, sm, block))
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
