"""``farm serve``: a read-only web monitor of the frame stores under a folder (Flask on waitress).

Routes (``<store>``: a store's path relative to the folder, as ``GET /api/jobs`` lists it)::

    GET /                                       the jobs, refreshing itself while one runs
    GET /jobs/<store>                           a job: its frames as thumbnails with progress, its priority and
                                                the tail of its log, refreshing itself
    GET /api/jobs                               JSON: one object per job (``farm.monitor.JobSummary``)
    GET /api/jobs/<store>                       JSON: the job, with ``per_frame`` (as ``farm status --json``)
    GET /api/jobs/<store>/frames/<frame>.png    the frame from the samples done so far (``?max=N``: a thumbnail)
    GET /api/jobs/<store>/renders/<frame>.png   an optimization's: the frame's render of its last iteration
    GET /api/jobs/<store>/targets/<frame>.png   an optimization's: the frame's target (``?max=N`` both)
    GET /api/queue                              JSON: the shared cluster's queue (``farm.queue_view.QueueView``)

Given a cluster's Ray address (``farm serve --address``), the job list also shows that cluster's
queue as ``farm queue`` lists it, read by a ``farm queue --watch`` child (``farm.queue_view``):
a queue that cannot be read is one line on the page, never an error of the page's.

An optimization's store (``farm optimize``) is listed with its iteration and loss; its page shows
the loss curve, the parameters and each frame's render beside its target, and its JSON is
``farm status --json``'s.

Every store is read through ``farm.monitor``, which opens stores read-only and answers only for
the stores it finds under the folder: any other name, however encoded, is a 404 (nothing outside
the folder is ever opened). A damaged store is listed as damaged, with its reason.
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

from flask import Flask, abort, jsonify, render_template_string, request, url_for

from farm import monitor
from farm.errors import FarmError
from farm.queue_view import QueueView, QueueWatch

if TYPE_CHECKING:
    from flask.json.provider import DefaultJSONProvider

__all__ = ["make_app", "serve"]

_REFRESH_S = {"running": 2, "new": 3, "stalled": 10}  # how often a page reloads while its jobs are in these states
_QUEUE_REFRESH_S = 5  # how often the job list reloads while it shows a cluster's queue (which changes unseen)
_PREVIEWS = 512  # cached preview images (a frame whose records did not change is not read again)

_STYLE = """<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222} table{border-collapse:collapse}
td,th{padding:.25em .8em;text-align:left;border-bottom:1px solid #ddd} .num{text-align:right}
.damaged,.failed,.stalled,.paused{color:#b00} .done{color:#070} .running,.rendering{color:#05a} .error{color:#b00}
.grid{display:flex;flex-wrap:wrap;gap:.8em} figure{margin:0;width:{{ thumb }}px}
figure img{width:{{ thumb }}px;image-rendering:pixelated;background:#888} figcaption{font-size:12px}
progress{width:100%}
</style>"""

_LIST = """<!doctype html><html><head><meta charset="utf-8"><title>farm: jobs</title>
{% if refresh %}<meta http-equiv="refresh" content="{{ refresh }}">{% endif %}""" + _STYLE + """</head><body>
<h1>Jobs under {{ root }}</h1>
{% if not jobs %}<p>No frame stores here.</p>{% else %}
<table><tr><th>store</th><th>state</th><th class="num">frames</th><th class="num">samples</th>
<th class="num">rate</th><th class="num">ETA</th><th>scene, or what is wrong</th></tr>
{% for j in jobs %}<tr>
<td><a href="{{ url_for('job_page', store=j.store) }}">{{ j.store }}</a></td><td class="{{ j.state }}">{{ j.state }}{% if j.phase %}: {{ j.phase }}{% endif %}</td>
{% if j.state == "damaged" %}<td></td><td></td><td></td><td></td><td class="error">{{ j.error }}</td>
{% else %}<td class="num">{{ j.frames_done }}/{{ j.frames }}</td>
<td class="num">{{ pct(j.samples_done, j.samples_total) }} of {{ j.spp }} spp</td>
<td class="num">{{ rate(j.rate) }}</td><td class="num">{{ clock(j.eta_s) }}</td>
<td>{{ basename(j.scene) }}{% if j.error %} <span class="error">{{ j.error }}</span>{% endif %}{% if j.failures.count %}
<span class="retries">{{ j.failures.count }} {{ "retry" if j.failures.count == 1 else "retries" }}</span>{% endif %}{% if j.failures.left_out %}
<span class="error">{{ j.failures.left_out | length }} host(s) left out</span>{% endif %}</td>{% endif %}
</tr>{% endfor %}</table>{% endif %}
</body></html>"""

_QUEUE = """{% if queue %}<h2>Queue of the cluster at {{ queue.address }}</h2>
{% if queue.error %}<p class="error queue">The queue cannot be read: {{ queue.error }}</p>
{% elif queue.seen_at is none %}<p class="queue">The queue has not answered yet.</p>
{% elif not queue.rows %}<p class="queue">No shared queue: no farm job is queued on this cluster.</p>
{% else %}<table class="queue"><tr><th class="num">#</th><th class="num">priority</th><th>state</th>
<th class="num">groups held</th><th class="num">share</th><th>store</th></tr>
{% for r in queue.rows %}<tr><td class="num">{{ loop.index }}</td><td class="num">{{ r.priority }}</td>
<td class="{{ r.state }}">{{ r.state }}</td><td class="num">{{ r.held }}/{{ r.wants }}</td><td class="num">{{ r.share }}</td>
<td>{% if r.store in served %}<a href="{{ url_for('job_page', store=served[r.store]) }}">{{ r.store }}</a>{% else %}{{ r.store }}{% endif %}</td></tr>
{% endfor %}</table><p>as of {{ ago(queue.seen_at) }}</p>{% endif %}{% endif %}"""

_JOB = """<!doctype html><html><head><meta charset="utf-8"><title>farm: {{ j.store }}</title>
{% if refresh %}<meta http-equiv="refresh" content="{{ refresh }}">{% endif %}""" + _STYLE + """</head><body>
<p><a href="{{ url_for('job_list') }}">all jobs</a></p>
<h1>{{ j.store }} <span class="{{ j.state }}">{{ j.state }}{% if j.phase %}: {{ j.phase }}{% endif %}</span></h1>
{% if j.state == "damaged" %}<p class="error">{{ j.error }}</p>{% else %}
<table>
<tr><th>scene</th><td>{{ j.scene }}</td></tr>
<tr><th>frames</th><td>{{ j.first_frame }}-{{ j.first_frame + j.frames - 1 }}: {{ j.frames_done }} of {{ j.frames }} done</td></tr>
<tr><th>film</th><td>{{ j.width }}x{{ j.height }}, {% if j.noise_target is not none %}noise target {{ j.noise_target }},
up to {% endif %}{{ j.spp }} spp</td></tr>
<tr><th>samples</th><td>{{ pct(j.samples_done, j.samples_total) }} ({{ j.samples_done }} of {{ j.samples_total }} pixel samples)</td></tr>
<tr><th>rate</th><td>{{ rate(j.rate) }} (the last run's, in its steady state)</td></tr>
<tr><th>ETA</th><td>{{ clock(j.eta_s) }}</td></tr>
<tr><th>last note</th><td>{{ ago(j.updated) }}</td></tr>
{% if j.error %}<tr><th>last error</th><td class="error">{{ j.error }}</td></tr>{% endif %}
{% if j.damaged_tasks %}<tr><th>damaged</th><td class="error">{{ j.damaged_tasks }} record(s) do not read back;
`farm resume` renders them again</td></tr>{% endif %}
{% if j.failures.count %}<tr><th>retries</th><td>{{ j.failures.count }} of {{ j.failures.tasks }} task(s) in the last run
<ul class="retries">{% for t in j.failures.retried %}<li>{{ t.task }}: {{ t.retries }}x; {{ t.reasons | join("; ") }}</li>{% endfor %}</ul></td></tr>{% endif %}
{% for h in j.failures.left_out %}<tr><th>left out</th><td class="error">{{ h.host }}, after {{ h.failures }} failed task(s)
(last: {{ h.reason }})</td></tr>{% endfor %}
{% if notes %}<tr><th>priority</th><td class="priority">{{ notes.priority }} in a shared cluster's queue{% if notes.paused %},
<span class="error">paused</span> (`farm unpause`){% endif %}</td></tr>{% endif %}
</table>
<p><progress max="{{ j.samples_total }}" value="{{ j.samples_done }}"></progress></p>
<div class="grid">{% for f in j.per_frame %}<figure>
<a href="{{ url_for('frame_png', store=j.store, frame=f.frame) }}"><img alt="frame {{ f.frame }}"
 src="{{ url_for('frame_png', store=j.store, frame=f.frame, max=thumb) }}"></a>
<figcaption>frame {{ f.frame }}: <span class="{{ f.state }}">{{ f.state }}</span><br>
{{ "%.1f" | format(f.spp) }}/{{ j.spp }} spp, noise {{ noise(f.noise) }}{% if f.eta_s is not none %}, ETA {{ clock(f.eta_s) }}{% endif %}
<progress max="1" value="{{ f.done }}"></progress></figcaption></figure>{% endfor %}</div>
{% if notes and notes.log_tail %}<h2>Log</h2><pre class="log">{{ notes.log_tail | join("\n") }}</pre>{% endif %}
{% endif %}</body></html>"""


_OPTIMIZATIONS = """{% if optimizations %}<h2>Optimizations</h2>
<table><tr><th>store</th><th>state</th><th class="num">iteration</th><th class="num">loss</th></tr>
{% for o in optimizations %}<tr><td><a href="{{ url_for('job_page', store=o.store) }}">{{ o.store }}</a></td>
<td class="{{ o.state }}">{{ o.state }}</td><td class="num">{{ o.iteration }}/{{ o.iterations }}</td>
<td class="num">{{ loss(o.loss) }}</td></tr>{% endfor %}</table>{% endif %}"""

_OPTIMIZATION = """<!doctype html><html><head><meta charset="utf-8"><title>farm: {{ o.store }}</title>
{% if refresh %}<meta http-equiv="refresh" content="{{ refresh }}">{% endif %}""" + _STYLE + """</head><body>
<p><a href="{{ url_for('job_list') }}">all jobs</a></p>
<h1>{{ o.store }} <span class="{{ o.state }}">{{ o.state }}</span></h1>
<table>
<tr><th>iteration</th><td>{{ o.iteration }} of {{ o.iterations }}</td></tr>
<tr><th>loss</th><td>{{ loss(o.loss) }} ({{ o.loss_kind }}; {{ o.optimizer }} at {{ o.learning_rate }})</td></tr>
<tr><th>rate</th><td>{{ "-" if not o.iterations_per_s else "%.3g iterations/s" | format(o.iterations_per_s) }}</td></tr>
{% if o.error %}<tr><th>last error</th><td class="error">{{ o.error }}</td></tr>{% endif %}
{% for key, values in o.parameters.items() %}<tr><th>{{ key }}</th><td>{{ shown(values) }}</td></tr>{% endfor %}
</table>
{% if curve %}<p><svg width="{{ curve.width }}" height="{{ curve.height }}" role="img" aria-label="loss by iteration">
<rect width="100%" height="100%" fill="#f6f6f6"/>
<polyline fill="none" stroke="#05a" stroke-width="1.5" points="{{ curve.points }}"/>
<text x="4" y="12" font-size="11">{{ loss(curve.high) }}</text><text x="4" y="{{ curve.height - 4 }}" font-size="11">{{ loss(curve.low) }}</text>
</svg><br>loss by iteration (log scale)</p>{% endif %}
<div class="grid">{% for frame in frames %}
{% if o.iteration %}<figure><img alt="render of frame {{ frame }}" src="{{ url_for('optimization_png', store=o.store, kind='renders', frame=frame, max=thumb) }}">
<figcaption>frame {{ frame }}: iteration {{ o.iteration }}</figcaption></figure>{% endif %}
<figure><img alt="target of frame {{ frame }}" src="{{ url_for('optimization_png', store=o.store, kind='targets', frame=frame, max=thumb) }}">
<figcaption>frame {{ frame }}: target</figcaption></figure>{% endfor %}</div>
</body></html>"""


def _curve(losses: list[float], width: int = 480, height: int = 160) -> dict[str, Any] | None:
    """An SVG polyline of ``losses`` by iteration, log-scaled (None below two positive values)."""
    values = [v for v in losses if v > 0 and math.isfinite(v)]
    if len(values) < 2 or len(values) != len(losses):
        return None
    low, high = math.log(min(values)), math.log(max(values))
    span = (high - low) or 1.0
    step = (width - 8) / (len(values) - 1)
    points = " ".join(f"{4 + i * step:.1f},{4 + (height - 8) * (high - math.log(v)) / span:.1f}"
                      for i, v in enumerate(values))
    return {"points": points, "width": width, "height": height, "low": min(values), "high": max(values)}


def _clock(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _helpers() -> dict[str, Any]:
    import time
    return {
        "clock": _clock,
        "rate": lambda r: "-" if not r else f"{r / 1e6:.2f} M samples/s",
        "pct": lambda done, total: f"{100 * done / total:.1f}%" if total else "-",
        "ago": lambda t: "none yet" if t is None else f"{max(0, time.time() - t):.0f} s ago",
        "basename": lambda p: os.path.basename(p or ""),
        "noise": lambda n: "-" if n is None else f"{n:.4f}",
        "loss": lambda v: "-" if v is None else f"{v:.5g}",
        "shown": lambda values: ", ".join(f"{v:.5g}" for v in values[:6]) + (", ..." if len(values) > 6 else ""),
        "thumb": 240,
    }


def _refresh(states: Iterable[str]) -> int | None:
    """Seconds after which a page of jobs in ``states`` reloads itself (None: it does not)."""
    waits = [_REFRESH_S[state] for state in states if state in _REFRESH_S]
    return min(waits) if waits else None


def _served(root: str, rows: Iterable[dict[str, object]], stores: Iterable[str]) -> dict[str, str]:
    """{store as the queue names it: its name under ``root``} for the queue's stores that are
    among ``stores`` (local paths; a URL is never one of ours)."""
    here = {os.path.join(os.path.realpath(root), s.replace("/", os.sep)): s for s in stores}
    named = (str(r["store"]) for r in rows)
    return {n: here[os.path.realpath(n)] for n in named if os.path.isabs(n) and os.path.realpath(n) in here}


def make_app(root: str, queue: QueueWatch | None = None) -> Flask:
    """The Flask application serving the stores under the folder ``root`` (and the cluster's
    queue that ``queue`` watches, where there is one)."""
    app = Flask(__name__, static_folder=None)  # no static route: nothing but what monitor answers
    cast("DefaultJSONProvider", app.json).sort_keys = False  # (Flask's default provider)
    app.url_map.merge_slashes = False  # '//x' names no store: a 404, not a redirect to '/x'
    previews: dict[tuple[str, str, str], bytes] = {}

    def summary(store):
        try:
            return monitor.summarize(root, store)
        except LookupError:
            abort(404)

    def optimization(store):
        try:
            return monitor.optimization(root, store)
        except LookupError:
            abort(404)

    def split():
        """(render jobs' summaries, optimizations' objects) of the stores under the root."""
        jobs, optimizations = [], []
        for s in monitor.find_stores(root):
            o = monitor.optimization(root, s)
            (jobs if o is None else optimizations).append(monitor.summarize(root, s) if o is None else o)
        return jobs, optimizations

    @app.get("/")
    def job_list():
        jobs, optimizations = split()
        refresh = _refresh([*(j.state for j in jobs), *(o["state"] for o in optimizations)])
        page = _LIST.replace("{% if not jobs %}<p>No frame stores here.</p>",
                             "{% if not jobs and not optimizations %}<p>No frame stores here.</p>{% elif not jobs %}")
        seen = None if queue is None else queue.view()
        served = {} if seen is None else _served(root, seen.rows, [j.store for j in jobs])
        if seen is not None:
            refresh = min(refresh or _QUEUE_REFRESH_S, _QUEUE_REFRESH_S)
        return render_template_string(page.replace("</body>", _OPTIMIZATIONS + _QUEUE + "</body>"), jobs=jobs,
                                      optimizations=optimizations, root=os.path.abspath(root), refresh=refresh,
                                      queue=seen, served=served, **_helpers())

    @app.get("/jobs/<path:store>")
    def job_page(store):
        o = optimization(store)
        if o is not None:
            frames = range(o["frames"][0], o["frames"][1] + 1)
            return render_template_string(_OPTIMIZATION, o=o, curve=_curve(o["losses"]), frames=frames,
                                          refresh=_refresh([o["state"]]), **_helpers())
        j = summary(store)
        return render_template_string(_JOB, j=j, notes=monitor.job_notes(root, store), refresh=_refresh([j.state]),
                                      **_helpers())

    @app.get("/api/jobs")
    def api_jobs():
        jobs, optimizations = split()
        return jsonify([j.to_json() for j in jobs] + optimizations)

    @app.get("/api/queue")
    def api_queue():
        return jsonify((queue.view() if queue is not None else QueueView(None)).to_json())

    @app.get("/api/jobs/<path:store>")
    def api_job(store):
        o = optimization(store)
        return jsonify(o if o is not None else summary(store).to_json(frames=True))

    @app.get("/api/jobs/<path:store>/<any(renders, targets):kind>/<int:frame>.png")
    def optimization_png(store, kind, frame):
        size = request.args.get("max", type=int)
        if size is not None and not 8 <= size <= 4096:
            abort(400, "max: 8 to 4096 pixels")
        try:
            png = monitor.optimization_image(root, store, kind[:-1], frame, size)
        except LookupError:
            abort(404)
        except FarmError as e:
            abort(409, str(e))
        response = app.response_class(png, mimetype="image/png")
        response.headers["Cache-Control"] = "no-cache"  # the render changes every iteration
        return response

    @app.get("/api/jobs/<path:store>/frames/<int:frame>.png")
    def frame_png(store, frame):
        size = request.args.get("max", type=int)
        if size is not None and not 8 <= size <= 4096:
            abort(400, "max: 8 to 4096 pixels")
        if len(previews) > _PREVIEWS:
            previews.clear()
        try:
            png, tag = monitor.preview(root, store, frame, size, cache=previews)
        except LookupError:
            abort(404)
        except FarmError as e:
            abort(409, str(e))
        response = app.response_class(png, mimetype="image/png")
        response.set_etag(tag)
        response.headers["Cache-Control"] = "no-cache"  # may change while the frame renders: ask each time
        return response.make_conditional(request)

    @app.after_request
    def headers(response):
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Content-Security-Policy"] = "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'"
        return response

    return app


def serve(root: str, host: str = "127.0.0.1", port: int = 8600, log: Callable[[str], object] = print,
          ready: Callable[[Any], object] | None = None, address: str | None = None) -> None:
    """Serve the stores under ``root`` on ``host``:``port`` until interrupted (port 0: a free
    one), and the queue of the cluster at the Ray ``address`` where one is given. ``ready(server)``
    is called once it listens (its port: ``server.effective_port``)."""
    import waitress
    if not os.path.isdir(root):
        raise FarmError(f"{root}: not a folder")
    queue = None if address is None else QueueWatch(address)
    try:
        server = waitress.create_server(make_app(root, queue), host=host, port=port, threads=8)
    except OSError as e:  # the port is taken, the host is not this machine's
        raise FarmError(f"cannot serve on {host}:{port}: {e.strerror or e}") from None
    watching = "" if address is None else f", and the queue of the cluster at {address}"
    log(f"serving the jobs under {root}{watching} at http://{host}:{server.effective_port}/ (Ctrl-C stops)")
    if ready is not None:
        ready(server)
    try:
        server.run()
    finally:
        server.close()
        if queue is not None:
            queue.close()
