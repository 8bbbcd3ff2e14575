"""The advice wording of the verdict, respecting which layers may be changed (pure).

Never proposes changing a layer the user marked ``fixed`` (:mod:`.layers`): a fix that needs
one becomes "move to an environment that has it".
"""

from __future__ import annotations

from .layers import LAYERS, Layers

#: layer -> (what to change, where to move when it is fixed); None: not a layer (topology)
FIX: dict[str | None, tuple[str, str]] = {
    "driver": ("upgrade the host driver to R580 or newer (CUDA 13 needs >= 580)",
               "an environment whose host driver is R580 or newer"),
    "container": ("use the K3 image built for CUDA 13 (and its runtime path)",
                  "an environment that can run the CUDA 13 K3 image"),
    "network": ("align the interconnect with the official all-to-all path (NVLink / RDMA) "
                "and the recipe's TP/EP layout", "an environment with the official "
                "interconnect and topology"),
    None: ("", "the supported topology where the weights fit (the official recipe: 8+ "
               "accelerators with its parallel layout)"),
}


#: what to do about a failure that blocks any capacity verdict, per classification category
BLOCKING_ADVICE: dict[str, str] = {
    "serving": "The engine failed for a reason other than memory: fix that first; it is no "
               "evidence about capacity.",
    "config": "The launch was rejected (a configuration error): fix the arguments first; it "
              "is no evidence about the environment or capacity.",
    "killed": "The server was killed from outside (SIGKILL, exit 137) with no out-of-memory "
              "line in its log: check the kernel log (dmesg) for the OOM killer, and the "
              "orchestrator's events (OOMKilled, eviction), before judging capacity.",
    "unknown": "The server failed for a reason the classifier does not recognise: read the "
               "quoted error lines; no verdict rests on a guess.",
}
#: a run that could not measure: stopped on a usage error, or no endpoint to measure
USAGE_ERROR = ("Fix the usage error named above and run again: the run stopped before its "
               "tests, so nothing about the deployment was measured.")
UNREACHABLE = ("The endpoint was unreachable: start the server (or wait until its engine is "
               "ready), check the URL given with --k3-endpoint and that this machine can "
               "reach it, then run again; nothing was measured.")


def move(layers: Layers, layer: str | None) -> tuple[str, bool]:
    """Advice for an environment problem whose fix needs ``layer``; True when that layer is
    marked fixed (the fix is blocked here)."""
    change, where = FIX[layer]
    if layer is None:
        return (f"Move to {where}; lowering context or concurrency will not help, and "
                "nothing measured here counts as capacity evidence.", False)
    what = LAYERS[layer]
    state = layers.state(layer)
    if state == "fixed":
        return (f"The fix needs the {what}, a layer marked fixed here: move to {where}; do "
                "not tune context or concurrency.", True)
    if state == "changeable":
        return f"Fix the {what}: {change}; then re-run from engine init.", False
    return (f"Fix the {what} if you control it ({change}); if not, move to {where}. State "
            f"it in the profile's [layers] table ({layer} = \"fixed\" or \"changeable\").",
            False)


#: what to try before scaling, per capacity category (the seed's order for serving OOM)
TUNE_FIRST: dict[str, str] = {
    "serving-oom": ("Out of memory while serving: tune in order, one variable at a time on the "
                    "same request set (context length first, then concurrency, then prefix "
                    "caching), and re-measure; the lowered load that holds with headroom is "
                    "the contract (accept-limits)."),
    "kv-capacity-at-init": ("The KV cache could not be sized for the context at init: lower "
                            "--max-model-len to the context the service needs, or give the KV "
                            "cache more memory (--gpu-memory-utilization, "
                            "--kv-cache-memory-bytes), and re-measure; lowering concurrency "
                            "does not help at init."),
}


def tune_first(category: str, measured_below: bool) -> str:
    """The tuning to try before scaling for a capacity failure; ``measured_below``: a load
    below the target was measured (else scaling is said to rest on the target alone)."""
    text = TUNE_FIRST.get(category, "")
    if not measured_below:
        text += (" No load below the target was measured, so 'scale' rests on the target "
                 "alone: scale only if the target must hold as it is.")
    return text.strip()


def scale(layers: Layers) -> str:
    """Advice when the target load leaves no headroom."""
    if layers.is_fixed("network"):
        return ("Multi-node needs the interconnect, marked fixed here: move the service to an "
                "environment with more capacity.")
    return ("Scale out (multi-node or another environment) until the target load runs with "
            "headroom; do not call the current setup tuned.")
