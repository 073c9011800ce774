"""The in-process channel between a driver and the clients in its process
(zsched/channel.py): what each side may ask of it."""
import threading

from zsched.channel import Channel, Endpoint


def _endpoint(log):
    return Endpoint(take=list, deliver=log.append, stopped=lambda: log.append("stopped"))


def test_endpoints_arrive_once_with_keys_no_router_peer_has():
    channel = Channel("inproc://x")
    first, second = _endpoint([]), _endpoint([])
    key1 = channel.connect(first)
    key2 = channel.connect(second)
    assert key1 != key2 and key1[0] == 0 and len(key1) != 5  # ZeroMQ's own ids have five bytes
    assert channel.arrivals() == [first, second]
    assert channel.arrivals() == []
    assert first.key == key1
    channel.close()


def test_open_only_while_its_driver_thread_serves_and_until_closed():
    channel = Channel()
    assert not channel.is_open() and not channel.in_driver_thread()
    serving, release = threading.Event(), threading.Event()
    seen = {}

    def driver():
        channel.serve_in_this_thread()
        seen["in_driver_thread"] = channel.in_driver_thread()
        serving.set()
        release.wait(10)

    thread = threading.Thread(target=driver)
    thread.start()
    try:
        assert serving.wait(10)
        assert channel.is_open() and seen["in_driver_thread"]
        assert not channel.in_driver_thread()  # the test's thread is not the driver's
        untaken = _endpoint([])
        channel.connect(untaken)
        assert channel.close() == [untaken]    # the driver tells those it never took
        assert not channel.is_open()
    finally:
        release.set()
        thread.join(10)


def test_a_wakeup_is_readable_by_the_driver():
    import select
    channel = Channel()
    channel.wake()
    assert select.select([channel.wakeup.fd], [], [], 5)[0]
    channel.wakeup.clear()
    channel.close()
