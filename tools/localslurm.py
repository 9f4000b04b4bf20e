"""A real multi-node SLURM cluster on one machine, for tests and for trying hpcprof locally.

A development tool, not part of the installed package: ``make slurm-up`` / ``slurm-down``
(mk/slurm.mk) and the ``tests/slurm`` fixture (tests/slurm/conftest.py) drive it. It imports
nothing from hpcprof.

Starts, with every file under one state directory:

- ``munged`` on its own socket (``munge/sock/``, mode 711) with a fresh key,
- MariaDB (``mariadbd``, TCP on 127.0.0.1 only) and ``slurmdbd`` for accounting
  (submitit needs ``sacct`` to see job states),
- ``slurmctld``,
- one ``slurmd`` per emulated node ``n1``, ``n2``, ... Each runs in its own mount + UTS namespace
  whose hostname is the node name and whose ``/etc/hosts`` maps every node name to 127.0.0.1, so
  job steps see their own node name as hostname and ``MASTER_ADDR=n1`` resolves.

Every daemon is started in the foreground of a process we spawn, its pid and start time recorded
in ``cluster.json``; :meth:`LocalSlurm.stop` stops each one by that pid (never by name), then any
process left in a node's mount namespace (job steps of cancelled jobs), identified by namespace id.

Command line (the ``make slurm-up`` / ``make slurm-down`` targets call these)::

    python tools/localslurm.py up   [--state-dir .slurm-state] [--nodes 2] [--cpus 8]
    eval "$(python tools/localslurm.py env [--state-dir .slurm-state])"   # exports SLURM_CONF
    python tools/localslurm.py status [--state-dir .slurm-state]
    python tools/localslurm.py down [--state-dir .slurm-state]

Python::

    with LocalSlurm("/tmp/state", nodes=2) as cluster:
        subprocess.run(["sbatch", ...], env=cluster.env)

Facts this relies on (Debian 12, Slurm 22.05, see also ../shared/docs/local-slurm.md):

- ``SlurmdParameters=config_overrides`` lets each node advertise more CPUs than the host has;
  ``SchedulerParameters=batch_sched_delay=0`` starts batch jobs in under a second.
- ``sbatch --wait`` polls in growing steps and returns seconds late: :meth:`LocalSlurm.wait_job`
  polls ``sacct`` instead (accounting lags the controller by about a second).
- A requeued batch job is held about 2 minutes (``squeue`` reason ``BeginTime``);
  ``scontrol update jobid=<id> StartTime=now`` releases it.
- ``sacct -X -j <one job> -o NodeList`` shows only the first node of a 2-node job in 22.05;
  ``NNodes`` and the steps' ``NodeList`` are right.
- ``KillWait=2`` here (30 s on real clusters): requeues and cancellations finish quickly.

Needs root with CAP_SYS_ADMIN (namespaces, bind mounts) and the Debian packages of
``scripts/install-debian-deps.sh``; :func:`unavailable_reason` says precisely what is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_STATE_DIR = ".slurm-state"
PARTITION = "local"
CLUSTER_NAME = "hpcprof"
STATE_FILE = "cluster.json"

#: Programs the cluster needs, with the Debian package that ships each.
REQUIRED_PROGRAMS = {
    "munged": "munge",
    "mariadbd": "mariadb-server-core",
    "mariadb-install-db": "mariadb-server-core",
    "mariadb": "mariadb-client-core",
    "slurmdbd": "slurmdbd",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sbatch": "slurm-client",
    "srun": "slurm-client",
    "sacct": "slurm-client",
    "sacctmgr": "slurm-client",
    "scontrol": "slurm-client",
    "squeue": "slurm-client",
    "sinfo": "slurm-client",
    "scancel": "slurm-client",
    "unshare": "util-linux",
    "mount": "mount",
}
PLUGIN_DIRS = ("/usr/lib/x86_64-linux-gnu/slurm-wlm", "/usr/lib/aarch64-linux-gnu/slurm-wlm",
               "/usr/lib/slurm-wlm", "/usr/lib64/slurm", "/usr/lib/slurm")

_SEARCH_PATH = os.pathsep.join(
    [os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])


class ClusterError(RuntimeError):
    """The local cluster could not be started, or a daemon failed; the message says which."""


def which(program: str) -> str | None:
    return shutil.which(program, path=_SEARCH_PATH)


def unavailable_reason() -> str | None:
    """Why a local cluster cannot start here (None when it can): not root, a missing program
    or plugin, or namespaces/bind mounts refused."""
    if os.geteuid() != 0:
        return (f"local SLURM cluster needs root (uid 0) to run slurmd in mount+UTS namespaces; "
                f"running as uid {os.geteuid()}")
    missing = sorted({f"{prog} (package {pkg})" for prog, pkg in REQUIRED_PROGRAMS.items()
                      if which(prog) is None})
    if missing:
        return ("local SLURM cluster needs programs not found on PATH or /usr/sbin: "
                + ", ".join(missing) + "; install them with scripts/install-debian-deps.sh")
    if _plugin_dir() is None:
        return ("SLURM MySQL accounting plugin accounting_storage_mysql.so not found in "
                + ", ".join(PLUGIN_DIRS) + " (package slurm-wlm-mysql-plugin)")
    probe = ("hostname hpcprof-probe && mount --bind /etc/hosts /etc/hosts "
             "&& test \"$(hostname)\" = hpcprof-probe")
    try:
        res = subprocess.run([which("unshare"), "--mount", "--uts", "--propagation", "slave",
                              "sh", "-c", probe], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot create mount+UTS namespaces (unshare): {exc}"
    if res.returncode != 0:
        return ("cannot create mount+UTS namespaces, set a hostname and bind-mount /etc/hosts "
                f"(needs CAP_SYS_ADMIN): unshare exited {res.returncode}: "
                f"{(res.stderr or res.stdout).strip()}")
    return None


def _plugin_dir() -> str | None:
    for d in PLUGIN_DIRS:
        if os.path.exists(os.path.join(d, "accounting_storage_mysql.so")):
            return d
    return None


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _proc_start_time(pid: int) -> int | None:
    """Start time (clock ticks since boot) of a live, non-zombie process, else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _mnt_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class Daemon:
    name: str
    pid: int
    start: int  # /proc start time, guards against pid reuse
    log: str

    def alive(self) -> bool:
        return _proc_start_time(self.pid) == self.start


@dataclass
class LocalSlurm:
    """A local SLURM cluster whose state lives in ``state_dir``.

    ``start()`` brings everything up (and returns once a warm-up job on all nodes has run);
    ``stop()`` stops every daemon it started, by pid. Usable as a context manager.
    ``env`` is ``os.environ`` plus ``SLURM_CONF``, for subprocesses (sbatch, submitit, ...).
    """

    state_dir: Path
    nodes: int = 2
    cpus_per_node: int = 8
    memory_mb: int = 16000
    partition: str = PARTITION
    first_job_id: int = 1
    """The id of the cluster's first job. Clusters started side by side (the test suite's workers)
    take ids in distinct ranges, since a job's rendezvous port is derived from its id
    (hpcprof.rank.env.slurm_port)."""
    daemons: dict[str, Daemon] = field(default_factory=dict)
    node_namespaces: dict[str, str] = field(default_factory=dict)
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.state_dir = Path(self.state_dir).resolve()
        if not 1 <= self.nodes <= 16:
            raise ValueError(f"nodes: must be between 1 and 16, got {self.nodes}")
        if self.cpus_per_node < 1:
            raise ValueError(f"cpus_per_node: must be >= 1, got {self.cpus_per_node}")
        if self.first_job_id < 1:
            raise ValueError(f"first_job_id: must be >= 1, got {self.first_job_id}")

    # ----------------------------------------------------------------------------- paths
    @property
    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    @property
    def conf_path(self) -> Path:
        return self.state_dir / "etc" / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.state_dir / "munge" / "sock" / "munge.socket"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "log"

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf_path)
        path = env.get("PATH", "")
        for d in ("/usr/sbin", "/sbin"):
            if d not in path.split(os.pathsep):
                path = path + os.pathsep + d
        env["PATH"] = path
        return env

    # ----------------------------------------------------------------------------- state
    def _save(self, ports: dict[str, int] | None = None) -> None:
        data = self._load_raw()
        data.update({
            "nodes": self.nodes, "cpus_per_node": self.cpus_per_node, "partition": self.partition,
            "conf": str(self.conf_path),
            "daemons": {k: vars(d) for k, d in self.daemons.items()},
            "node_namespaces": self.node_namespaces,
        })
        if ports is not None:
            data["ports"] = ports
        tmp = self.state_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(self.state_dir / STATE_FILE)

    def _load_raw(self) -> dict:
        try:
            return json.loads((self.state_dir / STATE_FILE).read_text())
        except (OSError, ValueError):
            return {}

    @classmethod
    def from_state_dir(cls, state_dir: str | os.PathLike) -> "LocalSlurm":
        """The cluster recorded in ``state_dir`` (to stop it, or get its env, from another process)."""
        state_dir = Path(state_dir)
        raw_path = state_dir / STATE_FILE
        try:
            raw = json.loads(raw_path.read_text())
        except OSError:
            raise ClusterError(f"{raw_path}: no local cluster state here "
                               f"(start one with: python tools/localslurm.py up "
                               f"--state-dir {state_dir})") from None
        c = cls(state_dir, nodes=raw.get("nodes", 2), cpus_per_node=raw.get("cpus_per_node", 8),
                partition=raw.get("partition", PARTITION))
        c.daemons = {k: Daemon(**v) for k, v in raw.get("daemons", {}).items()}
        c.node_namespaces = raw.get("node_namespaces", {})
        return c

    def running(self) -> dict[str, bool]:
        return {name: d.alive() for name, d in self.daemons.items()}

    # ----------------------------------------------------------------------------- start
    def __enter__(self) -> "LocalSlurm":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, warmup: bool = True, timeout: float = 60.0) -> None:
        """Start munged, MariaDB, slurmdbd, slurmctld and the slurmd nodes; then run a warm-up
        job on all nodes. On any failure, stops what was started and raises ClusterError with
        the failing daemon and its log file."""
        reason = unavailable_reason()
        if reason:
            raise ClusterError(reason)
        if (self.state_dir / STATE_FILE).exists() and any(
                self.from_state_dir(self.state_dir).running().values()):
            raise ClusterError(f"{self.state_dir}: a local cluster is already running there "
                               f"(stop it with: python tools/localslurm.py down "
                               f"--state-dir {self.state_dir})")
        deadline = time.monotonic() + timeout
        try:
            self._layout()
            names = ["slurmctld", "slurmdbd", "mariadb"] + [f"slurmd-{n}" for n in self.node_names]
            ports = dict(zip(names, _free_ports(len(names))))
            self._write_configs(ports)
            self._save(ports)
            self._start_munge(deadline)
            self._start_mariadb(ports["mariadb"], deadline)
            self._start_slurmdbd(ports["slurmdbd"], deadline)
            self._start_slurmctld(deadline)
            self._start_nodes(deadline)
            if warmup:
                self._warmup(deadline)
        except BaseException:
            self.stop()
            raise

    def _layout(self) -> None:
        sd = self.state_dir
        for sub in ("etc", "log", "run", "ctld", "db", "tmp", "jobs"):
            (sd / sub).mkdir(parents=True, exist_ok=True)
        for n in self.node_names:
            (sd / "spool" / n).mkdir(parents=True, exist_ok=True)
        (sd / "munge").mkdir(exist_ok=True)
        os.chmod(sd / "munge", 0o700)
        (sd / "munge" / "sock").mkdir(exist_ok=True)
        os.chmod(sd / "munge" / "sock", 0o711)  # munged refuses anything else

    def _write_configs(self, ports: dict[str, int]) -> None:
        sd = self.state_dir
        nodes_conf = "\n".join(
            f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={ports['slurmd-' + n]} "
            f"CPUs={self.cpus_per_node} Boards=1 SocketsPerBoard=1 "
            f"CoresPerSocket={self.cpus_per_node} ThreadsPerCore=1 "
            f"RealMemory={self.memory_mb} State=UNKNOWN"
            for n in self.node_names)
        node_list = f"n[1-{self.nodes}]" if self.nodes > 1 else "n1"
        conf = f"""\
# Written by tools/localslurm.py (hpcprof): a local {self.nodes}-node cluster, all state under {sd}
ClusterName={CLUSTER_NAME}
SlurmctldHost=localhost
SlurmctldPort={ports['slurmctld']}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={sd}/ctld
SlurmdSpoolDir={sd}/spool/%n
SlurmctldPidFile={sd}/run/slurmctld.pid
SlurmdPidFile={sd}/run/slurmd-%n.pid
SlurmctldLogFile={sd}/log/slurmctld.log
SlurmdLogFile={sd}/log/slurmd-%n.log
TmpFS={sd}/tmp
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
FirstJobId={self.first_job_id}
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=2
MinJobAge=600
InactiveLimit=0
SlurmdTimeout=120
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={ports['slurmdbd']}
AccountingStoragePass={self.munge_socket}
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
{nodes_conf}
PartitionName={self.partition} Nodes={node_list} Default=YES MaxTime=INFINITE State=UP
"""
        self.conf_path.write_text(conf)
        dbd = f"""\
# Written by tools/localslurm.py (hpcprof)
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
DbdHost=localhost
DbdPort={ports['slurmdbd']}
SlurmUser=root
LogFile={sd}/log/slurmdbd.log
PidFile={sd}/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={ports['mariadb']}
StorageUser=root
StorageLoc=slurm_acct_db
"""
        dbd_path = self.conf_path.parent / "slurmdbd.conf"
        dbd_path.write_text(dbd)
        os.chmod(dbd_path, 0o600)  # slurmdbd refuses a readable slurmdbd.conf
        hosts = "127.0.0.1 localhost " + " ".join(self.node_names) + "\n::1 localhost\n"
        (sd / "etc" / "hosts").write_text(hosts)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Daemon:
        log = self.log_dir / f"{name}.stdout.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    env=env or self.env, cwd=self.state_dir)
        start = _proc_start_time(proc.pid)
        d = Daemon(name=name, pid=proc.pid, start=start if start is not None else -1, log=str(log))
        self._procs[name] = proc
        self.daemons[name] = d
        self._save()
        return d

    def _wait(self, what: str, ready, daemon: Daemon, deadline: float, log: str | None = None):
        while time.monotonic() < deadline:
            if ready():
                return
            proc = self._procs.get(daemon.name)
            if proc is not None and proc.poll() is not None:
                raise ClusterError(f"{daemon.name} exited with status {proc.returncode} while "
                                   f"starting; see {log or daemon.log}:\n{_tail(log or daemon.log)}")
            time.sleep(0.1)
        raise ClusterError(f"{what} not ready in time; see {log or daemon.log}:\n"
                           f"{_tail(log or daemon.log)}")

    def _start_munge(self, deadline: float) -> None:
        mdir = self.state_dir / "munge"
        key = mdir / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        self.munge_socket.unlink(missing_ok=True)
        d = self._spawn("munged", [which("munged"), "--foreground", "--force",
                                   f"--socket={self.munge_socket}", f"--key-file={key}",
                                   f"--pid-file={mdir}/munged.pid",
                                   f"--log-file={self.log_dir}/munged.log",
                                   f"--seed-file={mdir}/munged.seed"])
        self._wait("munged", self.munge_socket.exists, d, deadline)

    def _start_mariadb(self, port: int, deadline: float) -> None:
        datadir = self.state_dir / "db" / "data"
        if not (datadir / "mysql").exists():
            res = subprocess.run(
                [which("mariadb-install-db"), "--no-defaults", f"--datadir={datadir}",
                 "--auth-root-authentication-method=normal", "--skip-test-db", "--user=root",
                 "--innodb-log-file-size=8M"],
                capture_output=True, text=True)
            if res.returncode != 0:
                raise ClusterError(f"mariadb-install-db --datadir={datadir} failed "
                                   f"({res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
        sock = self.state_dir / "db" / "mysqld.sock"
        # A private, local-only database; no grant tables so slurmdbd connects as root freely.
        d = self._spawn("mariadb", [
            which("mariadbd"), "--no-defaults", f"--datadir={datadir}", f"--socket={sock}",
            f"--port={port}", "--bind-address=127.0.0.1", f"--pid-file={self.state_dir}/db/mysqld.pid",
            f"--log-error={self.log_dir}/mariadb.log", "--user=root", "--skip-grant-tables",
            "--innodb-log-file-size=8M", "--innodb-buffer-pool-size=32M", "--skip-log-bin",
            f"--tmpdir={self.state_dir}/tmp"])
        self._wait("mariadb", lambda: _port_open(port), d, deadline, f"{self.log_dir}/mariadb.log")

    def _start_slurmdbd(self, port: int, deadline: float) -> None:
        d = self._spawn("slurmdbd", [which("slurmdbd"), "-D"])
        self._wait("slurmdbd", lambda: _port_open(port), d, deadline,
                   f"{self.log_dir}/slurmdbd.log")

    def _run(self, argv: list[str], timeout: float = 20, check: bool = True):
        res = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and res.returncode != 0:
            raise ClusterError(f"{shlex.join(argv)} failed ({res.returncode}): "
                               f"{res.stderr.strip() or res.stdout.strip()}")
        return res

    def _start_slurmctld(self, deadline: float) -> None:
        d = self._spawn("slurmctld", [which("slurmctld"), "-D", "-f", str(self.conf_path)])

        def up():
            try:
                return self._run(["scontrol", "ping"], timeout=5, check=False).returncode == 0
            except subprocess.TimeoutExpired:
                return False

        self._wait("slurmctld", up, d, deadline, f"{self.log_dir}/slurmctld.log")

    def _start_nodes(self, deadline: float) -> None:
        hosts = self.state_dir / "etc" / "hosts"
        for n in self.node_names:
            # unshare execs sh, which execs slurmd: the pid we record is slurmd's own.
            script = (f"mount --bind {shlex.quote(str(hosts))} /etc/hosts && hostname {n} && "
                      f"exec {shlex.quote(which('slurmd'))} -D -f {shlex.quote(str(self.conf_path))}"
                      f" -N {n}")
            self._spawn(f"slurmd-{n}", [which("unshare"), "--mount", "--uts", "--propagation",
                                        "slave", "sh", "-c", script])
        for n in self.node_names:
            d = self.daemons[f"slurmd-{n}"]
            own = _mnt_ns(os.getpid())
            self._wait(f"slurmd {n} namespace", lambda: _mnt_ns(d.pid) not in (None, own),
                       d, deadline, f"{self.log_dir}/slurmd-{n}.log")
            self.node_namespaces[n] = _mnt_ns(d.pid)
        self._save()

        def all_idle():
            res = self._run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=5, check=False)
            states = dict(line.split() for line in res.stdout.splitlines() if line.strip())
            return all(states.get(n, "").rstrip("*") == "idle" for n in self.node_names)

        self._wait("slurmd nodes idle", all_idle, self.daemons[f"slurmd-{self.node_names[-1]}"],
                   deadline, f"{self.log_dir}/slurmctld.log")

    def _warmup(self, deadline: float) -> None:
        """One job on every node, so the first scheduling pass after start-up is absorbed here
        and not by the first real job; also proves srun and the node hostnames work."""
        out = self.state_dir / "jobs" / "warmup-%j.out"
        res = self._run(["sbatch", "--parsable", f"--nodes={self.nodes}",
                         "--ntasks-per-node=1", "--job-name=hpcprof-warmup", f"--output={out}",
                         f"--partition={self.partition}", "--time=2",
                         "--wrap", "srun hostname"], timeout=10)
        job = res.stdout.strip().split(";")[0]
        log = Path(str(out).replace("%j", job))
        # Poll ourselves: `sbatch --wait` sleeps in growing steps and returns seconds late.
        state = "PENDING"
        while time.monotonic() < deadline:
            state = self.job_state(job)
            if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", ""):
                break
            time.sleep(0.1)
        if state != "COMPLETED":
            raise ClusterError(f"warm-up job {job} ended {state or 'in an unknown state'} "
                               f"(see {log} and {self.log_dir}/slurmctld.log)")
        hosts = sorted(log.read_text().split()) if log.exists() else []
        if hosts != sorted(self.node_names):
            raise ClusterError(f"warm-up job {job}: expected hostnames {self.node_names}, "
                               f"got {hosts} (see {log})")
        # submitit reads job states through sacct: wait until accounting has the job too.
        acct = ""
        while time.monotonic() < deadline:
            acct = self.sacct_state(job)
            if acct == "COMPLETED":
                return
            time.sleep(0.2)
        raise ClusterError(f"warm-up job {job}: sacct shows {acct or 'nothing'} instead of "
                           f"COMPLETED; accounting is not working (see {self.log_dir}/slurmdbd.log "
                           f"and {self.log_dir}/slurmctld.log)")

    def wait_job(self, job_id: str, timeout: float = 120.0, accounted: bool = True) -> str:
        """Wait until the job has ended (and, with ``accounted``, until sacct records its end);
        return its final state. Raises ClusterError after ``timeout`` seconds."""
        end = time.monotonic() + timeout
        state = ""
        while time.monotonic() < end:
            state = self.sacct_state(job_id) if accounted else self.job_state(job_id)
            if state and state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING",
                                       "REQUEUED", "RESIZING", "SUSPENDED"):
                return state
            time.sleep(0.2)
        raise ClusterError(f"job {job_id} still {state or 'unknown'} after {timeout:.0f} s")

    def sacct_state(self, job_id: str) -> str:
        """The job's state as accounting (``sacct``) records it; "" when not recorded yet."""
        res = self._run(["sacct", "-n", "-X", "-P", "-o", "State", "-j", str(job_id)],
                        timeout=10, check=False)
        lines = res.stdout.split()
        return lines[0] if lines else ""

    def job_state(self, job_id: str) -> str:
        """The controller's state of a job (``COMPLETED``, ``RUNNING``, ...; "" if unknown)."""
        res = self._run(["scontrol", "-o", "show", "job", str(job_id)], timeout=10, check=False)
        for tok in res.stdout.split():
            if tok.startswith("JobState="):
                return tok.split("=", 1)[1]
        return ""

    # ----------------------------------------------------------------------------- stop
    def stop(self, timeout: float = 20.0) -> list[str]:
        """Cancel remaining jobs, then stop every recorded daemon by pid (SIGTERM, then
        SIGKILL), then any process left in a node namespace. Returns the names stopped."""
        stopped = []
        ctld = self.daemons.get("slurmctld")
        if ctld is not None and ctld.alive():
            self._cancel_all_jobs()
        order = ([f"slurmd-{n}" for n in self.node_names] + ["slurmctld", "slurmdbd", "mariadb",
                                                              "munged"])
        for name in order:
            d = self.daemons.get(name)
            if d is None:
                continue
            if _terminate(d.pid, d.start, timeout):
                stopped.append(name)
            proc = self._procs.pop(name, None)
            if proc is not None:
                try:
                    proc.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    pass
            if name.startswith("slurmd-"):
                # Job steps (slurmstepd and tasks) live on in the node's namespace.
                self._kill_namespace(self.node_namespaces.get(name[len("slurmd-"):]))
        if (self.state_dir / STATE_FILE).exists():
            self._save()
        return stopped

    def _cancel_all_jobs(self) -> None:
        try:
            res = self._run(["squeue", "-h", "-o", "%A"], timeout=5, check=False)
            jobs = res.stdout.split()
            if jobs:
                self._run(["scancel", *jobs], timeout=10, check=False)
                end = time.monotonic() + 10
                while time.monotonic() < end:
                    if not self._run(["squeue", "-h", "-o", "%A"], timeout=5,
                                     check=False).stdout.split():
                        break
                    time.sleep(0.2)
        except (subprocess.TimeoutExpired, OSError):
            pass

    def _kill_namespace(self, ns: str | None) -> None:
        if not ns or ns == _mnt_ns(os.getpid()):
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            victims = []
            for entry in os.listdir("/proc"):
                if entry.isdigit() and _mnt_ns(int(entry)) == ns:
                    victims.append(int(entry))
            if not victims:
                return
            for pid in victims:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            end = time.monotonic() + 3
            while time.monotonic() < end and any(_proc_start_time(p) is not None for p in victims):
                time.sleep(0.1)


def _terminate(pid: int, start: int, timeout: float) -> bool:
    """SIGTERM the process ``pid`` if it is still the one started at ``start``; SIGKILL it after
    ``timeout`` seconds. True if it was running."""
    if _proc_start_time(pid) != start:
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if _proc_start_time(pid) != start:
            return True
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


def _tail(path: str, n: int = 15) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return f"({path} not readable)"


# --------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python tools/localslurm.py", allow_abbrev=False,
                                description="A real multi-node SLURM cluster on this machine "
                                            "(needs root). All state under --state-dir.")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, help_ in (("up", "start the cluster and return once a job has run on every node"),
                        ("down", "stop every daemon of the cluster (by pid)"),
                        ("env", "print 'export SLURM_CONF=...' for eval in a shell"),
                        ("status", "print which daemons of the cluster are running")):
        sp = sub.add_parser(name, help=help_, allow_abbrev=False)
        sp.add_argument("--state-dir", default=DEFAULT_STATE_DIR,
                        help=f"directory holding all cluster state (default {DEFAULT_STATE_DIR})")
        if name == "up":
            sp.add_argument("--nodes", type=int, default=2, help="emulated nodes n1..nN (default 2)")
            sp.add_argument("--cpus", type=int, default=8,
                            help="CPUs advertised per node (default 8)")
    args = p.parse_args(argv)
    state_dir = Path(args.state_dir).resolve()
    try:
        if args.cmd == "up":
            cluster = LocalSlurm(state_dir, nodes=args.nodes, cpus_per_node=args.cpus)
            t0 = time.monotonic()
            cluster.start()
            print(f"local SLURM cluster up in {time.monotonic() - t0:.1f} s: nodes "
                  f"{', '.join(cluster.node_names)}, partition {cluster.partition}, "
                  f"state {state_dir}", file=sys.stderr)
            print(f"use it with: export SLURM_CONF={shlex.quote(str(cluster.conf_path))}",
                  file=sys.stderr)
        elif args.cmd == "down":
            cluster = LocalSlurm.from_state_dir(state_dir)
            stopped = cluster.stop()
            print(f"stopped: {', '.join(stopped) or 'nothing was running'}", file=sys.stderr)
        elif args.cmd == "env":
            cluster = LocalSlurm.from_state_dir(state_dir)
            print(f"export SLURM_CONF={shlex.quote(str(cluster.conf_path))}")
        elif args.cmd == "status":
            cluster = LocalSlurm.from_state_dir(state_dir)
            running = cluster.running()
            for name, alive in running.items():
                d = cluster.daemons[name]
                print(f"{name:14s} pid {d.pid:<8d} {'running' if alive else 'stopped'}")
            return 0 if running and all(running.values()) else 1
    except (ClusterError, ValueError) as exc:
        print(f"localslurm {args.cmd}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
