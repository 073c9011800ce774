"""The driver's read-only live dashboard and Prometheus metrics, served over HTTP.

``DashboardServer`` serves a page (``static/``) that polls the driver's latest published
snapshot, the snapshot itself as JSON (``/api/status``) and its Prometheus exposition
(``/metrics``). ``dashboard_token`` derives the token that guards them from the cluster's
secret, so anyone holding the secret can open the dashboard.
"""
from .auth import dashboard_token
from .server import DashboardServer

__all__ = ["DashboardServer", "dashboard_token"]
