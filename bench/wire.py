"""Students without a browser: the load test's students speaking Streamlit's own protocol.

In a class the browsers run on the students' machines; on one benchmark machine ten
Chromium sessions take 1.6 of its 2 cores (``bench/load.py``), and every latency is mostly
their wait. A ``WireSession`` is what a browser tab is to the server and nothing more: one
websocket to ``/_stcore/stream``, a ``rerun_script`` message for each page opened or widget
changed (its query string, its page, the widget values this student set), and the
``ForwardMsg`` stream back until the run's ``script_finished``. Timed from the message sent
to the run finished, an interaction is the server's answer, without the rendering a
student's own machine then does (0.5-0.8 s in a quiet Chromium, ``bench/page_idle.py``).

The students do what load.py's do, and check what they get as a browser student does: the
translation changed, the map titled with the new kind, the count of heads removed; an
exception on the page is an error. When the class ends each opens its page once more, all
at about the same time ("open a page again": the server warm, unlike the first opening).
"""

from __future__ import annotations

import asyncio
import random
import time
import urllib.parse

SENTENCE_LABEL = "English sentence"  # the text box both pages ask for the source in
KIND_LABEL = "Attention kind"
HEADS_LABEL = "Heads to remove"  # the "Remove heads" section's multiselect
FINISHED = (0, 3)  # ScriptFinishedStatus: FINISHED_SUCCESSFULLY, FINISHED_FRAGMENT_RUN_...


class WireError(RuntimeError):
    """The page showed an exception, or its answer lacked what the student waited for."""


class WireSession:
    """One student's session: a websocket, the widgets the last run drew, the values set."""

    def __init__(self, url: str, timeout: float):
        self.url, self.timeout = url, timeout
        self.ws = None
        self.widgets: dict[str, str] = {}  # label -> widget id, from the last run
        self.states: dict[str, object] = {}  # widget id -> WidgetState this student set
        self.page, self.query = "", ""

    async def connect(self) -> None:
        import websockets

        stream = self.url.replace("http://", "ws://", 1) + "/_stcore/stream"
        self.ws = await websockets.connect(stream, subprotocols=["streamlit"], max_size=None)

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()

    async def open(self, page: str, query: dict | None = None) -> list:
        """Open a page (as a browser's first visit: no widget values); its elements."""
        self.page, self.query, self.states = page, urllib.parse.urlencode(query or {}), {}
        return await self.rerun()

    async def set(self, label: str, field: str, value) -> list:
        """Give the widget labelled ``label`` a value (``field`` of WidgetState: the value's
        type, e.g. "string_value"), as a click or a key does; the elements of the rerun."""
        from streamlit.proto.WidgetStates_pb2 import WidgetState

        wid = next((w for lab, w in self.widgets.items() if lab.startswith(label)), None)
        if wid is None:
            raise WireError(f"no widget {label!r} on the page")
        state = WidgetState(id=wid)
        target = getattr(state, field)
        if isinstance(value, list):
            target.data.extend(value)
        else:
            setattr(state, field, value)
        self.states[wid] = state
        return await self.rerun()

    async def rerun(self) -> list:
        """Send one rerun_script; read the stream until the run finished (a run the server
        ended early for a rerun it started itself is followed to its end)."""
        from streamlit.proto.BackMsg_pb2 import BackMsg

        msg = BackMsg()
        msg.rerun_script.query_string = self.query
        msg.rerun_script.page_name = self.page
        msg.rerun_script.widget_states.widgets.extend(self.states.values())
        await self.ws.send(msg.SerializeToString())
        return await asyncio.wait_for(self._until_finished(), self.timeout)

    async def _until_finished(self) -> list:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        elements = []
        while True:
            fwd = ForwardMsg()
            fwd.ParseFromString(await self.ws.recv())
            kind = fwd.WhichOneof("type")
            if kind == "new_session":
                elements = []  # a rerun of its own starts afresh
            elif kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                elements.append(fwd.delta.new_element)
            elif kind == "script_finished" and fwd.script_finished in FINISHED:
                break
        self.widgets = {}
        for el in elements:
            which = el.WhichOneof("type")
            if which == "exception":
                raise WireError("exception on the page")
            inner = getattr(el, which)
            if getattr(inner, "id", "") and getattr(inner, "label", ""):
                self.widgets[inner.label] = inner.id
        return elements


def markdowns(elements: list) -> list[str]:
    """The text of each Markdown element of a run."""
    return [el.markdown.body for el in elements if el.WhichOneof("type") == "markdown"]


def translation(elements: list) -> str:
    """The Translate page's translation (its "### " line)."""
    return next((b for b in markdowns(elements) if b.startswith("### ")), "")


def chart_specs(elements: list) -> list[str]:
    """Each Plotly chart's figure, as the JSON the page sent."""
    return [el.plotly_chart.spec for el in elements if el.WhichOneof("type") == "plotly_chart"]


async def timed(results: list, what: str, action) -> None:
    """Run one interaction; append (what, seconds, error) as load.py's browsers do."""
    start, error = time.perf_counter(), ""
    try:
        await action()
    except Exception as e:  # noqa: BLE001 - a timeout or a closed socket is an error
        error = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    results.append((what, time.perf_counter() - start, error))


async def translator(s: WireSession, sentences, rng: random.Random, until: float, results):
    """load.py's translator: opens Translate, then types one sentence after another."""
    last = {"text": ""}

    async def open_page():
        last["text"] = translation(await s.open("translate"))

    await timed(results, "open a page", open_page)
    sentence = sentences[0]
    while time.time() < until:
        sentence = rng.choice([x for x in sentences if x != sentence])

        async def translate(sentence=sentence):
            text = translation(await s.set(SENTENCE_LABEL, "string_value", sentence))
            if not text or text == last["text"]:
                raise WireError("the translation did not change")
            last["text"] = text

        await timed(results, "translate", translate)
        await asyncio.sleep(rng.uniform(0.5, 2.0))  # reading what came back
    await timed(results, "open a page again", open_page)  # the server warm, the class at once


async def explorer(s: WireSession, sentences, kinds: dict, heads: list, rng, until, results):
    """load.py's explorer on "Remove heads": switches the kind, removes one more head."""

    async def open_page():
        await s.open("attention", {"sentence": rng.choice(sentences), "section": "ablation"})

    await timed(results, "open a page", open_page)
    kind, removed = "Cross", 0
    while time.time() < until:
        if removed and (rng.random() < 0.5 or removed >= len(heads)):
            kind = rng.choice([k for k in kinds if k != kind])

            async def browse(kind=kind):
                specs = chart_specs(await s.set(KIND_LABEL, "string_value", kind))
                if not any(kinds[kind] in spec for spec in specs):
                    raise WireError(f"no map titled {kinds[kind]!r}")

            await timed(results, "browse heads", browse)
        else:
            removed += 1

            async def remove(removed=removed):
                chosen = heads[:removed]
                answer = await s.set(HEADS_LABEL, "string_array_value", chosen)
                what = f"{removed} head{'s' * (removed != 1)} removed"
                if not any(what in body for body in markdowns(answer)):
                    raise WireError(f"no {what!r} on the page")

            await timed(results, "remove heads", remove)
        await asyncio.sleep(rng.uniform(0.5, 2.0))
    await timed(results, "open a page again", open_page)


async def student(url, seed, until, results, sentences, kinds, heads, timeout) -> None:
    """One session without a browser: half translate, half explore attention (load.py's)."""
    rng, s = random.Random(seed), WireSession(url, timeout)
    try:
        await s.connect()
        if seed % 2 == 0:
            await translator(s, sentences, rng, until, results)
        else:
            await explorer(s, sentences, kinds, heads, rng, until, results)
    finally:
        await s.close()


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank), None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]
