"""The soak run of bench/soak.py, short: the same code path at 2 x 10^5 tasks, nothing
lost, wrong or run twice, and memory that does not grow with the tasks run."""
import os

import pytest

from conftest import REPO

BENCH = os.path.join(REPO, "bench")
MIB = 1024 * 1024


@pytest.fixture
def soak_run(monkeypatch):
    """bench/_soak_run.py; bench/ on the path of this process and so of the cluster's
    processes (its task function travels by reference)."""
    monkeypatch.syspath_prepend(BENCH)
    import _soak_run
    return _soak_run


def grew_little(warm, end, what):
    """End RSS within a generous bound of the RSS after the warm-up: a leak of a few
    hundred bytes a task over 2 x 10^5 tasks passes it, a leak of a KiB a task does not."""
    assert end <= 1.5 * warm + 96 * MIB, (
        f"{what} RSS grew from {warm / MIB:.1f} MiB after the warm-up to {end / MIB:.1f} MiB")


@pytest.mark.parametrize("transport", ["pipes", "socket"])
def test_a_short_soak_loses_nothing_runs_nothing_twice_and_keeps_memory_flat(soak_run, tmp_path, transport):
    """Waves by submit and by map, alternately, as bench/soak.py runs them."""
    report = soak_run.soak(200_000, wave=10_000, transport=transport, sample_interval=0.5,
                           csv_path=str(tmp_path / "soak.csv"), timeout=120)
    assert report["done"] == report["submitted"] >= 200_000
    assert (report["wrong"], report["failed"], report["lost"]) == (0, 0, 0), report["first_error"]
    assert report["ran_twice"] == 0
    assert report["executor_processes"] == 2  # the run numbers of both executors were checked
    assert report["left_running"] == []
    tasks = report["status"]["tasks"]
    assert (tasks["finished"], tasks["failed"], tasks["queued"], tasks["running"]) == (
        report["submitted"], 0, 0, 0)
    warm, end = report["warm"], report["end"]
    assert end["executors"] == 2
    grew_little(warm["driver_rss"], end["driver_rss"], "the driver's")
    grew_little(warm["executor_rss_max"], end["executor_rss_max"], "the largest executor's")
    grew_little(warm["client_rss"], end["client_rss"], "the client's")
    with open(tmp_path / "soak.csv") as f:
        header, *rows = f.read().splitlines()
    assert header.split(",") == soak_run.FIELDS and len(rows) >= 3


@pytest.mark.unit
def test_a_run_whose_result_never_came_back_counts_as_a_task_run_twice(soak_run):
    tally = soak_run.Tally()
    for x, run in [(0, 1), (1, 2), (2, 4)]:  # run 3 of process 7 came back for no task
        tally.take(x, soak_run.work(x)[:1] + (7, run))
    tally.take(3, (7 * 3 + 3, 8, 1))
    tally.take(4, (0, 8, 2))
    assert (tally.done, tally.wrong, tally.unseen_runs()) == (5, 1, 1)


@pytest.mark.unit
def test_throughput_windows_are_interpolated_between_samples(soak_run):
    rows = [{"seconds": 0.0, "tasks": 0}, {"seconds": 30.0, "tasks": 300},
            {"seconds": 90.0, "tasks": 900}, {"seconds": 130.0, "tasks": 1000}]
    assert soak_run.rates(rows, 60) == [600.0, pytest.approx(375.0)]
    assert soak_run.rates(rows, 60, since=30) == [600.0]


def test_the_plot_is_drawn_from_the_samples(soak_run, tmp_path):
    pytest.importorskip("matplotlib", reason="the plot needs the bench extras (matplotlib)")
    import soak_plot
    csv_path = tmp_path / "soak.csv"
    lines = [",".join(soak_run.FIELDS)] + [
        f"{t},{t * 1000},{50 * MIB},{40 * MIB},2,{30 * MIB},{31 * MIB}" for t in range(0, 100, 5)]
    csv_path.write_text("\n".join(lines) + "\n")
    soak_plot.plot(str(csv_path), str(tmp_path / "soak.png"))
    with open(tmp_path / "soak.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
