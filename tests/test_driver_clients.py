"""The driver's client sessions (``zsched/driver/clients.py``): connected clients by routing
id, and the function table: a function is held while a connected client holds it, leaves
the table once none does, and is reported unused (for the executors to drop) once no task
holds it either, unless a client sent it again meanwhile."""
import gc

import pytest

from zsched import protocol as p
from zsched.driver.clients import ClientSessions

pytestmark = pytest.mark.unit

F = b"cloudpickled function f"
G = b"cloudpickled function g"
DF, DG = p.function_digest(F), p.function_digest(G)


def test_a_client_connects_once():
    sessions = ClientSessions()
    client = sessions.connect(b"rid-1", 4242)
    assert client.routing_id == b"rid-1" and client.pid == 4242
    assert sessions.connect(b"rid-1", 4242) is client  # a second hello: the same session
    assert sessions.get(b"rid-1") is client
    assert sessions.by_rid == {b"rid-1": client}


def test_a_disconnected_client_is_forgotten():
    sessions = ClientSessions()
    a = sessions.connect(b"a", 1)
    b = sessions.connect(b"b", 2)
    assert sessions.disconnect(b"a") is a
    assert sessions.get(b"a") is None
    assert sessions.get(b"b") is b
    assert sessions.disconnect(b"a") is None


def test_unknown_clients_are_not_found():
    assert ClientSessions().get(b"nobody") is None


def test_functions_sent_are_held_for_the_client():
    sessions = ClientSessions()
    client = sessions.connect(b"a", 1)
    assert sessions.add_functions(client, {DF: F, DG: G}) == 0
    assert set(sessions.functions) == {DF, DG}
    assert bytes(sessions.functions[DF].data) == F
    assert client.functions == {DF, DG}


def test_a_function_under_a_wrong_digest_is_refused():
    sessions = ClientSessions()
    client = sessions.connect(b"a", 1)
    assert sessions.add_functions(client, {DG: F, DF: F}) == 1
    assert set(sessions.functions) == {DF}
    assert client.functions == {DF}


def test_no_client_replaces_a_function_another_sent():
    sessions = ClientSessions()
    a, b = sessions.connect(b"a", 1), sessions.connect(b"b", 2)
    sessions.add_functions(a, {DF: F})
    held = sessions.functions[DF]
    sessions.add_functions(b, {DF: F})
    assert sessions.functions[DF] is held
    assert DF in b.functions


def test_a_function_forgotten_by_its_only_client_leaves_the_table():
    sessions = ClientSessions()
    client = sessions.connect(b"a", 1)
    sessions.add_functions(client, {DF: F, DG: G})
    sessions.forget_functions(client, [DF])
    assert set(sessions.functions) == {DG}
    assert client.functions == {DG}
    gc.collect()
    assert sessions.take_unused() == {DF}
    assert sessions.take_unused() == set()  # each once


def test_a_function_another_client_holds_stays():
    sessions = ClientSessions()
    a, b = sessions.connect(b"a", 1), sessions.connect(b"b", 2)
    sessions.add_functions(a, {DF: F})
    sessions.add_functions(b, {DF: F})
    sessions.forget_functions(a, [DF])
    assert DF in sessions.functions
    assert not sessions.has_unused()
    sessions.forget_functions(b, [DF])
    assert DF not in sessions.functions


def test_forgetting_a_function_the_client_never_sent_changes_nothing():
    sessions = ClientSessions()
    a, b = sessions.connect(b"a", 1), sessions.connect(b"b", 2)
    sessions.add_functions(a, {DF: F})
    sessions.forget_functions(b, [DF])
    assert DF in sessions.functions
    assert a.functions == {DF}


def test_release_after_a_client_left_drops_what_it_alone_held():
    sessions = ClientSessions()
    a, b = sessions.connect(b"a", 1), sessions.connect(b"b", 2)
    sessions.add_functions(a, {DF: F, DG: G})
    sessions.add_functions(b, {DG: G})
    sessions.disconnect(b"a")
    sessions.release(a.functions)
    assert set(sessions.functions) == {DG}


def test_a_function_a_task_holds_is_unused_only_once_the_task_lets_go():
    sessions = ClientSessions()
    client = sessions.connect(b"a", 1)
    sessions.add_functions(client, {DF: F})
    task_holds = sessions.functions[DF]  # as a queued task's function_blob does
    sessions.forget_functions(client, [DF])
    gc.collect()
    assert DF not in sessions.functions
    assert not sessions.has_unused()
    assert sessions.take_unused() == set()
    del task_holds
    gc.collect()
    assert sessions.has_unused()
    assert sessions.take_unused() == {DF}
    assert not sessions.has_unused()


def test_a_function_sent_again_is_not_reported_unused():
    sessions = ClientSessions()
    client = sessions.connect(b"a", 1)
    sessions.add_functions(client, {DF: F})
    task_holds = sessions.functions[DF]
    sessions.forget_functions(client, [DF])
    sessions.add_functions(client, {DF: F})  # a new task of it brings it again
    del task_holds
    gc.collect()
    assert sessions.take_unused() == set()
    assert DF in sessions.functions


@pytest.mark.parametrize("rows", [0, 1, 15, 16, 65535, 65536, 70_000])
def test_the_rows_of_a_results_frame_are_read_from_its_header(rows):
    from zsched.driver.clients import rows_in
    frame = p.encode(p.TaskResults([[1, 1, b""]] * rows))
    assert rows_in(frame) == rows
