"""How a client and a cluster show themselves in a notebook (``_repr_html_``): a small
table of what the driver reports, escaped, with the dashboard's link when it serves one."""
import html


def status_table(title, address, status=None, error=None, rows=()):
    """An HTML table headed ``title``: ``address``, then ``rows`` (label, text), then the
    executors, cores and tasks of ``status`` (a client's ``status()``), or ``error``
    when the driver could not be asked."""
    lines = [("Address", html.escape(str(address)))]
    lines += [(label, html.escape(str(text))) for label, text in rows]
    if status is not None:
        executors = status.get("executors", [])
        tasks = status.get("tasks", {})
        lines += [
            ("Application", html.escape(str(status.get("app_id")))),
            ("Executors", len(executors)),
            ("Cores", sum(e.get("cores", 0) for e in executors)),
            ("Tasks running", tasks.get("running", 0)),
            ("Tasks queued", tasks.get("queued", 0)),
            ("Tasks done", tasks.get("finished", 0)),
            ("Tasks failed", tasks.get("failed", 0)),
        ]
        url = status.get("dashboard_url")
        if url:
            link = html.escape(url, quote=True)
            lines.append(("Dashboard", f'<a href="{link}" target="_blank">{html.escape(url)}</a>'))
    elif error is not None:
        lines.append(("Status", html.escape(error)))
    body = "".join(f'<tr><th style="text-align: left">{label}</th><td style="text-align: left">'
                   f"{text}</td></tr>" for label, text in lines)
    return (f'<div class="zsched"><strong>{html.escape(title)}</strong>'
            f"<table>{body}</table></div>")
