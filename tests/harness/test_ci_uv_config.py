"""`.ci/run` tells uv pip's package sources (`.ci/uv_from_pip_config.py`): each setting pip reports becomes
uv's variable of the same meaning, the environment's and ``[install]``'s winning over ``[global]``'s."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's

SPEC = importlib.util.spec_from_file_location("uv_from_pip_config", Path(".ci/uv_from_pip_config.py"))
UV_FROM_PIP = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(UV_FROM_PIP)

LISTED = """\
:env:.find-links='/opt/wheels /srv/wheels'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/ignored'
global.timeout='60'
install.index-url='https://mirror.example/simple'
"""


def test_pip_settings_become_uvs_variables_the_later_section_winning():
    assert UV_FROM_PIP.exports(UV_FROM_PIP.parsed(LISTED)) == {
        "UV_INDEX_STRATEGY": "unsafe-best-match",
        "UV_FIND_LINKS": "/opt/wheels,/srv/wheels",  # uv takes find-links comma-separated
        "UV_CONSTRAINT": "/etc/xdg/pip/constraints.txt",
        "UV_EXTRA_INDEX_URL": "file:///opt/pypi/simple file:///opt/pypi-more/simple",
        "UV_DEFAULT_INDEX": "https://mirror.example/simple",
    }


def test_no_pip_configuration_leaves_uv_its_own_defaults_but_pips_strategy():
    assert UV_FROM_PIP.exports(UV_FROM_PIP.parsed("")) == {"UV_INDEX_STRATEGY": "unsafe-best-match"}
