"""The search loop: suggesters, `AgentSampler`, `Tuner`, the display and the `tune` CLI."""
