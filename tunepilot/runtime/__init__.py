"""Process plumbing: trial isolation (`isolate`), Ctrl-C and SIGTERM that are never lost
(`interrupts`), and local worker processes on one study (`pool`)."""
