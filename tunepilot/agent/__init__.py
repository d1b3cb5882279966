"""Running a search: `Tuner` and its run loop, ask/tell, the opening of a study, the result, a
run built from a `TuneConfig` (`build`), and what can be done with a stored study (`studies`).
Who proposes each trial is `tunepilot.proposers`' business; the agent never imports a face,
and tells them what happens through `observer.Observer`."""
