"""Who proposes the next config: the `Suggester` seam and `AgentSampler` (`suggest`), Optuna's
samplers and pruners by name and what a reviewer is shown of a sampler (`samplers`, `pruners`,
`sampler_state`), the LLM suggester and the answers it reads (`llm_suggester`, `answers`), the
`review` strategy and the cap on the model's time (`review`), and the strategies by name
(`strategies`). It runs no search: `tunepilot.agent` does."""
