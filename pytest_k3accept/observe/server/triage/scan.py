"""A streaming scan of a server log: feed it lines one at a time, it keeps only bounded state.

:class:`Scanner` tracks, for the latest server start in the log: the stage the server had
reached (from init progress, serving activity and traceback frames, see
:mod:`.patterns`), every line that matched a failure rule (with the stage at that line, raised
by frames of the traceback that follows it), exception lines, and the last error lines. A
new start in the same log (the API server's ``non-default args`` line after other startup
events) forgets the previous start's state. Memory does not grow with the log: at most
:data:`MAX_HITS` hits and :data:`MAX_EXCEPTIONS` exception lines are kept (the first ones,
plus a ring of the latest), and a ring of the last :data:`TAIL` error lines.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from ..logread import LogLine
from ..timeline import Timeline, log_level
from .patterns import ANY_FRAME, BEFORE_FRAMES, BEFORE_RULES, BUILD_FRAME, CUT, DISPATCH_FRAMES, \
    FAULT_FRAME, FRAME, FRAME_STAGE, HANDLED, HINTS, LOADING, NATIVE_ERROR, NOT_EVIDENCE, \
    PROCESS_START, QUIET_EVIDENCE, RPC_TIMEOUT, RULES, SAMPLER_FRAME, SELF_KILL, SERVING, SHM_WAIT, \
    SLEEP_FRAMES, SOURCE_CALL, STARTUP_FAILED, \
    SPECULATION, STARTED, TOOL_PARSER_TAG, TRACEBACK, V1_STEP_FRAME, WAIT_CANCELLED, may_match, \
    unwrap, unwrap_parts, wrapped_match

__all__ = ["Hit", "Scanner", "EXCEPTION", "MAX_HITS", "MAX_EXCEPTIONS", "TAIL"]

MAX_HITS = 200
MAX_EXCEPTIONS = 100
TAIL = 40
#: frames after a hit that still belong to its traceback (they raise the hit's stage)
FOLLOW = 80

EXCEPTION = re.compile(r"(?:^|\]\s|\s)((?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Interrupt)):"
                       r"(?:\s\S|$)|^(?:[\w.]+\.)?[A-Z]\w*Error\s*$")
_QUIET = ("DEBUG", "INFO", "WARNING", "WARN")
ACCESS_5XX = re.compile(r'"(?:POST|GET)\s+\S+\s+HTTP/[\d.]+"\s+5\d\d\b')
_VLLM_LIKE = re.compile(r"vllm|EngineCore|\(\w*Worker\w*[ _]?\S* ?pid=|APIServer|\[\w+\.py:\d+\]|"
                        r"\b\w+\.py:\d+\]|Uvicorn|NCCL|Ray|CUDA|torch", re.I)


@dataclass
class Hit:
    """One line that matched a failure rule."""

    rule: str
    kind: str
    tier: int
    order: int  # position among the lines fed (after the latest start)
    line: LogLine
    text: str  # the line without its wrappers
    stage: int
    #: lines were cut out of the log (``[...]``) after the last line that showed its stage,
    #: and no traceback frame placed it since: the stage may have moved on unseen
    cut: bool = False


@dataclass
class Scanner:
    """Feed :meth:`feed` the lines of one log in order; read the fields afterwards."""

    timeline: Timeline = field(default_factory=Timeline)
    external: bool = False  # the timeline was built elsewhere (from the whole log)
    hits: list[Hit] = field(default_factory=list)
    late_hits: deque[Hit] = field(default_factory=lambda: deque(maxlen=MAX_HITS // 2))
    exceptions: list[LogLine] = field(default_factory=list)
    late_exceptions: deque[LogLine] = field(default_factory=lambda: deque(maxlen=MAX_EXCEPTIONS))
    tail: deque[LogLine] = field(default_factory=lambda: deque(maxlen=TAIL))
    stage: int = 0
    lines: int = 0  # lines of the latest start
    total_lines: int = 0
    vllm_lines: int = 0  # 0 or 1: whether any line looked like vLLM's
    unreadable_lines: int = 0
    last_lineno: int = 0
    last_activity: int = 0  # lineno of the last INFO-level (healthy) vLLM line
    self_killed: bool = False  # V1's executor killed its own process tree (SELF_KILL)
    started: bool = False  # a line only a starting server prints (patterns.STARTED) was seen
    handled: str | None = None  # the logger tag of a request's handled exception (HANDLED)
    #: something showed the server at its start (a start line, a frame of BEFORE_FRAMES, a
    #: rule of BEFORE_RULES): "before loading" is then observed, not the default
    before_shown: bool = False
    #: the latest traceback was placed by a sleep-mode frame (:data:`.patterns.SLEEP_FRAMES`)
    waking: bool = False
    #: a sampler frame was seen (:data:`.patterns.SAMPLER_FRAME`), and the engine's start failed
    #: (:data:`.patterns.STARTUP_FAILED`): together, an OOM in the sampler is the KV-sizing run's
    sampler_frame: bool = False
    startup_failed: bool = False
    _shm_wait: int | None = None  # the order of the last shm_broadcast wait line (SHM_WAIT)
    _order: int = 0
    _tb_stage: int | None = None
    _tb_dispatch: int | None = None  # the stage of a dispatching frame, until one inside it
    _prev: str = ""
    _cut: bool = False  # a cut marker since the stage was last shown
    _last_tb: int = -100  # the order of the last traceback header or frame line

    @classmethod
    def over(cls, timeline: Timeline | None) -> "Scanner":
        """A scanner that uses ``timeline`` (built from the whole log) when given."""
        return cls(timeline, True) if timeline is not None else cls()

    def _reset(self) -> None:
        self.hits, self.exceptions = [], []
        self.late_hits.clear()
        self.late_exceptions.clear()
        self.tail.clear()
        self.stage, self.lines, self._tb_stage, self._tb_dispatch = 0, 0, None, None
        self._cut = False
        self.self_killed = self.started = self.before_shown = self.waking = False
        self.sampler_frame = self.startup_failed = False
        self._shm_wait = None
        self.handled = None

    def shown(self) -> bool:
        """Whether the log shows how far the server got (any stage, "before loading"
        included), rather than the scanner defaulting to "before loading"."""
        return (self.stage > 0 or self.started or self.before_shown
                or bool(self.timeline.events))

    def all_hits(self) -> list[Hit]:
        """The kept hits, in log order."""
        return self.hits + [h for h in self.late_hits if h not in self.hits]

    def all_exceptions(self) -> list[LogLine]:
        """The kept exception lines, in log order."""
        seen = {id(x) for x in self.exceptions}
        return self.exceptions + [x for x in self.late_exceptions if id(x) not in seen]

    def feed(self, line: LogLine) -> None:
        """Take one line into account."""
        self.total_lines += 1
        self.last_lineno = line.lineno
        if line.text.count("\ufffd") * 4 > max(8, len(line.text)):
            self.unreadable_lines += 1
        if self.external:
            if line.lineno < self.timeline.start_lineno:
                return
        else:
            before, pasted = self.timeline.earlier_starts, self.timeline.out_of_order_starts
            self.timeline.feed(line)
            if self.timeline.earlier_starts != before or (
                    (self.stage or any(h.rule not in BEFORE_RULES for h in self.hits))
                    and PROCESS_START.search(line.text)
                    and self.timeline.out_of_order_starts == pasted):
                # (an import's failure before the banner is the same start's: round 19)
                self._reset()  # a new start: what came before is another process's
        self.lines += 1
        text, dropped = unwrap_parts(line.text)
        if dropped:
            # what unwrap cut before vLLM's own line (no wrapper shape) can be another line
            # whose break was lost (a progress bar's last "\r" update: "Capturing CUDA graphs
            # ... 45/51 [...](Worker_TP0 pid=1) DEBUG ..."): its stage counts (round 18)
            self._stage_hints(dropped)
        if not self.vllm_lines and _VLLM_LIKE.search(text):
            self.vllm_lines = 1  # only "none at all" matters
        if CUT.match(text):
            # a cut just after a traceback's frames elides more of the same traceback (one
            # event, placed by its frames); elsewhere it may hide how far the server got
            if self._order - self._last_tb > 3:
                self._cut = True
        elif TRACEBACK.search(text) or FRAME.match(text) or FAULT_FRAME.match(text):
            self._last_tb = self._order
        self._hints(text)
        if not self.started and STARTED.search(text):
            self.started = True
        level = "INFO" if text.startswith(("INFO:", "DEBUG:")) else log_level(text)  # uvicorn
        if level is None and NATIVE_ERROR.match(text):
            level = "ERROR"
        if self.handled is not None:
            if f"[{self.handled}]" in text[:200]:
                self._prev = text  # a request's own handled exception: no evidence
                self._order += 1
                return
            self.handled = None
        if TOOL_PARSER_TAG.search(text, 0, 200):  # a parser's caught error: one request's
            self.last_activity = line.lineno
            self._prev = text
            self._order += 1
            return
        handled = HANDLED.search(text)
        if handled:
            self.handled = handled.group(1)
            self.last_activity = line.lineno
            self._prev = text
            self._order += 1
            return
        if SHM_WAIT.search(text):  # at any level (pasted without its INFO prefix too)
            self._shm_wait = self._order
        if ACCESS_5XX.search(text):
            self.tail.append(line)
        elif level in _QUIET and not QUIET_EVIDENCE.search(text):
            self.last_activity = line.lineno
        elif not NOT_EVIDENCE.search(text):
            self._rules(line, text)
            if level is not None or EXCEPTION.search(text) or TRACEBACK.search(text) \
                    or FRAME.match(text) or FAULT_FRAME.match(text):
                # a posted traceback can lack its header and level
                self.tail.append(line)
            if EXCEPTION.search(text):
                (self.exceptions if len(self.exceptions) < MAX_EXCEPTIONS
                 else self.late_exceptions).append(line)
        self._prev = text
        self._order += 1

    def _raise(self, stage: int, framed: bool = False) -> None:
        if stage > self.stage or framed:  # shown after the cut (a frame: the traceback's own)
            self._cut = False
        if stage > self.stage:
            self.stage = stage
        for hit in self.all_hits()[-8:]:  # a traceback that follows a hit is its own
            if self._order - hit.order <= FOLLOW and stage >= hit.stage:
                if framed or stage > hit.stage:  # its own traceback or what followed places it
                    hit.cut = False
                hit.stage = stage

    def _stage_hints(self, text: str) -> None:
        for stage, pat in HINTS:
            if stage > self.stage and pat.search(text):
                self._raise(stage)

    def _hints(self, text: str) -> None:
        self._stage_hints(text)
        if STARTUP_FAILED.search(text):
            self.startup_failed = True
        if TRACEBACK.search(text):
            self.settle()
            self._tb_stage = None
            self.waking = False
            return
        if not self.before_shown and "line " in text:
            f = ANY_FRAME.search(text)
            if f and f.group(1) in BEFORE_FRAMES:
                self.before_shown = True
        m = FRAME.match(text)
        if m and SAMPLER_FRAME.search(text):
            self.sampler_frame = True
        built: int | None = None
        if m and m.group(1) and self._tb_stage is None and m.group(1) not in FRAME_STAGE:
            built = LOADING if BUILD_FRAME.search(text) else \
                SERVING if V1_STEP_FRAME.search(text) else None
        if built is not None:
            self._tb_dispatch = None
            self._tb_stage = built
            self._raise(built, framed=True)
        elif m and m.group(1) and self._tb_stage is None and m.group(1) in FRAME_STAGE:
            if m.group(1) in DISPATCH_FRAMES:
                self._tb_dispatch = FRAME_STAGE[m.group(1)]
                return
            self._placed_by(m.group(1))
        elif not m and self._tb_stage is None and FRAME.match(self._prev):
            call = SOURCE_CALL.match(text)  # the call to the next frame (patterns.SOURCE_CALL)
            name = call.group(1) if call else ""
            if name in FRAME_STAGE and name not in DISPATCH_FRAMES:
                self._placed_by(name)
        elif self._tb_dispatch is not None and EXCEPTION.search(text):
            self.settle()

    def _placed_by(self, name: str) -> None:
        """The traceback's stage is that of the function ``name`` (:data:`.patterns.FRAME_STAGE`:
        its frame, or the source line that calls it)."""
        self._tb_dispatch = None
        self._tb_stage = FRAME_STAGE[name]
        self.waking = name in SLEEP_FRAMES
        self._raise(self._tb_stage, framed=True)

    def _cancelled(self, hit: Hit) -> bool:
        return hit.rule == "rpc-wait-frame" and self._order - hit.order <= FOLLOW

    def _keep(self, hit: Hit) -> None:
        """Keep ``hit`` (the first :data:`MAX_HITS`, then the latest ones)."""
        (self.hits if len(self.hits) < MAX_HITS else self.late_hits).append(hit)

    def settle(self) -> None:
        """Apply a dispatching frame's stage (:data:`.patterns.DISPATCH_FRAMES`) when no frame
        inside it was recognised: at its traceback's message, a new traceback, or the log's
        end (the classifier calls this once all lines are fed)."""
        if self._tb_dispatch is not None:
            self._tb_stage, self._tb_dispatch = self._tb_dispatch, None
            self._raise(self._tb_stage)

    def _rules(self, line: LogLine, text: str) -> None:
        if WAIT_CANCELLED.search(text):
            # the RPC wait just read was cancelled by the executor (a worker died): not a
            # failed wait (patterns.WAIT_CANCELLED)
            self.hits = [h for h in self.hits if not self._cancelled(h)]
            kept = [h for h in self.late_hits if not self._cancelled(h)]
            self.late_hits.clear()
            self.late_hits.extend(kept)
            return
        guess = SPECULATION.search(text)
        if guess:  # the guessing part of a line is no evidence; what it states before is
            text = text[:guess.start()]
        # a terminal wrapped the previous line mid-word: try the two halves joined
        wrapped = text[:1].isalnum() and not text[:1].isupper() and self._prev[-1:].isalnum()
        if not may_match(self._prev[-120:] + text if wrapped else text):
            return
        if SELF_KILL.search(text):
            self.self_killed = True
        if self._shm_wait is not None and self._order - self._shm_wait <= 400 and \
                RPC_TIMEOUT.search(text):
            # the reader that shm_broadcast was waiting for never came (patterns.SHM_WAIT)
            self._keep(Hit("interconnect", "connection", 2, self._order, line, text,
                           self.stage, self._cut))
            return
        for rule, kind, tier, pat in RULES:
            if pat.search(text) or (wrapped and wrapped_match(pat, self._prev, text)):
                if kind == "killed" and self.self_killed:
                    return  # the executor's own SIGKILL of its process tree (SELF_KILL)
                hit = Hit(rule, kind, tier, self._order, line, text, self.stage, self._cut)
                if rule in BEFORE_RULES:
                    self.before_shown = True
                self._keep(hit)
                return
