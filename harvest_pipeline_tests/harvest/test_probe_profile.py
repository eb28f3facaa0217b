"""`probe`'s quirk profile against the demo provider, clean and with the fault modes it must detect."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from harvest_pipeline.harvest.probe_profile import profile_endpoint
from harvest_pipeline.sources.registry import SourceConfig

pytestmark = pytest.mark.integration


def test_a_conforming_server_profiles_clean_in_at_most_eight_requests(shared_demo):
    prof = profile_endpoint(shared_demo.url)
    assert prof.requests <= 8 and len(prof.latencies) == prof.requests
    assert prof.dates == "honoured to the second" and prof.until_seconds_honoured is True
    assert prof.continuation == "token only"
    assert prof.set_with_dates == "supported"
    assert (prof.gzip, prof.content_length) == ("no", "correct")
    assert prof.page_size == 25 and prof.list_size == shared_demo.stats()["total"]
    assert prof.identify.deleted_record == "persistent"
    entry, why = prof.proposed_settings("demo_probe")
    assert SourceConfig.model_validate(entry).window == entry["window"] == "month"  # ~480 records in all
    assert not any("quirk" in w or "refused" in w for w in why)


def test_the_quirks_of_a_hostile_server_are_detected_and_shape_the_proposal(demo):
    demo.set_options(dates_to_whole_days=True, reject_token_only=True, reject_set_with_dates=True,
                     gzip_wrong_length=True, deleted_record="no")
    prof = profile_endpoint(demo.url)
    assert prof.requests == 8  # the continuation was asked twice
    assert prof.dates == "read by the day only" and prof.until_seconds_honoured is False
    assert prof.continuation == "must repeat the arguments"
    assert prof.set_with_dates == "refused"
    assert prof.gzip == "yes"
    assert prof.content_length.startswith("wrong") and "the gzip member is whole" in prof.content_length
    assert prof.list_size == demo.stats()["live"]  # no tombstones listed or counted
    _, why = prof.proposed_settings()
    text = "\n".join(why)
    for said in ("read by their date only", "continuation-needs-arguments", "set cannot be combined",
                 "deletedRecord no", "Content-Length is wrong"):
        assert said in text


@pytest.mark.parametrize("fault, dates", [("ignore_dates", "ignored"), ("reject_dates", "refused")])
def test_dates_that_are_ignored_or_refused_are_told_apart(demo, fault, dates):
    demo.set_options(**{fault: True}, gzip="header")
    prof = profile_endpoint(demo.url)
    assert prof.dates == dates and prof.until_seconds_honoured is False
    assert (prof.gzip, prof.content_length) == ("yes", "correct")


def test_the_cli_prints_the_profile_and_a_sources_snippet_that_loads(shared_demo):
    out = subprocess.run(
        [sys.executable, "-m", "harvest_pipeline.cli", "probe", shared_demo.url, "--id", "probed"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    assert "Identify" in out and "ListMetadataFormats" in out
    assert "Quirk profile (7 requests, metadataPrefix oai_dc)" in out
    assert "honoured to the second" in out
    snippet = out.split("Proposed source settings\n", 1)[1]
    loaded = yaml.safe_load("\n".join(line[2:] for line in snippet.splitlines()))
    [entry] = loaded["sources"]
    assert SourceConfig.model_validate(entry).id == "probed" and entry["url"] == shared_demo.url
