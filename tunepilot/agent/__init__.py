"""The agent: `Tuner` and its run loop, the `Suggester` seam and `AgentSampler`, the strategies,
the LLM suggester, chat-model construction and the embedded model, and what can be done with a
stored study (`studies`). It never imports a face; it tells them what happens through
`observer.Observer`."""
