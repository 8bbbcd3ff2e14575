"""Reading a vLLM server log for the cause of a failure: line patterns (:mod:`.patterns`) and a
bounded, streaming scan of a log (:mod:`.scan`). The decision itself is
:func:`pytest_k3accept.observe.server.classify.classify`."""
