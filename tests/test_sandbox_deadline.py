"""A run's deadline and its RunStop: the wall-clock backstop cut to the time left, a run
stopped from another thread, and a pool closed with its runs killed."""

import threading
import time

from microcoder.evaluator.sandbox import RunStop, Sandbox

SLEEPER = "import time\ntime.sleep(20)\nprint('woke')\n"


def test_a_deadline_cuts_the_wall_clock_backstop_and_a_passed_one_never_starts():
    with Sandbox(workers=1) as sandbox:
        started = time.monotonic()
        run = sandbox.run(SLEEPER, time_limit_s=10, deadline=time.monotonic() + 1.0)  # backstop alone: 31 s
        took = time.monotonic() - started
        assert run.status == "time_limit_exceeded" and "wall-clock backstop" in run.detail
        assert 0.9 < took < 3.0
        run = sandbox.run("print(1)", deadline=time.monotonic() - 0.1)
        assert (run.status, run.stdout) == ("time_limit_exceeded", b"")
        assert "deadline passed" in run.detail


def test_a_stopped_run_ends_and_the_workers_next_run_is_untouched():
    with Sandbox(workers=1) as sandbox:
        for _ in range(3):
            stop = RunStop()
            threading.Timer(0.3, stop.stop).start()
            started = time.monotonic()
            run = sandbox.run("while True:\n    pass\n", time_limit_s=10, stop=stop)
            assert run.status == "time_limit_exceeded" and time.monotonic() - started < 3.0
            # A stop after its run ended reaches nothing: the next run on this worker goes on.
            stop.stop()
            assert sandbox.run("import time\ntime.sleep(0.2)\nprint('next')\n").stdout == b"next\n"
        stopped = RunStop()
        stopped.stop()
        run = sandbox.run("print(1)", stop=stopped)
        assert run.status == "time_limit_exceeded" and run.stdout == b""


def test_close_with_kill_ends_the_runs_in_progress_at_once():
    sandbox = Sandbox(workers=2)
    sandbox.run_programs([("pass", "")] * 2)
    results = []
    threads = [threading.Thread(target=lambda: results.append(sandbox.run(SLEEPER, time_limit_s=10)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    started = time.monotonic()
    sandbox.close(kill=True)
    assert time.monotonic() - started < 2.0  # a plain close waits for the runs (up to 5 s per worker)
    for thread in threads:
        thread.join(5)
    assert [run.stdout for run in results] == [b"", b""]
    # The machine ended them, not the programs: no verdict, and no retry on a closed sandbox.
    assert [run.status for run in results] == ["sandbox_error"] * 2, results
    assert all("closed mid-run" in run.detail for run in results)
