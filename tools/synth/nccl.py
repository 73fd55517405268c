"""NCCL faults of one rank: an InfiniBand completion error, and the silent culprit of a hang.

The hang's culprit prints nothing of its own; with the 2.8 flight recorder it may still report the
dump signal another rank sent (``culprit_sees_dump_signal``). Everyone else's timeouts are ``watchdog``'s.
"""

from __future__ import annotations

from tools.synth import watchdog
from tools.synth.job import Job


def ib_completion_error(job: Job, r: int, t: float) -> tuple[str, float]:
    """Rank ``r``'s InfiniBand queue pair fails (retry counter exceeded); its peer sees the flush later.

    Returns the truth's details and when the rank's communicator aborts.
    """
    rng, p = job.rng, job.profile
    wk = job.workers[r]
    n = wk.node
    peer_node = (n + 1 + rng.randrange(job.nodes - 1)) % job.nodes
    peer_ip = job.ips[peer_node]
    port = rng.randrange(32768, 60999)
    tid = wk.pid + 200 + rng.randrange(50)
    pre = f"{job.hosts[n]}:{wk.pid}:{tid} [{wk.local}]"
    nccl_version = tuple(int(x) for x in p.nccl.split(".")[:2])
    if nccl_version >= (2, 24):
        warn = (f"NET/IB : Got completion from peer {peer_ip}<{port}> with status=12 opcode=0 len=0 vendor err 129 "
                f"(Recv) localGid ::ffff:{job.ips[n]} remoteGids::ffff:{peer_ip}")
    elif nccl_version >= (2, 19):
        warn = (f"NET/IB : Got completion from peer {peer_ip}<{port}> with error 12, opcode 0, len 0, vendor err 129 "
                f"(Recv) localGid ::ffff:{job.ips[n]} remoteGid ::ffff:{peer_ip}")
    else:
        warn = f"NET/IB : Got completion from peer {peer_ip}<{port}> with error 12, opcode 0, len 0, vendor err 129"
    job.print_rank(r, t, f"{pre} transport/net_ib.cc:1296 NCCL WARN {warn}", stream="o")
    job.print_rank_lines(r, t + 0.0001, [f"{pre} NCCL INFO transport/net.cc:1134 -> 6", f"{pre} NCCL INFO proxy.cc:679 -> 6",
                                         f"{pre} NCCL INFO proxy.cc:858 -> 6 [Proxy Thread]"], "log", "o")
    t2 = t + rng.uniform(0.3, 1.5)
    err = f"NCCL error: {watchdog.REMOTE_ERROR}, NCCL version {p.nccl}"
    if p.key == "2.1":
        job.print_rank(r, t2, f"{job.glog_tag(n, t2, 'ProcessGroupNCCL.cpp', p.cpp_line['some'])} {watchdog.SOME_NCCL_OPS_FAILED}", "glog")
        job.print_rank(r, t2, f"{job.glog_tag(n, t2, 'ProcessGroupNCCL.cpp', p.cpp_line['avoid'])} {watchdog.TAKING_PROCESS_DOWN}", "glog")
        job.print_rank_lines(r, t2 + 0.001, ["terminate called after throwing an instance of 'std::runtime_error'",
                                             f"  what():  {err}", watchdog.REMOTE_ERROR_EXPLAINED, "Last error:", warn], "raw")
    else:
        job.print_rank(r, t2, f"{job.glog_tag(n, t2, 'ProcessGroupNCCL.cpp', p.cpp_line['some'])} [Rank {r}] {watchdog.SOME_NCCL_OPS_FAILED}", "glog")
        job.print_rank(r, t2, f"{job.glog_tag(n, t2, 'ProcessGroupNCCL.cpp', p.cpp_line['avoid'])} [Rank {r}] {watchdog.TAKING_PROCESS_DOWN}", "glog")
        watchdog.terminate_block(job, r, t2 + 0.001, err, "checkForNCCLErrorsInternal", extra=[watchdog.REMOTE_ERROR_EXPLAINED, "Last error:", warn])
    # the peer on the other end sees its queue pair flushed a little later
    peers = [w for w in job.workers if w.node == peer_node and w.local == wk.local] or \
            [w for w in job.workers if w.node == peer_node]
    pw = peers[0]
    tp = t + rng.uniform(0.8, 4.0)
    ptid = pw.pid + 200 + rng.randrange(50)
    if nccl_version >= (2, 24):
        pwarn = (f"NET/IB : Got completion from peer {job.ips[n]}<{rng.randrange(32768, 60999)}> with status=5 opcode=0 "
                 f"len=1 vendor err 244 (Recv) localGid ::ffff:{peer_ip} remoteGids::ffff:{job.ips[n]}")
    elif nccl_version >= (2, 19):
        pwarn = (f"NET/IB : Got completion from peer {job.ips[n]}<{rng.randrange(32768, 60999)}> with error 5, opcode 0, "
                 f"len 1, vendor err 244 (Recv) localGid ::ffff:{peer_ip} remoteGid ::ffff:{job.ips[n]}")
    else:
        pwarn = f"NET/IB : Got completion from peer {job.ips[n]}<{rng.randrange(32768, 60999)}> with error 5, opcode 0, len 1, vendor err 244"
    job.print_rank(pw.rank, tp, f"{job.hosts[peer_node]}:{pw.pid}:{ptid} [{pw.local}] transport/net_ib.cc:1296 NCCL WARN {pwarn}",
                   stream="o")
    job.ib_peer = pw.rank
    return warn, t2 + 0.01


def culprit_sees_dump_signal(job: Job, root: int, first_timeout: tuple[float, int], seq: int) -> None:
    """The silent culprit's heartbeat monitor (2.8) still reports the first rank's dump signal.

    Its last enqueued and completed work are one below the stuck SeqNum ``seq``: it never enqueued it.
    """
    rn, pg, L = job.workers[root].node, job.pg_name(root), job.profile.cpp_line
    to = first_timeout[0] + job.rng.uniform(0.3, 1.0)
    job.print_rank(root, to, f"{job.glog_tag(rn, to, 'ProcessGroupNCCL.cpp', L['observed'])} {pg} Observed flight recorder "
                   "dump signal from another rank via TCPStore.", "glog")
    job.print_rank(root, to, f"{job.glog_tag(rn, to, 'ProcessGroupNCCL.cpp', L['dump'])} {pg} Received a dump signal due to "
                   f"a collective timeout from  rank {first_timeout[1]} and we will try our best to dump the debug "
                   f"info. Last enqueued NCCL work: {seq - 1}, last completed NCCL work: {seq - 1}.{watchdog.WATCHDOG_TAIL}",
                   "glog")
