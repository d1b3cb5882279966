"""Talking to a chat model: specs and settings (`models`), the embedded model (`local`),
what counts as a passing transport failure (`transport`), and the circuit breaker over a run
(`health`). It imports nothing of the agent or the proposers: any part that needs a chat model
builds one here."""
