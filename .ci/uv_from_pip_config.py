"""Print shell exports that give uv the package sources pip is configured with on this machine.

uv reads none of pip's configuration (pip.conf, PIP_* variables), and a CI machine's local wheels,
extra indexes and constraint file live there. Each setting pip reports (``pip config list``: its
files' ``[global]`` and ``[install]`` sections and the environment, later ones winning as pip reads
them) becomes the uv variable of the same meaning; uv's index strategy is set to pip's (the best
version over every index, not the first index that has the package).
"""

from __future__ import annotations

import shlex
import subprocess
import sys

# pip's key -> (uv's variable, the separator uv takes between its values)
UV_OF = {
    "index-url": ("UV_DEFAULT_INDEX", " "),
    "extra-index-url": ("UV_EXTRA_INDEX_URL", " "),
    "find-links": ("UV_FIND_LINKS", ","),
    "constraint": ("UV_CONSTRAINT", " "),
    "cert": ("SSL_CERT_FILE", " "),
}
SECTIONS = ("global", "install", ":env:")  # in the order pip applies them


def pip_config() -> dict[str, list[str]]:
    """pip's effective values of the keys uv needs, on this machine."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], check=True, capture_output=True, text=True
    ).stdout
    return parsed(listed)


def parsed(listed: str) -> dict[str, list[str]]:
    """The keys uv needs from ``pip config list``'s lines (``section.key='value'``), later sections winning."""
    found: dict[str, tuple[int, list[str]]] = {}
    for line in listed.splitlines():
        name, _, value = line.partition("=")
        section, _, key = name.rpartition(".")
        if key in UV_OF and section in SECTIONS:
            rank = SECTIONS.index(section)
            if rank >= found.get(key, (-1, []))[0]:
                found[key] = (rank, value.strip().strip("'\"").split())
    return {key: values for key, (_, values) in found.items()}


def exports(config: dict[str, list[str]]) -> dict[str, str]:
    """uv's variables for pip's ``config``, and pip's index strategy."""
    out = {"UV_INDEX_STRATEGY": "unsafe-best-match"}
    for key, values in config.items():
        name, separator = UV_OF[key]
        out[name] = separator.join(values)
    return out


def main() -> None:
    for name, value in exports(pip_config()).items():
        print(f"export {name}={shlex.quote(value)}")


if __name__ == "__main__":
    main()
