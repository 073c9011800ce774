"""Results on their way to clients (``driver/clients.py``): a window per client, results
held on the driver past it, a client's tasks held past its backlog, and a client dropped
only when it is gone, its futures told why."""
import pytest

import zsched
from zsched.errors import DriverConnectionError


def test_a_failed_hand_over_to_a_client_in_the_drivers_process_fails_its_futures_with_the_reason():
    with zsched.LocalCluster(1, in_process=True) as cluster:
        broken = cluster.client()
        assert broken._transport.kind == "in-process"

        def from_driver(msg):
            raise RuntimeError("no room for results")
        broken._futures.from_driver = from_driver
        futures = [broken.submit(abs, -i) for i in range(3)]
        for future in futures:
            with pytest.raises(DriverConnectionError, match=r"dropped this client: handing it \w+ "
                                                            r"failed .*no room for results"):
                future.result(30)
        with cluster.client() as other:  # the driver serves on
            assert other.submit(abs, -5).result(30) == 5
