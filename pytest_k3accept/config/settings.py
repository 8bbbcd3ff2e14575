"""Options, ini values and environment variables -> one validated, frozen :class:`Settings`.

Every command-line option of the plugin is declared once, in :data:`OPTIONS`, with its ini
fallback and (where it has one) its environment variable. Precedence: command line, then
environment variable, then ini value, then default.

The API key is never an option value: ``--k3-api-key-env`` names the *environment variable*
that holds it, so the key cannot leak through the command line, ``ps`` or a CI log.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import urlsplit

import pytest

GROUP = "k3accept"

#: the value of ``--k3-launch`` that starts the embedded CPU testbed (never implicit)
TESTBED = "testbed"


def _url(value: str, option: str) -> str:
    value = value.strip().rstrip("/")
    parts = urlsplit(value)
    if parts.query or parts.fragment:  # never echoed: a query often carries a key
        raise pytest.UsageError(
            f"{option}: the URL has a query string or fragment, which an endpoint cannot "
            "have (/v1/... is appended to it); give the key in K3ACCEPT_API_KEY (or the "
            "variable named by --k3-api-key-env), not in the URL"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise pytest.UsageError(
            f"{option}: {value!r} is not an http(s) URL; expected e.g. http://host:8000"
        )
    try:
        parts.port
    except ValueError:
        raise pytest.UsageError(f"{option}: {value!r} has an invalid port") from None
    if parts.path.endswith("/v1"):
        value = value[: -len("/v1")]
    return value


def _selector(value: str, option: str) -> str:
    from ..observe.host.remote import selector_matchers

    try:
        return selector_matchers(value)
    except ValueError as exc:
        raise pytest.UsageError(f"{option}: {exc}") from None


def _positive(value: str, option: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{option}: {value!r} is not a number of seconds") from None
    if not math.isfinite(number) or number <= 0:
        raise pytest.UsageError(f"{option}: must be a positive number of seconds, got {value!r}")
    return number


def _env_name(value: str, option: str) -> str:
    if not value or not value.replace("_", "a").isalnum() or value[0].isdigit():
        raise pytest.UsageError(  # the value is not shown: it may be the key itself
            f"{option}: the value given ({len(value or '')} characters, not shown) is not an "
            "environment variable name; pass the NAME of the variable that holds the key "
            "(e.g. K3ACCEPT_API_KEY), never the key itself"
        )
    return value


@dataclass(frozen=True)
class Option:
    """One option: ``--name``, ini key, environment variable, parser and help."""

    name: str
    help: str
    default: Any = None
    env: str | None = None
    parse: Callable[[str, str], Any] | None = None
    multiple: bool = False
    flag: bool = False
    metavar: str | None = None
    aliases: tuple[str, ...] = ()

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    Option("--k3-endpoint", "base URL of the vLLM OpenAI-compatible server (repeatable: "
           "further endpoints are replicas / the B side of an A/B)", env="K3ACCEPT_ENDPOINT",
           parse=_url, multiple=True, metavar="URL"),
    Option("--k3-model", "served model name (default: discovered from /v1/models)",
           env="K3ACCEPT_MODEL", metavar="NAME"),
    Option("--k3-api-key-env", "NAME of the environment variable holding the API key "
           "(the key itself is never accepted as an option)", default="K3ACCEPT_API_KEY",
           parse=_env_name, metavar="NAME"),
    Option("--k3-timeout", "per-request timeout in seconds", default=60.0, parse=_positive,
           env="K3ACCEPT_TIMEOUT", metavar="SECONDS"),
    Option("--k3-require", "a missing or unreachable endpoint (or unknown facts) is an error, "
           "not a skip; use in pipelines", flag=True, env="K3ACCEPT_REQUIRE"),
    Option("--k3-launch", "start the server under test: a shell COMMAND, or 'testbed' for the "
           "embedded CPU vLLM testbed (only ever started when asked for)", metavar="COMMAND"),
    Option("--k3-launch-timeout", "seconds to wait for a launched server to become ready",
           default=600.0, parse=_positive, metavar="SECONDS"),
    Option("--k3-server-log", "log file of an externally started server, read as it grows",
           metavar="PATH"),
    Option("--k3-host-facts", "facts file written by 'k3accept collect' (repeatable: one per "
           "node)", multiple=True, metavar="PATH"),
    Option("--k3-dcgm-url", "dcgm-exporter /metrics URL for remote GPU facts and telemetry",
           parse=_url, metavar="URL"),
    Option("--k3-prometheus-url", "Prometheus server URL (PromQL over its HTTP API) for "
           "remote GPU facts and telemetry", parse=_url, metavar="URL"),
    Option("--k3-gpu-selector", "label matchers applied to every --k3-prometheus-url query "
           "and every --k3-dcgm-url series so only the deployment's GPUs and engines count, "
           "e.g. 'namespace=\"k3\",pod=~\"vllm-.*\"' (alias --k3-prometheus-selector)",
           env="K3ACCEPT_GPU_SELECTOR", parse=_selector, metavar="MATCHERS",
           aliases=("--k3-prometheus-selector",)),
    Option("--k3-local-gpu", "this machine's GPUs (local NVML) are the deployment's: read "
           "them even when the endpoint is elsewhere (default: only when the endpoint is on "
           "this machine, or no endpoint and no other facts source is given)", flag=True,
           env="K3ACCEPT_LOCAL_GPU"),
    Option("--k3-image", "container image reference of the deployment", metavar="REF"),
    Option("--k3-gpu-interval", "GPU telemetry sampling interval in seconds", default=0.5,
           parse=_positive, metavar="SECONDS"),
    Option("--k3-profile", "load profile file (TOML or JSON)", env="K3ACCEPT_PROFILE",
           metavar="PATH"),
    Option("--k3-preset", "deployment preset: a name shipped with the plugin (default "
           "'kimi-k3') or a path to a preset file", default="kimi-k3", metavar="NAME|PATH"),
    # the official vLLM recipe: the preset's deployment expectations from one of its profiles
    Option("--k3-recipe", "official vLLM recipe YAML (vllm-project/recipes models/<org>/"
           "<model>.yaml): the deployment expectations come from its profile for "
           "--k3-hardware / --k3-strategy", env="K3ACCEPT_RECIPE", metavar="FILE"),
    Option("--k3-hardware", "hardware of the recipe profile, as the recipe names it (default: "
           "the recipe's default_hardware)", env="K3ACCEPT_HARDWARE", metavar="NAME"),
    Option("--k3-strategy", "serving strategy of the recipe profile, as the recipe names it "
           "(default: the recipe's default_strategy)", env="K3ACCEPT_STRATEGY", metavar="NAME"),
    Option("--k3-record", "write the reproduction record (JSON) to PATH", metavar="PATH"),
    Option("--k3-baseline", "reproduction record of an earlier session (repeatable): this "
           "session is judged as its re-measurement (conditions changed, figures side by "
           "side, regressions beyond the profile's [baseline] thresholds fail k3_baseline)",
           env="K3ACCEPT_BASELINE", multiple=True, metavar="RECORD.json"),
    Option("--k3-summary-md", "write the session's Markdown summary (verdict, checklist, "
           "artifacts) to PATH; under GitHub Actions it is also appended to "
           "$GITHUB_STEP_SUMMARY", env="K3ACCEPT_SUMMARY_MD", metavar="PATH"),
    Option("--k3-artifacts", "directory for server logs, charts and screenshots",
           default="artifacts", metavar="DIR"),
)


@dataclass(frozen=True)
class Settings:
    """The plugin's validated configuration for one pytest session."""

    endpoints: tuple[str, ...] = ()
    model: str | None = None
    api_key_env: str = "K3ACCEPT_API_KEY"
    timeout: float = 60.0
    require: bool = False
    launch: str | None = None
    launch_timeout: float = 600.0
    server_log: Path | None = None
    host_facts: tuple[Path, ...] = ()
    dcgm_url: str | None = None
    prometheus_url: str | None = None
    gpu_selector: str | None = None
    local_gpu: bool = False
    image: str | None = None
    gpu_interval: float = 0.5
    profile: Path | None = None
    preset: str = "kimi-k3"
    recipe: Path | None = None
    hardware: str | None = None
    strategy: str | None = None
    record: Path | None = None
    baseline: tuple[Path, ...] = ()
    summary_md: Path | None = None
    artifacts: Path = Path("artifacts")
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def endpoint(self) -> str | None:
        """The primary endpoint URL, if any."""
        return self.endpoints[0] if self.endpoints else None

    @property
    def prometheus_selector(self) -> str | None:
        """``--k3-gpu-selector`` under its older name."""
        return self.gpu_selector

    @property
    def launch_testbed(self) -> bool:
        return self.launch is not None and self.launch.strip() == TESTBED

    def api_key(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The API key, read from the environment variable named by ``api_key_env``."""
        value = (environ if environ is not None else os.environ).get(self.api_key_env)
        return value or None


def add_options(parser: pytest.Parser) -> None:
    """Declare every option in the ``k3accept`` group with its ini fallback."""
    group = parser.getgroup(GROUP, "k3accept: acceptance of a live LLM deployment")
    for opt in OPTIONS:
        ini_name = opt.dest
        env = f" [env {opt.env}]" if opt.env else ""
        if opt.flag:
            group.addoption(opt.name, *opt.aliases, action="store_true", default=None,
                            dest=opt.dest, help=opt.help + env)
            parser.addini(ini_name, opt.help, type="bool", default=False)
        elif opt.multiple:
            group.addoption(opt.name, action="append", default=None, dest=opt.dest,
                            metavar=opt.metavar, help=opt.help + env)
            parser.addini(ini_name, opt.help, type="linelist", default=[])
        else:
            group.addoption(opt.name, *opt.aliases, action="store", default=None, dest=opt.dest,
                            metavar=opt.metavar, help=f"{opt.help} (default: {opt.default})"
                            + env if opt.default is not None else opt.help + env)
            parser.addini(ini_name, opt.help, default=None)


def _raw(config: pytest.Config, opt: Option, environ: Mapping[str, str]) -> Any:
    value = config.getoption(opt.dest, default=None)
    if value not in (None, []):
        return value
    if opt.env and environ.get(opt.env):
        raw = environ[opt.env]
        if opt.flag:
            return raw.strip().lower() in ("1", "true", "yes", "on")
        if opt.multiple:
            return [v for v in (p.strip() for p in raw.split(",")) if v]
        return raw
    ini = config.getini(opt.dest)
    if ini not in (None, [], ""):
        return ini
    return opt.default


def from_config(config: pytest.Config, environ: Mapping[str, str] | None = None, *,
                lenient: bool = False) -> Settings:
    """Build and validate :class:`Settings`; bad values raise :class:`pytest.UsageError`.

    ``lenient``: an option whose value is bad takes its default instead of raising. The
    plugin builds these settings only to write the artifacts of a run that a bad option
    value stops (the record, report and summary still say where they go and why the run
    stopped); nothing is measured with them.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        raw = _raw(config, opt, environ)
        if opt.flag:
            values[opt.dest] = bool(raw)
            continue
        if raw is None:
            values[opt.dest] = None
            continue
        items: Sequence[Any] = raw if opt.multiple else [raw]
        try:
            parsed = [opt.parse(str(v), opt.name) if opt.parse and isinstance(v, str) else v
                      for v in items]
        except pytest.UsageError:
            if not lenient:
                raise
            values[opt.dest] = () if opt.multiple else opt.default
            continue
        values[opt.dest] = tuple(parsed) if opt.multiple else parsed[0]
    return Settings(
        endpoints=values["k3_endpoint"] or (),
        model=values["k3_model"],
        api_key_env=values["k3_api_key_env"],
        timeout=values["k3_timeout"],
        require=values["k3_require"],
        launch=values["k3_launch"],
        launch_timeout=values["k3_launch_timeout"],
        server_log=Path(values["k3_server_log"]) if values["k3_server_log"] else None,
        host_facts=tuple(Path(p) for p in values["k3_host_facts"] or ()),
        dcgm_url=values["k3_dcgm_url"],
        prometheus_url=values["k3_prometheus_url"],
        gpu_selector=values["k3_gpu_selector"] or None,
        local_gpu=values["k3_local_gpu"],
        image=values["k3_image"],
        gpu_interval=values["k3_gpu_interval"],
        profile=Path(values["k3_profile"]) if values["k3_profile"] else None,
        preset=values["k3_preset"],
        recipe=Path(values["k3_recipe"]) if values["k3_recipe"] else None,
        hardware=values["k3_hardware"] or None,
        strategy=values["k3_strategy"] or None,
        record=Path(values["k3_record"]) if values["k3_record"] else None,
        baseline=tuple(Path(p) for p in values["k3_baseline"] or ()),
        summary_md=Path(values["k3_summary_md"]) if values["k3_summary_md"] else None,
        artifacts=Path(values["k3_artifacts"]),
    )
