"""Both protocols implement the whole Lister protocol the window pipeline relies on."""

from __future__ import annotations

import pytest

from harvest_pipeline.harvest.csw_lister import CswLister
from harvest_pipeline.harvest.listers import Lister, lister_for
from harvest_pipeline.harvest.oai_lister import OaiLister
from harvest_pipeline.sources import SourceConfig


@pytest.mark.parametrize(
    "protocol, url, cls",
    [("oai-pmh", "http://127.0.0.1:9/oai", OaiLister), ("csw", "http://127.0.0.1:9/csw", CswLister)],
)
def test_each_protocol_has_a_complete_lister(tmp_path, protocol, url, cls):
    lister = lister_for(SourceConfig(id="s", protocol=protocol, url=url), state_dir=tmp_path)
    assert type(lister) is cls
    assert isinstance(lister, Lister)  # every method and attribute of the protocol is there
    lister.apply_quirks(set())
    assert lister.quirks == set() and lister.drain_warnings() == []
