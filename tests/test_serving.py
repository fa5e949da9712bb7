"""The app is safe to start: `streamlit run app.py` listens on the loopback interface only."""

from __future__ import annotations

import colorsys
import tomllib
import urllib.error
import urllib.request
from urllib.parse import urlparse

import pytest

from pages.ui import closed_routes
from tests.helpers import ROOT


def _listening_addresses(port: int) -> set[str]:
    """Local addresses of the sockets listening on ``port`` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def test_shipped_config_serves_loopback_only():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "127.0.0.1"
    assert config["browser"]["gatherUsageStats"] is False


def test_the_server_skips_a_full_garbage_collection_after_every_run():
    """gc.collect(2) after each script run (Streamlit's default) cost the server 0.2 s per
    rerun per session with torch and transformers loaded: a third of its CPU under the class
    load test (bench/README.md)."""
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["runner"]["postScriptGC"] is False


def test_shipped_theme_marks_focus_in_a_calm_colour():
    """Streamlit's default primary colour is red: focused inputs would read as errors."""
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    primary = config.get("theme", {}).get("primaryColor", "#ff4b4b")
    rgb = [int(primary.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    hue = colorsys.rgb_to_hls(*rgb)[0] * 360
    assert 180 <= hue <= 260, f"primaryColor {primary} (hue {hue:.0f}°) is not a blue"


def test_a_started_app_listens_on_loopback_only(app_server):
    """The server was started with only a port: its address comes from the shipped config."""
    port = urlparse(app_server["url"]).port
    addresses = _listening_addresses(port)
    assert addresses == {"0100007F"}, addresses  # 127.0.0.1, never 0.0.0.0 or ::


def test_streamlits_metrics_are_closed_to_whoever_reaches_the_port(app_server):
    """Issue 64, item 11: /_stcore/metrics (cache names, sessions, timings) answers 404 unless
    the operator sets ATTENTION_STUDIO_METRICS=1; the app itself still answers."""
    for path in ("/_stcore/metrics", "//_stcore/metrics/", "/_stcore/metrics?families=x"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(app_server["url"] + path, timeout=10)
        assert e.value.code == 404, path
    assert urllib.request.urlopen(app_server["url"] + "/_stcore/health").read() == b"ok"


@pytest.mark.parametrize(
    "setting, path, is_closed",
    [
        ("", "/_stcore/metrics", True),
        ("0", "/_stcore/metrics", True),
        ("yes", "/_stcore/metrics", True),  # only "1" opens it
        ("", "/class/_stcore/metrics", True),  # behind a base URL
        ("", "/_stcore//metrics/", True),
        ("", "/_stcore/health", False),
        ("", "/", False),
        ("1", "/_stcore/metrics", False),
    ],
)
def test_only_the_operator_opens_the_metrics_route(monkeypatch, setting, path, is_closed):
    monkeypatch.setenv(closed_routes.METRICS_ENV, setting)
    assert closed_routes.closed(path) is is_closed
