"""Triage accuracy on the corpus of real vLLM logs: per category, confusion table, per split.

``python benchmarks/triage.py [--corpus PATH] [--markdown] [--first-contact]
[--agreement]`` classifies
every case of ``tests/data/triage/cases.jsonl`` (the excerpt, with the exit code the source states) with
the same classifier ``--k3-launch``, ``--k3-server-log`` and ``k3accept triage`` use, and
prints: accuracy overall and per split, accuracy per expected category, the confusion table
(rows: the label, columns: the answer), the confusions between ``loading``,
``kv-capacity-at-init`` and ``serving-oom`` (the split the verdict rests on), the phase
accuracy on the cases that label one, and every miss. Splits (see the corpus README):
``tune``, ``tune-2``, ``tune-3`` ... (cases some round of rules was tuned on) and ``heldout-N``
(added after the latest round was frozen, never tuned on); "held-out" figures count only the
``heldout*`` splits not in :data:`READ` (splits whose misses were read to write a later round
of rules; their figure is printed on its own line, never as held out).

Two labels per case (corpus README): ``expected``, what the excerpt alone shows (the figures
above), and ``thread_cause``, what its thread concluded; the same accuracies against
``thread_cause`` are printed too, with the confusion of ``thread_cause`` against ``expected``
(where an excerpt lacks the line that decides its thread's cause).

``--agreement`` measures the labels themselves: 160 cases relabelled blind, from the excerpt
alone, by two more readers (``tests/data/triage/agreement.jsonl``, corpus README "How far two
readers agree"); it prints how often each pair of the collector, the two readers and the
classifier agree (with Cohen's kappa), how often each agrees with the majority label, and the
classifier on the cases all three labels agree on.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_k3accept.observe.server.classify import CATEGORIES, classify  # noqa: E402

CRITICAL = ("loading", "kv-capacity-at-init", "serving-oom")
SHORT = {"environment": "env", "loading": "load", "kv-capacity-at-init": "kv", "serving": "serv",
         "serving-oom": "s-oom", "host-oom": "h-oom", "connection": "conn", "killed": "kill",
         "config": "cfg", "unknown": "unk", "none": "none"}


def run(corpus: Path) -> list[dict[str, Any]]:
    """Each case with the classifier's answer (``got``, ``got_stage``) added."""
    rows = []
    for line in corpus.read_text("utf-8").splitlines():
        if not line.strip():
            continue
        case = json.loads(line)
        case.setdefault("thread_cause", case["expected"])  # a corpus from before round 6
        cls = classify(case["log"], exit_code=case["exit_code"], ended=True)
        rows.append({**case, "got": cls.category, "got_stage": cls.stage})
    return rows


#: held-out splits whose misses were read to write a later round's rules (corpus README) ->
#: (the last round they were held out from, the round that read them): their cases stay in the
#: corpus under their split, but no longer count as held out
READ = {"heldout-2": (6, 7), "heldout-3": (6, 7), "heldout-4": (6, 7), "heldout-5": (6, 7),
        "heldout-9": (10, 11), "heldout-11": (11, 12), "heldout-12": (12, 13),
        "heldout-13": (13, 14), "heldout-14": (14, 15), "heldout-15": (15, 16),
        "heldout-16": (16, 17), "heldout-17": (17, 18), "heldout-18": (18, 19),
        "heldout-19": (19, 20), "heldout-20": (20, 21),
        "heldout-21": (21, 22), "heldout-22": (22, 23), "heldout-23": (23, 24),
        "heldout-24": (23, 24)}


def _held_out(row: dict[str, Any]) -> bool:
    return str(row["split"]).startswith("heldout") and row["split"] not in READ


def _pct(ok: int, n: int) -> str:
    return f"{ok}/{n} ({100 * ok / n:.0f} %)" if n else "-"


def report(rows: list[dict[str, Any]], markdown: bool = False) -> str:
    """The figures as text (or Markdown tables)."""
    out: list[str] = []
    ok = [r for r in rows if r["got"] == r["expected"]]
    out.append(f"overall: {_pct(len(ok), len(rows))}")
    for split in sorted({r["split"] for r in rows}, key=lambda s: (s.startswith("heldout"), s)):
        part = [r for r in rows if r["split"] == split]
        out.append(f"{split}: {_pct(sum(r['got'] == r['expected'] for r in part), len(part))}")
    held = [r for r in rows if _held_out(r)]
    held_ok = sum(r["got"] == r["expected"] for r in held)
    for rounds in sorted(set(READ.values())):
        splits = [s for s, r in READ.items() if r == rounds]
        read = [r for r in rows if r["split"] in splits]
        if read:
            out.append(f"held out until round {rounds[0]}, misses read for round {rounds[1]} "
                       f"({', '.join(splits)}): "
                       f"{_pct(sum(r['got'] == r['expected'] for r in read), len(read))}")
    out.append(f"held out (never read for a rule): {_pct(held_ok, len(held))}")
    for name, part in (("overall", rows), ("held out", held)):
        out.append(f"{name} against thread_cause: "
                   f"{_pct(sum(r['got'] == r['thread_cause'] for r in part), len(part))}")
    staged = [r for r in rows if r.get("phase")]
    out.append(f"phase (cases that label one): "
               f"{_pct(sum(r['got_stage'] == r['phase'] for r in staged), len(staged))}")
    critical = [r for r in rows if r["expected"] in CRITICAL and r["got"] in CRITICAL
                and r["got"] != r["expected"]]
    out.append(f"confused between {', '.join(CRITICAL)}: {len(critical)}")
    critical_tc = [r for r in rows if r["thread_cause"] in CRITICAL and r["got"] in CRITICAL
                   and r["got"] != r["thread_cause"]]
    out.append(f"  the same against thread_cause: {len(critical_tc)}")
    out.append("")
    by_cat: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_cat[r["expected"]].append(r)
    if markdown:
        out += ["| category | cases | right | held-out right |", "|---|---:|---:|---:|"]
    for cat in CATEGORIES:
        part = by_cat.get(cat, [])
        held = [r for r in part if _held_out(r)]
        right, held_right = (sum(r["got"] == cat for r in p) for p in (part, held))
        if markdown:
            out.append(f"| {cat} | {len(part)} | {right} | {held_right}/{len(held)} |")
        else:
            out.append(f"  {cat:<20} {_pct(right, len(part)):>14}   held-out "
                       f"{held_right}/{len(held)}")
    out.append("")
    counts = Counter((r["expected"], r["got"]) for r in rows)
    cols = [SHORT[c] for c in CATEGORIES]
    if markdown:
        out += ["| label \\ answer | " + " | ".join(cols) + " |",
                "|---|" + "---:|" * len(cols)]
        for cat in CATEGORIES:
            cells = [str(counts[(cat, g)] or "") for g in CATEGORIES]
            out.append(f"| {cat} | " + " | ".join(cells) + " |")
    else:
        out.append("confusion (rows: label, columns: answer)")
        out.append(" " * 21 + " ".join(f"{c:>5}" for c in cols))
        for cat in CATEGORIES:
            out.append(f"  {cat:<19}" + " ".join(f"{counts[(cat, g)] or '.':>5}"
                                                 for g in CATEGORIES))
    cut = Counter((r["thread_cause"], r["expected"]) for r in rows
                  if r["thread_cause"] != r["expected"])
    out += ["", "excerpt lacks the deciding line (thread_cause -> expected: cases)"]
    out += [f"  {tc} -> {ex}: {n}" for (tc, ex), n in sorted(cut.items())]
    misses = [r for r in rows if r["got"] != r["expected"]]
    if misses:
        out += ["", "misses:"]
        out += [f"  [{r['split']}] {r['id']}: expected {r['expected']}, got {r['got']}"
                for r in misses]
    return "\n".join(out)


ROUND_10 = "255b82b"  # the commit that froze round 10
ROUND_11 = "a622a51"  # ... and round 11
ROUND_12 = "f377f36"  # ... and round 12
ROUND_13 = "ab1e31a"  # ... and round 13
ROUND_14 = "963a368"  # ... and round 14
ROUND_15 = "f07d0db"  # ... and round 15
ROUND_16 = "6bb8736"  # ... and round 16
ROUND_17 = "2764dbe"  # ... and round 17
ROUND_18 = "a592390"  # ... and round 18
ROUND_19 = "a4754e7"  # ... and round 19
ROUND_20 = "ce1d6dd"  # ... and round 20
ROUND_21 = "61c44e1"  # ... and round 21
ROUND_22 = "1bf7c7c"  # ... and round 22
ROUND_23 = "5e311d3"  # ... and round 23
ROUND_24 = "67fcc1a"  # ... and round 24
#: fresh batches and the commit whose rules were frozen when each was collected: the batch's
#: first contact is re-measured with exactly those rules (``--first-contact``)
FIRST_CONTACT = {"tune-7": "1e35f35", "tune-8": "6d7801d", "tune-9": "a4ff148",
                 "heldout-9": ROUND_10, "heldout-11": ROUND_11,
                 "heldout-12": ROUND_12, "heldout-13": ROUND_13,
                 "heldout-14": ROUND_14, "heldout-15": ROUND_15, "heldout-16": ROUND_16,
                 "heldout-17": ROUND_17, "heldout-18": ROUND_18,
                 "heldout-19": ROUND_19, "heldout-20": ROUND_20,
                 "heldout-21": ROUND_21, "heldout-22": ROUND_22,
                 "heldout-23": ROUND_23, "heldout-24": ROUND_23,
                 "heldout-25": ROUND_24}

_CLASSIFY_SPLIT = """
import json, sys
from pytest_k3accept.observe.server.classify import classify
for line in open(sys.argv[1], encoding="utf-8"):
    c = json.loads(line)
    if c["split"] in sys.argv[2:]:
        got = classify(c["log"], exit_code=c["exit_code"], ended=True).category
        print(json.dumps([c["id"], got]))
"""


def answers_at(corpus: Path, splits: list[str], commit: str) -> dict[str, str]:
    """Case id -> category for every case of ``splits``, with the rules of ``commit`` (git
    archive of the package into a temporary directory, classified in a subprocess that imports
    only that copy)."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="k3-triage-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "pytest_k3accept"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        out = subprocess.run([sys.executable, "-c", _CLASSIFY_SPLIT, str(corpus.resolve()),
                              *splits], check=True, capture_output=True, text=True, cwd=tmp,
                             env={"PYTHONPATH": tmp, "PATH": "/usr/bin:/bin"}).stdout
    return {case: got for case, got in map(json.loads, out.splitlines())}


def first_contact(corpus: Path, split: str, commit: str) -> tuple[int, int]:
    """(right, cases) of ``split`` with the rules of ``commit``."""
    got = answers_at(corpus, [split], commit)
    labels = {c["id"]: c["expected"] for c in _cases(corpus) if c["id"] in got}
    return sum(got[i] == labels[i] for i in got), len(got)


def _cases(corpus: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in corpus.read_text("utf-8").splitlines() if line.strip()]


#: the agreement study (corpus README, "How far two readers agree"): cases of the corpus
#: relabelled blind, from the excerpt alone, by two more readers
AGREEMENT = ROOT / "tests" / "data" / "triage" / "agreement.jsonl"


def _kappa(pairs: list[tuple[str, str]]) -> float:
    """Cohen's kappa: agreement beyond what the two label counts give by chance."""
    n = len(pairs)
    seen = sum(a == b for a, b in pairs) / n
    left, right = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    chance = sum(left[c] * right[c] for c in left) / (n * n)
    return (seen - chance) / (1 - chance) if chance < 1 else 1.0


def agreement(corpus: Path, study: Path = AGREEMENT,
              first: dict[str, str] | None = None) -> list[str]:
    """How often the collector's label, two blind readers' labels and the classifier agree on
    the cases of ``study``. ``first`` (case id -> answer with the rules each case met first,
    :func:`first_contact_answers`) adds the classifier's first contact; without it only
    today's rules are compared (they were written after reading most of these cases)."""
    cases = {c["id"]: c for c in _cases(corpus)}
    rows = []
    for line in study.read_text("utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            c = cases[r["id"]]
            now = classify(c["log"], exit_code=c["exit_code"], ended=True).category
            rows.append({"collector": c["expected"], "reader A": r["reader_a"],
                         "reader B": r["reader_b"], "rules today": now,
                         **({"first contact": first[r["id"]]} if first else {})})
    n = len(rows)
    splits = sorted({cases[json.loads(x)["id"]]["split"]
                     for x in study.read_text("utf-8").splitlines() if x.strip()},
                    key=lambda s: int(s.rsplit("-", 1)[1]))
    out = [f"agreement on {n} cases ({splits[0]} .. {splits[-1]}) relabelled blind from the "
           f"excerpt alone by two readers (study: {study.name})"]

    def pair(x: str, y: str) -> None:
        pairs = [(r[x], r[y]) for r in rows]
        same = sum(a == b for a, b in pairs)
        out.append(f"  {x:<13} vs {y:<9} {_pct(same, n):<15} kappa {_kappa(pairs):.2f}")

    for x, y in (("reader A", "reader B"), ("reader A", "collector"), ("reader B", "collector")):
        pair(x, y)
    for tool in ("first contact", "rules today"):
        if tool in rows[0]:
            for y in ("collector", "reader A", "reader B"):
                pair(tool, y)
    voted = [(r, Counter((r["collector"], r["reader A"], r["reader B"])).most_common(1)[0])
             for r in rows]
    voted = [(r, label) for r, (label, votes) in voted if votes >= 2]
    out.append(f"  a majority of the three labels: {len(voted)}/{n} cases; agreeing with it: "
               + ", ".join(f"{who} {_pct(sum(r[who] == m for r, m in voted), len(voted))}"
                           for who in rows[0]))
    unanimous = [r for r in rows if r["collector"] == r["reader A"] == r["reader B"]]
    out.append(f"  all three labels the same: {len(unanimous)}/{n} cases; right on them: "
               + ", ".join(f"{who} {_pct(sum(r[who] == r['collector'] for r in unanimous), len(unanimous))}"
                           for who in rows[0] if who in ("first contact", "rules today")))
    split = [r for r in rows
             if len({r[who] for who in ("collector", "reader A", "reader B")} & set(CRITICAL)) > 1]
    out.append(f"  cases whose labels are confused between {', '.join(CRITICAL)}: {len(split)}")
    return out


def first_contact_answers(corpus: Path, ids: set[str]) -> dict[str, str]:
    """Case id -> the answer of the rules frozen when the case's batch was collected."""
    by_split: dict[str, set[str]] = defaultdict(set)
    for c in _cases(corpus):
        if c["id"] in ids:
            by_split[c["split"]].add(c["id"])
    got: dict[str, str] = {}
    for split in by_split:
        if split not in FIRST_CONTACT:
            return {}
        got.update(answers_at(corpus, [split], FIRST_CONTACT[split]))
    return {i: a for i, a in got.items() if i in ids}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path,
                        default=ROOT / "tests" / "data" / "triage" / "cases.jsonl")
    parser.add_argument("--markdown", action="store_true", help="tables as Markdown")
    parser.add_argument("--first-contact", action="store_true",
                        help="also re-measure each fresh batch with the rules frozen when it "
                             "was collected (FIRST_CONTACT; needs the git history)")
    parser.add_argument("--agreement", action="store_true",
                        help="also print how far the collector's labels, two blind readers' "
                             "and the classifier's answers agree (tests/data/triage/"
                             "agreement.jsonl; with --first-contact, the first contact too)")
    args = parser.parse_args(argv)
    print(report(run(args.corpus), markdown=args.markdown))
    if args.first_contact:
        print("\nfirst contact (each fresh batch with the rules frozen when it was collected)")
        for split, commit in FIRST_CONTACT.items():
            ok, n = first_contact(args.corpus, split, commit)
            if n:
                print(f"  {split:<10} rules at {commit}: {_pct(ok, n)}")
    if args.agreement:
        ids = {json.loads(x)["id"] for x in AGREEMENT.read_text("utf-8").splitlines() if x.strip()}
        first = first_contact_answers(args.corpus, ids) if args.first_contact else None
        print()
        print("\n".join(agreement(args.corpus, first=first)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
