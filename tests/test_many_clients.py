"""Fifty clients, each a process of its own, connect to one driver at once and submit 10^4
tasks each: every task completes with its own client's result, and nothing is left
running."""
import json
import os
import subprocess
import sys

import pytest

import zsched
from conftest import wait_for

CLIENTS = 50
TASKS = 10_000

# A client: ready once zsched is imported, then connects when told (one line on stdin),
# submits its tasks (by submit, or by map one call a task) and prints what came back.
CLIENT = r"""
import json, sys
import zsched

address, credential, how = sys.argv[1], sys.argv[2], sys.argv[3]
first, n = int(sys.argv[4]), int(sys.argv[5])

def square(x):
    return x * x

print("ready", flush=True)
sys.stdin.readline()
xs = range(first, first + n)
with zsched.Client(address, secret_file=credential, timeout=120) as client:
    if how == "submit":
        futures = [client.submit(square, x) for x in xs]
        results = [f.result(300) for f in futures]
    else:
        results = list(client.map(square, xs, chunksize=1, timeout=300))
print(json.dumps({"right": results == [x * x for x in xs], "results": len(results)}), flush=True)
"""

pytestmark = pytest.mark.timeout(300)


def start_client(k, address, credential):
    how = "submit" if k % 2 == 0 else "map"
    return subprocess.Popen([sys.executable, "-c", CLIENT, address, credential, how, str(k * TASKS), str(TASKS)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})


def test_fifty_clients_connect_at_once_and_each_gets_its_own_results():
    with zsched.LocalCluster(n_executors=2, cores_per_executor=1) as cluster:
        credential = cluster.client_credential()
        # half over TCP, half over the driver's Unix socket
        addresses = [cluster.address, cluster.local_address]
        clients = [start_client(k, addresses[k % 2], credential) for k in range(CLIENTS)]
        try:
            for client in clients:
                line = client.stdout.readline()
                assert line == "ready\n", (line, client.stderr.read() if client.poll() is not None else "")
            for client in clients:  # all connect at once
                client.stdin.write("go\n")
                client.stdin.flush()
            outcomes = []
            for client in clients:
                out, err = client.communicate(timeout=240)
                assert client.returncode == 0, err[-3000:]
                outcomes.append(json.loads(out.splitlines()[-1]))
        finally:
            for client in clients:
                if client.poll() is None:
                    client.kill()
                    client.wait()
        assert outcomes == [{"right": True, "results": TASKS}] * CLIENTS
        with cluster.client() as client:
            wait_for(lambda: client.status()["tasks"]["running"] == 0, 30, message="nothing running")
            tasks = client.status()["tasks"]
            assert (tasks["finished"], tasks["failed"], tasks["queued"], tasks["running"]) == (
                CLIENTS * TASKS, 0, 0, 0)
            assert client.submit(abs, -5).result(30) == 5  # the driver serves on
