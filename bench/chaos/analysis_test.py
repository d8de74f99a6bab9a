"""The chaos harness's invariant checks on made-up sample logs: each violation is found, a
clean log passes (python3 bench/chaos/analysis_test.py; CTest chaos:analysis)."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analysis  # noqa: E402

BATCH, ROWS = 2, 12


def line(step, rank, idx, t, world=2, pos=None, epoch=0, params=7):
    pos = (step - 1) * world * BATCH if pos is None else pos
    return "round=0 epoch=%d step=%d rank=%d idx=%s t=%.3f world=%d pos=%d params=%d\n" % (
        epoch, step, rank, ",".join(map(str, idx)), t, world, pos, params)


def clean():
    """Two ranks, 12 rows, batch 2: three steps per epoch, two epochs."""
    out = {0: [], 1: []}
    order = list(range(ROWS))
    for e in range(2):
        for k in range(3):
            s = e * 3 + k + 1
            chunk = order[k * 4:(k + 1) * 4]
            for r in (0, 1):
                out[r].append(line(s, r, chunk[r::2], 100 + s + r * 0.01, pos=k * 4, epoch=e))
    return out


def run(files, events=()):
    with tempfile.TemporaryDirectory() as d:
        for name, lines in files.items():
            with open(os.path.join(d, "pid%s" % name), "w") as f:
                f.writelines(lines)
        res = {"t0": 100.0, "launched": 99.0, "end": 110.0, "events": list(events)}
        return analysis.analyse(res, d, BATCH, ROWS, hang_timeout=5)


class AnalysisTest(unittest.TestCase):
    def test_clean_log_passes(self):
        res = run(clean())
        self.assertEqual(res["violations"], [])
        self.assertEqual(res["steps_kept"], 6)

    def test_sample_trained_twice(self):
        files = clean()
        files[1][1] = line(2, 1, [0], 102.01, pos=4)  # index 0 again in epoch 0
        self.assertTrue(any("trained twice" in v for v in run(files)["violations"]))

    def test_position_gap_is_a_skip(self):
        files = clean()
        for r in (0, 1):
            files[r][2] = line(3, r, [8 + r, 10 + r], 103 + r * 0.01, pos=10)
        self.assertTrue(any("skipped" in v for v in run(files)["violations"]))

    def test_params_out_of_sync(self):
        files = clean()
        files[1][4] = line(5, 1, [5, 7], 105.01, pos=4, epoch=1, params=8)
        self.assertTrue(any("out of sync" in v for v in run(files)["violations"]))

    def test_missing_rank_line_is_lost_unless_a_fault_killed_it(self):
        files = clean()
        del files[1][3]  # step 4, rank 1
        self.assertTrue(any("lost from the logs" in v for v in run(files)["violations"]))
        killed = [{"kind": "worker_crash", "t": 4.0, "length": 0}]
        self.assertEqual(run(files, killed)["violations"], [])

    def test_a_last_line_cut_by_the_final_sigterm_is_not_lost(self):
        files = clean()
        del files[0][5]  # step 6 at t=106, rank 0; the SIGTERM at 106.5 (res["end"] below)
        with tempfile.TemporaryDirectory() as d:
            for name, lines in files.items():
                with open(os.path.join(d, "pid%s" % name), "w") as f:
                    f.writelines(lines)
            res = analysis.analyse({"t0": 100.0, "launched": 99.0, "end": 106.5, "events": []},
                                   d, BATCH, ROWS, hang_timeout=5)
        self.assertEqual(res["violations"], [])

    def test_redone_steps_are_thrown_away_not_counted_twice(self):
        files = clean()
        # A restart from the step-1 checkpoint redoes steps 2 and 3 later, in new processes.
        files[2] = [line(s, 0, [4 * (s - 1), 4 * (s - 1) + 2], 100 + s + 0.5, pos=4 * (s - 1))
                    for s in (2, 3)]
        files[3] = [line(s, 1, [4 * (s - 1) + 1, 4 * (s - 1) + 3], 100 + s + 0.51,
                         pos=4 * (s - 1)) for s in (2, 3)]
        res = run(files)
        self.assertEqual(res["violations"], [])
        self.assertEqual(res["steps_thrown_away"], 2)

    def test_a_redo_interleaved_with_the_old_lines_is_one_version(self):
        files = clean()
        # Step 3 redone at world 3 by new processes; its first line lands between the old
        # version's lines in time (the old run's last line was late).
        files[1][2] = line(3, 1, [9, 11], 103.9, pos=8)
        files[4] = [line(3, 2, [2], 103.5, world=3, pos=8, params=9)]
        files[5] = [line(3, 0, [0], 103.95, world=3, pos=8, params=9)]
        files[6] = [line(3, 1, [1], 103.96, world=3, pos=8, params=9)]
        res = run(files)
        self.assertFalse(any("lost from the logs" in v for v in res["violations"]),
                         res["violations"])
        self.assertEqual(res["steps_thrown_away"], 1)


if __name__ == "__main__":
    unittest.main()
