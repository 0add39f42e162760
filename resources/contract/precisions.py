"""The weights' precisions a candidate, or one of its several models, may name: the cloud
engines' (bf16, fp8, int4) and the GGUF quantizations of the real local engine."""

PRECISIONS = ("bf16", "fp8", "int4", "q4_k_m", "q8_0", "q2_k")
