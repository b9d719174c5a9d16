#!/usr/bin/env python3
"""FUSE requests per operation on a real lsfs mount, counted by opcode by the
adapter itself (`lsfs stats`, section "fuse").

    sudo bench/requests.py [--lsfs target/release/lsfs] [-o MOUNT_OPTS] [--out FILE.json]
                           [--tree TARBALL] [--only NAME,...]
    bench/requests.py --table LABEL=FILE.json ...     (Markdown table comparing runs)

Each phase runs on a fresh 2 GiB image mounted with `lsfs mount --background`
(plus `-o MOUNT_OPTS`); the counts are the difference of the mount's
counters around the measured part, divided by the phase's number of
operations. Phases:

  micro     one system call pattern at a time, N times, warm caches:
            create (open O_CREAT|O_EXCL, write 4 KiB, close), stat, stat of a
            missing name (the second time), open+read+close, append
            (open O_APPEND, write 4 KiB, close), Python open() (which calls
            isatty), write+fsync, rename, unlink, mkdir, rmdir, readdir of a
            1,000-entry directory, readdir+stat of each entry
  postmark  bench/postmark.cfg, 500 files, 1,000 transactions (per transaction)
  dbench    dbench -c client.txt 1 for 5 s (per dbench operation)
  tree      tar x of TARBALL (per file), then find, du -s, grep -r, rm -rf
            (each per file of the tree)

Writes a JSON document (--out) and prints a Markdown table per phase.
Everything it mounts or creates is removed on exit, also on failure.
"""
import argparse
import atexit
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = 1000

state = {"mnt": None, "work": None}


def cleanup():
    mnt = state["mnt"]
    if mnt and os.path.ismount(mnt):
        subprocess.run(["fusermount3", "-u", mnt], stderr=subprocess.DEVNULL)
        if os.path.ismount(mnt):
            subprocess.run(["umount", "-l", mnt], stderr=subprocess.DEVNULL)
        wait_server_gone(state.get("img"))
    state["mnt"] = None
    if state["work"]:
        shutil.rmtree(state["work"], ignore_errors=True)
        state["work"] = None


def wait_server_gone(img):
    if not img:
        return
    for _ in range(300):
        r = subprocess.run(["pgrep", "-f", "lsfs mount %s " % img], capture_output=True)
        if r.returncode != 0:
            return
        time.sleep(0.1)


def on_signal(sig, _frame):
    cleanup()
    sys.exit(128 + sig)


def control(mnt, req):
    """One request on the mount's control socket (see crates/lsfs/src/control.rs)."""
    mnt = os.path.realpath(mnt)
    path = os.path.join(os.path.dirname(mnt), ".%s.lsfs.sock" % os.path.basename(mnt))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall((json.dumps(req) + "\n").encode())
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    v = json.loads(buf)
    if not v.get("ok"):
        raise RuntimeError("control request %s failed: %s" % (req, v.get("error")))
    return v


def counts(mnt):
    # Background requests (FORGET, RELEASE, writeback) may trail the calls
    # that caused them: let them arrive first.
    time.sleep(0.3)
    f = control(mnt, {"cmd": "stats"})["stats"].get("fuse", {})
    c = dict(f.get("requests", {}))
    c["getxattr(security.capability)"] = f.get("getxattr_security_capability", 0)
    return c


def delta(a, b):
    keys = set(a) | set(b)
    return {k: b.get(k, 0) - a.get(k, 0) for k in keys if b.get(k, 0) - a.get(k, 0)}


class Mount:
    def __init__(self, lsfs, opts):
        self.lsfs, self.opts = lsfs, opts

    def __enter__(self):
        work = tempfile.mkdtemp(prefix="lsfs-requests.", dir="/var/tmp")
        state["work"] = work
        img, mnt = os.path.join(work, "img"), os.path.join(work, "mnt")
        os.mkdir(mnt)
        state["img"] = img
        subprocess.run([self.lsfs, "mkfs", img, "--size", "2G"], check=True, stdout=subprocess.DEVNULL)
        cmd = [self.lsfs, "mount", img, mnt, "--background"]
        if self.opts:
            cmd += ["-o", self.opts]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        state["mnt"] = mnt
        self.mnt = mnt
        return self

    def __exit__(self, *exc):
        cleanup()


def measure(mnt, name, nops, fn, results):
    c0 = counts(mnt)
    fn()
    d = delta(c0, counts(mnt))
    results.append({"op": name, "n": nops, "requests": d})
    per = {k: v / nops for k, v in d.items()}
    total = sum(v for k, v in d.items() if k != "getxattr(security.capability)") / nops
    print("  %-28s %6.2f requests/op  %s" % (name, total, ", ".join(
        "%s %.2f" % (k, v) for k, v in sorted(per.items(), key=lambda x: -x[1]))), flush=True)


def micro(m, results):
    mnt = m.mnt
    d = os.path.join(mnt, "d")
    os.mkdir(d)
    names = [os.path.join(d, "f%04d" % i) for i in range(N)]
    data = b"x" * 4096

    def create():
        for p in names:
            fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.write(fd, data)
            os.close(fd)

    def stat():
        for p in names:
            os.stat(p)

    missing = [os.path.join(d, "missing%04d" % i) for i in range(N)]

    def stat_missing():
        for p in missing:
            try:
                os.stat(p)
            except FileNotFoundError:
                pass

    def read():
        for p in names:
            fd = os.open(p, os.O_RDONLY)
            while os.read(fd, 65536):
                pass
            os.close(fd)

    def append():
        for p in names:
            fd = os.open(p, os.O_WRONLY | os.O_APPEND)
            os.write(fd, data)
            os.close(fd)

    def py_open():
        for p in names:
            with open(p, "rb") as f:
                f.read()

    def fsync():
        for p in names:
            fd = os.open(p, os.O_WRONLY)
            os.write(fd, data)
            os.fsync(fd)
            os.close(fd)

    def rename():
        for p in names:
            os.rename(p, p + ".r")

    def unlink():
        for p in names:
            os.unlink(p + ".r")

    dirs = [os.path.join(mnt, "dir%04d" % i) for i in range(N)]

    def mkdir():
        for p in dirs:
            os.mkdir(p)

    def rmdir():
        for p in dirs:
            os.rmdir(p)

    big = os.path.join(mnt, "big")
    os.mkdir(big)
    for i in range(N):
        os.close(os.open(os.path.join(big, "e%04d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
    reps = 10

    def listdir():
        for _ in range(reps):
            os.listdir(big)

    def scandir_stat():
        for e in os.scandir(big):
            os.stat(e.path)

    measure(mnt, "create + write 4 KiB + close", N, create, results)
    measure(mnt, "stat", N, stat, results)
    stat_missing()
    measure(mnt, "stat of a missing name, again", N, stat_missing, results)
    measure(mnt, "open + read + close", N, read, results)
    measure(mnt, "append 4 KiB (open, write, close)", N, append, results)
    measure(mnt, "Python open() + read", N, py_open, results)
    measure(mnt, "open + write + fsync + close", N, fsync, results)
    measure(mnt, "rename", N, rename, results)
    measure(mnt, "unlink", N, unlink, results)
    measure(mnt, "mkdir", N, mkdir, results)
    measure(mnt, "rmdir", N, rmdir, results)
    measure(mnt, "readdir of 1,000 entries", reps, listdir, results)
    measure(mnt, "readdir + stat, per entry", N, scandir_stat, results)


def postmark(m, results):
    pm = os.path.join(m.mnt, "pm")
    os.mkdir(pm)
    cfg = open(os.path.join(REPO, "bench/postmark.cfg")).read()
    cfg = cfg.replace("@LOCATION@", pm).replace("@NUMBER@", "500").replace("@TRANSACTIONS@", "1000")
    cfg = "\n".join(l for l in cfg.splitlines() if not l.startswith("#")) + "\n"
    path = os.path.join(state["work"], "postmark.cfg")
    open(path, "w").write(cfg)

    def run():
        subprocess.run(["postmark", path], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["sync", "-f", pm], check=True)

    measure(m.mnt, "postmark transaction", 1000, run, results)


def dbench(m, results):
    out = {}

    def run():
        r = subprocess.run(["dbench", "-D", m.mnt, "-t", "5", "-c", "/usr/share/dbench/client.txt", "1"],
                           check=True, capture_output=True, text=True)
        out["ops"] = sum(int(x) for x in re.findall(r"^\s+[A-Za-z_]+\s+(\d+)\s+[\d.]+\s+[\d.]+\s*$",
                                                    r.stdout, re.M))

    c0 = counts(m.mnt)
    run()
    d = delta(c0, counts(m.mnt))
    n = out["ops"] or 1
    results.append({"op": "dbench operation", "n": n, "requests": d})
    total = sum(v for k, v in d.items() if k != "getxattr(security.capability)") / n
    print("  %-28s %6.2f requests/op  %s" % ("dbench operation (%d)" % n, total, ", ".join(
        "%s %.2f" % (k, v / n) for k, v in sorted(d.items(), key=lambda x: -x[1]))), flush=True)


def tree(m, results, tarball):
    nfiles = int(subprocess.run("tar tf %s | grep -vc '/$'" % tarball, shell=True,
                                capture_output=True, text=True).stdout)
    t = os.path.join(m.mnt, "t")
    os.mkdir(t)
    sh = lambda cmd: (lambda: subprocess.run(cmd, shell=True, check=True, cwd=t,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    measure(m.mnt, "tar x, per file", nfiles, sh("tar xf %s" % tarball), results)
    measure(m.mnt, "find, per file", nfiles, sh("find . >/dev/null"), results)
    measure(m.mnt, "du -s, per file", nfiles, sh("du -s ."), results)
    measure(m.mnt, "grep -r, per file", nfiles, lambda: subprocess.run(
        "grep -r zzyzx_not_there . >/dev/null || true", shell=True, cwd=t), results)
    measure(m.mnt, "rm -rf, per file", nfiles, sh("rm -rf ./*"), results)


def per_op(entry):
    """Requests per operation, and the opcodes by count (the capability
    probe is a GETXATTR already counted, so it is left out of the total)."""
    r = {k: v for k, v in entry["requests"].items() if k != "getxattr(security.capability)"}
    n = entry["n"]
    return sum(r.values()) / n, sorted(((k, v / n) for k, v in r.items()), key=lambda x: -x[1])


def table(specs):
    runs = []
    for spec in specs:
        label, path = spec.split("=", 1)
        runs.append((label, {e["op"]: e for e in json.load(open(path))["results"]}))
    ops = []
    for _, r in runs:
        ops += [o for o in r if o not in ops]
    last = runs[-1][0]
    print("| operation | " + " | ".join(l for l, _ in runs) + " | %s: by opcode |" % last)
    print("|---|" + "---|" * len(runs) + "---|")
    for op in ops:
        cells = []
        for _, r in runs:
            cells.append("%.2f" % per_op(r[op])[0] if op in r else "–")
        detail = ""
        if op in runs[-1][1]:
            detail = ", ".join("%s %.2f" % kv for kv in per_op(runs[-1][1][op])[1] if kv[1] >= 0.005)
        name = "dbench operation" if op.startswith("dbench") else op
        print("| %s | %s | %s |" % (name, " | ".join(cells), detail))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--table":
        return table(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lsfs", default=os.path.join(REPO, "target/release/lsfs"))
    ap.add_argument("-o", dest="opts", default="")
    ap.add_argument("--out")
    ap.add_argument("--tree", default="/var/tmp/lsfs-everyday/linux-6.1-subset.tar")
    ap.add_argument("--only", default="micro,postmark,dbench,tree")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("requests.py: must run as root (mount, dbench)")
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    results = []
    for phase in a.only.split(","):
        if phase == "tree" and not os.path.exists(a.tree):
            print("requests.py: %s missing; skipping the tree phase (scripts/everyday.sh makes it)" % a.tree)
            continue
        print("%s (%s):" % (phase, a.opts or "default options"), flush=True)
        with Mount(a.lsfs, a.opts) as m:
            {"micro": micro, "postmark": postmark, "dbench": dbench,
             "tree": lambda m, r: tree(m, r, a.tree)}[phase](m, results)
    doc = {"mount_options": a.opts, "lsfs": a.lsfs, "results": results,
           "kernel": os.uname().release, "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
