"""Issue 36, finding 4: logs survive the failure they explain. A cluster's own log folder goes at close, unless a
service failed (exited without the cluster stopping it) or the cluster did not start: then it stays, and stderr
says where."""

from __future__ import annotations

import os
import signal

import pytest

import tensorwire as tw


def test_a_clean_close_removes_the_log_folder(capsys):
    c = tw.LocalCluster(devices=["cpu:0"], autograd=False, collectives=False)
    logs = c.log_dir
    assert (logs / "cpu-0.log").exists()
    c.close()
    assert not logs.exists() and "logs are kept" not in capsys.readouterr().err


def test_a_crashed_worker_keeps_the_logs_and_says_where(capsys):
    c = tw.LocalCluster(devices=["cpu:0"], autograd=False, collectives=False)
    logs = c.log_dir
    worker = c.services["cpu:0"].proc
    os.kill(worker.pid, signal.SIGKILL)  # a crash, not a stop
    worker.wait(30)
    c.close()
    err = capsys.readouterr().err
    assert f"cpu:0 (exit code {-signal.SIGKILL}) exited; the services' logs are kept in {logs}" in err, err
    assert (logs / "cpu-0.log").exists() and (logs / "dispatcher.log").exists()


def test_a_cluster_that_does_not_start_keeps_the_log_its_error_names(capsys):
    with pytest.raises(tw.TensorwireError) as info:
        tw.LocalCluster(devices=["cpu:9999"], autograd=False, collectives=False)
    msg = str(info.value)
    path = msg.split("its log (", 1)[1].split(")", 1)[0]
    assert os.path.exists(path), msg
    assert "cpu:9999 (exit code 1) exited; the services' logs are kept in" in capsys.readouterr().err
