"""Secret redaction for everything the plugin writes: record, report, terminal, logs, JUnit.

Two layers, applied together by :class:`Redactor`:

* **by name**: the value of any variable, option, argument or mapping key whose *name* looks
  secret (``KEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``, ``PASSWD``, ``CREDENTIAL``, ``AUTH``,
  ``COOKIE`` ... as a word of the name, or a word ending in ``KEY``/``TOKEN``/``SECRET``)
  is replaced by :data:`REDACTED`, in dicts, argv lists, command strings and free text
  (``--api-key X``, ``HF_TOKEN=X``, ``"api_key": "X"``, ``'api_key': ['X']``,
  ``Authorization: Bearer X``, ``https://user:X@host``), plus well-known token shapes
  (``sk-...``, ``hf_...``, ``ghp_...``, ``AKIA...``, JWTs);
* **verbatim**: known secret values (the key held by the variable named by
  ``--k3-api-key-env``, values of secret-named environment variables, values of secret
  arguments of the launch command) are replaced wherever they appear, whatever surrounds them.

Pure logic: no pytest import. The helpers at the end apply a redactor to pytest's report
objects (duck-typed), to log records and to a log file the plugin wrote.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = ["REDACTED", "RedactingFilter", "Redactor", "is_secret_name", "redact_file",
           "redact_report"]

#: what a secret value is replaced with
REDACTED = "***"

_WORDS = frozenset({
    "KEY", "APIKEY", "TOKEN", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD",
    "PASSPHRASE", "CREDENTIAL", "CREDENTIALS", "CRED", "CREDS", "AUTH",
    "AUTHORIZATION", "COOKIE", "PRIVATE", "SIGNATURE", "BEARER", "SESSIONID",
})
_SUFFIXES = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD")
#: a last word that makes the name point AT a secret rather than hold one (``--k3-api-key-env``)
_POINTERS = frozenset({"ENV", "NAME", "ERROR", "EXCEPTION"})  # ... and KeyError is no key
#: explicit secrets shorter than this are not replaced verbatim (they would shred the text)
MIN_EXPLICIT = 4
#: values of secret-named environment variables are learned only from this length on
MIN_HARVESTED = 8

_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
# quoted, a list of quoted, or a bare word that is not a call/index/attribute (code)
_QUOTED = r"""(?:"[^"\n]*"|'[^'\n]*')"""
_VALUE = (r"(?:" + _QUOTED + r"|\[\s*" + _QUOTED + r"(?:\s*,\s*" + _QUOTED + r")*\s*\]"
          r"""|[^\s,;}\])"'&(\[{]+(?![(\[{\w.-]))""")
_ASSIGN = re.compile(
    r"""(?P<q>["']?)(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?P=q)"""
    r"""(?P<sep>\s*(?::(?![:/])|(?<![=!<>])=(?!=))\s*)"""
    r"(?P<value>" + _VALUE + ")")
_OPTION = re.compile(r"(?<![\w-])(?P<name>--?[A-Za-z][A-Za-z0-9_.-]*)(?P<sep>=|[ \t]+)"
                     r"(?P<value>(?!-)" + _VALUE + ")")
_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{6,}")
#: an ``Authorization`` / ``Proxy-Authorization`` value: the scheme word is kept, the rest is
#: the credential: to the closing quote of a quoted value, else to the end of the line (more
#: than needed in ``-H 'Authorization: X' URL``, never less: Digest values hold quotes)
_AUTH_HEADER = re.compile(
    r"""(?i)(?<![\w-])((?:proxy-)?authorization["']?\s*[:=]\s*)(?P<q>["'])?"""
    r"""(?:(bearer|basic|digest|token|negotiate|ntlm|aws4-hmac-sha256|hoba|mutual)(\s+))?"""
    r"""(?(q)(?:(?!(?P=q))[^\r\n])+|[^\r\n]+)""")
_AUTH_NAME = re.compile(r"(?i)(?:proxy-)?authorization")
#: URL credentials: ``user:pass@``, ``:pass@`` and a token as the user (``TOKEN@``): the
#: user name is kept only beside a password, the rest is the credential
_URL_AUTH = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)(?:([^/\s:@?#]*):)?([^/\s@?#]+)(@)")
#: a secret option's further values (vLLM's ``--api-key K1 K2``: a list)
_OPTION_LIST = re.compile(r"(?<![\w-])(?P<name>--?[A-Za-z][A-Za-z0-9_.-]*)(?P<sep>[ \t]+)"
                          r"(?P<value>(?!-)[^\s\"'`]+(?:[ \t]+(?!-)[^\s\"'`]+)+)")
_SHAPES = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})")


#: every pattern below needs one of these substrings (secret-name words and suffixes,
#: Authorization schemes, token shapes, the ``@`` of URL credentials): text without any of
#: them skips the patterns; keep in step with _WORDS, _SUFFIXES and the patterns
_MAYBE = re.compile(r"(?i)key|token|secret|pass|cred|auth|cookie|private|signature|bearer"
                    r"|basic|session|sk-|hf_|gh[pousr]_|github_pat_|akia|xox|eyj|@")


def is_secret_name(name: str) -> bool:
    """True when a variable/option/key name looks like it holds a secret.

    ``API_KEY``, ``--api-key``, ``HF_TOKEN``, ``apiKey``, ``db_password``, ``Authorization``
    are secret; ``max_tokens``, ``tokenizer``, ``--k3-api-key-env`` (it names a variable) are
    not.
    """
    name = name.strip().lstrip("-").rsplit(".", 1)[-1]  # "x.api_key"; not "test_secret.py"
    words = [w.upper() for w in _SPLIT.split(name) if w]
    if not words or words[-1] in _POINTERS:
        return False
    return any(w in _WORDS or w.endswith(_SUFFIXES) for w in words)


def _unquote(value: str) -> str:
    value = value.strip()
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1].strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return value


def _mask(value: str) -> str:
    """Keep the quoting/brackets of a matched value, replace its content."""
    inner = _unquote(value)
    return value.replace(inner, REDACTED, 1) if inner else value


class Redactor:
    """Replaces secrets in text, argv, commands, environments and nested data.

    Build one per session with :meth:`from_settings`; feed it more known secrets with
    :meth:`add` or :meth:`learn_command`. All methods return new objects.
    """

    def __init__(self, secrets: Iterable[str] = (), *, patterns: bool = True) -> None:
        self._secrets: set[str] = set()
        #: False: only known secrets are replaced (for sessions that do not use the plugin)
        self.patterns = patterns
        for secret in secrets:
            self.add(secret)

    @classmethod
    def from_settings(cls, settings: Any, environ: Mapping[str, str] | None = None,
                      ) -> "Redactor":
        """Learn the API key (env var named by ``settings.api_key_env``), the values of
        secret-named environment variables and secret arguments of ``settings.launch``."""
        environ = os.environ if environ is None else environ
        red = cls()
        key_env = getattr(settings, "api_key_env", None)
        if key_env and environ.get(key_env):
            red.add(environ[key_env])
        for name, value in environ.items():
            if is_secret_name(name) and len(value or "") >= MIN_HARVESTED:
                red.add(value)
        launch = getattr(settings, "launch", None)
        if launch:
            red.learn_command(launch)
        return red

    @property
    def secrets(self) -> frozenset[str]:
        """The verbatim secrets known so far (never print this)."""
        return frozenset(self._secrets)

    def add(self, secret: str | None) -> None:
        """Redact ``secret`` verbatim from now on (ignored when shorter than 4 characters)."""
        if secret and len(secret.strip()) >= MIN_EXPLICIT and secret.strip() != REDACTED:
            self._secrets.add(secret.strip())

    def learn_command(self, command: str | Sequence[str], _depth: int = 0) -> None:
        """Learn the values of secret arguments (``--api-key X``, ``--api-key K1 K2``,
        ``TOKEN=X``, and one inside another option's value: ``--env=VLLM_API_KEY=X``,
        ``-e VLLM_API_KEY=X``) of a command."""
        text = command if isinstance(command, str) else " ".join(command)
        for m in _OPTION_LIST.finditer(text):
            if is_secret_name(m.group("name")):
                for word in m.group("value").split():
                    self.add(_unquote(word))
        for rx in (_OPTION, _ASSIGN):
            for m in rx.finditer(text):
                if is_secret_name(m.group("name")):
                    self.add(_unquote(m.group("value")))
                elif _depth < 4 and len(m.group("value")) < len(m.group(0)):
                    self.learn_command(_unquote(m.group("value")), _depth + 1)

    def _verbatim(self, text: str) -> str:
        for secret in sorted(self._secrets, key=len, reverse=True):
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def text(self, text: str) -> str:
        """Redact free text: known secrets verbatim, then secret-looking assignments,
        options, Authorization values, URL passwords and well-known token shapes."""
        if not text:
            return text
        text = self._verbatim(text)
        if not self.patterns or not _MAYBE.search(text):
            return text
        text = _AUTH_HEADER.sub(
            lambda m: f"{m.group(1)}{m.group('q') or ''}{m.group(3) or ''}{m.group(4) or ''}"
                      f"{REDACTED}", text)
        text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)

        def by_name(m: re.Match[str], depth: int = 0) -> str:
            head = m.group(0)[: m.start("value") - m.start(0)]
            if _AUTH_NAME.fullmatch(m.group("name")):
                return m.group(0)  # Authorization values: done above, scheme word kept
            if is_secret_name(m.group("name")):
                return head + _mask(m.group("value"))
            if depth >= 4:
                return m.group(0)
            # not secret itself, but its value may hold one: ``error: api_key=X``,
            # ``--env=VLLM_API_KEY=X``, ``endpoint=http://h/?token=X``
            inner = m.group("value")
            for rx in (_OPTION, _ASSIGN):
                inner = rx.sub(lambda n: by_name(n, depth + 1), inner)
            return head + inner

        def by_list(m: re.Match[str]) -> str:
            if not is_secret_name(m.group("name")):
                return m.group(0)
            words = re.sub(r"[^ \t]+", REDACTED, m.group("value"))
            return m.group(0)[: m.start("value") - m.start(0)] + words

        text = _OPTION_LIST.sub(by_list, text)
        text = _OPTION.sub(by_name, text)
        text = _ASSIGN.sub(by_name, text)
        text = _URL_AUTH.sub(lambda m: (f"{m.group(1)}{m.group(2)}:{REDACTED}{m.group(4)}"
                                        if m.group(2) else
                                        f"{m.group(1)}{REDACTED}{m.group(4)}"), text)
        return _SHAPES.sub(REDACTED, text)

    def command(self, command: str) -> str:
        """Redact a shell command line (same rules as :meth:`text`)."""
        return self.text(command)

    def argv(self, argv: Sequence[str]) -> list[str]:
        """Redact an argument list: ``--secret X``, ``--secret=X``, ``SECRET=X`` words."""
        if not self.patterns:
            return [self.text(str(w)) for w in argv]
        out: list[str] = []
        hide_next = False
        for word in (str(w) for w in argv):
            if hide_next and not word.startswith("-"):
                out.append(REDACTED)  # and the next: vLLM's --api-key takes a list
                continue
            hide_next = False
            name, eq, _ = word.partition("=")
            if eq and is_secret_name(name):
                out.append(f"{name}={REDACTED}")
            elif word.startswith("-") and not eq and is_secret_name(word):
                out.append(word)
                hide_next = True
            else:
                out.append(self.text(word))
        return out

    def env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """Copy of an environment with secret-named values (and known secrets) redacted."""
        return {k: (REDACTED if self.patterns and is_secret_name(k) and v else self.text(str(v)))
                for k, v in environ.items()}

    def data(self, obj: Any) -> Any:
        """Redact nested JSON-like data: string values under secret-named keys become
        :data:`REDACTED`, every other string goes through :meth:`text`.

        A mapping key spelled exactly ``key`` is the identifier field of structured evidence
        (a timeline event's ``{"key": "engine_init_done", ...}``), not a secret's name: its
        value still goes through :meth:`text` (known secrets, token shapes)."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, Mapping):
            out: dict[Any, Any] = {}
            for key, value in obj.items():
                secret = (self.patterns and isinstance(key, str) and key != "key"
                          and is_secret_name(key))
                if secret and isinstance(value, str) and value:
                    out[key] = REDACTED
                elif secret and isinstance(value, (list, tuple)) and value and all(
                        isinstance(v, str) for v in value):
                    out[key] = [REDACTED for _ in value]
                else:
                    out[key] = self.data(value)
            return out
        if isinstance(obj, (list, tuple)):
            return [self.data(v) for v in obj]
        return obj

    def leaks(self, text: str) -> bool:
        """True when ``text`` still contains a known secret verbatim."""
        return any(secret in text for secret in self._secrets)


# -- pytest artifacts (duck-typed: no pytest import) -------------------------------------
class RedactingFilter(logging.Filter):
    """A log-handler filter that rewrites each record's message and traceback text with
    secrets redacted (``get()`` returns the redactor to use at that moment)."""

    def __init__(self, get: Callable[[], Redactor]) -> None:
        super().__init__()
        self.get = get

    def filter(self, record: logging.LogRecord) -> bool:
        red = self.get()
        try:
            message = record.getMessage()
        except Exception:
            return True
        clean = red.text(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = red.text(record.exc_text)
        return True


def redact_report(report: Any, red: Redactor) -> None:
    """Redact what a pytest test/collect report carries to the terminal, JUnit XML and the
    HTML report: captured sections, failure text (in place when possible), skip/xfail
    reasons, user properties and text-like extras."""
    report.sections = [(title, red.text(content)) for title, content in report.sections]
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        report.longrepr = (longrepr[0], longrepr[1], red.text(str(longrepr[2])))
    elif longrepr is not None:
        text = report.longreprtext
        if red.text(text) != text:
            try:
                _redact_repr(longrepr, red)
                leaked = red.text(report.longreprtext) != report.longreprtext
            except Exception:
                leaked = True
            if leaked:
                report.longrepr = red.text(text)  # plain text: the only safe form left
    if isinstance(getattr(report, "wasxfail", None), str):
        report.wasxfail = red.text(report.wasxfail)
    if isinstance(getattr(report, "user_properties", None), list):
        report.user_properties = [(n, red.text(v) if isinstance(v, str) else v)
                                  for n, v in report.user_properties]
    extras = getattr(report, "extras", None)
    if isinstance(extras, list):
        report.extras = [dict(e, content=red.data(e.get("content"))) if isinstance(e, dict)
                         and e.get("format_type") in ("html", "text", "json", "url") else e
                         for e in extras]


def _redact_repr(obj: Any, red: Redactor, depth: int = 0) -> None:
    """Redact a failure representation in place (keeps its layout and crash line): every
    ``str`` attribute, list of ``str`` and ``(name, value)`` pair inside it."""
    if depth > 8 or obj is None or isinstance(obj, (str, int, float, bool)):
        return
    for name, value in list(vars(obj).items()):
        if isinstance(value, str):
            setattr(obj, name, red.text(value))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                if isinstance(v, str):
                    value[i] = red.text(v)
                elif isinstance(v, tuple):
                    value[i] = tuple(red.text(x) if isinstance(x, str) else x for x in v)
                else:
                    _redact_repr(v, red, depth + 1)
        elif hasattr(value, "__dict__"):
            _redact_repr(value, red, depth + 1)


def redact_file(path: Path, red: Redactor) -> str | None:
    """Rewrite a text file with secrets redacted (atomically); None, or what went wrong."""
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
        clean = red.text(text)
        if clean != text:
            tmp = path.with_name(f".{path.name}.redacting")
            tmp.write_text(clean, encoding="utf-8")
            os.replace(tmp, path)
    except OSError as exc:
        return f"could not redact {path}: {exc}"
    return None
