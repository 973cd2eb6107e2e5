"""safeattn: NaN-safe fused attention (forward + backward) in Triton."""
