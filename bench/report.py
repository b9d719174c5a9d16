#!/usr/bin/env python3
"""Turns the raw outputs of scripts/bench.sh (throughput workloads) or
scripts/everyday.sh (everyday tools, timed) into results.json, results.md and
results.svg. Standard library only.

    bench/report.py OUT_DIR        (reads OUT_DIR/raw, writes OUT_DIR/results.*)

Every ratio lsfs/peer > 1 means lsfs is faster: throughputs are divided as
lsfs / peer, times as peer / lsfs. postmark is timed by wall clock; its
throughput is transactions per wall second of the whole run (create,
transactions, delete, syncfs). The everyday steps also get the geometric
mean of their ratios.
"""
import json
import math
import os
import re
import sys

PEERS = ["ext4", "btrfs", "xfs"]

# workload -> (label, unit, target ratio vs ext4 or None); units in TIMED
# are times (lower is better), the others throughputs.
WORKLOADS = {
    "seqwrite": ("fio 1 MiB sequential write + end fsync", "MiB/s", 0.8),
    "seqread": ("fio 1 MiB sequential read, cold cache", "MiB/s", 1.0),
    "randwrite": ("fio 4 KiB random write, fsync after each", "IOPS", 1.2),
    "randwrite4": ("the same, 4 jobs on 4 files", "IOPS", 1.5),
    "postmark": ("postmark small files + syncfs", "tx/s", 0.5),
    "dbench1": ("dbench (client.txt), 1 client", "MB/s", 0.8),
    "dbench4": ("dbench (client.txt), 4 clients", "MB/s", 0.8),
    # Results made before randwrite4, dbench1 and dbench4 (dbench, 2 clients).
    "dbench": ("dbench (client.txt), 2 clients", "MB/s", None),
    # scripts/everyday.sh; each must reach 0.5 of ext4, their geometric mean 0.7
    "untar": ("tar x of the tree + sync -f", "s", 0.5),
    "find_du": ("find + du -s over the tree", "s", 0.5),
    "grep": ("grep -r over the tree", "s", 0.5),
    "diff": ("diff -r against the original", "s", 0.5),
    "rm": ("rm -rf of the tree + sync -f", "s", 0.5),
    "clone": ("git clone --no-local + sync -f", "s", 0.5),
    "checkout": ("git checkout of the first commit and back + sync -f", "s", 0.5),
    "sqlite": ("sqlite3 transactions (one INSERT each)", "s", 0.5),
}
TIMED = {"s"}
EVERYDAY = ["untar", "find_du", "grep", "diff", "rm", "clone", "checkout", "sqlite"]
GEOMEAN_TARGET = 0.7


def load(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def read_time(raw, name):
    t = read_text(os.path.join(raw, name + ".time"))
    return float(t) if t else None


def fio_job(raw, name):
    j = load(os.path.join(raw, name + ".json"))
    if not j or not j.get("jobs"):
        return None
    return j["jobs"][0]


def pct(lat, p):
    try:
        return lat["percentile"]["%.6f" % p] / 1e3  # ns -> us
    except (KeyError, TypeError):
        return None


def measure(raw, meta, wl, fs, rnd):
    """Returns a dict with 'value' (the headline number) and details, or None."""
    name = "%s-%s.r%d" % (wl, fs, rnd)
    wall = read_time(raw, name)
    if wl == "seqwrite":
        job = fio_job(raw, name)
        if not job or not wall:
            return None
        mib = meta["seq_mb"]
        return {
            "value": mib / wall,
            "wall_s": wall,
            "fio_bw_mib_s": job["write"]["bw_bytes"] / 2**20,
            "note": "MiB written / wall time of fio including the end fsync",
        }
    if wl == "seqread":
        job = fio_job(raw, name)
        if not job:
            return None
        return {"value": job["read"]["bw_bytes"] / 2**20, "wall_s": wall}
    if wl in ("randwrite", "randwrite4"):
        job = fio_job(raw, name)
        if not job:
            return None
        w = job["write"]
        sync = job.get("sync", {})
        return {
            "value": w["iops"],
            "writes": w["total_ios"],
            "write_lat_p50_us": pct(w.get("clat_ns"), 50),
            "write_lat_p99_us": pct(w.get("clat_ns"), 99),
            "fsync_lat_mean_us": (sync.get("lat_ns", {}).get("mean") or 0) / 1e3,
            "fsync_lat_p99_us": pct(sync.get("lat_ns"), 99),
            "wall_s": wall,
        }
    if wl == "postmark":
        txt = read_text(os.path.join(raw, name + ".txt"))
        if not txt or not wall:
            return None
        terse = [l for l in txt.splitlines() if re.match(r"^[\d. ]+$", l.strip() or "x")]
        return {
            "value": meta["postmark_transactions"] / wall,
            "wall_s": wall,
            "postmark_terse": terse[-1].strip() if terse else None,
        }
    if wl in EVERYDAY:
        return {"value": wall, "wall_s": wall} if wall else None
    if wl.startswith("dbench"):
        txt = read_text(os.path.join(raw, name + ".txt"))
        m = re.search(r"Throughput ([\d.]+) MB/sec", txt or "")
        if not m:
            return None
        lat = re.search(r"max_latency=([\d.]+) ms", txt)
        return {
            "value": float(m.group(1)),
            "max_latency_ms": float(lat.group(1)) if lat else None,
            "wall_s": wall,
        }
    return None


STAT_KEYS = [
    ("device", "flushes"), ("device", "writes"), ("device", "write_bytes"),
    ("device", "reads"), ("device", "read_bytes"),
    ("store", "records_written"), ("store", "dsync_records_written"),
    ("store", "blocks_written"), ("store", "payload_blocks_written"),
    ("store", "checkpoints_written"),
    ("cache", "hits"), ("cache", "misses"),
    ("fuse", "total"),
]


def lsfs_counters(raw, wl, rnd):
    s0 = load(os.path.join(raw, "%s-lsfs.r%d.stats0.json" % (wl, rnd)))
    s1 = load(os.path.join(raw, "%s-lsfs.r%d.stats1.json" % (wl, rnd)))
    if not s0 or not s1:
        return None
    d = {}
    for a, b in STAT_KEYS:
        try:
            d["%s.%s" % (a, b)] = s1[a][b] - s0[a][b]
        except (KeyError, TypeError):
            pass
    try:
        r0, r1 = s0["fuse"]["requests"], s1["fuse"]["requests"]
        d["fuse.requests"] = {k: r1[k] - r0.get(k, 0) for k in r1 if r1[k] - r0.get(k, 0)}
    except (KeyError, TypeError):
        pass
    cpu = (read_text(os.path.join(raw, "%s-lsfs.r%d.cpu" % (wl, rnd))) or "").split("\n")
    cpu = [l.split() for l in cpu if l.strip()]
    if len(cpu) == 2:
        hz = float(cpu[0][2])
        d["cpu_user_s"] = (int(cpu[1][0]) - int(cpu[0][0])) / hz
        d["cpu_sys_s"] = (int(cpu[1][1]) - int(cpu[0][1])) / hz
    rss = read_text(os.path.join(raw, "%s-lsfs.r%d.rss" % (wl, rnd))) or ""
    samples = [int(x) for x in rss.split() if x.isdigit()]
    if samples:
        d["rss_kib_max"] = max(samples)
        d["rss_samples"] = len(samples)
    return d


def fmt(v, digits=None):
    if v is None:
        return "–"
    if digits is None:
        digits = 0 if abs(v) >= 100 else (1 if abs(v) >= 10 else 2)
    return "%.*f" % (digits, v)


def svg_chart(results, fslist, path):
    peers = [p for p in PEERS if p in fslist]
    wls = [w for w in WORKLOADS if w in results]
    ratios = {w: {p: results[w].get("ratio_lsfs_over", {}).get(p) for p in peers} for w in wls}
    vals = [r for w in wls for r in ratios[w].values() if r]
    ymax = max([1.2] + [v * 1.15 for v in vals])
    W, H, left, bottom, top = 760, 380, 60, 70, 40
    plot_w, plot_h = W - left - 20, H - bottom - top
    colors = {"ext4": "#4e79a7", "btrfs": "#f28e2b", "xfs": "#59a14f"}
    gw = plot_w / max(1, len(wls))
    bw = gw * 0.8 / max(1, len(peers))
    y = lambda v: top + plot_h * (1 - v / ymax)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="20" font-size="14">lsfs throughput / peer throughput '
           '(&gt; 1: lsfs faster)</text>' % left]
    step = 0.25 if ymax <= 2 else (0.5 if ymax <= 4 else 1.0)
    t = 0.0
    while t <= ymax + 1e-9:
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (left, W - 20, y(t), y(t)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.2f</text>' % (left - 5, y(t) + 4, t))
        t += step
    for ref, col in ((1.0, "#000"), (0.7, "#c00")):
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="4,3"/>'
                   % (left, W - 20, y(ref), y(ref), col))
    out.append('<text x="%d" y="%.1f" fill="#c00" text-anchor="end">0.7</text>' % (W - 22, y(0.7) - 3))
    for i, w in enumerate(wls):
        x0 = left + i * gw + gw * 0.1
        for j, p in enumerate(peers):
            r = ratios[w][p]
            if r is None:
                continue
            x = x0 + j * bw
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>'
                       % (x, y(r), bw - 2, top + plot_h - y(r), colors[p]))
            out.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%.2f</text>'
                       % (x + bw / 2 - 1, y(r) - 3, r))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>'
                   % (left + i * gw + gw / 2, top + plot_h + 18, w))
    for j, p in enumerate(peers):
        lx = left + j * 110
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>' % (lx, H - 28, colors[p]))
        out.append('<text x="%d" y="%d">lsfs / %s</text>' % (lx + 16, H - 18, p))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    out_dir = sys.argv[1]
    raw = os.path.join(out_dir, "raw")
    meta = load(os.path.join(raw, "meta.json"), {})
    fslist = meta.get("filesystems", "lsfs " + " ".join(PEERS)).split()
    rounds = int(meta.get("rounds", 1))
    results = {}
    for wl in WORKLOADS:
        row = {}
        for fs in fslist:
            runs = [m for m in (measure(raw, meta, wl, fs, r) for r in range(1, rounds + 1)) if m]
            if not runs:
                continue
            # The round with the median value stands for the file system; all
            # rounds' values are kept.
            vals = sorted(m["value"] for m in runs)
            med = vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2
            m = dict(min(runs, key=lambda x: abs(x["value"] - med)))
            m["value"] = med
            m["rounds"] = [x["value"] for x in runs]
            row[fs] = m
        if not row:
            continue
        label, unit, target = WORKLOADS[wl]
        entry = {"label": label, "unit": unit, "target_vs_ext4": target, "by_fs": row}
        if "lsfs" in row:
            timed = unit in TIMED
            entry["ratio_lsfs_over"] = {
                p: (row[p]["value"] / row["lsfs"]["value"] if timed
                    else row["lsfs"]["value"] / row[p]["value"])
                for p in PEERS if p in row and row[p]["value"] and row["lsfs"]["value"]
            }
            c = lsfs_counters(raw, wl, 1)
            if c:
                rss = [lsfs_counters(raw, wl, r) or {} for r in range(1, rounds + 1)]
                rss = [x["rss_kib_max"] for x in rss if "rss_kib_max" in x]
                if rss:
                    c["rss_kib_max"] = max(rss)
                entry["lsfs_counters"] = c
        results[wl] = entry

    # Derived per-operation numbers for lsfs.
    derived = {}
    rw = results.get("randwrite", {})
    c = rw.get("lsfs_counters")
    if c and "lsfs" in rw.get("by_fs", {}):
        m1 = measure(raw, meta, "randwrite", "lsfs", 1) or {}
        n = m1.get("writes") or 1  # the counters are those of round 1
        derived["randwrite_per_fsync"] = {
            "flushes": c.get("device.flushes", 0) / n,
            "blocks_written": c.get("store.blocks_written", 0) / n,
            "payload_blocks_written": c.get("store.payload_blocks_written", 0) / n,
            "device_write_bytes": c.get("device.write_bytes", 0) / n,
            "device_read_bytes": c.get("device.read_bytes", 0) / n,
            "records": c.get("store.records_written", 0) / n,
            "lsfs_cpu_us": (c.get("cpu_user_s", 0) + c.get("cpu_sys_s", 0)) * 1e6 / n,
        }
    for wl in ("seqwrite", "seqread"):
        c = results.get(wl, {}).get("lsfs_counters")
        if c:
            data = meta.get("seq_mb", 0) * 2**20 or 1
            derived[wl + "_per_data_byte"] = {
                "device_write_bytes": c.get("device.write_bytes", 0) / data,
                "device_read_bytes": c.get("device.read_bytes", 0) / data,
                "device_writes": c.get("device.writes", 0),
                "device_reads": c.get("device.reads", 0),
                "lsfs_cpu_s_per_gib": (c.get("cpu_user_s", 0) + c.get("cpu_sys_s", 0)) * 2**30 / data,
            }
    every = [w for w in EVERYDAY if w in results]
    if every:
        gm = {}
        for p in PEERS:
            rs = [results[w].get("ratio_lsfs_over", {}).get(p) for w in every]
            if rs and all(rs):
                gm[p] = math.exp(sum(math.log(r) for r in rs) / len(rs))
        derived["everyday_geomean_lsfs_over"] = gm
    rss = [r.get("lsfs_counters", {}).get("rss_kib_max") for r in results.values()]
    rss = [x for x in rss if x]
    if rss:
        derived["lsfs_rss_kib_max"] = max(rss)
    doc = {"meta": meta, "results": results, "lsfs_derived": derived}
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(doc, f, indent=2, sort_keys=False)
        f.write("\n")

    # Markdown.
    peers = [p for p in PEERS if p in fslist]
    md = ["# lsfs benchmark results", ""]
    mach = meta.get("machine", {})
    md.append("`%s` (%s mode, %s round(s)), %s, %.0f s. Images of %s; lsfs binary %s (repository HEAD at run time: %s). Machine: %s CPUs (%s), "
              "%.1f GiB RAM, kernel %s, images on %s. %s."
              % (meta.get("command", "?"), meta.get("mode", "?"), meta.get("rounds", 1), meta.get("started_utc", "?"),
                 meta.get("elapsed_s", 0), meta.get("image_size", "?"), meta.get("lsfs_binary", "?"),
                 meta.get("repo_head_at_run", meta.get("lsfs_commit", "?")),
                 mach.get("nproc", "?"), mach.get("cpu", "?"), mach.get("mem_total_kib", 0) / 2**20,
                 mach.get("kernel", "?"), mach.get("backing", "?"), mach.get("fio", "fio")))
    md.append("")
    md.append("Load average (1, 5, 15 min) before the run: %s; after: %s (the machine has %s CPUs "
              "and is shared)." % (meta.get("loadavg_before", "?"), meta.get("loadavg_after", "?"),
                                   mach.get("nproc", "?")))
    md.append("")
    if meta.get("suite") == "everyday":
        md.append("Tree: %s. Repository: %s. SQLite: %s transactions. Times in seconds (lower "
                  "is better); ratios are peer time / lsfs time (above 1: lsfs faster)."
                  % (meta.get("tree"), meta.get("repository"), meta.get("sqlite_transactions")))
    else:
        clients = ("%s clients" % meta["dbench_clients"] if "dbench_clients" in meta
                   else "1 and 4 clients")
        md.append("Sizes: sequential file %s MiB; random write over %s MiB for %s s (with four "
                  "jobs, a quarter each); postmark %s files, %s transactions; dbench %s for %s s."
                  % (meta.get("seq_mb"), meta.get("randwrite_mb"), meta.get("randwrite_s"),
                     meta.get("postmark_files"), meta.get("postmark_transactions"),
                     clients, meta.get("dbench_s")))
    md.append("")
    head = "| " + " | ".join(["workload", "unit"] + fslist + ["lsfs/%s" % p for p in peers]
                             + ["target vs ext4"]) + " |"
    md.append(head)
    md.append("|" + "---|" * (head.count("|") - 1))
    for wl, e in results.items():
        cells = [fmt(e["by_fs"][fs]["value"]) if fs in e["by_fs"] else "–" for fs in fslist]
        rat = [fmt(e.get("ratio_lsfs_over", {}).get(p), 2) for p in peers]
        tgt = e["target_vs_ext4"]
        r_ext4 = e.get("ratio_lsfs_over", {}).get("ext4")
        if tgt is None:
            tcell = "–"
        elif r_ext4 is None:
            tcell = "≥ %.1f" % tgt
        else:
            tcell = "≥ %.1f: %s" % (tgt, "met" if r_ext4 >= tgt else "**not met**")
        md.append("| " + " | ".join([wl, e["unit"]] + cells + rat + [tcell]) + " |")
    gm = derived.get("everyday_geomean_lsfs_over")
    if gm:
        r_ext4 = gm.get("ext4")
        tcell = "≥ %.1f: %s" % (GEOMEAN_TARGET, "–" if r_ext4 is None else
                                ("met" if r_ext4 >= GEOMEAN_TARGET else "**not met**"))
        md.append("| " + " | ".join(["**geometric mean**", ""] + [""] * len(fslist)
                                    + [fmt(gm.get(p), 2) for p in peers] + [tcell]) + " |")
    md.append("")
    if derived:
        md.append("lsfs counters (from `lsfs stats`, deltas over the measured phase of round 1):")
        md.append("")
        d = derived.get("randwrite_per_fsync")
        if d:
            md.append("- randwrite, per write+fsync: %.2f device flushes, %.2f records, %.1f blocks written "
                      "(%.1f payload), %.1f KiB written, %.1f KiB read; %.0f µs of lsfs CPU"
                      % (d["flushes"], d["records"], d["blocks_written"], d["payload_blocks_written"],
                         d["device_write_bytes"] / 1024, d["device_read_bytes"] / 1024, d["lsfs_cpu_us"]))
        for wl in ("seqwrite", "seqread"):
            d = derived.get(wl + "_per_data_byte")
            if d:
                md.append("- %s, per byte of file data: %.2f bytes written and %.2f bytes read on the "
                          "device, in %d writes and %d reads; %.1f s of lsfs CPU per GiB"
                          % (wl, d["device_write_bytes"], d["device_read_bytes"],
                             d["device_writes"], d["device_reads"], d["lsfs_cpu_s_per_gib"]))
        reqs = [(w, results[w].get("lsfs_counters", {}).get("fuse.requests")) for w in EVERYDAY
                if w in results]
        reqs = [(w, r) for w, r in reqs if r]
        if reqs:
            md.append("- FUSE requests lsfs served per step (round 1): " + "; ".join(
                "%s %d (%s)" % (w, sum(r.values()), ", ".join(
                    "%s %d" % kv for kv in sorted(r.items(), key=lambda kv: -kv[1])[:4]))
                for w, r in reqs))
        if "lsfs_rss_kib_max" in derived:
            md.append("- peak RSS of the `lsfs mount` process over all workloads: %.1f MiB"
                      % (derived["lsfs_rss_kib_max"] / 1024))
        md.append("")
    details = []
    for wl in ("randwrite", "randwrite4", "dbench", "dbench1", "dbench4"):
        for fs, m in results.get(wl, {}).get("by_fs", {}).items():
            if wl.startswith("randwrite"):
                details.append("- " + wl + " %s: fsync mean %s µs, p99 %s µs; write p99 %s µs"
                               % (fs, fmt(m.get("fsync_lat_mean_us")), fmt(m.get("fsync_lat_p99_us")),
                                  fmt(m.get("write_lat_p99_us"))))
            else:
                details.append("- " + wl + " %s: max latency %s ms" % (fs, fmt(m.get("max_latency_ms"))))
    if details:
        md.append("Latencies:")
        md.append("")
        md.extend(details)
        md.append("")
    md.append("Every round's value (the table shows the median):")
    md.append("")
    for wl, e in results.items():
        md.append("- %s: %s" % (wl, "; ".join(
            "%s %s" % (fs, ", ".join(fmt(v) for v in e["by_fs"][fs]["rounds"]))
            for fs in fslist if fs in e["by_fs"])))
    md.append("")
    md.append("![ratios](results.svg)")
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    svg_chart(results, fslist, os.path.join(out_dir, "results.svg"))


if __name__ == "__main__":
    main()
