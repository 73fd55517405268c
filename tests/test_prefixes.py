from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from correlator.extract.prefixes import clean, frame_at, nccl_origin, rank_in_text, split_prefix


@pytest.mark.parametrize(("line", "task", "local", "rank", "msg"), [
    ("3: [default1]:[rank25]: Traceback", 3, 1, 25, "Traceback"),
    ("  12: hello", 12, None, None, "hello"),
    ("[default3]:foo", None, 3, None, "foo"),
    ("[rank5]:[E0302 14:07:31.1 x] y", None, None, 5, "[E0302 14:07:31.1 x] y"),
    ("[trainer2]:[rank10]:x", None, 2, 10, "x"),
    ("[1,25]<stdout>:msg", None, None, 25, "msg"),
    ("plain [Rank 5] Watchdog", None, None, None, "plain [Rank 5] Watchdog"),
    ("2026-03-02 14:00:00 x", None, None, None, "2026-03-02 14:00:00 x"),
])
def test_split_prefix(line, task, local, rank, msg):
    p, m = split_prefix(line)
    assert (p.task, p.local_rank, p.rank, m) == (task, local, rank, msg)


def test_rank_in_text_and_nccl_origin():
    assert rank_in_text("[Rank 5] Watchdog caught") == 5
    assert rank_in_text("no rank") is None
    assert nccl_origin("gpu-a09:12345:12399 [5] NCCL INFO comm") == ("gpu-a09", 12345, 5)
    # WARN lines carry NCCL's source file:line before "NCCL" (nccl-tests #252, NCCL #1405)
    assert nccl_origin("kolyoz2:25146:25854 [0] ib_plugin.c:1105 NCCL WARN NET/IB : Got completion") == ("kolyoz2", 25146, 0)
    assert nccl_origin("node05:4021:4195 [2] transport/net_ib.cc:838 NCCL WARN NET/IB : x") == ("node05", 4021, 2)


def test_progress_frame_and_ansi():
    line = " 50%|#####     | 5/10 [00:01<00:01]\rOSError: [Errno 5] Input/output error"
    assert frame_at(line, line.index("OSError")) == "OSError: [Errno 5] Input/output error"
    assert clean("\x1b[31mERROR\x1b[0m boom\r") == "ERROR boom"


@given(st.text(max_size=200))
def test_split_never_raises(text):
    p, msg = split_prefix(text)
    assert text.endswith(msg) or msg == text[p.length + 1:]


@pytest.mark.parametrize(("line", "host", "pid", "rank", "msg"), [
    ("worker-1: [2023-04-14 13:11:27,885] [INFO] x", "worker-1", None, None, "[2023-04-14 13:11:27,885] [INFO] x"),
    ("gpu-a09: [default3]:[rank25]: boom", "gpu-a09", None, 25, "boom"),
    ("(WorkerDict pid=26110, ip=10.0.0.7) [rank7]:[W1120 x] y", "10.0.0.7", 26110, 7, "[W1120 x] y"),
    ("node001: [1,25]<stdout>:msg", "node001", None, 25, "msg"),
    ("rank0: loss 2.3", None, None, None, "rank0: loss 2.3"),
    ("ERROR: boom", None, None, None, "ERROR: boom"),
    ("epoch1: x", None, None, None, "epoch1: x"),
    ("slurmstepd-ideafix03: error: Detected 1 oom_kill event", None, None, None,
     "slurmstepd-ideafix03: error: Detected 1 oom_kill event"),
])
def test_pdsh_and_ray_prefixes(line, host, pid, rank, msg):
    p, m = split_prefix(line)
    assert (p.host, p.pid, p.rank, m) == (host, pid, rank, msg)


def test_mpirun_timestamp_output_tag_gives_the_rank_and_keeps_the_stamp():
    prefix, msg = split_prefix("2019-06-02T16:13:44.884Z: [1,12]<stdout>:gpu-a01:815:864 [0] NCCL WARN NET/IB : x")
    assert prefix.rank == 12 and prefix.task is None and prefix.stamp == "2019-06-02T16:13:44.884Z"
    assert msg == "gpu-a01:815:864 [0] NCCL WARN NET/IB : x"
    assert split_prefix("2019-06-02T16:13:44.884Z: not a tag")[0].rank is None
    # SageMaker's mpirun: "[1,mpirank:7,algo-1]<stderr>:"
    prefix, msg = split_prefix("[1,mpirank:7,algo-1]<stderr>:FileNotFoundError: [Errno 2] No such file")
    assert prefix.rank == 7 and msg.startswith("FileNotFoundError")


def test_host_and_local_rank_tag():
    prefix, msg = split_prefix("[gpu187:2]:torch.cuda.OutOfMemoryError: CUDA out of memory.")
    assert (prefix.host, prefix.local_rank, prefix.rank) == ("gpu187", 2, None)
    assert msg.startswith("torch.cuda.OutOfMemoryError")
    prefix, msg = split_prefix("[ip-10-0-1-5:3]:[rank11]:ValueError: x")
    assert (prefix.host, prefix.local_rank, prefix.rank, msg) == ("ip-10-0-1-5", 3, 11, "ValueError: x")
