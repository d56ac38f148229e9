#!/usr/bin/env python3
"""Analyse the engine-choice grid (benches/grid/results/grid.csv, from run_grid.sh).

    .venv/bin/python benches/grid/analyze.py [--csv benches/grid/results/grid.csv]
        [--figures docs/figures]
        [--summary benches/grid/results/summary.md]

Per point (mpi, transport, ranks, batch, sample):
  oracle        min(t_onesided, t_collective) (forced engines, same ids)
  AUTO right    t_auto <= 1.10 * oracle
  model right   the raw calibrated model (pred_onesided / pred_collective, no online
                correction) names the measured winner, or the two engines are within 10%
  choice right  AUTO's majority engine is the measured winner, or the two engines are
                within 10% (a measure of the decision that does not depend on the noise
                between two runs of the same engine)
Headlines: % of points AUTO got right, sum(t_auto) / sum(oracle) (and the geometric
mean of t_auto / oracle), each engine's ratio to its bare-MPI floor at batch >= 64
(onesided / floor_rma, collective / floor_a2a; geometric means), and the batched
one-sided engine against the DDStore-style loop (geometric mean of
t_ddstore / t_onesided at batch >= 64). Where the CSV has the node column (t_node: AUTO
with MDL_NODE_LOCAL=on), a section compares it per run with the oracle of the engines
alone: on one node every sample is copied out of shared memory; with two hosts a step
mixes node-local copies and an engine.

Figures: winner_map.png (one panel per MPI x transport x ranks: batch vs sample size,
coloured by the measured winner and by how much it wins, AUTO's majority choice as a
marker: red when it is the slower engine, orange when AUTO's median was more than 10%
over the oracle with the right engine) and auto_vs_oracle.png. (The scale model's
figure is benches/scale/plot_scale_model.py's.)
"""
import argparse
import csv
import math
import os
import sys
from collections import OrderedDict, defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import TwoSlopeNorm  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRANSPORTS = ["shm", "tcp", "tcp1g", "twohosts", "twonodes"]
MPIS = ["openmpi", "mpich"]
RIGHT = 1.10  # AUTO is right within 10% of the oracle
NUM = [
    "t_onesided", "t_collective", "t_auto", "auto_onesided_steps", "auto_collective_steps", "t_ddstore",
    "t_floor_rma", "t_floor_a2a", "pred_onesided", "pred_collective", "auto_probes", "auto_switches",
    "n_onesided", "n_collective", "n_auto", "n_ddstore", "t_node", "node_local_fraction",
]


def num(x):
    try:
        v = float(x)
        return v if math.isfinite(v) else math.nan
    except (TypeError, ValueError):
        return math.nan


def load(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            for k in NUM:
                r[k] = num(r.get(k))
            r["ranks"] = int(r["ranks"])
            r["batch"] = int(r["batch"])
            r["sample"] = int(r["sample"])
            derive(r)
            rows.append(r)
    return rows


def derive(r):
    os_, co = r["t_onesided"], r["t_collective"]
    r["has_pair"] = not (math.isnan(os_) or math.isnan(co))
    r["oracle"] = min(os_, co) if r["has_pair"] else math.nan
    r["winner"] = ("onesided" if os_ <= co else "collective") if r["has_pair"] else None
    a1, a2 = r["auto_onesided_steps"], r["auto_collective_steps"]
    if math.isnan(a1) or a1 + a2 == 0:
        r["auto_choice"] = None
    else:
        r["auto_choice"] = "onesided" if a1 >= a2 else "collective"
    r["auto_ratio"] = r["t_auto"] / r["oracle"] if r["has_pair"] and not math.isnan(r["t_auto"]) else math.nan
    r["auto_right"] = r["auto_ratio"] <= RIGHT if not math.isnan(r["auto_ratio"]) else None
    # Choice right: AUTO's majority engine is the measured winner, or the two forced
    # engines are within 10% of each other (either choice is fine). Unlike "AUTO right"
    # this does not depend on the noise between two runs of the same engine.
    tie = r["has_pair"] and max(os_, co) <= RIGHT * min(os_, co)
    r["tie"] = tie
    r["choice_right"] = (tie or r["auto_choice"] == r["winner"]) if r["auto_choice"] and r["has_pair"] else None
    # Steps of the majority engine: AUTO / that engine forced, when AUTO (almost) never
    # used the other one; spread of this ratio = the measurement noise of a point.
    tot = (a1 + a2) if not math.isnan(a1) else 0
    if tot and max(a1, a2) >= 0.95 * tot and not math.isnan(r["t_auto"]):
        same = os_ if a1 >= a2 else co
        r["same_engine_ratio"] = r["t_auto"] / same if same and not math.isnan(same) else math.nan
    else:
        r["same_engine_ratio"] = math.nan
    r["oversubscribed_mpich"] = r.get("wait") == "yield"
    po, pc = r["pred_onesided"], r["pred_collective"]
    r["model_choice"] = None if math.isnan(po) or math.isnan(pc) else ("onesided" if po <= pc else "collective")
    if r["model_choice"] and r["has_pair"]:
        tie = max(os_, co) <= RIGHT * min(os_, co)
        r["model_right"] = tie or r["model_choice"] == r["winner"]
    else:
        r["model_right"] = None


def gmean(xs):
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan


def headline(rows):
    """The summary figures of a set of points."""
    h = OrderedDict()
    judged = [r for r in rows if r["auto_right"] is not None]
    h["points"] = len(rows)
    h["auto_right"] = sum(r["auto_right"] for r in judged)
    h["judged"] = len(judged)
    h["auto_right_pct"] = 100.0 * h["auto_right"] / len(judged) if judged else math.nan
    h["auto_over_oracle_total"] = (
        sum(r["t_auto"] for r in judged) / sum(r["oracle"] for r in judged) if judged else math.nan
    )
    h["auto_over_oracle_gmean"] = gmean([r["auto_ratio"] for r in judged])
    h["auto_worst"] = max((r["auto_ratio"] for r in judged), default=math.nan)
    cj = [r for r in rows if r["choice_right"] is not None]
    h["choice_right_pct"] = 100.0 * sum(r["choice_right"] for r in cj) / len(cj) if cj else math.nan
    h["choice_right"] = sum(r["choice_right"] for r in cj)
    h["choice_judged"] = len(cj)
    same = [r["same_engine_ratio"] for r in rows if not math.isnan(r["same_engine_ratio"])]
    h["noise_n"] = len(same)
    h["noise_median_dev"] = float(np.median([abs(x - 1) for x in same])) if same else math.nan
    h["same_median"] = float(np.median(same)) if same else math.nan
    h["same_p90"] = float(np.percentile(same, 90)) if same else math.nan
    h["same_below"] = sum(1 for x in same if x < 1 / RIGHT)
    h["noise_over10"] = 100.0 * sum(1 for x in same if x > RIGHT) / len(same) if same else math.nan
    mj = [r for r in rows if r["model_right"] is not None]
    h["model_right_pct"] = 100.0 * sum(r["model_right"] for r in mj) / len(mj) if mj else math.nan
    big = [r for r in rows if r["batch"] >= 64]
    h["os_floor"] = gmean([r["t_onesided"] / r["t_floor_rma"] for r in big])
    h["coll_floor"] = gmean([r["t_collective"] / r["t_floor_a2a"] for r in big])
    h["dd_speedup"] = gmean([r["t_ddstore"] / r["t_onesided"] for r in big])
    h["dd_n"] = sum(1 for r in big if not math.isnan(r["t_ddstore"]) and not math.isnan(r["t_onesided"]))
    fair = [r for r in big if not r["oversubscribed_mpich"]]
    h["dd_speedup_fair"] = gmean([r["t_ddstore"] / r["t_onesided"] for r in fair])
    h["dd_n_fair"] = sum(1 for r in fair if not math.isnan(r["t_ddstore"]))
    h["big_n"] = len(big)
    h["os_wins"] = sum(1 for r in rows if r["winner"] == "onesided")
    h["coll_wins"] = sum(1 for r in rows if r["winner"] == "collective")
    return h


def fmt(x, spec=".2f", suffix=""):
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec) + suffix


def combos(rows):
    seen = OrderedDict()
    for m in MPIS + sorted({r["mpi"] for r in rows} - set(MPIS)):
        for t in TRANSPORTS + sorted({r["transport"] for r in rows} - set(TRANSPORTS)):
            for p in sorted({r["ranks"] for r in rows}):
                sel = [r for r in rows if r["mpi"] == m and r["transport"] == t and r["ranks"] == p]
                if sel:
                    seen[(m, t, p)] = sel
    return seen


def summary_md(rows, groups):
    h = headline(rows)
    out = []
    out.append("# Engine-choice grid: summary\n")
    out.append(
        f"{h['points']} points ({len(groups)} MPI x transport x ranks runs); batch per rank "
        f"{sorted({r['batch'] for r in rows})} x mean sample {sorted({r['sample'] for r in rows})} B. "
        "Times are medians of the per-step slowest rank. Oracle = the faster forced engine at that point; "
        f"AUTO right = within {int(round((RIGHT - 1) * 100))}% of the oracle. Floors are bare MPI: "
        "one-sided = lock_all + gets + one flush_all; collective = counts all-to-all + ids all-to-allv + "
        "owners pack + data all-to-allv. Engine/floor ratios, the DDStore speedup and AUTO/oracle "
        "(geo) are geometric means.\n"
    )
    out.append("## Headline\n")
    out.append("| figure | value |")
    out.append("|---|---|")
    out.append(f"| AUTO right (within 10% of oracle) | **{fmt(h['auto_right_pct'], '.1f', '%')}** "
               f"({h['auto_right']}/{h['judged']} points) |")
    out.append(f"| AUTO total / oracle total | **{fmt(h['auto_over_oracle_total'], '.3f')}** |")
    calm = headline([r for r in rows if not r["oversubscribed_mpich"]])
    out.append(f"| the same two, without MPICH with more ranks than cores (yield-scheduled steps, whose medians "
               f"swing by 2x between neighbouring points) | {fmt(calm['auto_right_pct'], '.1f', '%')} "
               f"({calm['auto_right']}/{calm['judged']}); {fmt(calm['auto_over_oracle_total'], '.3f')} |")
    out.append(f"| AUTO / oracle, geometric mean over points (worst) | {fmt(h['auto_over_oracle_gmean'], '.3f')} "
               f"({fmt(h['auto_worst'], '.2f')}) |")
    out.append(f"| AUTO's majority engine is the measured winner (or the engines are within 10%) "
               f"| **{fmt(h['choice_right_pct'], '.1f', '%')}** ({h['choice_right']}/{h['choice_judged']}) |")
    out.append(f"| AUTO / the same engine forced, at the {h['noise_n']} points where AUTO ran one engine in >= 95% "
               f"of its steps (noise, and any cost of AUTO itself) | median {fmt(h['same_median'], '.3f')}, "
               f"p90 {fmt(h['same_p90'], '.2f')}; {fmt(h['noise_over10'], '.0f', '%')} of points above 1.10, "
               f"{h['same_below']} below 1/1.10 |")
    out.append(f"| raw calibrated model names the winner (no online correction; ties within 10% count as right) "
               f"| {fmt(h['model_right_pct'], '.1f', '%')} |")
    out.append(f"| one-sided engine / bare RMA floor, batch >= 64 | **{fmt(h['os_floor'], '.2f')}x** |")
    out.append(f"| collective engine / bare all-to-all floor, batch >= 64 | **{fmt(h['coll_floor'], '.2f')}x** |")
    out.append(f"| batched one-sided vs DDStore-style lock/get/unlock per sample, batch >= 64 "
               f"| **{fmt(h['dd_speedup'], '.1f')}x faster** ({h['dd_n']} of {h['big_n']} points measured) |")
    out.append(f"| the same, without MPICH with more ranks than cores (where the blocking lock/unlock busy-polls) "
               f"| **{fmt(h['dd_speedup_fair'], '.1f')}x faster** ({h['dd_n_fair']} points) |")
    out.append(f"| measured winners | one-sided {h['os_wins']}, collective {h['coll_wins']} |")
    out.append("")
    out.append("## Per run\n")
    out.append("| mpi | transport | ranks | points | AUTO right | choice right | AUTO/oracle total | AUTO/oracle geo | "
               "worst | model right | one-sided wins | os/floor (b>=64) | coll/floor (b>=64) | DDStore/os (b>=64) |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (m, t, p), sel in groups.items():
        g = headline(sel)
        out.append(
            f"| {m} | {t} | {p} | {g['points']} | {fmt(g['auto_right_pct'], '.0f', '%')} | "
            f"{fmt(g['choice_right_pct'], '.0f', '%')} | "
            f"{fmt(g['auto_over_oracle_total'], '.3f')} | {fmt(g['auto_over_oracle_gmean'], '.3f')} | "
            f"{fmt(g['auto_worst'], '.2f')} | {fmt(g['model_right_pct'], '.0f', '%')} | "
            f"{g['os_wins']}/{g['os_wins'] + g['coll_wins']} | {fmt(g['os_floor'], '.2f')} | "
            f"{fmt(g['coll_floor'], '.2f')} | {fmt(g['dd_speedup'], '.1f')} |"
        )
    out.append("")
    for key, label in [("mpi", "MPI"), ("transport", "transport"), ("ranks", "ranks")]:
        out.append(f"### By {label}\n")
        out.append("| " + label + " | points | AUTO right | choice right | AUTO/oracle total | os/floor | coll/floor "
                   "| DDStore/os |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for v in sorted({r[key] for r in rows}, key=str):
            g = headline([r for r in rows if r[key] == v])
            out.append(f"| {v} | {g['points']} | {fmt(g['auto_right_pct'], '.0f', '%')} | "
                       f"{fmt(g['choice_right_pct'], '.0f', '%')} | "
                       f"{fmt(g['auto_over_oracle_total'], '.3f')} | {fmt(g['os_floor'], '.2f')} | "
                       f"{fmt(g['coll_floor'], '.2f')} | {fmt(g['dd_speedup'], '.1f')} |")
        out.append("")
    out.append("## Where AUTO was wrong (more than 10% slower than the oracle), worst first\n")
    out.append("| mpi | transport | ranks | batch | sample | t_os | t_coll | t_auto | AUTO/oracle | AUTO steps os/coll "
               "| switches | model os/coll (us) | model pick | winner | choice |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---|---|---|")
    wrong = sorted([r for r in rows if r["auto_right"] is False], key=lambda r: -r["auto_ratio"])
    for r in wrong:
        out.append(
            f"| {r['mpi']} | {r['transport']} | {r['ranks']} | {r['batch']} | {r['sample']} | "
            f"{r['t_onesided']:.1f} | {r['t_collective']:.1f} | {r['t_auto']:.1f} | {r['auto_ratio']:.2f} | "
            f"{r['auto_onesided_steps']:.0f}/{r['auto_collective_steps']:.0f} | {r['auto_switches']:.0f} | "
            f"{fmt(r['pred_onesided'], '.1f')}/{fmt(r['pred_collective'], '.1f')} | {r['model_choice']} | {r['winner']} | "
            f"{'tie' if r['tie'] else ('right' if r['choice_right'] else 'WRONG')} |"
        )
    if not wrong:
        out.append("| (none) |||||||||||||||")
    out.append("")
    miss = [r for r in rows if math.isnan(r["t_ddstore"])]
    if miss:
        out.append(f"DDStore-style points not measured (a single step predicted above the skip limit): {len(miss)} "
                   "(" + ", ".join(f"{r['mpi']}/{r['transport']}/{r['ranks']} b{r['batch']} s{r['sample']}"
                                   for r in miss) + ").\n")
    out.extend(node_section(groups))
    out.append("Figures: docs/figures/winner_map.png, docs/figures/auto_vs_oracle.png.\n")
    return "\n".join(out)


def node_section(groups):
    """The node-local path (t_node) against the better engine, per run."""
    out = []
    runs = {k: [r for r in sel if r["has_pair"] and not math.isnan(r["t_node"])] for k, sel in groups.items()}
    runs = {k: sel for k, sel in runs.items() if sel}
    if not runs:
        return out
    out.append("## The node-local path (AUTO with MDL_NODE_LOCAL=on) against the engines\n")
    out.append("node/oracle: t_node over the better forced engine (below 1: faster than both). Node-local share: "
               "of rank 0's bytes from other ranks, the part copied out of shared memory.\n")
    out.append("| mpi | transport | ranks | points | node faster than both | node/oracle geo | best | worst "
               "| node-local share |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for (m, t, p), sel in runs.items():
        ratios = [r["t_node"] / r["oracle"] for r in sel]
        shares = [r["node_local_fraction"] for r in sel if not math.isnan(r["node_local_fraction"])]
        share = f"{min(shares):.2f}-{max(shares):.2f}" if shares else "n/a"
        out.append(f"| {m} | {t} | {p} | {len(sel)} | {sum(x < 1 for x in ratios)}/{len(sel)} | "
                   f"{fmt(gmean(ratios), '.2f')} | {min(ratios):.2f} | {max(ratios):.2f} | {share} |")
    out.append("")
    return out


# ---------------------------------------------------------------- figures

def winner_map(groups, path):
    keys = list(groups)
    ranks = sorted({k[2] for k in keys})
    cols = [(t, p) for t in TRANSPORTS for p in ranks if any(k[1] == t and k[2] == p for k in keys)]
    mpis = [m for m in MPIS if any(k[0] == m for k in keys)]
    if not cols or not mpis:
        return
    fig, axes = plt.subplots(len(mpis), len(cols), figsize=(2.75 * len(cols) + 1.2, 2.6 * len(mpis) + 1.4),
                             squeeze=False)
    norm = TwoSlopeNorm(vmin=-3, vcenter=0, vmax=3)
    cmap = plt.get_cmap("RdBu")
    im = None
    for i, m in enumerate(mpis):
        for j, (t, p) in enumerate(cols):
            ax = axes[i][j]
            sel = groups.get((m, t, p))
            ax.set_title(f"{m} {t} np={p}", fontsize=9)
            if not sel:
                ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes, fontsize=9)
                ax.set_xticks([]), ax.set_yticks([])
                continue
            batches = sorted({r["batch"] for r in sel})
            samples = sorted({r["sample"] for r in sel})
            grid = np.full((len(samples), len(batches)), np.nan)
            for r in sel:
                if r["has_pair"]:
                    # > 0: one-sided faster (blue), < 0: collective faster (red)
                    grid[samples.index(r["sample"]), batches.index(r["batch"])] = math.log2(
                        r["t_collective"] / r["t_onesided"])
            im = ax.imshow(grid, cmap=cmap, norm=norm, origin="lower", aspect="auto")
            for r in sel:
                x, y = batches.index(r["batch"]), samples.index(r["sample"])
                if r["has_pair"]:
                    ratio = max(r["t_onesided"], r["t_collective"]) / r["oracle"]
                    dark = abs(math.log2(r["t_collective"] / r["t_onesided"])) > 1.8
                    ax.text(x, y - 0.28, f"{ratio:.1f}x", ha="center", va="center", fontsize=6,
                            color="white" if dark else "0.15")
                if r["auto_choice"]:
                    # red: AUTO's majority engine is the slower one (by more than 10%);
                    # orange: right engine, but AUTO's median > 1.10 x the oracle
                    if r["choice_right"] is False:
                        edge, width = "red", 2.2
                    elif r["auto_right"] is False:
                        edge, width = "darkorange", 1.6
                    else:
                        edge, width = "black", 0.8
                    ax.plot(x, y + 0.12, marker="o" if r["auto_choice"] == "onesided" else "s", ms=7,
                            mfc="white", mec=edge, mew=width)
            ax.set_xticks(range(len(batches)))
            ax.set_xticklabels([str(b) for b in batches], fontsize=7)
            ax.set_yticks(range(len(samples)))
            ax.set_yticklabels([f"{s // 1024}K" if s >= 1024 else str(s) for s in samples], fontsize=7)
            if i == len(mpis) - 1:
                ax.set_xlabel("batch per rank", fontsize=8)
            if j == 0:
                ax.set_ylabel("mean sample (B)", fontsize=8)
    fig.suptitle("Measured winner (blue: one-sided, red: collective; shade = log2 speed ratio, text = loser/winner)\n"
                 "marker = AUTO's majority choice (o one-sided, square collective); red edge: AUTO chose the slower "
                 "engine (> 10% apart); orange edge: right engine but AUTO's median > 1.10 x oracle",
                 fontsize=10)
    if im is not None:
        cb = fig.colorbar(im, ax=axes, shrink=0.6, pad=0.01)
        cb.set_label("log2(t_collective / t_onesided)", fontsize=8)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)


def auto_vs_oracle(rows, groups, path):
    fig, ax = plt.subplots(figsize=(12, 4.8))
    labels = []
    sizes = sorted({r["sample"] for r in rows})
    markers = {s: mk for s, mk in zip(sizes, ["o", "^", "s", "D", "v"])}
    batches = sorted({r["batch"] for r in rows})
    cmap = plt.get_cmap("viridis")
    for k, ((m, t, p), sel) in enumerate(groups.items()):
        labels.append(f"{m}\n{t}\nnp={p}")
        for r in sel:
            if math.isnan(r["auto_ratio"]):
                continue
            jitter = (batches.index(r["batch"]) - (len(batches) - 1) / 2) * 0.09 + (sizes.index(r["sample"]) - 1) * 0.03
            ax.scatter(k + jitter, r["auto_ratio"], marker=markers[r["sample"]],
                       color=cmap(batches.index(r["batch"]) / max(1, len(batches) - 1)), s=22,
                       edgecolors="red" if r["choice_right"] is False else "none", linewidths=1.2)
    ax.axhline(1.0, color="0.4", lw=0.8)
    ax.axhline(RIGHT, color="red", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("t_auto / oracle (log)")
    ax.set_title("AUTO time over the oracle (faster forced engine) per point; dashed: +10%; "
                 "red edge: AUTO ran the slower engine (> 10% apart) in most steps")
    handles = [Line2D([], [], marker=markers[s], ls="", color="0.3", label=f"{s} B") for s in sizes]
    handles += [Line2D([], [], marker="o", ls="", color=cmap(i / max(1, len(batches) - 1)), label=f"batch {b}")
                for i, b in enumerate(batches)]
    ax.legend(handles=handles, fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", default=os.path.join(ROOT, "benches/grid/results/grid.csv"))
    ap.add_argument("--figures", default=os.path.join(ROOT, "docs/figures"))
    ap.add_argument("--summary", default=os.path.join(ROOT, "benches/grid/results/summary.md"))
    a = ap.parse_args()
    rows = load(a.csv)
    if not rows:
        sys.exit(f"no rows in {a.csv}")
    bad = [r for r in rows if r.get("bad") not in (None, "", "0")]
    if bad:
        print(f"WARNING: {len(bad)} points report wrongly delivered samples", file=sys.stderr)
    groups = combos(rows)
    os.makedirs(a.figures, exist_ok=True)
    winner_map(groups, os.path.join(a.figures, "winner_map.png"))
    auto_vs_oracle(rows, groups, os.path.join(a.figures, "auto_vs_oracle.png"))
    text = summary_md(rows, groups)
    os.makedirs(os.path.dirname(a.summary), exist_ok=True)
    with open(a.summary, "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
