"""A PNG chart of the records, if matplotlib is installed (``pip install statekit[bench]``).

One horizontal bar per comparison, showing statekit's *advantage*: the ratio where higher is
better, its inverse where lower is better, so every bar right of 1 means statekit is ahead.
Aims are marked the same way.
"""
from __future__ import annotations

GROUP_COLOURS = {"spark": "tab:blue", "operations": "tab:orange", "checkpoint": "tab:green", "memory": "tab:purple",
                 "timers": "tab:red", "reading": "tab:cyan", "sinks": "tab:olive", "rescale": "tab:brown",
                 "per-row": "tab:pink"}


def advantage(value: float, better: str) -> float:
    return value if better == "higher" else 1 / value


def save_chart(results: list[dict], path: str) -> bool:
    """Write the chart to ``path``; ``False`` (nothing written) without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    shown = [r for r in results if r["ratio"]]
    fig, ax = plt.subplots(figsize=(11, 0.28 * len(shown) + 1.5))
    rows = range(len(shown))
    ax.barh(rows, [advantage(r["ratio"], r["better"]) for r in shown],
            color=[GROUP_COLOURS.get(r["group"], "tab:gray") for r in shown])
    for row, r in zip(rows, shown):
        if r.get("aim"):
            ax.plot([advantage(r["aim"], r["better"])] * 2, [row - 0.4, row + 0.4], color="black", linewidth=2)
    ax.axvline(1.0, color="gray", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_yticks(list(rows), [r["name"] for r in shown], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("statekit's advantage (x; > 1 is better; black ticks: aims)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> None:
    """Redraw the chart of a results file, e.g. only the comparisons that have an aim (the README's)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m benchmarks.chart", description=main.__doc__)
    parser.add_argument("results", help="a JSON file written by python -m benchmarks")
    parser.add_argument("png")
    parser.add_argument("--aims", action="store_true", help="only the comparisons that have an aim")
    args = parser.parse_args(argv)
    with open(args.results) as f:
        records = json.load(f)["records"]
    if args.aims:
        records = [r for r in records if r.get("aim") is not None]
    if not save_chart(records, args.png):
        parser.exit(1, "no chart: matplotlib is not installed (pip install 'statekit[bench]')\n")


if __name__ == "__main__":
    main()
