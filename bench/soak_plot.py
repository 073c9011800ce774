"""The plot of a soak run's samples (``bench/soak.py --csv``): the RSS of the driver, the
executors and the client, the throughput, and the CPU per task of each process kind, over
time. Needs matplotlib
(``pip install ".[bench]"``).

    python bench/soak_plot.py soak.csv docs/soak.png
"""
import argparse
import csv

MIB = 1024 * 1024
COLORS = {"driver": "tab:blue", "executor": "tab:orange", "client": "tab:red", "rate": "tab:green"}


def read_samples(csv_path):
    """The CSV's rows, numbers as floats (None where empty)."""
    with open(csv_path, newline="") as f:
        return [{k: float(v) if v not in ("", None) else None for k, v in row.items()}
                for row in csv.DictReader(f)]


def windows(rows, window):
    """(minutes, earlier row, row): each sample with the earliest sample at most ``window``
    seconds before it (at least the sample before)."""
    found = []
    for i, row in enumerate(rows[1:], 1):
        j = i - 1
        while j > 0 and row["seconds"] - rows[j - 1]["seconds"] <= window:
            j -= 1
        if row["seconds"] > rows[j]["seconds"]:
            found.append((row["seconds"] / 60, rows[j], row))
    return found


def throughput(rows, window):
    """(minutes, tasks per minute) over the ``window`` seconds before each sample."""
    return [(m, (b["tasks"] - a["tasks"]) / (b["seconds"] - a["seconds"]) * 60)
            for m, a, b in windows(rows, window)]


def cpu_per_task(rows, window, key):
    """(minutes, CPU microseconds per task of ``key``) over the ``window`` seconds before
    each sample in which tasks ran."""
    return [(m, (b[key] - a[key]) / (b["tasks"] - a["tasks"]) * 1e6) for m, a, b in windows(rows, window)
            if b["tasks"] > a["tasks"] and a.get(key) is not None and b.get(key) is not None]


def plot(csv_path, png_path, title=None, window=60.0):
    """Draw the samples of ``csv_path`` into ``png_path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = read_samples(csv_path)
    if len(rows) < 2:
        raise ValueError(f"{csv_path}: fewer than two samples")
    window = min(window, rows[-1]["seconds"] / 10) or window
    fig, (memory, rate, cpu) = plt.subplots(3, 1, sharex=True, figsize=(9, 8), height_ratios=[3, 2, 2])
    draw_memory(memory, rows)
    memory.set_title(title or f"zsched soak: {rows[-1]['tasks']:,.0f} tasks in {rows[-1]['seconds'] / 60:.1f} minutes")
    points = throughput(rows, window)
    rate.plot([m for m, _ in points], [r / 1e6 for _, r in points], color=COLORS["rate"])
    rate.set_ylabel(f"million tasks/min\n(last {window:.0f} s)")
    for key, label, color in (("driver_cpu", "driver", "driver"), ("executors_cpu", "executors", "executor"),
                              ("client_cpu", "client", "client")):
        points = cpu_per_task(rows, window, key)
        cpu.plot([m for m, _ in points], [us for _, us in points], color=COLORS[color], label=label)
    cpu.set_ylabel("CPU µs per task")
    cpu.legend(loc="lower right")
    cpu.set_xlabel("minutes")
    for axes in (memory, rate, cpu):
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)


def draw_memory(axes, rows):
    minutes = [r["seconds"] / 60 for r in rows]
    for key, label, style, color in (
            ("driver_rss", "driver", "-", "driver"), ("executor_rss_max", "executor (largest)", "-", "executor"),
            ("executor_rss_mean", "executor (mean)", ":", "executor"), ("client_rss", "client", "-", "client")):
        axes.plot(minutes, [None if r[key] is None else r[key] / MIB for r in rows], style,
                  color=COLORS[color], label=label)
    axes.set_ylabel("RSS, MiB")
    axes.legend(loc="lower right")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="the samples of bench/soak.py")
    parser.add_argument("png", help="the plot to write")
    parser.add_argument("--title", default=None)
    parser.add_argument("--window", type=float, default=60.0, metavar="S",
                        help="seconds the throughput is averaged over (default 60)")
    args = parser.parse_args(argv)
    plot(args.csv, args.png, args.title, args.window)


if __name__ == "__main__":
    main()
