"""The sources YAML: defaults, env interpolation, and errors that name the source and the field."""

import pickle

import pytest

from harvest_pipeline.errors import ConfigError
from harvest_pipeline.sources import load_sources


def _write(tmp_path, text):
    p = tmp_path / "sources.yaml"
    p.write_text(text)
    return p


def test_defaults_and_env_interpolation(tmp_path, monkeypatch):
    monkeypatch.setenv("DEMO_URL", "http://127.0.0.1:9/oai")
    [src] = load_sources(_write(tmp_path, "sources:\n  - id: demo_1\n    url: ${DEMO_URL}\n"))
    assert (src.id, src.url, src.protocol, src.metadata_prefix, src.window, src.set, src.start) == (
        "demo_1", "http://127.0.0.1:9/oai", "oai-pmh", "oai_dc", "day", None, None,
    )


def test_env_default_when_unset(tmp_path, monkeypatch):
    monkeypatch.delenv("NOPE_URL", raising=False)
    [src] = load_sources(_write(tmp_path, "sources:\n  - id: a\n    url: ${NOPE_URL:-http://127.0.0.1:1/oai}\n"))
    assert src.url == "http://127.0.0.1:1/oai"


@pytest.mark.parametrize(
    "body, needle",
    [
        ("  - id: Bad-Id\n    url: http://x/oai\n", "source 'Bad-Id': field 'id'"),
        ("  - id: ok\n    url: ftp://x\n", "source 'ok': field 'url'"),
        ("  - id: ok\n    url: http://x/oai\n    window: fortnight\n", "source 'ok': field 'window'"),
        ("  - id: ok\n    url: http://x/oai\n    colour: red\n", "source 'ok': field 'colour'"),
        ("  - id: ok\n    url: http://user:pw@x/oai\n", "must not embed credentials"),
        ("  - id: ok\n    url: http://x/oai\n  - id: ok\n    url: http://y/oai\n", "duplicate id"),
        ("  - url: http://x/oai\n", "source #1: field 'id'"),
    ],
)
def test_bad_config_names_source_and_field(tmp_path, body, needle):
    with pytest.raises(ConfigError) as err:
        load_sources(_write(tmp_path, "sources:\n" + body))
    assert needle in str(err.value)


def test_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="HARVEST_SOURCES_FILE"):
        load_sources(tmp_path / "nope.yaml")


def test_secrets_come_from_env_and_are_required_when_used(tmp_path, monkeypatch):
    [src] = load_sources(_write(
        tmp_path,
        "sources:\n  - id: a\n    url: http://x/oai\n    headers_from_env: {X-Api-Key: MY_KEY}\n"
        "    auth: {username_env: MY_USER, password_env: MY_PASS}\n",
    ))
    monkeypatch.delenv("MY_KEY", raising=False)
    with pytest.raises(ConfigError, match="MY_KEY"):
        src.http_headers()
    monkeypatch.setenv("MY_KEY", "s3cret")
    monkeypatch.setenv("MY_USER", "user-9f2")
    monkeypatch.setenv("MY_PASS", "pass-7c1")
    assert src.http_headers() == {"X-Api-Key": "s3cret"}
    assert src.http_auth() == ("user-9f2", "pass-7c1")
    # The config keeps the variables' names, never their values: nothing resolved stays on it to be
    # shown, logged or pickled into a run process.
    shown = [repr(src), str(src), src.model_dump_json(), pickle.dumps(src).decode("latin-1")]
    assert all("MY_KEY" in s and "MY_PASS" in s for s in shown)  # the place a leak would show
    for secret in ("s3cret", "user-9f2", "pass-7c1"):
        assert not any(secret in s for s in shown), secret


@pytest.mark.parametrize(
    "id_yaml, needle",
    [
        # `$` in a pattern also matches before a trailing newline; the id must match whole.
        ('"demo\\n"', "lowercase letters"),
        ("a" * 65, "at most 64 characters"),
    ],
)
def test_source_id_is_validated_whole_and_bounded(tmp_path, id_yaml, needle):
    with pytest.raises(ConfigError) as err:
        load_sources(_write(tmp_path, f"sources:\n  - id: {id_yaml}\n    url: http://x/oai\n"))
    assert "field 'id'" in str(err.value) and needle in str(err.value)


def test_a_source_id_of_the_maximum_length_is_accepted(tmp_path):
    [src] = load_sources(_write(tmp_path, f"sources:\n  - id: {'a' * 64}\n    url: http://x/oai\n"))
    assert src.id == "a" * 64


def test_a_file_that_is_not_yaml_is_named_with_the_line_where_it_breaks(tmp_path):
    path = tmp_path / "sources.yaml"
    path.write_text("sources:\n  - id: a\n    url: [unclosed\n")
    with pytest.raises(ConfigError) as caught:
        load_sources(path)
    assert f"{path} is not valid YAML" in str(caught.value) and "line 3, column 10" in str(caught.value)
