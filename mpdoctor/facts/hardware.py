"""Which low-precision dtypes the traced machine's devices compute fast: one fact that MP603 reports and the HTML
report's environment table shows."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpdoctor.facts.schema import Environment


def slow_hardware(environment: Environment | None, dtype: str) -> str | None:
    """Why `dtype` ("float16" or "bfloat16") computes no faster than float32 on the traced machine, or None when a
    device runs it fast."""
    if environment is None:
        from mpdoctor.facts.schema import Environment

        environment = Environment()
    capabilities = [tuple(g.compute_capability) for g in environment.gpus if g.compute_capability]
    if dtype == "float16":
        if any(cc >= (7, 0) for cc in capabilities):
            return None
        have = "no GPU" if not environment.gpus else "no GPU of compute capability 7.0 or higher"
        return f"{have}: float16 only runs faster on Tensor Core GPUs (compute capability >= 7.0)"
    if any(cc >= (8, 0) for cc in capabilities) or environment.cpu_bf16:
        return None
    return (
        "no bfloat16-capable device (GPU of compute capability 8.0+, or a CPU with AVX512-BF16/AMX): bfloat16 is "
        "emulated and slower than float32 there"
    )
