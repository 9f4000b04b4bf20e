"""The control channel (hpcprof.rank.control), with real gloo ranks whose hosts are NOT kept together
by the training (as on NCCL, where the host runs ahead of its GPU): a healthy rank never waits for a
straggler's host at a step boundary (issue 18 item 11), and a preemption signal on any rank stops
every rank before the same step, every step below it run on every rank."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

RANK_PROGRAM = textwrap.dedent('''
    import json, os, signal, sys, time, datetime
    import torch, torch.distributed as dist
    from hpcprof.rank.control import ControlChannel

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    ctrl = dist.new_group(backend="gloo")
    chan = ControlChannel(ctrl, dist.new_group(backend="gloo"), 2)
    signal_at = int(os.environ.get("SIGNAL_AT", "-1"))
    slow_s = float(os.environ.get("SLOW_S", "0"))
    ran, stop, boundary_s = [], None, []
    for step in range(60):
        t = time.perf_counter()
        if chan.poll(step):
            stop = step
            break
        boundary_s.append(time.perf_counter() - t)
        if rank == 1 and slow_s:
            time.sleep(slow_s)  # a straggler's host, late in every step
        if rank == 0 and step == signal_at:
            os.kill(os.getpid(), signal.SIGUSR2)
        if int(os.environ.get("SYNC_EVERY", "0")):
            dist.all_reduce(torch.ones(1))  # the training's own synchronisation, as DDP on gloo
        ran.append(step)
    reads_before_end = chan.rounds_read
    chan.drain(ran[-1] + 1 if ran else 0)
    print(json.dumps({"rank": rank, "ran": ran, "stop": stop, "agreements": chan.agreements,
                      "reads_before_end": reads_before_end}), flush=True)
    dist.destroy_process_group()
''')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path, **env) -> dict[int, dict]:
    prog = tmp_path / "rank.py"
    prog.write_text(RANK_PROGRAM)
    port = str(_free_port())
    procs = [subprocess.Popen([sys.executable, str(prog)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                                       **{k: str(v) for k, v in env.items()}))
             for r in range(2)]
    out = {}
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr[-2000:]
        rec = json.loads(stdout.strip().splitlines()[-1])
        out[rec["rank"]] = rec
    return out


def test_a_healthy_rank_never_waits_at_a_step_boundary_for_a_late_host(tmp_path):
    """Rank 1's host is 30 ms late in every step and nothing else holds the ranks together: rank 0
    runs its 60 steps far ahead, reading the rounds that have completed and never waiting for one
    (it read fewer rounds than it issued before the end; the blocking design waited at every
    boundary for the previous round, i.e. for rank 1's host)."""
    res = _run(tmp_path, SLOW_S=0.03)
    for r in (0, 1):
        assert res[r]["ran"] == list(range(60)) and res[r]["stop"] is None and res[r]["agreements"] == 0
    assert res[0]["reads_before_end"] < 30, res[0]  # rank 1 had not issued its rounds: rank 0 went on


def test_a_preemption_signal_on_one_rank_stops_every_rank_before_the_same_step(tmp_path):
    """Rank 0 signals itself in step 10 while rank 1's host is 10 ms late per step: both stop before
    the same step, having run the same steps."""
    res = _run(tmp_path, SIGNAL_AT=10, SLOW_S=0.01, SYNC_EVERY=1)
    stop = res[0]["stop"]
    assert stop is not None and stop == res[1]["stop"], res
    assert stop > 10  # after the signal (rank 0 raised it during step 10)
    assert res[0]["ran"] == res[1]["ran"] == list(range(stop))
    assert res[0]["agreements"] == res[1]["agreements"] == 1


def test_a_signal_seen_only_after_a_fast_rank_finished_lets_every_rank_finish(tmp_path):
    """Rank 0's host races through its 60 steps before rank 1 reaches the signalled round: rank 0
    takes part in the agreement while draining, at its end step, so rank 1 runs to the end too."""
    res = _run(tmp_path, SIGNAL_AT=10, SLOW_S=0.01)
    assert res[0]["ran"] == res[1]["ran"] == list(range(60))
    assert res[0]["agreements"] == res[1]["agreements"] == 1
