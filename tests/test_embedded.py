"""How ``Client()`` with no address gets its cluster (zsched/embedded.py)."""
import pytest

from zsched import embedded

pytestmark = pytest.mark.unit


def test_the_zsched_package_registers_the_embedded_cluster():
    assert embedded._factory is not None


def test_without_a_registered_factory_client_says_what_is_missing(monkeypatch):
    monkeypatch.setattr(embedded, "_factory", None)
    with pytest.raises(RuntimeError, match="no embedded cluster is registered"):
        embedded.start_cluster(1)


def test_the_registered_factory_is_called_with_the_executors_wanted(monkeypatch):
    calls = []
    monkeypatch.setattr(embedded, "_factory", calls.append)
    embedded.start_cluster(3)
    assert calls == [3]
