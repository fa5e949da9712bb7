"""Which lines of a trainer's log say something to a person: launcher noise left out.

A multi-process run's log starts with what torchrun and the libraries print before the
trainer does: a banner of asterisks around "Setting OMP_NUM_THREADS environment variable
for each process to be 1 in default, ...", the same behind a logging prefix (older torch:
"WARNING:torch.distributed.run:"), torch's own log lines below error level
("I1123 23:08:27.867000 6168 .../c10d_rendezvous_backend.py:169] Process 6168 hosts the TCP
store ...", "[rank0]:W1123 ...") and Python warnings. None of it says what the run is doing.
The trainer's own lines ("training on cpu ...", "warning: ...", "error: ...") are kept, and
library lines of error level are kept without their prefix.
"""

from __future__ import annotations

import re

GLOG_PREFIX = re.compile(  # torch's loggers: "[rank0]:I1123 23:08:27.867000 6168 f.py:169] "
    r"^(?:\[rank\d+\]:)?\[?(?P<level>[VDIWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+\s+[^\]]*\]\s?"
)
LOGGING_PREFIX = re.compile(  # logging.basicConfig's format: "WARNING:torch.distributed.run:"
    r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:\s?"
)
SEPARATOR = re.compile(r"^[\s*=#~_\-]*$")  # banner rules and blank lines
NOISE = (
    re.compile(r"^Setting OMP_NUM_THREADS environment variable for each process"),
    re.compile(r"^\S+\.py:\d+: \w*Warning: "),  # a Python warning ...
    re.compile(r"^\s+warnings\.warn\("),  # ... and the source line printed under it
)
QUIET_LEVELS = ("V", "D", "I", "W", "DEBUG", "INFO", "WARNING")  # libraries' chatter: left out


def message(line: str) -> str:
    """What a log line says to a person ("" for launcher noise), its logging prefix removed."""
    for prefix in (GLOG_PREFIX, LOGGING_PREFIX):
        found = prefix.match(line)
        if found:
            if found["level"] in QUIET_LEVELS:
                return ""
            line = line[found.end() :]
            break
    if SEPARATOR.match(line) or any(noise.match(line) for noise in NOISE):
        return ""
    return line.strip()


def last_message(text: str) -> str:
    """The last line of a log's text that says something ("" when none does)."""
    for line in reversed(text.splitlines()):
        said = message(line)
        if said:
            return said
    return ""


def starting_words(processes: int) -> str:
    """What a launched run is doing before its log says anything: "starting 2 processes"."""
    return f"starting {processes} processes" if processes > 1 else "starting the trainer"
