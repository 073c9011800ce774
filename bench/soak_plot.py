"""The plot of a soak run's samples (``bench/soak.py --csv``): the RSS of the driver, the
executors and the client over time, and the throughput over time. Needs matplotlib
(``pip install ".[bench]"``).

    python bench/soak_plot.py soak.csv docs/soak.png
"""
import argparse
import csv

MIB = 1024 * 1024


def read_samples(csv_path):
    """The CSV's rows, numbers as floats (None where empty)."""
    with open(csv_path, newline="") as f:
        return [{k: float(v) if v not in ("", None) else None for k, v in row.items()}
                for row in csv.DictReader(f)]


def throughput(rows, window):
    """(minutes, tasks per minute) over the ``window`` seconds before each sample (at least
    since the sample before)."""
    points = []
    for i, row in enumerate(rows[1:], 1):
        j = i - 1
        while j > 0 and row["seconds"] - rows[j - 1]["seconds"] <= window:
            j -= 1
        span = row["seconds"] - rows[j]["seconds"]
        if span > 0:
            points.append((row["seconds"] / 60, (row["tasks"] - rows[j]["tasks"]) / span * 60))
    return points


def plot(csv_path, png_path, title=None, window=60.0):
    """Draw the samples of ``csv_path`` into ``png_path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = read_samples(csv_path)
    if len(rows) < 2:
        raise ValueError(f"{csv_path}: fewer than two samples")
    window = min(window, rows[-1]["seconds"] / 10) or window
    minutes = [r["seconds"] / 60 for r in rows]
    fig, (memory, rate) = plt.subplots(2, 1, sharex=True, figsize=(9, 6.5), height_ratios=[3, 2])
    for key, label, style in (("driver_rss", "driver", "-"), ("executor_rss_max", "executor (largest)", "-"),
                              ("executor_rss_mean", "executor (mean)", ":"), ("client_rss", "client", "-")):
        memory.plot(minutes, [None if r[key] is None else r[key] / MIB for r in rows], style, label=label)
    memory.set_ylabel("RSS, MiB")
    memory.set_ylim(bottom=0)
    memory.legend(loc="lower right")
    memory.grid(alpha=0.3)
    total = rows[-1]["tasks"]
    memory.set_title(title or f"zsched soak: {total:,.0f} tasks in {minutes[-1]:.1f} minutes")
    points = throughput(rows, window)
    rate.plot([m for m, _ in points], [r / 1e6 for _, r in points], color="tab:green")
    rate.set_ylabel(f"million tasks/min\n(last {window:g} s)")
    rate.set_ylim(bottom=0)
    rate.set_xlabel("minutes")
    rate.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)


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
