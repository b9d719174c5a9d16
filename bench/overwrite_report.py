#!/usr/bin/env python3
"""Turns the raw outputs of scripts/overwrite-bench.sh into results.json and
results.md. Standard library only.

    bench/overwrite_report.py OUT_DIR      (reads OUT_DIR/raw, writes OUT_DIR/results.*)

Device write amplification (WA) = bytes the loop device wrote (sectors written,
/sys/block/loopN/stat field 7, × 512) ÷ bytes the application wrote, over the
measured step and up to the syncfs (for lsfs: checkpoint) after it. Lower is
better; a ratio fs/ext4 below 1 means fewer device writes than ext4. IOPS:
higher is better.
"""
import glob
import json
import os
import statistics
import sys

FS_ORDER = ["lsfs", "ext4", "btrfs", "xfs"]
MIB = 1 << 20


def meter_over(s0, s1):
    a, b = s0.get("write_amplification"), s1.get("write_amplification")
    if not isinstance(a, dict) or not isinstance(b, dict):
        return None
    app = b["app_bytes"] - a["app_bytes"]
    return (b["device_bytes"] - a["device_bytes"]) / app if app > 0 else None


def load_json(path, default=None):
    """A JSON file; fio may print notes before its JSON, so parsing starts at the first '{'."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return default
    start = text.find("{") if not text.lstrip().startswith("[") else text.find("[")
    if start < 0:
        return default
    try:
        return json.loads(text[start:])
    except ValueError:
        return default


def load_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                env[k] = v
    return env


def num(env, key):
    try:
        return float(env[key])
    except (KeyError, ValueError):
        return None


def div(a, b):
    return a / b if a is not None and b else None


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs):
    xs = [x for x in xs if x is not None]
    return (min(xs), max(xs)) if len(xs) > 1 else None


def fmt(x, digits=2):
    if x is None:
        return "–"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}f}"


def fmt_spread(xs, digits=2):
    m = median(xs)
    s = spread(xs)
    if s is None:
        return fmt(m, digits)
    return f"{fmt(m, digits)} ({fmt(s[0], digits)}–{fmt(s[1], digits)})"


def fio_write(raw, name):
    j = load_json(os.path.join(raw, name + ".json"))
    if not j or not j.get("jobs"):
        return None
    w = j["jobs"][0]["write"]
    return {
        "bytes": w.get("io_bytes", 0),
        "ios": w.get("total_ios", 0),
        "runtime_s": w.get("runtime", 0) / 1000.0,
        "iops": w.get("iops"),
    }


def get(d, *path, default=None):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return default
        d = d[p]
    return d


def lsfs_detail(raw, tag):
    """What lsfs's own counters say about the measured step (deltas, after − before)."""
    s0 = load_json(os.path.join(raw, tag + ".before.stats.json"), {})
    s1 = load_json(os.path.join(raw, tag + ".after.stats.json"), {})
    g0 = get(load_json(os.path.join(raw, tag + ".before.gc.json"), {}), "stats", default={})
    g1 = get(load_json(os.path.join(raw, tag + ".after.gc.json"), {}), "stats", default={})
    if not s1 or not g1:
        return None

    def d(a, b, *path):
        x, y = get(a, *path), get(b, *path)
        return y - x if isinstance(x, (int, float)) and isinstance(y, (int, float)) else None

    user = d(g0, g1, "user_blocks_written")
    copied = d(g0, g1, "blocks_copied")
    cleaner = d(g0, g1, "cleaner_blocks_written")
    return {
        "device_write_bytes": d(s0, s1, "device", "write_bytes"),
        "device_flushes": d(s0, s1, "device", "flushes"),
        "checkpoints_written": d(s0, s1, "store", "checkpoints_written"),
        "records_written": d(s0, s1, "store", "records_written"),
        "blocks_by_class": {
            k: v - get(s0, "store", "blocks_by_class", k, default=0)
            for k, v in (get(s1, "store", "blocks_by_class", default={}) or {}).items()
        },
        "user_blocks_written": user,
        "file_data_written": d(g0, g1, "file_data_written"),
        "user_file_data_written": (d(g0, g1, "file_data_written") or 0) - (d(g0, g1, "file_data_copied") or 0),
        "file_data_copied": d(g0, g1, "file_data_copied"),
        "blocks_copied": copied,
        "cleaner_blocks_written": cleaner,
        "passes": d(g0, g1, "passes"),
        "segments_cleaned": d(g0, g1, "segments_cleaned"),
        "late_aborts": d(g0, g1, "late_aborts"),
        "checkpoints_given_up": d(g0, g1, "checkpoints_given_up"),
        "engine_wa_step": div((user or 0) + (cleaner or 0), user),
        # lsfs's own meter (`lsfs stats`: bytes it wrote to its device ÷
        # bytes applications wrote), over the step; older builds printed a
        # bare number here, which is not comparable.
        "gc_stats_write_amplification": meter_over(s0, s1),
        "gc_stats_data_write_amplification": g1.get("data_write_amplification"),
        "read_only_reason": s1.get("read_only_reason"),
    }


def log_findings(raw, tag):
    """Warning and error lines of the lsfs mount's log, deduplicated, with counts."""
    path = os.path.join(raw, tag + ".lsfs.log")
    try:
        with open(path, errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return []
    counts = {}
    for line in lines:
        if " WARN" in line or " ERROR" in line or "panic" in line.lower():
            # Strip ANSI colours and the timestamp, keep the message.
            import re

            clean = re.sub(r"\x1b\[[0-9;]*m", "", line).strip()
            clean = re.sub(r"^\S+Z\s+", "", clean)
            key = re.sub(r"\d+", "N", clean)[:160]
            if key not in counts:
                counts[key] = [clean[:300], 0]
            counts[key][1] += 1
    return [{"line": v[0], "count": v[1]} for v in counts.values()]


def large_run(raw, env_path):
    env = load_env(env_path)
    tag = os.path.basename(env_path)[:-4]
    parts = int(env.get("parts", 3))
    part_mb = num(env, "part_mb")
    fio = [fio_write(raw, f"{tag}.part{k}") for k in range(1, parts + 1)]
    done = [f for f in fio if f]
    app = sum(f["bytes"] for f in done) if done else None
    before = num(env, "sect_before")
    end = num(env, "sect_end")
    dev = (end - before) * 512 if end is not None and before is not None else None
    umount = num(env, "sect_umount")
    per_part = []
    prev = before
    for k in range(1, parts + 1):
        f = fio[k - 1]
        cur = num(env, "sect_end") if k == parts else num(env, f"sect_part{k}")
        if f is None or cur is None or prev is None:
            per_part.append(None)
            prev = cur
            continue
        per_part.append({
            "fio_bytes": f["bytes"],
            "device_bytes": (cur - prev) * 512,
            "wa": div((cur - prev) * 512, f["bytes"]),
            "iops": div(f["ios"], f["runtime_s"]),
            "runtime_s": f["runtime_s"],
            # fio stopped at --runtime, not at its byte count (nor at an error).
            "time_bounded": bool(part_mb and f["bytes"] < part_mb * MIB * 0.999
                                 and f["runtime_s"] >= 0.98 * (num(env, "part_max_secs") or 0)),
        })
        prev = cur
    ios = sum(f["ios"] for f in done) if done else None
    secs = sum(f["runtime_s"] for f in done) if done else None
    traced = num(env, "trace_write_sectors")
    row = {
        "tag": tag,
        "fs": env.get("fs"),
        "fill": int(env.get("fill", 0)),
        "round": int(env.get("round", 1)),
        "status": env.get("status"),
        "error": env.get("error") or None,
        "file_mb": num(env, "file_mb"),
        "planned_rewrite_mb": part_mb * parts if part_mb else None,
        "fio_bytes": app,
        "device_bytes": dev,
        "wa": div(dev, app),
        "wa_with_unmount": div((umount - before) * 512, app)
        if umount is not None and before is not None else None,
        "steady_wa": per_part[-1]["wa"] if per_part and per_part[-1] else None,
        "iops": div(ios, secs),
        "fio_runtime_s": secs,
        "parts": per_part,
        "time_bounded": any(p and p["time_bounded"] for p in per_part),
        "fsck": env.get("fsck"),
        "elapsed_s": num(env, "elapsed_s"),
        "trace": {
            "tracer": env.get("tracer"),
            "lost_events": num(env, "trace_lost_events"),
            "coverage": div(traced, (end - before) if end is not None and before is not None else None),
            "zeroes_share": div(num(env, "trace_zeroes_sectors"),
                                (end - before) if end is not None and before is not None else None),
            "discard_bytes": (num(env, "trace_discard_sectors") or 0) * 512,
        } if "tracer" in env else None,
        "ftl": [],
    }
    for path in sorted(glob.glob(os.path.join(raw, tag + ".ftl-op*.json"))):
        op = float(path.rsplit("-op", 1)[1][:-5])
        for r in load_json(path, []) or []:
            row["ftl"].append({
                "ftl": r["ftl"],
                "over_provisioning": op,
                "host_pages": r["host_pages"],
                "copied_pages": r["copied_pages"],
                "erases": r["erases"],
                "waf": r["waf"],
                "end_to_end": row["wa"] * r["waf"] if row["wa"] else None,
            })
    if row["fs"] == "lsfs":
        row["lsfs"] = lsfs_detail(raw, tag)
        row["lsfs_log"] = log_findings(raw, tag)
    return row


def small_run(raw, env_path):
    env = load_env(env_path)
    tag = os.path.basename(env_path)[:-4]
    steps = int(env.get("steps_done", 0))
    works = [load_json(os.path.join(raw, f"{tag}.step{n}.json")) for n in range(1, steps + 1)]
    app = sum(w["bytes_written"] for w in works if w) if works else None
    before = num(env, "sect_before")
    end = num(env, "sect_end")
    dev = (end - before) * 512 if end is not None and before is not None else None
    per_step = []
    prev = before
    for n in range(1, steps + 1):
        cur = end if n == steps else num(env, f"sect_step{n}")
        w = works[n - 1]
        per_step.append(div((cur - prev) * 512, w["bytes_written"]) if w and cur is not None and prev is not None else None)
        prev = cur
    umount = num(env, "sect_umount")
    row = {
        "tag": tag,
        "fs": env.get("fs"),
        "round": int(env.get("round", 1)),
        "status": env.get("status"),
        "error": env.get("error") or None,
        "device_mb": num(env, "dev_mb"),
        "files": num(env, "files"),
        "steps_done": steps,
        "steps": num(env, "steps"),
        "app_bytes": app,
        "device_bytes": dev,
        "wa": div(dev, app),
        "wa_with_unmount": div((umount - before) * 512, app) if umount is not None and before is not None else None,
        "wa_per_step": per_step,
        "overwrites_per_s": div(sum(w["overwrites"] for w in works if w), sum(w["elapsed_secs"] for w in works if w)) if works else None,
        "fsck": env.get("fsck"),
        "elapsed_s": num(env, "elapsed_s"),
    }
    if row["fs"] == "lsfs":
        row["lsfs"] = lsfs_detail(raw, tag)
        row["lsfs_log"] = log_findings(raw, tag)
        sim = load_json(os.path.join(raw, tag + ".sim.json"))
        if sim:
            s = sim[0]
            row["sim"] = {
                "policy": s.get("policy"),
                "disk_blocks": s.get("disk_blocks"),
                "segment_blocks": s.get("segment_blocks"),
                "utilization": s.get("utilization"),
                "wa": s.get("write_amplification"),
            }
            row["device_wa_over_sim"] = div(row["wa"], s.get("write_amplification"))
    return row


def by(rows, **kw):
    return [r for r in rows if all(r.get(k) == v for k, v in kw.items())]


def main():
    out = sys.argv[1]
    raw = os.path.join(out, "raw")
    meta = load_json(os.path.join(raw, "meta.json"), {})
    large = [large_run(raw, p) for p in sorted(glob.glob(os.path.join(raw, "ow-*.env")))]
    small = [small_run(raw, p) for p in sorted(glob.glob(os.path.join(raw, "sf-*.env")))]
    fss = [f for f in FS_ORDER if any(r["fs"] == f for r in large + small)]
    fills = sorted({r["fill"] for r in large})

    summary = {"large": {}, "small": {}, "ftl": {}}
    for fill in fills:
        base = by(large, fs="ext4", fill=fill)
        ext4_wa, ext4_iops = median([r["wa"] for r in base]), median([r["iops"] for r in base])
        for fs in fss:
            rs = by(large, fs=fs, fill=fill)
            if not rs:
                continue
            wa, iops = median([r["wa"] for r in rs]), median([r["iops"] for r in rs])
            summary["large"].setdefault(str(fill), {})[fs] = {
                "wa": wa,
                "wa_spread": spread([r["wa"] for r in rs]),
                "steady_wa": median([r["steady_wa"] for r in rs]),
                "wa_with_unmount": median([r["wa_with_unmount"] for r in rs]),
                "iops": iops,
                "iops_spread": spread([r["iops"] for r in rs]),
                "wa_vs_ext4": div(wa, ext4_wa),
                "iops_vs_ext4": div(iops, ext4_iops),
                "runs": len(rs),
                "failed": sum(r["status"] != "ok" for r in rs),
                "time_bounded": sum(bool(r["time_bounded"]) for r in rs),
            }
            ftl = {}
            for r in rs:
                for f in r["ftl"]:
                    ftl.setdefault(f"{f['ftl']}@{f['over_provisioning']:g}", []).append(f)
            for key, fr in ftl.items():
                summary["ftl"].setdefault(str(fill), {}).setdefault(fs, {})[key] = {
                    "waf": median([f["waf"] for f in fr]),
                    "end_to_end": median([f["end_to_end"] for f in fr]),
                }
    for fs in fss:
        rs = by(small, fs=fs)
        if rs:
            summary["small"][fs] = {
                "wa": median([r["wa"] for r in rs]),
                "wa_spread": spread([r["wa"] for r in rs]),
                "device_wa_over_sim": median([r.get("device_wa_over_sim") for r in rs]),
            }
    result = {"meta": meta, "summary": summary, "large": large, "small": small}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(result, f, indent=1, sort_keys=False)
        f.write("\n")
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(markdown(meta, large, small, summary, fss, fills))
    print(f"overwrite_report.py: wrote {out}/results.json and results.md")


def markdown(meta, large, small, summary, fss, fills):
    m = meta.get("machine", {})
    L = []
    w = L.append
    w("# Sustained overwrites at the device\n")
    w(f"`{meta.get('command', 'scripts/overwrite-bench.sh')}`, {meta.get('mode', '?')} run started "
      f"{meta.get('started_utc', '?')}, {fmt(meta.get('elapsed_s'), 0)} s in all "
      f"({fmt(meta.get('device_runs_s'), 0)} s of device runs); {meta.get('rounds', '?')} round(s); "
      f"lsfs {meta.get('repo_head_at_run', '?')} ({meta.get('lsfs_binary', '?')}). "
      f"Load average {meta.get('loadavg_before', '?')} before, {meta.get('loadavg_after', '?')} after; "
      f"{m.get('nproc', '?')} cores, kernel {m.get('kernel', '?')}, {m.get('fio', '?')}, "
      f"images on {m.get('backing', '?')}.\n")
    w("Each file system has its own loop device with default mkfs and mount settings; device "
      "WA = bytes the loop device wrote ÷ bytes the application wrote, from just before the "
      "measured step to the syncfs (lsfs: a checkpoint) after it. Lower WA is better; WA / ext4 "
      "below 1 means fewer device writes than ext4; IOPS / ext4 above 1 means faster. "
      "With several rounds: median (min–max).\n")

    dev_mb = meta.get("device_mb", 1024)
    w(f"## Large file: random 4 KiB rewrites on a {dev_mb} MiB device\n")
    w(f"fio writes one file of F % of the device sequentially (1 MiB, fsync), then rewrites "
      f"{meta.get('rewrites', 3)} × its size in 4 KiB random writes, zoned 90/10:10/90, fsync "
      f"every 32 writes, as {meta.get('parts', 3)} fio runs of one third each (the last third "
      f"alone is the steady state), each bounded by {fmt((meta.get('max_rewrite_secs') or 0) / max(meta.get('parts', 3), 1), 0)} s.\n")
    for fill in fills:
        rows = summary["large"].get(str(fill), {})
        any_run = next((r for r in large if r["fill"] == fill), None)
        w(f"### File of {fill} % of the device ({fmt(any_run['file_mb'], 0) if any_run else '?'} MiB)\n")
        w("| file system | device WA | steady-state WA (last third) | WA with unmount | fio IOPS | WA / ext4 | IOPS / ext4 | rewritten | fsck | status |")
        w("|---|---|---|---|---|---|---|---|---|---|")
        for fs in fss:
            rs = by(large, fs=fs, fill=fill)
            if not rs:
                continue
            s = rows[fs]
            written = median([r["fio_bytes"] for r in rs])
            planned = median([r["planned_rewrite_mb"] for r in rs])
            note = []
            for r in rs:
                if r["status"] != "ok":
                    note.append(f"r{r['round']}: {r['status']}: {r['error']}")
                elif r["time_bounded"]:
                    note.append(f"r{r['round']}: time-bounded")
            w(f"| {fs} | {fmt_spread([r['wa'] for r in rs])} | {fmt_spread([r['steady_wa'] for r in rs])} | "
              f"{fmt_spread([r['wa_with_unmount'] for r in rs])} | {fmt_spread([r['iops'] for r in rs], 0)} | "
              f"{fmt(s['wa_vs_ext4'])} | {fmt(s['iops_vs_ext4'])} | "
              f"{fmt(written / MIB if written else None, 0)} of {fmt(planned, 0)} MiB | "
              f"{', '.join(sorted({str(r['fsck']) for r in rs}))} | {'; '.join(note) or 'ok'} |")
        w("")
        w("Per third of the rewrite (device WA, IOPS; round 1):\n")
        parts = meta.get("parts", 3)
        w("| file system | " + " | ".join(f"third {k} WA" for k in range(1, parts + 1)) + " | "
          + " | ".join(f"third {k} IOPS" for k in range(1, parts + 1)) + " |")
        w("|---|" + "---|" * (2 * parts))
        for fs in fss:
            r = next(iter(by(large, fs=fs, fill=fill, round=1)), None)
            if not r:
                continue
            ps = r["parts"] + [None] * (parts - len(r["parts"]))
            w(f"| {fs} | " + " | ".join(fmt(p["wa"]) if p else "–" for p in ps) + " | "
              + " | ".join(fmt(p["iops"], 0) if p else "–" for p in ps) + " |")
        w("")

    lsfs_large = by(large, fs="lsfs")
    if lsfs_large:
        w("### lsfs's own counters during the rewrite\n")
        w("Deltas of `lsfs stats --json` and `lsfs gc stats --json` (before and after the rewrite), in 4 KiB blocks unless named.\n")
        w("| fill | round | user blocks | blocks copied | cleaner blocks | passes | checkpoints written | checkpoints given up | engine WA (step) | `lsfs stats` device ÷ app (step) | lsfs device bytes ÷ loop bytes |")
        w("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in lsfs_large:
            d = r.get("lsfs") or {}
            w(f"| {r['fill']} % | {r['round']} | {fmt(d.get('user_blocks_written'), 0)} | {fmt(d.get('blocks_copied'), 0)} | "
              f"{fmt(d.get('cleaner_blocks_written'), 0)} | {fmt(d.get('passes'), 0)} | {fmt(d.get('checkpoints_written'), 0)} | "
              f"{fmt(d.get('checkpoints_given_up'), 0)} | {fmt(d.get('engine_wa_step'))} | {fmt(d.get('gc_stats_write_amplification'))} | "
              f"{fmt(div(d.get('device_write_bytes'), r['device_bytes']))} |")
        w("")
        w("Blocks written by class during the rewrite (`blocks_by_class`):\n")
        classes = sorted({k for r in lsfs_large for k in ((r.get('lsfs') or {}).get('blocks_by_class') or {})})
        if classes:
            w("| fill | round | " + " | ".join(classes) + " |")
            w("|---|---|" + "---|" * len(classes))
            for r in lsfs_large:
                bc = (r.get("lsfs") or {}).get("blocks_by_class") or {}
                w(f"| {r['fill']} % | {r['round']} | " + " | ".join(fmt(bc.get(c), 0) for c in classes) + " |")
            w("")

    if small:
        w("## Small files: hot/cold overwrites at the device\n")
        s0 = small[0]
        w(f"`lsfs sim workload hot-cold` on each file system: {fmt(s0['files'], 0)} files of 4 KiB "
          f"({meta.get('small_fill_percent', 80)} % of a {meta.get('small_device_mb', 256)} MiB device at 1.17 blocks per "
          f"file, as scripts/cleaner-bench.sh), then {meta.get('small_rounds', 4)} × the file count in 4 KiB "
          f"overwrites, 90 % of them to 10 % of the files, no fsync, paced at "
          f"{meta.get('small_rate', 1500)}/s, in {fmt(s0['steps'], 0)} steps. lsfs: `mkfs --segment-size "
          f"{meta.get('small_segment_size', '512K')}` (as cleaner-bench.sh), default mount settings. "
          f"The simulator: `lsfs sim gc --access hot-cold --policies {meta.get('sim_policy', 'cost-benefit')}` "
          f"with the lsfs image's disk and segment blocks and lsfs's live share after the fill.\n")
        w("| file system | device MiB | device WA | WA per step | WA with unmount | overwrites/s | simulator WA (utilization) | device WA ÷ simulator WA | fsck | status |")
        w("|---|---|---|---|---|---|---|---|---|---|")
        for fs in fss:
            for r in by(small, fs=fs):
                sim = r.get("sim") or {}
                simtxt = f"{fmt(sim.get('wa'))} ({fmt(sim.get('utilization'), 3)})" if sim else "–"
                w(f"| {fs}{'' if len(by(small, fs=fs)) == 1 else ' r' + str(r['round'])} | {fmt(r['device_mb'], 0)} | {fmt(r['wa'])} | "
                  f"{', '.join(fmt(x) for x in r['wa_per_step']) or '–'} | {fmt(r['wa_with_unmount'])} | "
                  f"{fmt(r['overwrites_per_s'], 0)} | {simtxt} | {fmt(r.get('device_wa_over_sim'))} | {r['fsck']} | "
                  f"{r['status']}{': ' + r['error'] if r['error'] else ''} |")
        w("")
        for r in by(small, fs="lsfs"):
            d = r.get("lsfs") or {}
            if d:
                app_blocks = (r["app_bytes"] or 0) / 4096
                w(f"lsfs, round {r['round']}: of {fmt(app_blocks, 0)} 4 KiB overwrites, "
                  f"{fmt(d.get('user_file_data_written'), 0)} reached the log as file data "
                  f"(the rest were overwritten again in the cache before a checkpoint wrote them); "
                  f"{fmt(d.get('blocks_copied'), 0)} blocks copied by the cleaner in {fmt(d.get('passes'), 0)} passes, "
                  f"{fmt(d.get('checkpoints_written'), 0)} checkpoints written, {fmt(d.get('checkpoints_given_up'), 0)} given up; "
                  f"engine WA over the step {fmt(d.get('engine_wa_step'))}, `lsfs stats` device ÷ app writes {fmt(d.get('gc_stats_write_amplification'))}.\n")

    if summary["ftl"]:
        w("## End to end on flash\n")
        w(f"The loop device's completed writes and discards during the rewrite, captured with {meta.get('tracer', '?')}"
          f"{' (' + meta['tracer_note'] + ')' if meta.get('tracer_note') else ''}, replayed by "
          f"`lsfs sim ftl --trace … --capacity-mib {dev_mb}` (4 KiB pages, 128-page erase blocks, the device "
          f"filled sequentially first; a discard drops the valid copies of the pages it covers). End-to-end WA = device WA × FTL WAF; e2e / ext4 "
          f"below 1 means fewer flash writes than ext4. Trace coverage: traced write sectors ÷ the "
          f"loop device's written sectors (write-zeroes requests, which the loop device counts as "
          f"written and the replay skips, shown apart).\n")
        keys = sorted({k for fill in summary["ftl"].values() for fs in fill.values() for k in fs},
                      key=lambda k: (k.split("@")[0] != "page-level", float(k.split("@")[1])))
        w("| fill | file system | device WA | trace coverage | " + " | ".join(
            f"{k.split('@')[0]} {float(k.split('@')[1]) * 100:g} % OP: WAF / e2e / e2e÷ext4" for k in keys) + " |")
        w("|---|---|---|---|" + "---|" * len(keys))
        for fill in fills:
            f_rows = summary["ftl"].get(str(fill), {})
            ext4 = f_rows.get("ext4", {})
            for fs in fss:
                if fs not in f_rows:
                    continue
                rs = by(large, fs=fs, fill=fill)
                cov = median([(r["trace"] or {}).get("coverage") for r in rs])
                zero = median([(r["trace"] or {}).get("zeroes_share") for r in rs])
                lost = sum(((r["trace"] or {}).get("lost_events") or 0) for r in rs)
                discarded = median([(r["trace"] or {}).get("discard_bytes") for r in rs])
                failed = [r for r in rs if r["status"] != "ok"]
                cells = []
                for k in keys:
                    x = f_rows[fs].get(k, {})
                    e = ext4.get(k, {})
                    cells.append(f"{fmt(x.get('waf'))} / {fmt(x.get('end_to_end'))} / {fmt(div(x.get('end_to_end'), e.get('end_to_end')))}")
                notes = []
                if zero:
                    notes.append(f"+ {fmt(zero, 3)} write-zeroes")
                if discarded:
                    notes.append(f"{discarded / 2**20:,.0f} MiB discarded")
                if lost:
                    notes.append(f"{lost:.0f} events lost")
                if failed:
                    notes.append("run failed part way")
                w(f"| {fill} % | {fs} | {fmt(median([r['wa'] for r in rs]))} | {fmt(cov, 3)}{' (' + '; '.join(notes) + ')' if notes else ''} | " + " | ".join(cells) + " |")
        w("")

    findings = [(r["tag"], f) for r in large + small for f in (r.get("lsfs_log") or [])]
    w("## lsfs log and fsck\n")
    fscks = [f"{r['tag']}: {r['fsck']}" for r in large + small if r["fs"] == "lsfs"]
    w("fsck after unmount: " + ("; ".join(fscks) if fscks else "–") + ".\n")
    if findings:
        w("Warnings and errors in the lsfs mount logs (deduplicated):\n")
        for tag, f in findings:
            w(f"- {tag}: {f['count']} × `{f['line']}`")
        w("")
    else:
        w("No warnings or errors in the lsfs mount logs.\n")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
