"""The job `register_source`: what `harvest-pipeline sources add` does, launched from the UI."""

from typing import Literal

import dagster as dg
from pydantic import Field

from harvest_pipeline.harvest.server_facts import learn_new_source
from harvest_pipeline.sources.edit import add_source
from harvest_pipeline.sources.probe import guess_protocol, probe_server, propose_entry
from harvest_pipeline.sources.registry import sources_file_path
from harvest_pipeline.store import default_db_path

REGISTER_JOB = "register_source"
REGISTER_OP = "probe_and_add_source"


class RegisterSourceConfig(dg.Config):
    id: str = Field(description="lowercase letters, digits and _; the asset becomes harvest/<id>")
    url: str = Field(description="the OAI-PMH base URL or the CSW endpoint")
    protocol: Literal["", "oai-pmh", "csw"] = Field(default="", description="empty: csw when the URL ends in /csw, else oai-pmh")
    metadata_prefix: str = Field(default="", description="OAI-PMH only; empty: oai_dc when the server offers it")
    set: str = Field(default="", description="OAI-PMH setSpec; empty: the whole repository")
    window: Literal["hour", "day", "week", "month"] = "day"


def register_run_config(**config) -> dict:
    """The launchpad config of `register_source`."""
    return {"ops": {REGISTER_OP: {"config": config}}}


@dg.op(
    name=REGISTER_OP,
    description="Probe the server (Identify and ListMetadataFormats, or GetCapabilities), propose the "
    "source's settings from its answers and append them to the sources file, comments kept.",
)
def probe_and_add_source(context: dg.OpExecutionContext, config: RegisterSourceConfig) -> None:
    protocol = config.protocol or guess_protocol(config.url)
    facts = probe_server(config.url, protocol, timeout=30, list_sets=bool(config.set))
    entry, why = propose_entry(
        facts, source_id=config.id, metadata_prefix=config.metadata_prefix or None,
        set_spec=config.set or None, window=config.window,
    )
    path = sources_file_path()
    add_source(entry, note=facts.name, path=path, added_by="the UI job register_source")
    if learn_new_source(config.id, default_db_path(), learned_by=f"register_source (run {context.run.run_id[:8]})") is None:
        context.log.warning(f"{config.id}: server facts not stored yet; the source's sensor learns them")
    for note in facts.notes:
        context.log.warning(f"{config.url}: {note}")
    context.log.info(f"added {config.id} to {path.resolve()}: " + "; ".join(why))
    context.add_output_metadata({
        "sources_file": dg.MetadataValue.path(str(path.resolve())),
        "entry": dg.MetadataValue.json(entry),
        "server": dg.MetadataValue.text(facts.name or "(no name)"),
        "decisions": dg.MetadataValue.md("\n".join(f"- {w}" for w in why)),
        "next": dg.MetadataValue.md(
            f"Reload the code location (**Deployment → Code locations → Reload**) to see `harvest/{config.id}`, "
            f"its job `harvest_{config.id}` and its sensor `harvest_{config.id}_watermark`."
        ),
    })


@dg.job(
    name=REGISTER_JOB,
    description=(
        "Register a new source without a shell: probes the server, proposes its settings and appends "
        "them to the sources file (what `harvest-pipeline sources add` does). Launchpad config: "
        f"ops: {{{REGISTER_OP}: {{config: {{id: my_repo, url: https://example.org/oai}}}}}} (optional: "
        "protocol, metadata_prefix, set, window). Then reload the code location to see the new asset."
    ),
)
def register_source():
    probe_and_add_source()
