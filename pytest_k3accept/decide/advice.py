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


def scale(layers: Layers) -> str:
    """Advice when the target load leaves no headroom."""
    if layers.is_fixed("network"):
        return ("Multi-node needs the interconnect, marked fixed here: move the service to an "
                "environment with more capacity.")
    return ("Scale out (multi-node or another environment) until the target load runs with "
            "headroom; do not call the current setup tuned.")
