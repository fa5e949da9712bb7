"""The app is safe to start: `streamlit run app.py` listens on the loopback interface only."""

from __future__ import annotations

import colorsys
import tomllib
from urllib.parse import urlparse

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
