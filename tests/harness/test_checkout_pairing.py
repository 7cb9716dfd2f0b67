"""Which vLLM a vllm-ascend checkout pairs with: its ``.github/vllm-release-tag.commit``, or on the
release branches older than that file (v0.20.2rc, v0.18.0, v0.13.0) the ``pip_vllm_version`` of its
``docs/source/conf.py``; a checkout naming neither, or a vLLM without a closure, is refused by name."""

from __future__ import annotations

import pytest

from sim.impls.kit.ascend import checkout

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's

# The line as v0.18.0's docs/source/conf.py has it (v0.13.0's uses single quotes).
CONF = '    "pip_vllm_version": "{}",\n'


def _tree(tmp_path, tag: str | None = None, conf: str | None = None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    if tag is not None:
        (tmp_path / ".github").mkdir()
        (tmp_path / checkout.TAG_FILE).write_text(tag + "\n")
    if conf is not None:
        (tmp_path / "docs" / "source").mkdir(parents=True)
        (tmp_path / checkout.DOCS_CONF).write_text("myst_substitutions = {\n" + conf + "}\n")
    return tmp_path


def test_the_tag_file_names_the_vllm_before_the_docs(tmp_path):
    src = _tree(tmp_path, tag="v0.27.1", conf=CONF.format("0.23.0"))
    assert checkout.paired_tag(src) == ("v0.27.1", checkout.TAG_FILE)
    assert checkout.paired_vllm(src) == "0.27.1"


@pytest.mark.parametrize("line", [CONF, CONF.replace('"', "'")], ids=["double-quoted", "single-quoted"])
def test_without_a_tag_file_the_docs_conf_names_it(tmp_path, line):
    src = _tree(tmp_path, conf=line.format("0.23.0"))
    assert checkout.paired_vllm(src) == "0.23.0"


def test_a_vllm_without_a_closure_is_refused_naming_where_it_was_read(tmp_path, capsys):
    src = _tree(tmp_path, conf=CONF.format("0.13.0"))
    with pytest.raises(SystemExit) as stopped:
        checkout.paired_vllm(src)
    assert stopped.value.code == 2
    assert f"pairs with vLLM '0.13.0' ({checkout.DOCS_CONF} pip_vllm_version)" in capsys.readouterr().err


def test_a_tree_naming_no_vllm_is_refused(tmp_path):
    assert checkout.unpaired_reason(tmp_path, label="the commit") == (
        f"the commit: no {checkout.TAG_FILE} nor {checkout.DOCS_CONF} (is it a vllm-ascend checkout?)"
    )


def test_a_checkout_of_releases_v0_13_0_pairs_on_its_own_line_and_the_other_names_it(tmp_path):
    """v0.13.0's branch runs under ``tox -e vllm_ascend_0_13`` (0.13's MtpProposer), named by its own
    variable; ``tox -e vllm_ascend`` refuses it naming that env, and the 0.13 line refuses a main checkout
    naming ``tox -e vllm_ascend``."""
    old = _tree(tmp_path / "v0.13.0", conf=CONF.replace('"', "'").format("0.13.0"))
    line = checkout.LINES["vllm_ascend_0_13"]
    assert checkout.paired_vllm(old, line) == "0.13.0"
    assert checkout.unpaired_reason(old).endswith("; tox -e vllm_ascend_0_13 runs it (VLLM_ASCEND_0_13_SRC=<checkout>)")
    main = _tree(tmp_path / "main", tag="v0.27.1")
    assert checkout.unpaired_reason(main, line=line) == (
        f"{main} pairs with vLLM 'v0.27.1' ({checkout.TAG_FILE}); the harness has closures for vLLM 0.13.0 only "
        "(sim/impls/kit/ascend/checkout.py LINES); tox -e vllm_ascend runs it (VLLM_ASCEND_SRC=<checkout>)"
    )


def test_a_branch_without_a_tag_file_pairs_by_its_docs_conf(tmp_path):
    """v0.18.0's and v0.20.2rc's vLLM (their docs conf) pair, each with a closure; a vLLM nobody tried is refused
    naming the closures there are."""
    for version in ("0.18.0", "0.20.2"):
        assert checkout.unpaired_reason(_tree(tmp_path / version, conf=CONF.format(version))) is None
    untried = _tree(tmp_path / "untried", tag="v0.19.0")
    assert checkout.unpaired_reason(untried).endswith("(sim/impls/kit/ascend/checkout.py LINES)")
