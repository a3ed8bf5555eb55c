"""Copies standard input to standard output without this machine's paths, for a console log about to be
committed: any ``.../site-packages`` (or ``dist-packages``) becomes ``<site-packages>`` and an interpreter's
path (``.../bin/python3``) ``python3``; then each absolute PYTHONPATH entry outside the working directory (a
``--target`` install folder) becomes ``<site-packages>``, the working directory's prefix is dropped (the
directory alone becomes ``.``) and the home folder becomes ``~``. A path is replaced only where it starts a
path (not inside another one) and ends at a separator or outside a name.

    python3 experiments/long-task/scrub_paths.py < /tmp/detached/lr.log | gzip -9n > experiments/long-task/fixed_lr/wave3/console.txt.gz
"""

import os
import re
import sys

NAME_CHARS = r"\w.~+@%-"  # of a file or folder name ("-" last: inside [...] it is not a range)
NAME = f"[{NAME_CHARS}]"
START = f"(?<![/{NAME_CHARS}])"  # not inside a longer path or name (after a name's character or a slash)
PATH = rf"/(?:{NAME}|/)*"  # a path: names and slashes only (linear: no quotes, commas, colons or brackets)
END = rf"(?=/|\.?(?!{NAME})|$)"  # the folder itself (a sentence's full stop may follow), not a longer name
GENERAL = [
    (re.compile(START + PATH + r"/(?:site|dist)-packages" + END), "<site-packages>"),
    (re.compile(START + PATH + r"/bin/(python[\d.]*)(?![\w/-])"), r"\1"),
]


def folders(cwd: str, pythonpath: str, home: str) -> list[tuple[str, str]]:
    """(absolute folder, its replacement), longest first: PYTHONPATH entries outside ``cwd``, ``cwd``, home."""
    cwd, found = cwd.rstrip("/"), {}
    for entry in (e.rstrip("/") for e in pythonpath.split(os.pathsep)):
        if entry.startswith("/") and not (cwd and (entry == cwd or entry.startswith(cwd + "/"))):
            found[entry] = "<site-packages>"
    found.setdefault(cwd, ".")
    found.setdefault(home.rstrip("/"), "~")
    return sorted(((f, r) for f, r in found.items() if f), key=lambda item: -len(item[0]))  # "/" (now ""): none


def scrub(text: str, cwd: str, pythonpath: str = "", home: str = "") -> str:
    for pattern, replacement in GENERAL:
        text = pattern.sub(replacement, text)
    for folder, replacement in folders(cwd, pythonpath, home):
        inside = "" if replacement == "." else replacement + "/"  # the working directory's paths become relative
        text = re.sub(START + re.escape(folder) + f"/(?={NAME})", inside, text)
        text = re.sub(START + re.escape(folder) + END, replacement, text)
    return text


if __name__ == "__main__":
    env = os.environ
    log = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")  # a console's stray bytes pass unchanged
    out = scrub(log, os.getcwd(), env.get("PYTHONPATH", ""), env.get("HOME", ""))
    sys.stdout.buffer.write(out.encode("utf-8", "surrogateescape"))
