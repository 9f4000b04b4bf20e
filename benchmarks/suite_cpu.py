"""Where a command's CPU time goes, by kind of process: the tool behind "The test suite's wall time"
in benchmarks/README.md.

Runs COMMAND with the kernel's process accounting on (every process that ends writes its CPU
time, pid and parent: acct(2), version 3 records), and with a line in the Python environment's
site-packages that logs each interpreter's command line as it starts; then sums the CPU time of
every process the command's run ended, by kind: a training rank (a submitit task, a user script,
torchrun), an analysis, the pytest workers, a map worker forked from one of those, other programs
by name. Processes SLURM starts for the command's jobs are counted too (they are not the command's
children, so `time` does not see them). Linux, root only; the machine's other processes that end
meanwhile are counted as well, so run it on an otherwise idle machine. The start log goes into the
site-packages of --python (default: the interpreter running this), so run it with the checkout's
own .venv, made first:

    make install && sudo .venv/bin/python benchmarks/suite_cpu.py -- make test

The log line is removed from site-packages and accounting is switched off when the command ends,
also when it fails or is interrupted (Ctrl-C, SIGTERM: the command is then stopped too).
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime,
# utime, stime, mem, io, rw, minflt, majflt, swaps (comp_t), comm
ACCT_V3 = struct.Struct("<BBHIIIIIIf8H16s")
AHZ = 100  # comp_t and etime units per second

# the .pth line: each interpreter appends "pid <tab> command line" to the log as it starts
PTH = ("import os; exec(\"try:\\n with open({log!r}, 'a') as f: f.write('%d\\\\t%s\\\\n' % (os.getpid(), "
       "open('/proc/self/cmdline', 'rb').read().replace(bytes(1), b' ').replace(bytes([10]), b' ').decode(errors='replace')[:300]))\\n"
       "except OSError: pass\")\n")


def _comp(c: int) -> float:
    """comp_t (13-bit mantissa, 3-bit base-8 exponent) in seconds."""
    return ((c & 0x1FFF) << (3 * (c >> 13))) / AHZ


def read_acct(path: Path):
    """(pid, ppid, start time, CPU seconds, command name) of each version 3 record in `path`."""
    data = path.read_bytes()
    for off in range(0, len(data) - ACCT_V3.size + 1, ACCT_V3.size):
        f = ACCT_V3.unpack_from(data, off)
        if f[1] != 3:
            raise SystemExit(f"{path}: not version 3 process accounting records (version {f[1]})")
        yield f[6], f[7], f[8], _comp(f[10]) + _comp(f[11]), f[18].rstrip(b"\0").decode(errors="replace")


KINDS = (  # (kind, pattern of what the interpreter runs: the module after -m, the script, or -c): the first that matches
    ("rank: submitit task", r"^submitit\.core\._submit$"),
    ("witness of a rank", r"^hpcprof\.witness$"),
    ("submitit local launcher", r"^submitit\.local\._local$"),
    ("rank: torchrun", r"^torch\.distributed\.run$|torchrun$"),
    ("pytest-xdist worker", r"^-c .*exec\(eval\(sys\.stdin"),
    ("pytest", r"^pytest$|pytest/__main__\.py$"),
    ("pip", r"^pip$|pip/|pyproject_hooks"),
    ("hpcprof.submit", r"^hpcprof\.submit$|hpcprof/submit\.py$"),
    ("hpcprof.analyze", r"^hpcprof\.analyze$|hpcprof/analyze\.py$"),
    ("hpcprof.compare", r"^hpcprof\.compare$|hpcprof/compare/__main__\.py$"),
    ("hpcprof.ladder", r"^hpcprof\.ladder$|hpcprof/ladder\.py$"),
    ("rank: hpcprof.train or hpcprof.wrap", r"^hpcprof\.(train|wrap)$"),
    ("a Python script (the tests' training scripts)", r"\.py$"),
)


def entry(cmdline: str) -> str:
    """What a Python command line runs: the module after -m, the script, or "-c CODE"."""
    words = cmdline.split()
    for i, w in enumerate(words[1:], 1):
        if w == "-m" and i + 1 < len(words):
            return words[i + 1]
        if w == "-c":
            return " ".join(words[i:])
        if not w.startswith("-"):
            return w
    return ""


def kind_of(cmdline: str) -> str:
    what = entry(cmdline)
    return next((kind for kind, pattern in KINDS if re.search(pattern, what)), "other Python")


def summarize(records: list, started: dict[int, str]) -> list[tuple[str, int, float]]:
    """(kind, processes, CPU seconds), largest first. A Python process that logged no start (a fork,
    such as a map worker) is its parent's kind, "(fork)"; any other program is named by itself."""
    own = {pid: kind_of(cmd) for pid, cmd in started.items()}
    by = collections.defaultdict(lambda: [0, 0.0])
    for pid, ppid, _start, cpu, comm in records:
        if pid in own:
            kind = own[pid]
        elif comm.startswith("python") or comm.startswith("pt_"):
            kind = f"{own[ppid]} (fork)" if ppid in own else "Python, start not logged"
        else:
            kind = f"program {comm}"
        by[kind][0] += 1
        by[kind][1] += cpu
    return sorted(((k, n, c) for k, (n, c) in by.items()), key=lambda row: -row[2])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter whose site-packages gets the start log (default: this one)")
    ap.add_argument("--top", type=int, default=25, help="kinds to print (default 25)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the command to measure after --")
    if os.geteuid() != 0:
        raise SystemExit("suite_cpu.py: process accounting needs root")
    site = Path(subprocess.run([args.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    libc = ctypes.CDLL(None, use_errno=True)
    with tempfile.TemporaryDirectory(prefix="suite-cpu-") as tmp:
        acct, log = Path(tmp) / "acct", Path(tmp) / "starts.tsv"
        acct.touch()
        log.touch()
        os.chmod(tmp, 0o711)  # processes of other users (a cluster's job steps) log too
        os.chmod(log, 0o666)
        pth = site / "zz_hpcprof_suite_cpu.pth"
        t0 = time.time()
        if libc.acct(str(acct).encode()) != 0:
            raise SystemExit(f"suite_cpu.py: acct({acct}) failed: {os.strerror(ctypes.get_errno())}")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the cleanup below runs on kill too
        proc = None
        try:
            pth.write_text(PTH.format(log=str(log)))
            proc = subprocess.Popen(command)
            rc = proc.wait()
        finally:
            if proc is not None and proc.poll() is None:  # interrupted: the command goes with us
                proc.terminate()
                proc.wait()
            pth.unlink(missing_ok=True)
            libc.acct(None)
        wall = time.time() - t0
        started = {}
        for line in log.read_text(errors="replace").splitlines():
            pid, _, cmd = line.partition("\t")
            if pid.isdigit():
                started[int(pid)] = cmd
        records = [r for r in read_acct(acct) if r[2] >= int(t0)]
    rows = summarize(records, started)
    total = sum(c for _k, _n, c in rows)
    print(f"\n{' '.join(command)}: exit {rc}, wall {wall / 60:.1f} min; CPU of the processes it ended: {total:,.0f} s "
          f"({total / wall:.2f} cores on average; {total / (os.cpu_count() or 1) / 60:.1f} min of wall at the least "
          f"on {os.cpu_count()} cores)")
    print(f"{'CPU s':>9} {'share':>6} {'procs':>6}  kind")
    for kind, n, cpu in rows[:args.top]:
        print(f"{cpu:9,.0f} {cpu / total:6.1%} {n:6d}  {kind}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
